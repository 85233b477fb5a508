/**
 * The write half of a hot path's charge (typed SQL; see README "Hot paths"): on an account row the caller has
 * locked, the ledger entries, the balance, hold and trailer columns, the chain head and the event announcing it,
 * as common table expressions the caller puts in its one statement next to its own writes. Only for "quiet"
 * charges: those that cross no alert threshold and leave or enter no deficit. Anything else goes through
 * postEntries, whose announcements (low_balance, billing.deficit, billing.recovered) must run.
 */
import { Prisma } from '@boxes/db';
import { chainEvent, EVENTS_CHANNEL } from '../events/append';
import { newId } from '../shared/ids';
import type { LockedAccount, Posting } from './ledger';

export interface LeanCharge {
  accountId: string;
  /** The account row, locked by the caller in this transaction (credit columns and the chain head). */
  locked: LockedAccount;
  postings: Posting[];
  releaseHeld?: { micros: bigint; freeMessages: number };
  trailerPaidMicros?: bigint;
  event: { type: string; boxId?: string | null; data: Record<string, unknown> };
}

/** Whether the postings move the balance without anything to announce. */
export function isQuietCharge(a: LockedAccount, postings: Posting[]): boolean {
  const after = a.balance_micros + postings.reduce((n, p) => n + p.amountMicros, 0n);
  if (after === a.balance_micros) return true;
  return after >= 0n && a.deficit_since === null && a.alert_first_micros === null && a.alert_second_micros === null;
}

/**
 * CTEs `acc`, `led` and `ev` for the caller's statement, and the final SELECT that notifies the push workers.
 * The caller checked isQuietCharge.
 */
export function leanChargeSql(c: LeanCharge): { ctes: Prisma.Sql; notify: Prisma.Sql; eventId: string } {
  const a = c.locked;
  let running = a.balance_micros;
  let free = 0;
  const entries = c.postings.map((p) => {
    running += p.amountMicros;
    free += p.freeMessages ?? 0;
    return {
      id: newId('led'),
      type: p.type,
      amount_micros: String(p.amountMicros),
      free_messages: p.freeMessages ?? 0,
      balance_after: String(running),
      message_id: p.messageId ?? null,
      delivery_id: p.deliveryId ?? null,
      quantity: p.quantity === undefined || p.quantity === null ? null : String(p.quantity),
    };
  });
  const held = c.releaseHeld ?? { micros: 0n, freeMessages: 0 };
  const ev = chainEvent(a, { accountId: c.accountId, type: c.event.type, data: c.event.data });
  const ctes = Prisma.sql`acc AS (
      UPDATE accounts SET balance_micros = ${running}, free_messages_left = free_messages_left - ${free},
        held_micros = held_micros - ${held.micros}, held_free_messages = held_free_messages - ${held.freeMessages},
        trailer_paid_micros = trailer_paid_micros + ${c.trailerPaidMicros ?? 0n}, chain_seq = ${ev.seq}, chain_hash = ${ev.hash}
      WHERE id = ${c.accountId}
    ), led AS (
      INSERT INTO ledger_entries (id, account_id, type, amount_micros, free_messages, balance_after, message_id, delivery_id, quantity, created_at)
      SELECT e.id, ${c.accountId}, e.type, e.amount_micros, e.free_messages, e.balance_after, e.message_id, e.delivery_id, e.quantity, now()
      FROM jsonb_to_recordset(${JSON.stringify(entries)}::jsonb)
        AS e(id text, type text, amount_micros bigint, free_messages int, balance_after bigint, message_id text, delivery_id text, quantity bigint)
    ), ev AS (
      INSERT INTO events (id, account_id, seq, type, box_id, data, created_at, prev_hash, hash)
      VALUES (${ev.id}, ${c.accountId}, ${ev.seq}, ${c.event.type}, ${c.event.boxId ?? null}, ${ev.json}::jsonb, ${ev.createdAt}, ${ev.prevHash}, ${ev.hash})
    )`;
  return { ctes, notify: Prisma.sql`SELECT pg_notify(${EVENTS_CHANNEL}, ${c.accountId})::text AS notified`, eventId: ev.id };
}
