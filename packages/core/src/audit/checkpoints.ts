/**
 * Chain checkpoints: the instance signs an account's chain head (account, seq, hash, time) as a compact JWS,
 * hourly for every account whose head moved (the audit job) and whenever asked (POST /events/checkpoints).
 * An agent that keeps one can later prove what its stream was: the events up to that seq must still recompute
 * to that hash. An operator who altered an event and recomputed every hash after it (so GET /events/verify
 * passes) cannot make the recomputed hash at the kept seq match the signed one.
 */
import { createPublicKey, verify as edVerify } from 'node:crypto';
import type { AuditCheckpoint } from '@boxes/db';
import { k, rows, sql } from '@boxes/db';
import { ACCOUNT_STATUSES } from '@boxes/schemas';
import { statusLit } from '../shared/statuses';
import { chainHash, GENESIS_HASH } from '../events/chain';
import { toApiEvent } from '../events/read';
import type { Services } from '../shared/context';
import { newId } from '../shared/ids';
import { currentSigningKey, publicKeyUrl, signJws } from './signing';

export const CHECKPOINT_TYP = 'boxes-checkpoint+jws';

const present = (c: AuditCheckpoint, config: Services['config']) => ({
  id: c.id,
  checkpoint: c.jws,
  account_id: c.accountId,
  seq: c.seq,
  hash: c.hash,
  signed_at: c.signedAt.toISOString(),
  key_id: c.keyId,
  public_key_url: publicKeyUrl(config, c.keyId),
});

/** Signs the account's current head and stores the checkpoint. */
export async function signCheckpoint(svc: Services, accountId: string) {
  const head = await svc.db.account.findUniqueOrThrow({ where: { id: accountId }, select: { chainSeq: true, chainHash: true } });
  const key = await currentSigningKey(svc);
  const signedAt = svc.clock.now();
  const payload = {
    typ: 'boxes.chain_checkpoint',
    issuer: svc.config.siteUrl,
    account_id: accountId,
    seq: head.chainSeq,
    hash: head.chainHash,
    signed_at: signedAt.toISOString(),
    key_id: key.id,
  };
  const { jws } = await signJws(svc, payload, CHECKPOINT_TYP, key);
  const row = await svc.db.auditCheckpoint.create({
    data: { id: newId('ckp'), accountId, seq: head.chainSeq, hash: head.chainHash, keyId: key.id, jws, signedAt },
  });
  return present(row, svc.config);
}

export async function listCheckpoints(svc: Services, input: { accountId: string; limit: number }) {
  const rows = await svc.db.auditCheckpoint.findMany({
    where: { accountId: input.accountId },
    orderBy: [{ signedAt: 'desc' }, { id: 'desc' }],
    take: input.limit,
  });
  return { checkpoints: rows.map((r) => present(r, svc.config)) };
}

/** The hourly pass: a checkpoint for every account whose head moved since its last one. */
export async function signMovedHeads(svc: Services, limit = 5000): Promise<number> {
  const due = await rows(
    svc.db,
    k
      .selectFrom('accounts as a')
      .select('a.id')
      .where('a.chain_seq', '>', sql.lit(0))
      .where('a.status', '=', statusLit(ACCOUNT_STATUSES, 'active'))
      .where(({ not, exists, selectFrom }) =>
        not(
          exists(
            selectFrom('audit_checkpoints as c')
              .select(sql.lit(1).as('one'))
              .whereRef('c.account_id', '=', 'a.id')
              .whereRef('c.seq', '=', 'a.chain_seq')
              .whereRef('c.hash', '=', 'a.chain_hash'),
          ),
        ),
      )
      .limit(limit),
  );
  for (const { id } of due) await signCheckpoint(svc, id);
  return due.length;
}

interface Decoded {
  header: { alg?: unknown; kid?: unknown };
  payload: { account_id?: unknown; seq?: unknown; hash?: unknown; signed_at?: unknown; typ?: unknown };
  input: string;
  signature: Buffer;
}

function decode(jws: string): Decoded | null {
  const parts = jws.trim().split('.');
  if (parts.length !== 3 || parts.some((p) => !/^[A-Za-z0-9_-]*$/.test(p))) return null;
  try {
    return {
      header: JSON.parse(Buffer.from(parts[0]!, 'base64url').toString('utf8')),
      payload: JSON.parse(Buffer.from(parts[1]!, 'base64url').toString('utf8')),
      input: `${parts[0]}.${parts[1]}`,
      signature: Buffer.from(parts[2]!, 'base64url'),
    };
  } catch {
    return null;
  }
}

/**
 * Checks a kept checkpoint against the current chain: the signature (by any key this instance has used), that
 * it is this account's, and that the stored events 1..seq recompute, from the genesis hash, to its hash.
 */
export async function verifyCheckpoint(svc: Services, input: { accountId: string; checkpoint: string }) {
  const fail = (reason: string, extra: Record<string, unknown> = {}) => ({
    ok: false,
    signature_valid: false,
    key_id: null as string | null,
    seq: null as number | null,
    hash: null as string | null,
    signed_at: null as string | null,
    recomputed_hash_at_seq: null as string | null,
    reason,
    verified_at: new Date().toISOString(),
    ...extra,
  });
  const d = decode(input.checkpoint);
  if (!d) return fail('not a compact JWS');
  const kid = typeof d.header.kid === 'string' ? d.header.kid : null;
  if (d.header.alg !== 'EdDSA' || !kid) return fail('the header must name alg EdDSA and a kid');
  const key = await svc.db.auditSigningKey.findUnique({ where: { id: kid } });
  if (!key) return fail(`no signing key ${kid} on this instance`, { key_id: kid });
  const signatureValid = edVerify(null, Buffer.from(d.input, 'ascii'), createPublicKey(key.publicKeyPem), d.signature);
  const p = d.payload;
  const base = { key_id: kid, signature_valid: signatureValid };
  if (!signatureValid) return fail('the signature does not verify', base);
  if (p.typ !== 'boxes.chain_checkpoint' || typeof p.seq !== 'number' || typeof p.hash !== 'string' || typeof p.signed_at !== 'string') {
    return fail('not a chain checkpoint', base);
  }
  const claimed = { seq: p.seq, hash: p.hash, signed_at: p.signed_at };
  if (p.account_id !== input.accountId) return fail('this checkpoint is of another account', { ...base, ...claimed });
  // Recompute from the genesis hash through seq from what is stored now.
  let prev = GENESIS_HASH;
  let expected = 1;
  let after = 0;
  for (;;) {
    const rows = await svc.db.event.findMany({ where: { accountId: input.accountId, seq: { gt: after, lte: p.seq } }, orderBy: { seq: 'asc' }, take: 2000 });
    for (const row of rows) {
      if (row.seq !== expected) return fail(`event ${expected} is missing from the stream`, { ...base, ...claimed });
      const { _chain, ...body } = toApiEvent(row);
      prev = chainHash(prev, body);
      expected += 1;
      after = row.seq;
    }
    if (rows.length < 2000) break;
  }
  if (after !== p.seq)
    return fail(`the stream ends at seq ${after}, before the checkpoint's seq ${p.seq}`, { ...base, ...claimed, recomputed_hash_at_seq: after ? prev : null });
  if (prev !== p.hash) {
    return fail(`the events up to seq ${p.seq} no longer hash to the signed value: an event at or before seq ${p.seq} was altered, removed or reordered`, {
      ...base,
      ...claimed,
      recomputed_hash_at_seq: prev,
    });
  }
  return { ok: true, ...base, ...claimed, recomputed_hash_at_seq: prev, reason: null, verified_at: new Date().toISOString() };
}
