/**
 * The writer of the ledger-grade tables: messages, deliveries, ledger entries and events, and the account row
 * columns they move (balance, free allowance, holds, trailer, the chain head). Batch-first: one change or
 * thousands, of one account or many, in one statement.
 *
 * The caller locks the accounts it writes for (lockAccountsCredit, in id order) and hands their rows over with
 * its changes in order. For each account the writer decides how its changes are written:
 *  - quiet: no charge of the account crosses an alert threshold or enters or leaves a deficit, so nothing needs
 *    announcing. Its holds, charges (ledger entries and balance) and events (chained here, in order) go into the
 *    one statement, beside the caller's messages, deliveries and own CTEs, with a NOTIFY for the push workers.
 *  - announced: some charge has something to announce (low_balance, billing.deficit, billing.recovered). The
 *    statement still writes the messages, deliveries and the caller's CTEs; the account's changes then follow
 *    one by one through postEntries and appendEvent, so the announcements happen exactly as on every other path.
 *    Those run on Prisma's models: in a transaction on the pg pool (poolTransaction, the group commits' flushes)
 *    the writer asks for a Prisma transaction (prismaTx) before writing anything, and the whole flush runs again
 *    in one (announcements are rare: a threshold crossed).
 * Callers never make that choice. The rows in `locked` are moved to the state the write left them in, so a
 * caller writing in runs (inbound group commits) needs no second lock read.
 */
import { exec, prepared, prismaTx, rows, sql, tbl, type RawBuilder, type SqlClient } from '@boxes/db';
import type { NewEvent } from '@boxes/schemas';
import { appendEvent, chainEvent, eventsInsert, EVENTS_CHANNEL, type EventRow } from '../events/append';
import { lockAccountsCredit, type LockedAccount, type Posting } from '../credit/ledger';
import { postEntries } from './ledger';
import type { Services } from '../shared/context';
import { newId } from '../shared/ids';
import { attachmentRows } from '../messages/attachments';
import {
  attachmentsInsert,
  deliveriesInsert,
  fixed,
  ledgerInsert,
  messagesCtes,
  recordsetJson,
  type DeliveryRow,
  type LedgerRow,
  type MessageRow,
} from './rows';

/** One change of one account, applied in the order given: a hold, then a charge, then an event. */
export interface AccountChange {
  accountId: string;
  /** Credit reserved for a send (positive) until its deliveries settle. */
  hold?: { micros: bigint; freeMessages: number };
  /** Ledger entries moving the balance, the hold they settle and the trailer surcharge they pay. */
  charge?: { postings: Posting[]; releaseHeld?: { micros: bigint; freeMessages: number }; trailerPaidMicros?: bigint };
  /** The event announcing the change, chained onto the account's log. */
  event?: NewEvent;
}

export interface WriteBatch {
  /** The rows of every account in `changes`, locked by the caller in this transaction. Moved to their new state. */
  locked: Map<string, LockedAccount>;
  changes: AccountChange[];
  messages?: MessageRow[];
  deliveries?: DeliveryRow[];
  /** The caller's own writes for the same statement, each `name AS (...)` (a CTE; it sees the rows as before the statement). */
  also?: RawBuilder<unknown>[];
  /**
   * The caller's CTEs are of a few texts, every value in them a parameter, so the statement can run prepared as
   * the writer's own do; their lists should be rows of parameters (valueRows), as an array makes PostgreSQL plan
   * the statement again on every run anyway. Otherwise it runs unnamed: parsed and planned again on every run.
   */
  alsoPrepared?: boolean;
}

export interface WriteResult {
  /** The events written, in order (announced accounts' included). */
  events: EventRow[];
  /** The attachment rows written, by message (their text is extracted once the transaction commits). */
  attachmentIds: Map<string, string[]>;
}

/** Whether postings move the balance without anything to announce, on the account's state as it stands. */
function isQuiet(a: LockedAccount, postings: Posting[]): boolean {
  const after = a.balance_micros + postings.reduce((n, p) => n + p.amountMicros, 0n);
  if (after === a.balance_micros) return true;
  return after >= 0n && a.deficit_since === null && a.alert_first_micros === null && a.alert_second_micros === null;
}

/** An account's row as the statement moves it: deltas, and the chain head it ends on. */
interface AccountRow {
  id: string;
  balance: bigint;
  free: number;
  held: bigint;
  held_free: number;
  trailer: bigint;
  seq: number;
  hash: string;
}

interface AccountDelta {
  balance: bigint;
  free: number;
  held: bigint;
  heldFree: number;
  trailer: bigint;
}

/** The quiet half: the account row's new state, its ledger entries and its chained events; null if it must be announced. */
function planQuiet(a: LockedAccount, changes: AccountChange[]): { next: LockedAccount; delta: AccountDelta; entries: LedgerRow[]; events: EventRow[] } | null {
  const next = { ...a };
  const delta: AccountDelta = { balance: 0n, free: 0, held: 0n, heldFree: 0, trailer: 0n };
  const entries: LedgerRow[] = [];
  const events: EventRow[] = [];
  for (const c of changes) {
    if (c.hold) {
      delta.held += c.hold.micros;
      delta.heldFree += c.hold.freeMessages;
      next.held_micros += c.hold.micros;
      next.held_free_messages += c.hold.freeMessages;
    }
    if (c.charge) {
      const { postings, releaseHeld, trailerPaidMicros } = c.charge;
      // Idempotent postings (billing, payments) check the ledger first: the general path.
      if (postings.some((p) => p.idempotencyKey) || !isQuiet(next, postings)) return null;
      for (const p of postings) {
        next.balance_micros += p.amountMicros;
        next.free_messages_left -= p.freeMessages ?? 0;
        delta.balance += p.amountMicros;
        delta.free += p.freeMessages ?? 0;
        entries.push({
          id: newId('led'),
          account_id: a.id,
          type: p.type,
          amount_micros: p.amountMicros,
          free_messages: p.freeMessages ?? 0,
          balance_after: next.balance_micros,
          message_id: p.messageId ?? null,
          delivery_id: p.deliveryId ?? null,
          payment_id: p.paymentId ?? null,
          quantity: p.quantity ?? null,
          description: p.description ?? null,
        });
      }
      if (releaseHeld) {
        delta.held -= releaseHeld.micros;
        delta.heldFree -= releaseHeld.freeMessages;
        next.held_micros -= releaseHeld.micros;
        next.held_free_messages -= releaseHeld.freeMessages;
      }
      if (trailerPaidMicros) {
        delta.trailer += trailerPaidMicros;
        next.trailer_paid_micros += trailerPaidMicros;
      }
    }
    if (c.event) {
      const ev = chainEvent(next, { accountId: a.id, ...c.event });
      next.chain_seq = ev.seq;
      next.chain_hash = ev.hash;
      events.push(ev);
    }
  }
  return { next, delta, entries, events };
}

/** Writes a batch (see the module comment): one statement, then the announced accounts' changes in order. */
export async function writeBatch(svc: Services, tx: SqlClient, batch: WriteBatch): Promise<WriteResult> {
  const byAccount = new Map<string, AccountChange[]>();
  for (const c of batch.changes) {
    if (!batch.locked.has(c.accountId)) throw new Error(`writeBatch: account ${c.accountId} was not locked by the caller`);
    byAccount.set(c.accountId, [...(byAccount.get(c.accountId) ?? []), c]);
  }
  const accRows: AccountRow[] = [];
  const entries: LedgerRow[] = [];
  const events: EventRow[] = [];
  const announced: string[] = [];
  const moved = new Map<string, LockedAccount>();
  for (const [accountId, changes] of byAccount) {
    const plan = planQuiet(batch.locked.get(accountId)!, changes);
    if (!plan) {
      announced.push(accountId);
      continue;
    }
    moved.set(accountId, plan.next);
    entries.push(...plan.entries);
    events.push(...plan.events);
    accRows.push({
      id: accountId,
      balance: plan.delta.balance,
      free: plan.delta.free,
      held: plan.delta.held,
      held_free: plan.delta.heldFree,
      trailer: plan.delta.trailer,
      seq: plan.next.chain_seq,
      hash: plan.next.chain_hash,
    });
  }
  // The general path runs through Prisma's models: in a pool transaction (poolTransaction) the whole batch is
  // then run again in a Prisma transaction, so ask before anything is written.
  const general = announced.length ? prismaTx(tx, 'an account has something to announce') : null;
  const ctes: RawBuilder<unknown>[] = [];
  if (accRows.length) {
    const head = fixed('write:acc', () => {
      const [set, a] = [tbl('accounts'), tbl('accounts', 'a')];
      return sql`UPDATE ${a.$} SET ${set.balance_micros} = ${a.balance_micros} + x.balance, ${set.free_messages_left} = ${a.free_messages_left} - x.free,
        ${set.held_micros} = ${a.held_micros} + x.held, ${set.held_free_messages} = ${a.held_free_messages} + x.held_free,
        ${set.trailer_paid_micros} = ${a.trailer_paid_micros} + x.trailer, ${set.chain_seq} = x.seq, ${set.chain_hash} = x.hash`;
    });
    ctes.push(sql`acc AS (
      ${head}
      FROM jsonb_to_recordset(${recordsetJson(accRows)}::jsonb)
        AS x(id text, balance bigint, free int, held bigint, held_free int, trailer bigint, seq int, hash text)
      WHERE ${tbl('accounts', 'a').id} = x.id
    )`);
  }
  if (batch.messages?.length) ctes.push(messagesCtes(batch.messages));
  const files = (batch.messages ?? []).flatMap((m) => (m.attachments?.length ? attachmentRows(m.id, m.account_id, m.attachments) : []));
  const attachmentIds = new Map<string, string[]>();
  for (const f of files) attachmentIds.set(f.message_id, [...(attachmentIds.get(f.message_id) ?? []), f.id]);
  if (files.length) ctes.push(sql`att AS (${attachmentsInsert(files)})`);
  if (batch.deliveries?.length) ctes.push(sql`dlv AS (${deliveriesInsert(batch.deliveries)})`);
  if (entries.length) ctes.push(sql`led AS (${ledgerInsert(entries)})`);
  if (events.length) ctes.push(sql`ev AS (${eventsInsert(events)})`);
  ctes.push(...(batch.also ?? []));
  if (ctes.length) {
    const notified = [...new Set(events.map((e) => e.account_id))];
    const statement = sql`WITH ${sql.join(ctes)} SELECT pg_notify(${EVENTS_CHANNEL}, n.id)::text AS notified FROM unnest(${notified}::text[]) AS n(id)`;
    // Made of the writer's own fragments, its values all parameters, the statement is one of a few texts (by the
    // CTEs present): prepared on each pool connection, so PostgreSQL parses and plans it once there. A caller's
    // own CTEs may be anything: with them it runs unnamed, unless the caller says they are of a few texts too.
    await rows(tx, batch.also?.length && !batch.alsoPrepared ? statement : prepared(statement));
  }
  for (const [id, next] of moved) batch.locked.set(id, next);
  if (!general) return { events, attachmentIds };
  // The general path, account by account in the caller's order: announcements run as on every other path.
  for (const accountId of announced) {
    for (const c of byAccount.get(accountId)!) {
      if (c.hold) {
        const a = tbl('accounts');
        await exec(
          general,
          sql`UPDATE ${a.$} SET ${a.held_micros} = ${a.held_micros} + ${c.hold.micros}, ${a.held_free_messages} = ${a.held_free_messages} + ${c.hold.freeMessages}
            WHERE ${a.id} = ${accountId}`,
        );
      }
      if (c.charge) {
        await postEntries(svc, general, accountId, c.charge.postings, { releaseHeld: c.charge.releaseHeld, trailerPaidMicros: c.charge.trailerPaidMicros });
      }
      if (c.event) events.push(await appendEvent({ db: general, accountId, ...c.event }));
    }
  }
  for (const a of await lockAccountsCredit(general, announced.sort())) batch.locked.set(a.id, a);
  return { events, attachmentIds };
}
