// Outside verifiers for audit bundles and checkpoints: openssl (pkeyutl over the JWS signing input) and the
// hash chain recomputed with the canonicalize package, as the audit guide (docs/guide/audit.md) tells an agent to do. None of this uses
// the service's code.
import { createHash } from 'node:crypto';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import canonicalize from 'canonicalize';
import type { ApiEvent } from '@boxes/testing';

const run = promisify(execFile);

/** Verifies a compact JWS (EdDSA) with `openssl pkeyutl -verify -rawin`; true when openssl says so. */
export async function opensslVerify(jws: string, publicKeyPem: string): Promise<boolean> {
  const [h, p, s] = jws.split('.');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-jws-'));
  try {
    fs.writeFileSync(path.join(dir, 'pub.pem'), publicKeyPem);
    fs.writeFileSync(path.join(dir, 'signing-input'), `${h}.${p}`);
    fs.writeFileSync(path.join(dir, 'sig.bin'), Buffer.from(s!, 'base64url'));
    const r = await run('openssl', ['pkeyutl', '-verify', '-pubin', '-inkey', 'pub.pem', '-rawin', '-in', 'signing-input', '-sigfile', 'sig.bin'], {
      cwd: dir,
    }).then(
      (x) => ({ code: 0, out: x.stdout }),
      (err: { code?: number; stdout?: string }) => ({ code: err.code ?? 1, out: err.stdout ?? '' }),
    );
    return r.code === 0 && /Signature Verified Successfully/.test(r.out);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** The payload of a compact JWS, decoded without verifying (only after a verifier said yes). */
export const payloadOf = (jws: string): any => JSON.parse(Buffer.from(jws.split('.')[1]!, 'base64url').toString('utf8'));

/** hash = hex(SHA-256(prev_hash + "\n" + JCS(body))) over the event as served without _chain (docs/guide/audit.md). */
export function eventHash(prevHash: string, e: ApiEvent): string {
  const { _chain, ...body } = e;
  return createHash('sha256')
    .update(`${prevHash}\n${canonicalize(body)}`)
    .digest('hex');
}

/** Recomputes the chain from the genesis hash; returns the recomputed hash after each seq. */
export function recomputeChain(events: ApiEvent[]): Map<number, string> {
  const out = new Map<number, string>();
  let prev = '0'.repeat(64);
  for (const e of events) {
    prev = eventHash(prev, e);
    out.set(e.seq, prev);
  }
  return out;
}
