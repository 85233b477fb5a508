/** Hashing, constant-time comparison and sealing (AES-256-GCM) of secrets kept at rest. */
import { createCipheriv, createDecipheriv, createHash, createSecretKey, timingSafeEqual, type KeyObject } from 'node:crypto';
import { randomBlocks } from './random';

export const sha256Hex = (input: string | Buffer): string => createHash('sha256').update(input).digest('hex');

export function constantTimeEqual(a: string, b: string): boolean {
  const ab = Buffer.from(a);
  const bb = Buffer.from(b);
  return ab.length === bb.length && timingSafeEqual(ab, bb);
}

/** Parses a 32-byte key given as 64 hex characters or base64. */
export function parseSecretKey(raw: string): Buffer {
  const key = /^[0-9a-f]{64}$/i.test(raw) ? Buffer.from(raw, 'hex') : Buffer.from(raw, 'base64');
  if (key.length !== 32) throw new Error('BOXES_SECRET_KEY must be 32 bytes (64 hex characters or base64)');
  return key;
}

// The IVs are read from the CSPRNG in blocks of 256 rather than one read of 12 bytes per seal (randomBlocks).
const IV_BYTES = 12;
const ivs = randomBlocks(IV_BYTES, 256);

/** A fresh random 96-bit IV (its own copy: the block's bytes are overwritten when it refills). */
function newIv(): Buffer {
  const at = ivs.take();
  return Buffer.from(ivs.bytes.subarray(at, at + IV_BYTES));
}

/** v1.<iv>.<tag>.<ciphertext>, each base64url. */
export function seal(key: Buffer, plaintext: string | Buffer): string {
  const iv = newIv();
  const cipher = createCipheriv('aes-256-gcm', keyObject(key), iv);
  const ct = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return ['v1', iv, cipher.getAuthTag(), ct].map((p) => (typeof p === 'string' ? p : p.toString('base64url'))).join('.');
}

/** The key as a KeyObject, made once per key: a raw Buffer key is turned into one on every cipher otherwise. */
const keyObjects = new WeakMap<Buffer, KeyObject>();
function keyObject(key: Buffer): KeyObject {
  let k = keyObjects.get(key);
  if (!k) {
    k = createSecretKey(key);
    keyObjects.set(key, k);
  }
  return k;
}

/**
 * Sealed bytes, for bytea columns (messages.raw_enc): 0x01, the 12-byte IV, the 16-byte tag, then the ciphertext.
 * The same AES-256-GCM as seal(), a quarter smaller than its text, and read back without decoding any text.
 */
export function sealBytes(key: Buffer, plaintext: string | Buffer): Buffer<ArrayBuffer> {
  const iv = newIv();
  const cipher = createCipheriv('aes-256-gcm', keyObject(key), iv);
  const ct = cipher.update(plaintext);
  const rest = cipher.final();
  return Buffer.concat([BYTES_V1, iv, cipher.getAuthTag(), ct, rest]);
}

const BYTES_V1 = Buffer.from([1]);
const BYTES_HEADER = 1 + 12 + 16;

/** Opens what seal() (text) or sealBytes() (bytes) made; throws when the key or the bytes are wrong. */
export function open(key: Buffer, sealed: string | Uint8Array): Buffer {
  let iv: Buffer;
  let tag: Buffer;
  let ct: Buffer;
  if (typeof sealed === 'string') {
    const [v, ivText, tagText, ctText] = sealed.split('.');
    if (v !== 'v1' || !ivText || !tagText || ctText === undefined) throw new Error('not a sealed value');
    iv = Buffer.from(ivText, 'base64url');
    tag = Buffer.from(tagText, 'base64url');
    ct = Buffer.from(ctText, 'base64url');
  } else {
    const b = Buffer.isBuffer(sealed) ? sealed : Buffer.from(sealed.buffer, sealed.byteOffset, sealed.byteLength);
    if (b.length < BYTES_HEADER || b[0] !== BYTES_V1[0]) throw new Error('not a sealed value');
    iv = b.subarray(1, 13);
    tag = b.subarray(13, BYTES_HEADER);
    ct = b.subarray(BYTES_HEADER);
  }
  const decipher = createDecipheriv('aes-256-gcm', keyObject(key), iv);
  decipher.setAuthTag(tag);
  const out = decipher.update(ct);
  // GCM gives everything from update(); final() only checks the tag (a copy of a large body saved).
  const rest = decipher.final();
  return rest.length ? Buffer.concat([out, rest]) : out;
}
