/**
 * The backup archive: one POSIX tar file (tar-stream; a member over 8 GiB gets GNU's base-256 size field, which
 * GNU tar and bsdtar read) holding, in this order,
 *
 *   manifest.json         what the archive is (never a secret): format, versions, schema level, checksums
 *   database.dump[.enc]   pg_dump's custom format of the whole database
 *   keys.json[.enc]       the secret key and the key and certificate files the configuration names
 *
 * With a passphrase both database.dump and keys.json are sealed (".enc"): the key is scrypt(passphrase, salt)
 * with the parameters in the manifest, each member is AES-256-GCM under its own random 96-bit nonce, stored as
 * nonce || ciphertext || tag, and authenticated with "boxes-backup/1 <backup_id> <member>" as additional data,
 * so a member cannot be swapped between archives or names. The manifest's SHA-256 of each member (of the bytes
 * stored) finds damage before anything is opened; the tag finds tampering and a wrong passphrase.
 */
import { createCipheriv, createDecipheriv, createHash, type DecipherGCM, randomBytes, scrypt as scryptCb, type ScryptOptions } from 'node:crypto';
import fs from 'node:fs';
import { Transform, type TransformCallback, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { extract, pack } from 'tar-stream';

export const FORMAT = 'boxes-backup';
export const FORMAT_VERSION = 1;
export const MANIFEST = 'manifest.json';
export const DATABASE_MEMBER = 'database.dump';
export const KEYS_MEMBER = 'keys.json';

/** How a passphrase becomes the archive key. */
export interface Encryption {
  kdf: 'scrypt';
  /** scrypt's cost (N), block size (r) and parallelism (p): N = 2^17 and r = 8 take 128 MiB and about half a second. */
  n: number;
  r: number;
  p: number;
  /** 16 random bytes, base64. */
  salt: string;
  cipher: 'aes-256-gcm';
}

export interface Member {
  /** Its name in the archive (with .enc when sealed). */
  name: string;
  bytes: number;
  /** SHA-256 (hex) of the bytes stored in the archive. */
  sha256: string;
  encrypted: boolean;
}

export interface Manifest {
  format: typeof FORMAT;
  format_version: number;
  backup_id: string;
  created_at: string;
  /** The API version of the Boxes that made it. */
  boxes_api_version: string;
  schema: {
    /** The migrations applied to the database, in order (the schema's level is the last). */
    migrations: string[];
    latest: string | null;
  };
  database: {
    name: string;
    server_version: string;
    pg_dump_version: string;
    /** How the dump was taken: pg_dump on a snapshot exported by the transaction that read the manifest's facts. */
    snapshot: string;
    /** pg_database_size when the backup was taken. */
    size_bytes: number;
    /** Grants to roles other than the owner (not restored: pg_restore runs with --no-owner --no-privileges). */
    grants: string[];
  };
  instance: { base_domain: string; mail_host: string; site_url: string };
  keys: {
    /** Where the source instance read its secret key from. */
    secret_key_source: 'BOXES_SECRET_KEY' | 'file';
    /** SHA-256 (hex) of the secret key: tells two keys apart without saying anything about them. */
    secret_key_sha256: string;
    /** The settings whose files keys.json holds (SMTP_TLS_CERT_FILE, SMTP_TLS_KEY_FILE, WEBHOOK_CA_FILE). */
    files: string[];
  };
  encryption: Encryption | null;
  members: Member[];
}

/** keys.json: everything the instance reads from outside the database. */
export interface KeysFile {
  secret_key: string;
  secret_key_source: 'BOXES_SECRET_KEY' | 'file';
  files: { setting: string; path: string; mode: number; content_base64: string }[];
}

export class BackupError extends Error {
  override name = 'BackupError';
}

const scrypt = (passphrase: string, salt: Buffer, opts: ScryptOptions): Promise<Buffer> =>
  new Promise((resolve, reject) => scryptCb(passphrase, salt, 32, opts, (err, key) => (err ? reject(err) : resolve(key))));

export function newEncryption(): Encryption {
  return { kdf: 'scrypt', n: 2 ** 17, r: 8, p: 1, salt: randomBytes(16).toString('base64'), cipher: 'aes-256-gcm' };
}

/** The archive key from a passphrase and the manifest's parameters. */
export async function deriveKey(passphrase: string, enc: Encryption): Promise<Buffer> {
  if (enc.kdf !== 'scrypt' || enc.cipher !== 'aes-256-gcm') throw new BackupError(`unknown encryption ${enc.kdf}/${enc.cipher}`);
  if (!passphrase) throw new BackupError('the passphrase is empty');
  // scrypt needs 128 * N * r bytes; allow that and a little more.
  return scrypt(passphrase, Buffer.from(enc.salt, 'base64'), { N: enc.n, r: enc.r, p: enc.p, maxmem: 129 * enc.n * enc.r + 1024 * 1024 });
}

const aadOf = (backupId: string, member: string): Buffer => Buffer.from(`${FORMAT}/${FORMAT_VERSION} ${backupId} ${member}`);
const IV_BYTES = 12;
const TAG_BYTES = 16;

/** Seals a stream: nonce || AES-256-GCM ciphertext || tag. */
export function sealStream(key: Buffer, backupId: string, member: string): Transform {
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(aadOf(backupId, member));
  let started = false;
  return new Transform({
    transform(chunk: Buffer, _enc, done: TransformCallback) {
      if (!started) {
        started = true;
        this.push(iv);
      }
      done(null, cipher.update(chunk));
    },
    flush(done: TransformCallback) {
      if (!started) this.push(iv);
      this.push(cipher.final());
      done(null, cipher.getAuthTag());
    },
  });
}

/**
 * Opens a sealed stream of known length (a tar member's size): the nonce is its first 12 bytes and the tag its
 * last 16. What it passes on is not authenticated until the stream ends without an error, so it is written to a
 * file that is used only then.
 */
export function openStream(key: Buffer, backupId: string, member: string, size: number): Transform {
  if (size < IV_BYTES + TAG_BYTES) throw new BackupError(`${member} is too short to be sealed`);
  const iv = Buffer.alloc(IV_BYTES);
  const tag = Buffer.alloc(TAG_BYTES);
  let decipher: DecipherGCM | null = null;
  let pos = 0;
  const bodyEnd = size - TAG_BYTES;
  return new Transform({
    transform(chunk: Buffer, _enc, done: TransformCallback) {
      let out: Buffer | null = null;
      for (let i = 0; i < chunk.length; ) {
        if (pos < IV_BYTES) {
          const n = Math.min(IV_BYTES - pos, chunk.length - i);
          chunk.copy(iv, pos, i, i + n);
          pos += n;
          i += n;
          if (pos === IV_BYTES) {
            decipher = createDecipheriv('aes-256-gcm', key, iv);
            decipher.setAAD(aadOf(backupId, member));
          }
        } else if (pos < bodyEnd) {
          const n = Math.min(bodyEnd - pos, chunk.length - i);
          const plain = decipher!.update(chunk.subarray(i, i + n));
          out = out ? Buffer.concat([out, plain]) : plain;
          pos += n;
          i += n;
        } else {
          const n = Math.min(size - pos, chunk.length - i);
          if (n <= 0) return done(new BackupError(`${member} is longer than its header says`));
          chunk.copy(tag, pos - bodyEnd, i, i + n);
          pos += n;
          i += n;
        }
      }
      done(null, out ?? undefined);
    },
    flush(done: TransformCallback) {
      if (pos !== size || !decipher) return done(new BackupError(`${member} ended early`));
      decipher.setAuthTag(tag);
      try {
        done(null, decipher.final());
      } catch {
        done(new BackupError(`${member} does not open: a wrong passphrase, or the archive was altered`));
      }
    },
  });
}

/** A pass-through that counts and hashes what goes by. */
export class Digest extends Transform {
  private hash = createHash('sha256');
  bytes = 0;
  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    this.hash.update(chunk);
    this.bytes += chunk.length;
    done(null, chunk);
  }
  hex(): string {
    return this.hash.digest('hex');
  }
}

/** Writes the archive: the manifest, then each member from its file, to `out` (mode 0600). */
export async function writeArchive(out: string, manifest: Manifest, files: Record<string, string>): Promise<void> {
  const tar = pack();
  const mtime = new Date(manifest.created_at);
  const done = pipeline(tar, fs.createWriteStream(out, { mode: 0o600, flags: 'wx' }));
  const body = Buffer.from(`${JSON.stringify(manifest, null, 2)}\n`);
  await new Promise<void>((resolve, reject) =>
    tar.entry({ name: MANIFEST, size: body.length, mode: 0o600, mtime }, body, (err) => (err ? reject(err) : resolve())),
  );
  for (const m of manifest.members) {
    const file = files[m.name];
    if (!file) throw new BackupError(`no file for ${m.name}`);
    const entry = tar.entry({ name: m.name, size: m.bytes, mode: 0o600, mtime });
    await pipeline(fs.createReadStream(file), entry);
  }
  tar.finalize();
  await done;
}

/**
 * Reads an archive: its manifest (which must come first and be of a known format), then each member through
 * `onMember`, which consumes the stream; the member's checksum and size are checked against the manifest as it
 * streams, and a mismatch fails the read (after onMember's stream has ended: it must not use what it wrote).
 */
export async function readArchive(
  file: string,
  onManifest: (m: Manifest) => void | Promise<void>,
  onMember: (member: Member, stream: NodeJS.ReadableStream) => Promise<void>,
): Promise<Manifest> {
  const tar = extract();
  const source = fs.createReadStream(file);
  source.on('error', (err) => tar.destroy(err));
  source.pipe(tar);
  // Iterated by hand, not with for-await: leaving a for-await early calls the extractor's return(), which waits
  // for the extractor to close, and a refusal must not depend on that. On any error the file, the member being
  // read and the extractor are all torn down here, so nothing is left holding the process open.
  const entries = tar[Symbol.asyncIterator]();
  let current: { destroy(err?: Error): unknown } | null = null;
  try {
    let manifest: Manifest | null = null;
    const seen = new Set<string>();
    for (;;) {
      const next = await entries.next();
      if (next.done) break;
      const entry = next.value;
      current = entry;
      const name = entry.header.name;
      if (!manifest) {
        if (name !== MANIFEST) throw new BackupError(`${file} is not a Boxes backup (its first member is ${name}, not ${MANIFEST})`);
        const chunks: Buffer[] = [];
        for await (const c of entry) chunks.push(c as Buffer);
        manifest = parseManifest(Buffer.concat(chunks).toString('utf8'));
        await onManifest(manifest);
        continue;
      }
      const member = manifest.members.find((m) => m.name === name);
      if (!member || seen.has(name)) throw new BackupError(`unexpected member ${name} in the archive`);
      seen.add(name);
      if (entry.header.size !== member.bytes) throw new BackupError(`${name} holds ${entry.header.size} bytes, the manifest says ${member.bytes}`);
      const digest = new Digest();
      entry.pipe(digest);
      await onMember(member, digest);
      if (digest.bytes !== member.bytes || digest.hex() !== member.sha256) {
        throw new BackupError(`${name} is damaged: its SHA-256 is not the manifest's`);
      }
    }
    if (!manifest) throw new BackupError(`${file} is empty or not a tar archive`);
    const missing = manifest.members.filter((m) => !seen.has(m.name)).map((m) => m.name);
    if (missing.length) throw new BackupError(`the archive is cut short: ${missing.join(', ')} missing`);
    return manifest;
  } catch (err) {
    source.unpipe(tar);
    source.destroy();
    current?.destroy();
    tar.destroy();
    throw err;
  }
}

function parseManifest(text: string): Manifest {
  let m: Manifest;
  try {
    m = JSON.parse(text) as Manifest;
  } catch {
    throw new BackupError('the manifest is not JSON');
  }
  if (m.format !== FORMAT) throw new BackupError('not a Boxes backup (manifest format)');
  if (m.format_version !== FORMAT_VERSION) {
    throw new BackupError(`archive format ${m.format_version}: this Boxes reads format ${FORMAT_VERSION} (restore with the Boxes that made it, or newer)`);
  }
  if (!Array.isArray(m.members) || !m.members.length) throw new BackupError('the manifest lists no members');
  return m;
}

/** A sink that keeps nothing (a member read only to check it). */
export const discard = (): Writable => new Writable({ write: (_c, _e, done) => done() });
