/**
 * Recording what happened to a delivery: delivered (charge the hold), bounced (release it, suppress the
 * address, re-evaluate reputation), deferred (retry later) or failed (retries exhausted: release). Each
 * final transition happens once; the message's status follows its deliveries.
 */
import { Prisma, type Tx } from '@boxes/db';
import { chargeDelivery, deliveryCharge, lockAccountCredit, releaseDelivery } from '../credit/ledger';
import { appendEvent } from '../events/append';
import { isQuietCharge, leanChargeSql } from '../credit/lean';
import type { Services } from '../shared/context';
import { suppress } from '../suppression/suppression';
import { evaluateReputation } from '../suppression/reputation';
import { stopForwardOnBounce } from '../forwarding/forwards';

const FINAL = ['delivered', 'bounced', 'failed'];

/** Sets the messages' statuses from their deliveries, each once every one of its deliveries is final (one statement). */
export async function refreshMessageStatuses(tx: Tx, messageIds: string[]): Promise<void> {
  if (messageIds.length) await tx.$executeRaw(messageStatusUpdate(messageIds));
}

async function refreshMessageStatus(tx: Tx, messageId: string): Promise<void> {
  await refreshMessageStatuses(tx, [messageId]);
}

/**
 * Each message's status once every delivery of it is final: delivered, partially_delivered, bounced or failed.
 * Also a part of a larger statement that makes delivery `justFinal` delivered (a sibling CTE does not see that
 * row's new status, so it is counted as delivered here).
 */
function messageStatusUpdate(messageIds: string[], justFinal = ''): Prisma.Sql {
  return Prisma.sql`
      UPDATE messages m SET status = CASE
          WHEN s.delivered = s.total THEN 'delivered'
          WHEN s.delivered > 0 THEN 'partially_delivered'
          WHEN s.bounced > 0 THEN 'bounced'
          ELSE 'failed' END
      FROM (
        SELECT message_id, count(*) AS total,
          count(*) FILTER (WHERE status = 'delivered' OR id = ${justFinal}) AS delivered,
          count(*) FILTER (WHERE status = 'bounced' AND id <> ${justFinal}) AS bounced,
          count(*) FILTER (WHERE status NOT IN ('delivered', 'bounced', 'failed') AND id <> ${justFinal}) AS open
        FROM deliveries WHERE message_id = ANY(${messageIds}::text[]) GROUP BY message_id
      ) s
      WHERE m.id = s.message_id AND s.open = 0`;
}

/** Claims a delivery for a final state; false if it already reached one (a duplicate job or report). */
async function claim(tx: Tx, deliveryId: string, status: string, data: Record<string, unknown>): Promise<boolean> {
  const r = await tx.delivery.updateMany({
    where: { id: deliveryId, status: { notIn: FINAL } },
    data: { status, ...data },
  });
  return r.count === 1;
}

interface ClaimedDelivery {
  id: string;
  account_id: string;
  message_id: string;
  recipient: string;
  route: string;
  held_micros: bigint;
  used_free: boolean;
  attachment_micros: bigint;
  surcharge_micros: bigint;
  settled_at: Date | null;
}

/**
 * A delivery the remote (or local) MX accepted: charged from its hold, announced as mail.delivered, and the
 * message's status follows. The hot path takes three round trips in the caller's transaction (typed SQL, not
 * Prisma: see the module header of events/append.ts): claim the delivery, lock the account row, then one
 * statement that settles the hold, writes the ledger entries, appends the event and refreshes the message.
 * When the charge moves the balance across an alert threshold or into deficit, the general ledger path runs
 * instead, so its announcements happen exactly as elsewhere.
 */
export async function markDelivered(svc: Services, tx: Tx, deliveryId: string, info: { mta: string | null; response: string; attempts: number }): Promise<boolean> {
  const claimed = await tx.$queryRaw<ClaimedDelivery[]>`
    UPDATE deliveries SET status = 'delivered', delivered_at = now(), remote_mta = ${info.mta}, last_error = NULL, next_attempt_at = NULL,
      attempts = ${info.attempts}, updated_at = now()
    WHERE id = ${deliveryId} AND status NOT IN ('delivered', 'bounced', 'failed')
    RETURNING id, account_id, message_id, recipient, route, held_micros, used_free, attachment_micros, surcharge_micros, settled_at`;
  const d = claimed[0];
  if (!d) return false;
  const a = await lockAccountCredit(tx, d.account_id);
  const data = { message_id: d.message_id, recipient: d.recipient, route: d.route, remote_mta: info.mta, response: info.response.slice(0, 500) };
  const charge = d.settled_at ? null : deliveryCharge(a, d);
  const postings = charge?.postings ?? [];
  if (!isQuietCharge(a, postings)) {
    // The general path: its announcements (low_balance, billing.deficit) run as for every other charge.
    await chargeDelivery(svc, tx, { id: d.id, accountId: d.account_id, messageId: d.message_id, heldMicros: d.held_micros, usedFree: d.used_free, attachmentMicros: d.attachment_micros, surchargeMicros: d.surcharge_micros });
    await appendEvent({ db: tx, accountId: d.account_id, type: 'mail.delivered', data });
    await refreshMessageStatus(tx, d.message_id);
    return true;
  }
  const lean = leanChargeSql({
    accountId: d.account_id,
    locked: a,
    postings,
    releaseHeld: charge ? { micros: d.held_micros, freeMessages: charge.free } : undefined,
    trailerPaidMicros: charge?.surcharge,
    event: { type: 'mail.delivered', data },
  });
  await tx.$queryRaw`
    WITH settle AS (
      UPDATE deliveries SET settled_at = now() WHERE id = ${d.id} AND settled_at IS NULL
    ), ${lean.ctes}, msg AS (
      ${messageStatusUpdate([d.message_id], d.id)}
    )
    ${lean.notify}`;
  return true;
}

/** attempts: the attempts made when our own attempt bounced; omitted for a bounce reported later (DSN). */
export async function markBounced(tx: Tx, deliveryId: string, info: { code: number | null; response: string; source: 'smtp' | 'dsn' | 'local'; attempts?: number }) {
  const d = await tx.delivery.findUniqueOrThrow({ where: { id: deliveryId } });
  const fresh = await claim(tx, deliveryId, 'bounced', { lastError: info.response.slice(0, 1000), nextAttemptAt: null, ...(info.attempts !== undefined ? { attempts: info.attempts } : {}) });
  // A DSN can arrive after we recorded the delivery as delivered (the remote accepted, then bounced): it still
  // counts as a bounce for the suppression list.
  if (!fresh && d.status !== 'delivered') return;
  if (fresh) await releaseDelivery(tx, d);
  else await tx.delivery.update({ where: { id: d.id }, data: { status: 'bounced', lastError: info.response.slice(0, 1000) } });
  await appendEvent({
    db: tx,
    accountId: d.accountId,
    type: 'mail.bounced',
    data: { message_id: d.messageId, recipient: d.recipient, code: info.code, response: info.response.slice(0, 500), source: info.source },
  });
  await suppress(tx, { accountId: d.accountId, address: d.recipient, reason: 'bounce', detail: info.response.slice(0, 500), messageId: d.messageId });
  // A bounced auto-forwarded copy stops its forward.
  await stopForwardOnBounce(tx, { messageId: d.messageId, recipient: d.recipient, response: info.response });
  await evaluateReputation(tx, d.accountId);
  await refreshMessageStatus(tx, d.messageId);
}

export async function markDeferred(tx: Tx, deliveryId: string, info: { error: string; nextAttemptAt: Date; attempts: number }) {
  await tx.delivery.updateMany({
    where: { id: deliveryId, status: { notIn: FINAL } },
    data: { status: 'deferred', lastError: info.error.slice(0, 1000), nextAttemptAt: info.nextAttemptAt, attempts: info.attempts },
  });
}

export async function markFailed(tx: Tx, deliveryId: string, info: { error: string; attempts: number }) {
  if (!(await claim(tx, deliveryId, 'failed', { lastError: info.error.slice(0, 1000), nextAttemptAt: null, attempts: info.attempts }))) return;
  const d = await tx.delivery.findUniqueOrThrow({ where: { id: deliveryId } });
  await releaseDelivery(tx, d);
  await appendEvent({
    db: tx,
    accountId: d.accountId,
    type: 'mail.failed',
    data: { message_id: d.messageId, recipient: d.recipient, attempts: info.attempts, last_error: info.error.slice(0, 500) },
  });
  await refreshMessageStatus(tx, d.messageId);
}
