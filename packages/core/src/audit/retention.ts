/**
 * The audit retention window (default 14 days, usermetadata.audit_retention_days 1 to 90): a stored
 * message keeps its body (parsed and raw) for that many days after it was recorded; the audit job then
 * reclaims it as DELETE /messages/{id} would (a message.deleted event with reason retention), keeping the
 * metadata, the SHA-256 of the raw bytes and every event, so its audit bundle still verifies. Closing accounts
 * keep their bodies until their data is deleted (the export needs them); a message with a delivery still
 * queued or deferred keeps its body until that delivery ends.
 */
import { dropSearchVectors } from '../search/vector';
import type { Message } from '@boxes/db';
import { k, rows, sql, tbl } from '@boxes/db';
import { ACCOUNT_STATUSES, DELIVERY_STATUSES } from '@boxes/schemas';
import { statusIn, statusLit } from '../shared/statuses';
import { appendEvent } from '../events/append';
import { reclaimAttachmentText } from '../messages/attachments';
import type { Services } from '../shared/context';
import { open, sha256Hex } from '../shared/crypto';

export const DEFAULT_AUDIT_RETENTION_DAYS = 14;
const DAY_MS = 86_400_000;

export function retentionOf(account: { auditRetentionDays: number | null }) {
  return {
    audit_retention_days: account.auditRetentionDays ?? DEFAULT_AUDIT_RETENTION_DAYS,
    source: (account.auditRetentionDays === null ? 'default' : 'usermetadata') as 'default' | 'usermetadata',
  };
}

/** The evidence.body_state of a message: "available", or {reclaimed_at_utc}. */
export function bodyState(m: Pick<Message, 'bodyReclaimedAt'>): 'available' | { reclaimed_at_utc: string } {
  return m.bodyReclaimedAt ? { reclaimed_at_utc: m.bodyReclaimedAt.toISOString() } : 'available';
}

/**
 * When an available body is due to be reclaimed under the window; null once reclaimed. A scheduled send's window
 * starts when it goes (send_at), not when it was accepted.
 */
export function bodyReclaimDueAt(m: Pick<Message, 'bodyReclaimedAt' | 'recordedAt'> & { sendAt?: Date | null }, retentionDays: number): Date | null {
  return m.bodyReclaimedAt ? null : new Date((m.sendAt ?? m.recordedAt).getTime() + retentionDays * DAY_MS);
}

/** The SHA-256 of a message's raw bytes: kept on the row once computed, else taken from the sealed raw. */
export function rawSha256Of(secretKey: Buffer, m: Pick<Message, 'rawSha256' | 'rawEnc'>): string | null {
  if (m.rawSha256) return m.rawSha256;
  return m.rawEnc ? sha256Hex(open(secretKey, m.rawEnc)) : null;
}

/** Reclaims the bodies of active accounts' messages older than their window. Returns how many. */
export async function reclaimExpiredBodies(svc: Services, limit = 1000): Promise<number> {
  const now = svc.clock.now();
  const m = tbl('messages', 'm');
  const a = tbl('accounts', 'a');
  const d = tbl('deliveries', 'd');
  const cutoff = sql<Date>`${now}::timestamptz - make_interval(days => COALESCE(${a.audit_retention_days}, ${DEFAULT_AUDIT_RETENTION_DAYS}))`;
  const due = await rows(
    svc.db,
    sql<{ id: string }>`
    SELECT ${m.id} FROM ${m.$} JOIN ${a.$} ON ${a.id} = ${m.account_id}
    WHERE ${a.status} = ${statusLit(ACCOUNT_STATUSES, 'active')} AND ${m.body_reclaimed_at} IS NULL
      AND ${m.recorded_at} < ${cutoff}
      AND (${m.send_at} IS NULL OR ${m.send_at} < ${cutoff})
      AND NOT EXISTS (SELECT 1 FROM ${d.$} WHERE ${d.message_id} = ${m.id} AND ${d.status} IN ${statusIn(DELIVERY_STATUSES, ['queued', 'deferred', 'bulk', 'scheduled'])})
    ORDER BY ${m.recorded_at} LIMIT ${limit}`,
  );
  let done = 0;
  for (const { id } of due) {
    const reclaimed = await svc.db.$transaction(async (tx) => {
      const locked = await rows(tx, k.selectFrom('messages').select('id').where('id', '=', id).where('body_reclaimed_at', 'is', null).forUpdate());
      if (!locked.length) return false;
      const m = await tx.message.findUniqueOrThrow({ where: { id }, include: { account: { select: { auditRetentionDays: true } } } });
      const at = svc.clock.now();
      await tx.message.update({ where: { id }, data: { bodyEnc: null, rawEnc: null, bodyReclaimedAt: at, rawSha256: rawSha256Of(svc.secretKey, m) } });
      await reclaimAttachmentText(tx, [id]);
      // The search vector holds the body's words: it goes with the body.
      await dropSearchVectors(tx, [id]);
      await appendEvent({
        db: tx,
        accountId: m.accountId,
        type: 'message.deleted',
        boxId: m.boxId,
        data: {
          message_id: m.id,
          purged: false,
          reclaimed_at_utc: at.toISOString(),
          by_key_id: null,
          reason: 'retention',
          audit_retention_days: retentionOf(m.account).audit_retention_days,
        },
      });
      return true;
    });
    if (reclaimed) done += 1;
  }
  return done;
}
