/**
 * Recording what happened to a delivery: delivered (charge the hold), bounced (release it, suppress the
 * address, re-evaluate reputation), deferred (retry later) or failed (retries exhausted: release). Each
 * final transition happens once; the message's status follows its deliveries.
 */
import { commitWithNext, exec, LARGEST_ROWS, parameterRows, prismaTx, sql, tbl, valueRows, type RawBuilder, type SqlClient, type Tx } from '@boxes/db';
import { deliveryCharge, lockAccountsCredit, releaseDelivery } from '../credit/ledger';
import { appendEvent } from '../events/append';
import { writeBatch, type AccountChange } from '../store/write';
import type { Services } from '../shared/context';
import { suppress } from '../suppression/suppression';
import { evaluateReputation } from '../suppression/reputation';
import { stopForwardOnBounce } from '../forwarding/forwards';
import { DELIVERY_STATUSES, FINAL_DELIVERY_STATUSES, MESSAGE_STATUSES, type DeliveryStatus, type MessageStatus } from '@boxes/schemas';
import { statusIn, statusLit } from '../shared/statuses';
import { sealBytes } from '../shared/crypto';

const FINAL: DeliveryStatus[] = [...FINAL_DELIVERY_STATUSES];

/** Sets the messages' statuses from their deliveries, each once every one of its deliveries is final (one statement). */
export async function refreshMessageStatuses(tx: Tx, messageIds: string[]): Promise<void> {
  if (messageIds.length) await exec(tx, messageStatusUpdate(messageIds));
}

async function refreshMessageStatus(tx: Tx, messageId: string): Promise<void> {
  await refreshMessageStatuses(tx, [messageId]);
}

/**
 * Message ids for messageStatusUpdate: an array parameter, or rows of parameters (valueRows, padded to at least
 * `atLeast` rows) for a statement that runs prepared (the delivered outcomes' writer statement), where an array
 * would have PostgreSQL plan the statement again on every run.
 */
export type MessageIds = string[] | { rows: string[]; atLeast: number };

/**
 * Each message's deliveries counted: total, delivered, bounced and still open (not final), by message_id (no row
 * for a message without deliveries). Counted message by message through the message_id index: asked as one
 * `message_id = ANY(...)`, a deliveries table without statistics yet (a fresh database, or one growing faster than
 * autovacuum analyzes it) was read whole on every outcome batch, the planner taking each id for 0.5% of the table.
 */
function deliveryCounts(messageIds: MessageIds): RawBuilder<unknown> {
  const d = tbl('deliveries', 'dc');
  const ids = Array.isArray(messageIds)
    ? sql`(SELECT DISTINCT unnest(${messageIds}::text[]) AS id)`
    : sql`(SELECT DISTINCT v.id FROM ${valueRows(messageIds.rows, ['text'], (id) => [id], messageIds.atLeast)} AS v(i, id))`;
  return sql`(
        SELECT c.* FROM ${ids} AS mid
        CROSS JOIN LATERAL (
          SELECT ${d.message_id}, count(*) AS total,
            count(*) FILTER (WHERE ${d.status} = ${statusLit(DELIVERY_STATUSES, 'delivered')}) AS delivered,
            count(*) FILTER (WHERE ${d.status} = ${statusLit(DELIVERY_STATUSES, 'bounced')}) AS bounced,
            count(*) FILTER (WHERE ${d.status} NOT IN ${statusIn(DELIVERY_STATUSES, FINAL)}) AS open
          FROM ${d.$} WHERE ${d.message_id} = mid.id GROUP BY ${d.message_id}
        ) AS c
      ) s`;
}

/** The final status of a message whose deliveries are counted in s (deliveryCounts) and none open. */
function finalStatus(): RawBuilder<unknown> {
  const is = (v: MessageStatus) => statusLit(MESSAGE_STATUSES, v);
  return sql`WHEN s.delivered = s.total THEN ${is('delivered')}
          WHEN s.delivered > 0 THEN ${is('partially_delivered')}
          WHEN s.bounced > 0 THEN ${is('bounced')}
          ELSE ${is('failed')}`;
}

/**
 * Each message's status once every delivery of it is final: delivered, partially_delivered, bounced or failed.
 * Also a part of a larger statement, after the statement that set the deliveries' statuses.
 */
export function messageStatusUpdate(messageIds: MessageIds): RawBuilder<unknown> {
  const [set, m] = [tbl('messages'), tbl('messages', 'm')];
  return sql`
      UPDATE ${m.$} SET ${set.status} = CASE ${finalStatus()} END
      FROM ${deliveryCounts(messageIds)}
      WHERE ${m.id} = s.message_id AND s.open = 0`;
}

/** Signed bytes to store with a message: sealed, as base64 text in one JSON parameter, and their size before sealing. */
export interface SealedRaw {
  id: string;
  raw_enc: string;
  size: number;
}

/** The signed bytes of messages, sealed for rawsUpdate and messageStatusAndRawUpdate. */
export function sealRaws(secretKey: Buffer, raws: Iterable<[string, Buffer]>): SealedRaw[] {
  return [...raws].map(([id, raw]) => ({ id, raw_enc: sealBytes(secretKey, raw).toString('base64'), size: raw.length }));
}

/**
 * Stores each message's signed bytes unless it has some already: every recipient must get the same bytes, so the
 * first stored win. `source` is the rows (id, raw_enc, size) named r; the messages table is `m` (a caller may
 * add RETURNING m.id: the messages it stored them for).
 */
export function rawsUpdateFrom(source: RawBuilder<unknown>): RawBuilder<unknown> {
  const [set, m] = [tbl('messages'), tbl('messages', 'm')];
  return sql`UPDATE ${m.$} SET ${set.raw_enc} = decode(r.raw_enc, 'base64'), ${set.size_bytes} = r.size
      FROM ${source} WHERE ${m.id} = r.id AND ${m.raw_enc} IS NULL`;
}

/** rawsUpdateFrom for raws given in one JSON parameter. */
export function rawsUpdate(raws: SealedRaw[]): RawBuilder<unknown> {
  return rawsUpdateFrom(sql`jsonb_to_recordset(${JSON.stringify(raws)}::jsonb) AS r(id text, raw_enc text, size int)`);
}

/**
 * messageStatusUpdate, and in the same UPDATE the signed bytes of messages composed meanwhile (raws: id, sealed
 * bytes in base64, size), each stored only if the message has none yet. A message whose status is set and whose
 * bytes are stored in one flush is written once instead of twice (one new row version instead of two; neither
 * column is indexed, so each is a HOT update while its page has room, which the messages table's fillfactor
 * keeps). Also a part of a larger statement, after the statement that set the deliveries' statuses.
 */
export function messageStatusAndRawUpdate(messageIds: string[], raws: SealedRaw[]): RawBuilder<unknown> {
  const [set, m] = [tbl('messages'), tbl('messages', 'm')];
  return sql`
      UPDATE ${m.$} SET ${set.status} = CASE
          WHEN s.open <> 0 OR s.open IS NULL THEN ${m.status}
          ${finalStatus()} END,
        ${set.raw_enc} = COALESCE(${m.raw_enc}, decode(r.raw_enc, 'base64')),
        ${set.size_bytes} = CASE WHEN ${m.raw_enc} IS NULL AND r.id IS NOT NULL THEN r.size ELSE ${m.size_bytes} END
      FROM ${deliveryCounts(messageIds)} FULL JOIN jsonb_to_recordset(${JSON.stringify(raws)}::jsonb) AS r(id text, raw_enc text, size int) ON r.id = s.message_id
      WHERE ${m.id} = COALESCE(s.message_id, r.id) AND (s.open = 0 OR (r.id IS NOT NULL AND ${m.raw_enc} IS NULL))`;
}

/** Claims a delivery for a final state; false if it already reached one (a duplicate job or report). */
async function claim(tx: Tx, deliveryId: string, status: DeliveryStatus, data: Record<string, unknown>): Promise<boolean> {
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

export interface DeliveredOutcome {
  deliveryId: string;
  mta: string | null;
  response: string;
  attempts: number;
}

/**
 * A delivery the remote (or local) MX accepted: charged from its hold, announced as mail.delivered, and the
 * message's status follows. False if it had already reached a final state (a duplicate job or report).
 */
export async function markDelivered(
  svc: Services,
  tx: Tx,
  deliveryId: string,
  info: { mta: string | null; response: string; attempts: number },
): Promise<boolean> {
  return (await markDeliveredMany(svc, tx, [{ deliveryId, ...info }])).has(deliveryId);
}

/**
 * The claim of deliveries accepted by their MX (markDeliveredMany): each not final yet is set delivered, one row
 * of parameters per delivery (parameterRows), so the planner knows how many rows it joins and reads them through
 * the primary key (with the recordset of one jsonb parameter it guessed 100, and on a deliveries table without
 * statistics yet read the whole table every batch), and each connection keeps the statement's plan.
 */
export const DELIVERED_CLAIMS = parameterRows<DeliveredOutcome, ClaimedDelivery>({
  types: ['text', 'text', 'int'],
  values: (o) => [o.deliveryId, o.mta, o.attempts],
  build: (values) => {
    const [set, d] = [tbl('deliveries'), tbl('deliveries', 'd')];
    return sql<ClaimedDelivery>`
    UPDATE ${d.$} SET ${set.status} = ${statusLit(DELIVERY_STATUSES, 'delivered')}, ${set.delivered_at} = now(), ${set.remote_mta} = x.mta, ${set.last_error} = NULL,
      ${set.next_attempt_at} = NULL, ${set.attempts} = x.attempts, ${set.updated_at} = now()
    FROM ${values} AS x(i, id, mta, attempts)
    WHERE ${d.id} = x.id AND ${d.status} NOT IN ${statusIn(DELIVERY_STATUSES, FINAL)}
    RETURNING ${sql.join([d.id, d.account_id, d.message_id, d.recipient, d.route, d.held_micros, d.used_free, d.attachment_micros, d.surcharge_micros, d.settled_at])}`;
  },
});

/**
 * Many deliveries accepted by their MX, recorded together (group commit: the worker gathers the outcomes that
 * arrive while a record is being written). Three statements in the caller's transaction whatever their number
 * (see docs/ARCHITECTURE.md, "Hot paths"): claim the deliveries, lock their accounts (in id order, so two such batches never
 * deadlock), then the store writer's one statement that settles the holds, writes the ledger entries, appends
 * each mail.delivered to its account's chain (in order, one account after another) and refreshes the messages
 * (an account whose charges have something to announce follows the general way, see store/write.ts).
 * Returns the ids it recorded.
 */
export async function markDeliveredMany(svc: Services, tx: SqlClient, outcomes: DeliveredOutcome[], opts: { last?: boolean } = {}): Promise<Set<string>> {
  const byId = new Map(outcomes.map((o) => [o.deliveryId, o]));
  if (!byId.size) return new Set();
  const claimedRows = await DELIVERED_CLAIMS.run(tx, [...byId.values()]);
  if (!claimedRows.length) return new Set();
  // In the order they were given: an account's events follow the order its outcomes arrived.
  const order = new Map([...byId.keys()].map((id, i) => [id, i]));
  const claimed = claimedRows.sort((x, y) => order.get(x.id)! - order.get(y.id)!);
  const accountIds = [...new Set(claimed.map((d) => d.account_id))].sort();
  const locked = new Map((await lockAccountsCredit(tx, accountIds)).map((a) => [a.id, a]));
  // Reevaluating a reputation runs on Prisma's models: in a pool transaction, asked for before the writer's
  // statement (the claim above is rolled back with the rest, and the whole flush runs again in Prisma's).
  const reevaluate = accountIds.filter((id) => locked.get(id)!.reputation_state !== 'ok');
  const general = reevaluate.length ? prismaTx(tx, 'an account under a reputation warning') : null;
  const eventData = (d: ClaimedDelivery) => {
    const o = byId.get(d.id)!;
    return { message_id: d.message_id, recipient: d.recipient, route: d.route, remote_mta: o.mta, response: o.response.slice(0, 500) };
  };
  // Each account's running trailer payments, so a surcharge stops once the opt-out is paid off within the batch.
  const paid = new Map([...locked].map(([id, a]) => [id, a.trailer_paid_micros]));
  const changes: AccountChange[] = claimed.map((d) => {
    const charge = d.settled_at ? null : deliveryCharge({ trailer_paid_micros: paid.get(d.account_id)! }, d);
    if (charge) paid.set(d.account_id, paid.get(d.account_id)! + charge.surcharge);
    return {
      accountId: d.account_id,
      charge: charge
        ? { postings: charge.postings, releaseHeld: { micros: d.held_micros, freeMessages: charge.free }, trailerPaidMicros: charge.surcharge }
        : undefined,
      event: { type: 'mail.delivered', data: eventData(d) },
    };
  });
  const unsettled = claimed.filter((d) => !d.settled_at).map((d) => d.id);
  const [set, sd] = [tbl('deliveries'), tbl('deliveries', 'sd')];
  // The caller's last statement (opts.last): the writer's goes out with the COMMIT.
  if (opts.last) commitWithNext(tx);
  // Both lists as rows of parameters, each padded to the size that holds the whole batch (neither is longer): the
  // statement is one text per batch size (and per the writer's CTEs), run prepared, and each connection keeps its
  // plan; given as arrays, it was planned again on every batch. A batch beyond the largest size (a group commit's
  // is at most 200) has a text of its own and runs unnamed.
  await writeBatch(svc, tx, {
    locked,
    changes,
    also: [
      sql`settle AS (UPDATE ${sd.$} SET ${set.settled_at} = now() FROM ${valueRows(unsettled, ['text'], (id) => [id], claimed.length)} AS u(i, id)
        WHERE ${sd.id} = u.id AND ${sd.settled_at} IS NULL)`,
      sql`mst AS (${messageStatusUpdate({ rows: [...new Set(claimed.map((c) => c.message_id))], atLeast: claimed.length })})`,
    ],
    alsoPrepared: claimed.length <= LARGEST_ROWS,
  });
  // More mail delivered lowers the rates: an account under a warning may have recovered (one that is ok cannot
  // get worse by a delivery, so the hot path skips it).
  for (const accountId of reevaluate) await evaluateReputation(general!, accountId, svc.clock.now());
  return new Set(claimed.map((d) => d.id));
}

/** attempts: the attempts made when our own attempt bounced; omitted for a bounce reported later (DSN). */
export async function markBounced(
  tx: Tx,
  deliveryId: string,
  info: { code: number | null; response: string; source: 'smtp' | 'dsn' | 'local'; attempts?: number; now: Date },
) {
  const d = await tx.delivery.findUniqueOrThrow({ where: { id: deliveryId } });
  const fresh = await claim(tx, deliveryId, 'bounced', {
    lastError: info.response.slice(0, 1000),
    nextAttemptAt: null,
    ...(info.attempts !== undefined ? { attempts: info.attempts } : {}),
  });
  // A DSN can arrive after we recorded the delivery as delivered (the remote accepted, then bounced): it still
  // counts as a bounce for the suppression list.
  if (!fresh && d.status !== 'delivered') return;
  if (fresh) await releaseDelivery(tx, d);
  else await tx.delivery.update({ where: { id: d.id }, data: { status: 'bounced' satisfies DeliveryStatus, lastError: info.response.slice(0, 1000) } });
  await appendEvent({
    db: tx,
    accountId: d.accountId,
    type: 'mail.bounced',
    data: { message_id: d.messageId, recipient: d.recipient, code: info.code, response: info.response.slice(0, 500), source: info.source },
  });
  await suppress(tx, {
    accountId: d.accountId,
    address: d.recipient,
    reason: 'bounce',
    detail: info.response.slice(0, 500),
    messageId: d.messageId,
    now: info.now,
  });
  // A bounced auto-forwarded copy stops its forward.
  await stopForwardOnBounce(tx, { messageId: d.messageId, recipient: d.recipient, response: info.response });
  await evaluateReputation(tx, d.accountId, info.now);
  await refreshMessageStatus(tx, d.messageId);
}

export async function markDeferred(tx: Tx, deliveryId: string, info: { error: string; nextAttemptAt: Date; attempts: number }) {
  await tx.delivery.updateMany({
    where: { id: deliveryId, status: { notIn: FINAL } },
    data: { status: 'deferred' satisfies DeliveryStatus, lastError: info.error.slice(0, 1000), nextAttemptAt: info.nextAttemptAt, attempts: info.attempts },
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
