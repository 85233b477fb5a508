/** Sealing at rest: text (seal) and bytes (sealBytes) open to what was sealed, and nothing else opens. */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { open, seal, sealBytes } from './crypto';

const key = randomBytes(32);

describe('seal and open', () => {
  it('every seal has its own IV, across refills of the block the IVs are read from (more than 256 seals)', () => {
    const ivs = new Set<string>();
    for (let i = 0; i < 700; i++) {
      const text = seal(key, `m${i}`);
      ivs.add(text.split('.')[1]!);
      const bytes = sealBytes(key, `b${i}`);
      // sealBytes: a version byte, then the 12-byte IV.
      ivs.add(Buffer.from(bytes.subarray(1, 13)).toString('base64url'));
      expect(open(key, text).toString()).toBe(`m${i}`);
      expect(open(key, bytes).toString()).toBe(`b${i}`);
    }
    expect(ivs.size).toBe(1400);
  });

  it('text and bytes both open to the sealed plaintext; bytes are 29 bytes longer than it', () => {
    const plain = Buffer.concat([Buffer.from('Subject: hi\r\n\r\n'), randomBytes(70_000)]);
    expect(open(key, seal(key, plain)).equals(plain)).toBe(true);
    const sealed = sealBytes(key, plain);
    expect(sealed.length).toBe(plain.length + 29);
    expect(sealed[0]).toBe(1);
    expect(open(key, sealed).equals(plain)).toBe(true);
    // As Prisma hands a bytea over: a plain Uint8Array.
    expect(open(key, new Uint8Array(sealed)).equals(plain)).toBe(true);
    expect(open(key, sealBytes(key, '')).length).toBe(0);
    expect(open(key, sealBytes(key, 'héllo')).toString()).toBe('héllo');
  });

  it('a wrong key, a changed byte or a cut value does not open', () => {
    const sealed = sealBytes(key, 'secret body');
    expect(() => open(randomBytes(32), sealed)).toThrow();
    for (const at of [1, 13, 29, sealed.length - 1]) {
      const bad = Buffer.from(sealed);
      bad[at]! ^= 1;
      expect(() => open(key, bad)).toThrow();
    }
    expect(() => open(key, sealed.subarray(0, 20))).toThrow('not a sealed value');
    const v2 = Buffer.from(sealed);
    v2[0] = 2;
    expect(() => open(key, v2)).toThrow('not a sealed value');
    expect(() => open(key, 'v2.a.b.c')).toThrow('not a sealed value');
  });
});
