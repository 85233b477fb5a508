/**
 * Audit bundles: a signed statement about one message (GET /messages/{id}/audit). The payload carries the
 * message's metadata, the SHA-256 of its raw bytes, every event about it with its _chain hashes, the account's
 * chain head when it was signed, evidence.body_state, the retention in force and where the public key is. It
 * is a compact JWS (EdDSA, Ed25519), so jose or openssl verify it without our code.
 */
import { EVENT_MESSAGE_ID } from '../events/payload-sql';
import { k, rows } from '@boxes/db';
import type { BoxScope } from '../boxes/boxes';
import { toApiEvent } from '../events/read';
import { presentMessage } from '../messages/read';
import type { Services } from '../shared/context';
import { notFound } from '../shared/errors';
import { currentSigningKey, publicKeyUrl, signJws } from './signing';
import { bodyReclaimDueAt, bodyState, rawSha256Of, retentionOf } from './retention';

export const BUNDLE_TYP = 'boxes-audit-bundle+jws';

export async function auditBundle(svc: Services, input: { accountId: string; scope: BoxScope; id: string }) {
  // One snapshot: the events, the message and the chain head agree.
  const snap = await svc.db.$transaction(
    async (tx) => {
      const m = await tx.message.findFirst({ where: { id: input.id, accountId: input.accountId } });
      if (!m || (input.scope && (!m.boxId || !input.scope.includes(m.boxId)))) throw notFound('message', input.id);
      const account = await tx.account.findUniqueOrThrow({
        where: { id: input.accountId },
        select: { chainSeq: true, chainHash: true, auditRetentionDays: true, domains: { where: { isPrimary: true }, select: { name: true } } },
      });
      const eventIds = await rows(
        tx,
        k.selectFrom('events').select('id').where('account_id', '=', input.accountId).where(EVENT_MESSAGE_ID, '=', m.id).orderBy('seq'),
      );
      const events = eventIds.length ? await tx.event.findMany({ where: { id: { in: eventIds.map((e) => e.id) } }, orderBy: { seq: 'asc' } }) : [];
      return { m, account, events };
    },
    { isolationLevel: 'RepeatableRead' },
  );
  const { m, account, events } = snap;
  const retention = retentionOf(account);
  const signedAt = svc.clock.now();
  const key = await currentSigningKey(svc);
  const rawSha256 = rawSha256Of(svc.secretKey, m);
  const payload = {
    typ: 'boxes.audit_bundle' as const,
    version: 1,
    issuer: svc.config.siteUrl,
    issued_at: signedAt.toISOString(),
    account_id: input.accountId,
    account_domain: account.domains[0]?.name ?? null,
    message: presentMessage(m, retention.audit_retention_days),
    raw_sha256: rawSha256,
    raw_state: (rawSha256 ? (m.rawEnc ? 'available' : 'reclaimed') : m.bodyReclaimedAt ? 'reclaimed' : 'not_composed') as
      | 'available'
      | 'reclaimed'
      | 'not_composed',
    events: events.map(toApiEvent),
    chain_head: { seq: account.chainSeq, hash: account.chainHash, at: signedAt.toISOString() },
    evidence: { body_state: bodyState(m) },
    retention: { ...retention, body_reclaim_due_at_utc: bodyReclaimDueAt(m, retention.audit_retention_days)?.toISOString() ?? null },
    signing: {
      alg: 'EdDSA' as const,
      key_id: key.id,
      public_key_url: publicKeyUrl(svc.config, key.id),
      public_keys_url: `${svc.config.apiBaseUrl}/audit/public-key`,
    },
  };
  const { jws } = await signJws(svc, payload, BUNDLE_TYP, key);
  return { bundle: jws, payload, format: 'JWS compact serialization (RFC 7515), alg EdDSA with Ed25519 (RFC 8037)' };
}
