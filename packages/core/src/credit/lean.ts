/**
 * The write half of a hot path's charge (typed SQL; see README "Hot paths"): on an account row the caller has
 * locked, the ledger entries, the balance, hold and trailer columns, the chain head and the event announcing it,
 * as common table expressions the caller puts in its one statement next to its own writes. Only for "quiet"
 * charges: those that cross no alert threshold and leave or enter no deficit. Anything else goes through
 * postEntries, whose announcements (low_balance, billing.deficit, billing.recovered) must run.
 */
import { Prisma } from '@boxes/db';
import type { NewEvent } from '@boxes/schemas';
import { chainEvent, eventsInsert, EVENTS_CHANNEL, type EventRow } from '../events/append';
import { newId } from '../shared/ids';
import type { LockedAccount, Posting } from './ledger';

export interface LeanCharge {
  accountId: string;
  /** The account row, locked by the caller in this transaction (credit columns and the chain head). */
  locked: LockedAccount;
  postings: Posting[];
  releaseHeld?: { micros: bigint; freeMessages: number };
  trailerPaidMicros?: bigint;
  event: NewEvent;
}

/** Whether the postings move the balance without anything to announce. */
export function isQuietCharge(a: LockedAccount, postings: Posting[]): boolean {
  const after = a.balance_micros + postings.reduce((n, p) => n + p.amountMicros, 0n);
  if (after === a.balance_micros) return true;
  return after >= 0n && a.deficit_since === null && a.alert_first_micros === null && a.alert_second_micros === null;
}

/**
 * CTEs `acc`, `led` and `ev` for the caller's statement, and the final SELECT that notifies the push workers,
 * for one charge or many, of one account or several (group commits): the charges of one account apply in the
 * order given, each on the state the one before it left (balance, chain head), all starting from the locked row
 * its first one carries. The caller checked with isQuietCharge that each is quiet on that running state.
 */
export function leanChargesSql(charges: LeanCharge[]): { ctes: Prisma.Sql; notify: Prisma.Sql; eventIds: string[] } {
  const accounts = new Map<
    string,
    { balance: bigint; free: number; heldMicros: bigint; heldFree: number; trailer: bigint; head: { chain_seq: number; chain_hash: string } }
  >();
  const entries: Record<string, unknown>[] = [];
  const events: EventRow[] = [];
  for (const c of charges) {
    let s = accounts.get(c.accountId);
    if (!s) {
      s = {
        balance: c.locked.balance_micros,
        free: 0,
        heldMicros: 0n,
        heldFree: 0,
        trailer: 0n,
        head: { chain_seq: c.locked.chain_seq, chain_hash: c.locked.chain_hash },
      };
      accounts.set(c.accountId, s);
    }
    for (const p of c.postings) {
      s.balance += p.amountMicros;
      s.free += p.freeMessages ?? 0;
      entries.push({
        id: newId('led'),
        account_id: c.accountId,
        type: p.type,
        amount_micros: String(p.amountMicros),
        free_messages: p.freeMessages ?? 0,
        balance_after: String(s.balance),
        message_id: p.messageId ?? null,
        delivery_id: p.deliveryId ?? null,
        quantity: p.quantity === undefined || p.quantity === null ? null : String(p.quantity),
      });
    }
    s.heldMicros += c.releaseHeld?.micros ?? 0n;
    s.heldFree += c.releaseHeld?.freeMessages ?? 0;
    s.trailer += c.trailerPaidMicros ?? 0n;
    const ev = chainEvent(s.head, { accountId: c.accountId, ...c.event });
    s.head = { chain_seq: ev.seq, chain_hash: ev.hash };
    events.push(ev);
  }
  const rows = [...accounts].map(([id, s]) => ({
    id,
    balance: String(s.balance),
    free: s.free,
    held: String(s.heldMicros),
    held_free: s.heldFree,
    trailer: String(s.trailer),
    seq: s.head.chain_seq,
    hash: s.head.chain_hash,
  }));
  const ctes = Prisma.sql`acc AS (
      UPDATE accounts a SET balance_micros = x.balance, free_messages_left = a.free_messages_left - x.free,
        held_micros = a.held_micros - x.held, held_free_messages = a.held_free_messages - x.held_free,
        trailer_paid_micros = a.trailer_paid_micros + x.trailer, chain_seq = x.seq, chain_hash = x.hash
      FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb)
        AS x(id text, balance bigint, free int, held bigint, held_free int, trailer bigint, seq int, hash text)
      WHERE a.id = x.id
    ), led AS (
      INSERT INTO ledger_entries (id, account_id, type, amount_micros, free_messages, balance_after, message_id, delivery_id, quantity, created_at)
      SELECT e.id, e.account_id, e.type, e.amount_micros, e.free_messages, e.balance_after, e.message_id, e.delivery_id, e.quantity, now()
      FROM jsonb_to_recordset(${JSON.stringify(entries)}::jsonb)
        AS e(id text, account_id text, type text, amount_micros bigint, free_messages int, balance_after bigint, message_id text, delivery_id text, quantity bigint)
    ), ev AS (
      ${eventsInsert(events)}
    )`;
  const ids = [...accounts.keys()];
  return {
    ctes,
    notify: Prisma.sql`SELECT pg_notify(${EVENTS_CHANNEL}, n.id)::text AS notified FROM unnest(${ids}::text[]) AS n(id)`,
    eventIds: events.map((e) => e.id),
  };
}
