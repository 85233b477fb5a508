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
 * Callers never make that choice. The rows in `locked` are moved to the state the write left them in, so a
 * caller writing in runs (inbound group commits) needs no second lock read.
 */
import { Prisma, type Tx } from '@boxes/db';
import type { NewEvent } from '@boxes/schemas';
import { appendEvent, chainEvent, eventsInsert, EVENTS_CHANNEL, type EventRow } from '../events/append';
import { lockAccountsCredit, postEntries, type LockedAccount, type Posting } from '../credit/ledger';
import type { Services } from '../shared/context';
import { newId } from '../shared/ids';
import { deliveriesInsert, messagesInsert, type DeliveryRow, type MessageRow } from './rows';

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
  also?: Prisma.Sql[];
}

export interface WriteResult {
  /** The events written, in order (announced accounts' included). */
  events: EventRow[];
}

/** Whether postings move the balance without anything to announce, on the account's state as it stands. */
function isQuiet(a: LockedAccount, postings: Posting[]): boolean {
  const after = a.balance_micros + postings.reduce((n, p) => n + p.amountMicros, 0n);
  if (after === a.balance_micros) return true;
  return after >= 0n && a.deficit_since === null && a.alert_first_micros === null && a.alert_second_micros === null;
}

interface AccountDelta {
  balance: bigint;
  free: number;
  held: bigint;
  heldFree: number;
  trailer: bigint;
}

/** The quiet half: the account row's new state, its ledger entries and its chained events; null if it must be announced. */
function planQuiet(
  a: LockedAccount,
  changes: AccountChange[],
): { next: LockedAccount; delta: AccountDelta; entries: Record<string, unknown>[]; events: EventRow[] } | null {
  const next = { ...a };
  const delta: AccountDelta = { balance: 0n, free: 0, held: 0n, heldFree: 0, trailer: 0n };
  const entries: Record<string, unknown>[] = [];
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
          amount_micros: String(p.amountMicros),
          free_messages: p.freeMessages ?? 0,
          balance_after: String(next.balance_micros),
          message_id: p.messageId ?? null,
          delivery_id: p.deliveryId ?? null,
          payment_id: p.paymentId ?? null,
          quantity: p.quantity === undefined || p.quantity === null ? null : String(p.quantity),
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
export async function writeBatch(svc: Services, tx: Tx, batch: WriteBatch): Promise<WriteResult> {
  const byAccount = new Map<string, AccountChange[]>();
  for (const c of batch.changes) {
    if (!batch.locked.has(c.accountId)) throw new Error(`writeBatch: account ${c.accountId} was not locked by the caller`);
    byAccount.set(c.accountId, [...(byAccount.get(c.accountId) ?? []), c]);
  }
  const accRows: Record<string, unknown>[] = [];
  const entries: Record<string, unknown>[] = [];
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
      balance: String(plan.delta.balance),
      free: plan.delta.free,
      held: String(plan.delta.held),
      held_free: plan.delta.heldFree,
      trailer: String(plan.delta.trailer),
      seq: plan.next.chain_seq,
      hash: plan.next.chain_hash,
    });
  }
  const ctes: Prisma.Sql[] = [];
  if (accRows.length) {
    ctes.push(Prisma.sql`acc AS (
      UPDATE accounts a SET balance_micros = a.balance_micros + x.balance, free_messages_left = a.free_messages_left - x.free,
        held_micros = a.held_micros + x.held, held_free_messages = a.held_free_messages + x.held_free,
        trailer_paid_micros = a.trailer_paid_micros + x.trailer, chain_seq = x.seq, chain_hash = x.hash
      FROM jsonb_to_recordset(${JSON.stringify(accRows)}::jsonb)
        AS x(id text, balance bigint, free int, held bigint, held_free int, trailer bigint, seq int, hash text)
      WHERE a.id = x.id
    )`);
  }
  if (batch.messages?.length) ctes.push(Prisma.sql`msg AS (${messagesInsert(batch.messages)})`);
  if (batch.deliveries?.length) ctes.push(Prisma.sql`dlv AS (${deliveriesInsert(batch.deliveries)})`);
  if (entries.length) {
    ctes.push(Prisma.sql`led AS (
      INSERT INTO ledger_entries (id, account_id, type, amount_micros, free_messages, balance_after, message_id, delivery_id, payment_id, quantity, description, created_at)
      SELECT e.id, e.account_id, e.type, e.amount_micros, e.free_messages, e.balance_after, e.message_id, e.delivery_id, e.payment_id, e.quantity, e.description, now()
      FROM jsonb_to_recordset(${JSON.stringify(entries)}::jsonb)
        AS e(id text, account_id text, type text, amount_micros bigint, free_messages int, balance_after bigint, message_id text, delivery_id text,
          payment_id text, quantity bigint, description text)
    )`);
  }
  if (events.length) ctes.push(Prisma.sql`ev AS (${eventsInsert(events)})`);
  ctes.push(...(batch.also ?? []));
  if (ctes.length) {
    const notified = [...new Set(events.map((e) => e.account_id))];
    await tx.$queryRaw`WITH ${Prisma.join(ctes, ', ')}
      SELECT pg_notify(${EVENTS_CHANNEL}, n.id)::text AS notified FROM unnest(${notified}::text[]) AS n(id)`;
  }
  for (const [id, next] of moved) batch.locked.set(id, next);
  if (!announced.length) return { events };
  // The general path, account by account in the caller's order: announcements run as on every other path.
  for (const accountId of announced) {
    for (const c of byAccount.get(accountId)!) {
      if (c.hold) {
        await tx.$executeRaw`UPDATE accounts SET held_micros = held_micros + ${c.hold.micros}, held_free_messages = held_free_messages + ${c.hold.freeMessages}
          WHERE id = ${accountId}`;
      }
      if (c.charge) {
        await postEntries(svc, tx, accountId, c.charge.postings, { releaseHeld: c.charge.releaseHeld, trailerPaidMicros: c.charge.trailerPaidMicros });
      }
      if (c.event) events.push(await appendEvent({ db: tx, accountId, ...c.event }));
    }
  }
  for (const a of await lockAccountsCredit(tx, announced.sort())) batch.locked.set(a.id, a);
  return { events };
}
