/**
 * The ledger's announced half, for the store writer and for single postings (billing, payments, signup credit,
 * domain moves, sending IPs, the trailer buyout): entries written and the balance moved under the account's row
 * lock, then whatever the change crossed announced (low_balance, billing.deficit, billing.recovered). Postings
 * with an idempotency key are made at most once. Batches of quiet changes go through writeBatch (store/write.ts),
 * which falls back to this for an account with something to announce.
 */
import { exec, k, type Tx } from '@boxes/db';
import { announceBalanceChange } from '../credit/alerts';
import { lockAccountsCredit, type LockedAccount, type Posting } from '../credit/ledger';
import type { Services } from '../shared/context';
import { newId } from '../shared/ids';

export interface LedgerPostResult {
  before: bigint;
  after: bigint;
  /** Entries written (a posting whose idempotency key exists already is skipped). */
  posted: number;
}

/** The idempotency keys among `keys` that the ledger already holds. */
export async function postedKeys(db: Pick<Tx, 'ledgerEntry'>, keys: string[]): Promise<Set<string>> {
  if (!keys.length) return new Set();
  const rows = await db.ledgerEntry.findMany({ where: { idempotencyKey: { in: keys } }, select: { idempotencyKey: true } });
  return new Set(rows.map((e) => e.idempotencyKey!));
}

export interface PostOptions {
  /** The row as the caller's lock read it, when it has one. */
  locked?: LockedAccount;
  /** A delivery's hold settled by these entries, released in the same statement that moves the balance. */
  releaseHeld?: { micros: bigint; freeMessages: number };
  /** Trailer surcharge these entries pay toward the opt-out. */
  trailerPaidMicros?: bigint;
}

/**
 * Writes entries and moves the balance (one UPDATE of the account row, with the hold and trailer columns the
 * entries settle), then announces what the change crossed (low_balance, billing.deficit, billing.recovered).
 */
export async function postEntries(svc: Services, tx: Tx, accountId: string, postings: Posting[], opts: PostOptions = {}): Promise<LedgerPostResult> {
  // Every caller posts for an account it acts for, inside its transaction: a missing row is a bug, not a 404.
  const a = opts.locked ?? (await lockAccountsCredit(tx, [accountId]))[0];
  if (!a) throw new Error(`postEntries: account ${accountId} does not exist`);
  let balance = a.balance_micros;
  let free = 0;
  let posted = 0;
  const seen = await postedKeys(
    tx,
    postings.map((p) => p.idempotencyKey).filter((k): k is string => !!k),
  );
  const rows = [];
  for (const p of postings) {
    if (p.idempotencyKey && seen.has(p.idempotencyKey)) continue;
    balance += p.amountMicros;
    free += p.freeMessages ?? 0;
    posted += 1;
    rows.push({
      id: newId('led'),
      accountId,
      type: p.type,
      amountMicros: p.amountMicros,
      freeMessages: p.freeMessages ?? 0,
      balanceAfter: balance,
      messageId: p.messageId ?? null,
      deliveryId: p.deliveryId ?? null,
      paymentId: p.paymentId ?? null,
      idempotencyKey: p.idempotencyKey ?? null,
      quantity: p.quantity ?? null,
      description: p.description ?? null,
    });
  }
  const held = opts.releaseHeld ?? { micros: 0n, freeMessages: 0 };
  const trailerPaid = opts.trailerPaidMicros ?? 0n;
  if (rows.length || held.micros || held.freeMessages || trailerPaid) {
    await exec(
      tx,
      k
        .updateTable('accounts')
        .set((eb) => ({
          balance_micros: balance,
          free_messages_left: eb('free_messages_left', '-', free),
          held_micros: eb('held_micros', '-', held.micros),
          held_free_messages: eb('held_free_messages', '-', held.freeMessages),
          trailer_paid_micros: eb('trailer_paid_micros', '+', trailerPaid),
        }))
        .where('id', '=', accountId),
    );
  }
  if (!rows.length) return { before: a.balance_micros, after: a.balance_micros, posted: 0 };
  if (rows.length === 1) await tx.ledgerEntry.create({ data: rows[0]!, select: { id: true } });
  else await tx.ledgerEntry.createMany({ data: rows });
  if (balance !== a.balance_micros) {
    await announceBalanceChange(svc, tx, {
      accountId,
      primaryAddress: a.primary_address,
      humanEmail: a.human_email,
      thresholds: { first: a.alert_first_micros, second: a.alert_second_micros },
      deficitSince: a.deficit_since,
      before: a.balance_micros,
      after: balance,
      cause: rows.find((r) => r.amountMicros !== 0n)?.type ?? rows[0]!.type,
    });
  }
  return { before: a.balance_micros, after: balance, posted };
}
