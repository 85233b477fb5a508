/**
 * Recording what happened to a delivery: delivered (charge the hold), bounced (release it, suppress the
 * address, re-evaluate reputation), deferred (retry later) or failed (retries exhausted: release). Each
 * final transition happens once; the message's status follows its deliveries.
 */
import type { Tx } from '@boxes/db';
import { chargeDelivery, releaseDelivery } from '../credit/ledger';
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';
import { suppress } from '../suppression/suppression';
import { evaluateReputation } from '../suppression/reputation';

const FINAL = ['delivered', 'bounced', 'failed'];

async function refreshMessageStatus(tx: Tx, messageId: string): Promise<void> {
  const ds = await tx.delivery.findMany({ where: { messageId }, select: { status: true } });
  if (!ds.length || !ds.every((d) => FINAL.includes(d.status))) return;
  const delivered = ds.filter((d) => d.status === 'delivered').length;
  const status =
    delivered === ds.length ? 'delivered' : delivered > 0 ? 'partially_delivered' : ds.some((d) => d.status === 'bounced') ? 'bounced' : 'failed';
  await tx.message.update({ where: { id: messageId }, data: { status } });
}

/** Claims a delivery for a final state; false if it already reached one (a duplicate job or report). */
async function claim(tx: Tx, deliveryId: string, status: string, data: Record<string, unknown>): Promise<boolean> {
  const r = await tx.delivery.updateMany({
    where: { id: deliveryId, status: { notIn: FINAL } },
    data: { status, ...data },
  });
  return r.count === 1;
}

export async function markDelivered(svc: Services, tx: Tx, deliveryId: string, info: { mta: string | null; response: string; attempts: number }): Promise<boolean> {
  if (!(await claim(tx, deliveryId, 'delivered', { deliveredAt: new Date(), remoteMta: info.mta, lastError: null, nextAttemptAt: null, attempts: info.attempts }))) return false;
  const d = await tx.delivery.findUniqueOrThrow({ where: { id: deliveryId } });
  await chargeDelivery(svc, tx, d);
  await appendEvent({
    db: tx,
    accountId: d.accountId,
    type: 'mail.delivered',
    data: { message_id: d.messageId, recipient: d.recipient, route: d.route, remote_mta: info.mta, response: info.response.slice(0, 500) },
  });
  await refreshMessageStatus(tx, d.messageId);
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
