/**
 * Scheduled sends (send_at on POST /messages/send): the message and its deliveries wait in status scheduled,
 * their credit held from acceptance; one delayed delivery job per recipient (job id = delivery id, kept in
 * Redis, so a restarted worker still runs it, once) releases them when due; the worker's sweeper re-enqueues
 * a due one whose job was lost. Until then POST /messages/{id}/cancel cancels it and returns the credit.
 */
import type { BoxScope } from '../boxes/boxes';
import { lockAccountCredit, releaseDelivery } from '../credit/ledger';
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';
import { AppError, notFound } from '../shared/errors';
import type { DeliveryStatus, MessageStatus } from '@boxes/schemas';
import { DELIVERY_STATUSES, MESSAGE_STATUSES } from '@boxes/schemas';
import { statusLit } from '../shared/statuses';
import { heldByPause } from '../guard/pause';
import { rows as run, sql, tbl } from '@boxes/db';

/** How far ahead a send may be scheduled. */
export const MAX_SCHEDULE_MS = 30 * 86_400_000;

/** The time of a scheduled send, checked; null when the message goes now. */
export function scheduledTime(sendAt: string | undefined, now: Date): Date | null {
  if (sendAt === undefined) return null;
  const at = new Date(sendAt);
  const bad = (message: string) => new AppError('validation_error', `send_at: ${message}`, { fields: [{ path: 'send_at', message }] });
  // A zone is required: a time without one would be read in whatever zone the server runs in.
  if (Number.isNaN(at.getTime()) || !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/i.test(sendAt)) {
    throw bad('must be an ISO 8601 time with a zone, such as 2026-11-24T09:00:00Z or 2026-11-24T10:00:00+01:00');
  }
  if (at.getTime() <= now.getTime()) throw bad(`must be in the future (it is ${now.toISOString()} now); omit send_at to send at once`);
  if (at.getTime() - now.getTime() > MAX_SCHEDULE_MS) throw bad(`at most 30 days ahead (until ${new Date(now.getTime() + MAX_SCHEDULE_MS).toISOString()})`);
  return at;
}

/**
 * A due scheduled message goes: it and its scheduled deliveries become queued and mail.sent is appended (as a
 * send without send_at appends it at acceptance), in one transaction that takes the account row first, as a
 * cancel does, so the two serialise: whichever comes first wins. Returns whether this call released it.
 */
export async function releaseScheduled(svc: Pick<Services, 'db'>, messageId: string): Promise<boolean> {
  return svc.db.$transaction(
    async (tx) => {
      const m = await tx.message.findUnique({ where: { id: messageId }, select: { accountId: true, boxId: true, status: true } });
      if (!m || m.status !== ('scheduled' satisfies MessageStatus)) return false;
      await lockAccountCredit(tx, m.accountId);
      // Due while its account or box is paused: it stays scheduled and goes when they are resumed (guard/pause.ts).
      const [account, box] = await Promise.all([
        tx.account.findUnique({ where: { id: m.accountId }, select: { pausedAt: true } }),
        m.boxId ? tx.box.findUnique({ where: { id: m.boxId }, select: { pausedAt: true } }) : null,
      ]);
      if (heldByPause({ account_paused_at: account?.pausedAt ?? null, box_paused_at: box?.pausedAt ?? null })) return false;
      const [m$, d$] = [tbl('messages'), tbl('deliveries')];
      const scheduled = statusLit(MESSAGE_STATUSES, 'scheduled');
      const returned = [
        m$.id,
        m$.box_id,
        m$.rfc_message_id,
        m$.thread_id,
        m$.from_address,
        m$.to_addresses,
        m$.cc_addresses,
        m$.subject,
        m$.send_at,
        m$.context,
      ];
      const rows = await run(
        tx,
        sql<{
          id: string;
          box_id: string | null;
          rfc_message_id: string;
          thread_id: string;
          from_address: string | null;
          to_addresses: string[];
          cc_addresses: string[];
          subject: string | null;
          send_at: Date | null;
          context: unknown;
          recipients: number;
        }>`
        WITH m AS (
          UPDATE ${m$.$} SET ${m$.status} = ${statusLit(MESSAGE_STATUSES, 'queued')} WHERE ${m$.id} = ${messageId} AND ${m$.status} = ${scheduled}
          RETURNING ${sql.join(returned)}
        ), d AS (
          UPDATE ${d$.$} SET ${d$.status} = ${statusLit(DELIVERY_STATUSES, 'queued')}, ${d$.updated_at} = now()
          WHERE ${d$.message_id} IN (SELECT id FROM m) AND ${d$.status} = ${statusLit(DELIVERY_STATUSES, 'scheduled')} RETURNING ${d$.id}
        )
        SELECT m.*, (SELECT count(*) FROM d)::int AS recipients FROM m`,
      );
      const r = rows[0];
      if (!r) return false;
      await appendEvent({
        db: tx,
        accountId: m.accountId,
        type: 'mail.sent',
        boxId: r.box_id,
        data: {
          message_id: r.id,
          rfc_message_id: r.rfc_message_id,
          thread_id: r.thread_id,
          from: r.from_address,
          to: r.to_addresses,
          cc: r.cc_addresses,
          recipients: r.recipients,
          subject: r.subject,
          status: 'queued',
          send_at: r.send_at?.toISOString() ?? null,
          context: (r.context ?? null) as Record<string, unknown> | null,
        },
      });
      return true;
    },
    { maxWait: 10_000, timeout: 20_000 },
  );
}

/** POST /messages/{id}/cancel: a scheduled send that has not gone is cancelled and its held credit released. */
export async function cancelScheduled(svc: Services, input: { accountId: string; scope: BoxScope; id: string; actorKeyId: string }) {
  const out = await svc.db.$transaction(
    async (tx) => {
      const m = await tx.message.findFirst({
        where: { id: input.id, accountId: input.accountId },
        select: { id: true, boxId: true, status: true, direction: true, sendAt: true },
      });
      if (!m || (input.scope && (!m.boxId || !input.scope.includes(m.boxId)))) throw notFound('message', input.id);
      // The account first, as every writer of credit and events locks it, then the message row.
      await lockAccountCredit(tx, input.accountId);
      const cancelled = await tx.message.updateMany({
        where: { id: m.id, status: 'scheduled' satisfies MessageStatus },
        data: { status: 'cancelled' satisfies MessageStatus },
      });
      if (cancelled.count === 0) {
        const now = await tx.message.findUniqueOrThrow({ where: { id: m.id }, select: { status: true } });
        if (now.status === 'cancelled') throw new AppError('conflict', `message ${m.id} was already cancelled`, { status: now.status });
        throw new AppError(
          'conflict',
          m.sendAt
            ? `message ${m.id} has already gone (status ${now.status}); it can no longer be cancelled`
            : `message ${m.id} was not scheduled (status ${now.status}); only a send with send_at can be cancelled`,
          {
            status: now.status,
          },
        );
      }
      const deliveries = await tx.delivery.findMany({ where: { messageId: m.id, status: 'scheduled' satisfies DeliveryStatus } });
      await tx.delivery.updateMany({
        where: { messageId: m.id, status: 'scheduled' satisfies DeliveryStatus },
        data: { status: 'cancelled' satisfies DeliveryStatus },
      });
      for (const d of deliveries) await releaseDelivery(tx, d);
      await appendEvent({
        db: tx,
        accountId: input.accountId,
        type: 'mail.cancelled',
        boxId: m.boxId,
        data: { message_id: m.id, send_at: m.sendAt?.toISOString() ?? null, recipients: deliveries.length, by_key_id: input.actorKeyId },
      });
      return {
        id: m.id,
        status: 'cancelled' as const,
        send_at: m.sendAt?.toISOString() ?? null,
        released_messages: deliveries.length,
        deliveryIds: deliveries.map((d) => d.id),
      };
    },
    { maxWait: 10_000, timeout: 20_000 },
  );
  const { deliveryIds, ...response } = out;
  // Their delayed jobs would find the deliveries cancelled and do nothing; removing them is only tidy.
  await Promise.all(deliveryIds.map((id) => svc.jobs.deliveries.remove(id).catch(() => undefined)));
  return response;
}
