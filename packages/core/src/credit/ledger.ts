/**
 * The ledger (integer micro-dollars). Every charge and credit is one entry with its type, under the account's
 * row lock (the same lock the event log takes), and moves the balance in the same statement sequence.
 *
 * Sends reserve (hold) what each recipient will cost when the send is accepted: the message (from the free
 * allowance first, then credit), its attachments, and the trailer surcharge when the account opted out.
 * The hold is settled when delivery ends: charged when delivered, released when it bounces or fails. Inbound
 * mail and recurring debits are charged even below zero; only sends are refused (402).
 */
import { compile, exec, k, rows, sql, type Delivery, type SqlClient, type Tx } from '@boxes/db';
import { AppError } from '../shared/errors';
import type { Services } from '../shared/context';
import { balanceState, type BalanceState } from './alerts';
import {
  attachmentMicros,
  FREE_MESSAGES,
  messagePriceMicros,
  microsToCents,
  microsToUsd,
  PRICES_MICROS,
  TRAILER_PAYOFF_MICROS,
  type LedgerType,
} from './prices';

export interface LockedAccount {
  id: string;
  balance_micros: bigint;
  held_micros: bigint;
  free_messages_left: number;
  held_free_messages: number;
  primary_address: string;
  human_email: string;
  alert_first_micros: bigint | null;
  alert_second_micros: bigint | null;
  deficit_since: Date | null;
  trailer_opted_out_at: Date | null;
  trailer_paid_micros: bigint;
  /** The event chain's head (the same row lock serialises appends). */
  chain_seq: number;
  chain_hash: string;
  /** The reputation state last announced (suppression/reputation.ts). */
  reputation_state: string;
}

/** Locks the account row (the same lock the event log takes) and reads its credit. */
export async function lockAccountCredit(tx: SqlClient, accountId: string): Promise<LockedAccount> {
  const [row] = await lockAccountsCredit(tx, [accountId]);
  if (!row) throw new AppError('not_found', `account ${accountId} not found`);
  return row;
}

/**
 * The lock read, compiled once (the ids are its one parameter, $1): a group commit makes it on every flush. Its
 * text has no literal, so a pool transaction sends BEGIN with it in one round trip (poolTransaction).
 */
const LOCK_ACCOUNTS = compile(
  k
    .selectFrom('accounts')
    .select([
      'id',
      'balance_micros',
      'held_micros',
      'free_messages_left',
      'held_free_messages',
      'primary_address',
      'human_email',
      'alert_first_micros',
      'alert_second_micros',
      'deficit_since',
      'trailer_opted_out_at',
      'trailer_paid_micros',
      'chain_seq',
      'chain_hash',
      'reputation_state',
    ])
    .where('id', '=', sql<string>`ANY(${sql.raw('$1')}::text[])`)
    .orderBy('id')
    .forNoKeyUpdate(),
);

/** Several account rows locked at once, in id order (two callers locking overlapping sets never deadlock). */
export async function lockAccountsCredit(tx: SqlClient, accountIds: string[]): Promise<LockedAccount[]> {
  return rows(tx, { ...LOCK_ACCOUNTS, parameters: [accountIds] });
}

export function messagePrice(svc: Pick<Services, 'config'>): bigint {
  return messagePriceMicros(svc.config);
}

export interface Posting {
  type: LedgerType;
  /** Negative for a charge, positive for a credit. */
  amountMicros: bigint;
  freeMessages?: number;
  messageId?: string | null;
  deliveryId?: string | null;
  paymentId?: string | null;
  /** A posting with a key is made at most once (recurring debits, payments). */
  idempotencyKey?: string | null;
  quantity?: bigint | null;
  description?: string | null;
}

export interface RecipientHold {
  free: boolean;
  /** Total held for this recipient: message + attachments + trailer surcharge (0 for a free message). */
  micros: bigint;
  attachmentMicros: bigint;
  surchargeMicros: bigint;
}

export interface Reservation {
  perRecipient: RecipientHold[];
  freeUsed: number;
  heldMicros: bigint;
  /** The account's credit after the reservation (the row stays locked until the transaction ends). */
  after: { balanceMicros: bigint; freeMessagesLeft: number; heldFreeMessages: number };
}

export function paymentRequired(svc: Services, message: string, extra: Record<string, unknown> = {}): AppError {
  return new AppError('payment_required', message, {
    top_up: {
      mpp: {
        method: 'POST',
        url: `${svc.config.apiBaseUrl}/account/credit/topup/mpp`,
        description: 'Machine Payments Protocol challenge; your agent runs the payment client',
      },
      card: { method: 'POST', url: `${svc.config.apiBaseUrl}/account/credit/topup`, description: 'payment intent (amount_cents) for the owner to approve' },
      human_approval:
        'Your human owner approves the payment in their wallet; tell them what it is for and wait for approved, denied or expired. Do not retry a denied payment without their consent.',
    },
    balance: { method: 'GET', url: `${svc.config.apiBaseUrl}/account/credit/balance` },
    ...extra,
  });
}

/** Whether the account pays a surcharge per message (trailer opted out and not yet paid off). */
export function surchargeApplies(a: Pick<LockedAccount, 'trailer_opted_out_at' | 'trailer_paid_micros'>): boolean {
  return a.trailer_opted_out_at !== null && a.trailer_paid_micros < TRAILER_PAYOFF_MICROS;
}

/**
 * What reserving `count` recipients of one message would hold, from the locked account row (free messages first,
 * then credit), or 402 with nothing reserved. Pure: the caller writes the holds (sendMessage folds them into its
 * one write statement; reserveMessages writes them alone).
 */
export function planReservation(svc: Services, a: LockedAccount, count: number, opts: { attachmentBytes?: number; trailer?: boolean } = {}): Reservation {
  const price = messagePrice(svc);
  if (a.balance_micros < 0n) {
    throw paymentRequired(
      svc,
      `Sending is blocked while the balance is negative (${microsToUsd(a.balance_micros)} USD). Top up to resume; inbound mail keeps arriving.`,
      {
        credit_balance_cents: microsToCents(a.balance_micros),
      },
    );
  }
  const attach = attachmentMicros(opts.attachmentBytes ?? 0);
  const surcharge = !opts.trailer && surchargeApplies(a) ? BigInt(PRICES_MICROS.trailerSurcharge) : 0n;
  const freeAvailable = Math.max(0, a.free_messages_left - a.held_free_messages);
  const freeUsed = Math.min(count, freeAvailable);
  const perRecipient: RecipientHold[] = Array.from({ length: count }, (_, i) => {
    const free = i < freeUsed;
    // A free message is free of everything, the surcharge included.
    return { free, micros: free ? 0n : price + attach + surcharge, attachmentMicros: free ? 0n : attach, surchargeMicros: free ? 0n : surcharge };
  });
  const need = perRecipient.reduce((n, r) => n + r.micros, 0n);
  const spendable = a.balance_micros - a.held_micros;
  if (need > spendable) {
    const paid = count - freeUsed;
    throw paymentRequired(
      svc,
      `Not enough credit: this send needs ${microsToUsd(need)} USD (${paid} message(s) beyond the free allowance${attach ? ', attachments' : ''}${surcharge ? ', trailer surcharge' : ''}), and ${microsToUsd(spendable > 0n ? spendable : 0n)} USD is available. Nothing was sent.`,
      { required_usd: microsToUsd(need), available_usd: microsToUsd(spendable > 0n ? spendable : 0n), credit_balance_cents: microsToCents(a.balance_micros) },
    );
  }
  return {
    perRecipient,
    freeUsed,
    heldMicros: need,
    after: { balanceMicros: a.balance_micros, freeMessagesLeft: a.free_messages_left, heldFreeMessages: a.held_free_messages + freeUsed },
  };
}

/** Reserves `count` recipients of one message, or throws 402 with nothing reserved. */
export async function reserveMessages(
  svc: Services,
  tx: Tx,
  accountId: string,
  count: number,
  opts: { attachmentBytes?: number; trailer?: boolean } = {},
): Promise<Reservation> {
  const r = planReservation(svc, await lockAccountCredit(tx, accountId), count, opts);
  await exec(
    tx,
    k
      .updateTable('accounts')
      .set((eb) => ({ held_micros: eb('held_micros', '+', r.heldMicros), held_free_messages: eb('held_free_messages', '+', r.freeUsed) }))
      .where('id', '=', accountId),
  );
  return r;
}

type SettledDelivery = Pick<Delivery, 'id' | 'accountId' | 'messageId' | 'heldMicros' | 'usedFree' | 'attachmentMicros' | 'surchargeMicros'>;

/** Claims a delivery's hold for settlement; false when it was settled already (settling is idempotent). */
async function claimHold(tx: Tx, d: SettledDelivery): Promise<boolean> {
  const claimed = await tx.delivery.updateMany({ where: { id: d.id, settledAt: null }, data: { settledAt: new Date() } });
  return claimed.count === 1;
}

/** Returns a delivery's hold (it bounced or failed). */
export async function releaseDelivery(tx: Tx, d: SettledDelivery): Promise<void> {
  if (!(await claimHold(tx, d))) return;
  await lockAccountCredit(tx, d.accountId);
  await exec(
    tx,
    k
      .updateTable('accounts')
      .set((eb) => ({ held_micros: eb('held_micros', '-', d.heldMicros), held_free_messages: eb('held_free_messages', '-', d.usedFree ? 1 : 0) }))
      .where('id', '=', d.accountId),
  );
}

/** What settling a delivered recipient's hold posts: the message, its attachments and the surcharge still owed. */
export function deliveryCharge(
  a: Pick<LockedAccount, 'trailer_paid_micros'>,
  d: { id: string; message_id: string; held_micros: bigint; used_free: boolean; attachment_micros: bigint; surcharge_micros: bigint },
) {
  const free = d.used_free ? 1 : 0;
  // The surcharge stops once the opt-out is paid off, even when more was held.
  const surcharge = minBig(d.surcharge_micros, maxBig(0n, TRAILER_PAYOFF_MICROS - a.trailer_paid_micros));
  const postings: Posting[] = [
    {
      type: 'message_sent',
      amountMicros: -(d.held_micros - d.attachment_micros - d.surcharge_micros),
      freeMessages: free,
      messageId: d.message_id,
      deliveryId: d.id,
    },
  ];
  if (d.attachment_micros > 0n) postings.push({ type: 'attachments', amountMicros: -d.attachment_micros, messageId: d.message_id });
  if (surcharge > 0n) postings.push({ type: 'trailer_surcharge', amountMicros: -surcharge, messageId: d.message_id });
  return { postings, free, surcharge };
}

const minBig = (x: bigint, y: bigint) => (x < y ? x : y);
const maxBig = (x: bigint, y: bigint) => (x > y ? x : y);

/** What a received message posts on the locked account row: free allowance first, then credit. */
export function receivedCharge(svc: Services, a: LockedAccount, messageId: string, attachmentBytes = 0): Posting[] {
  const useFree = a.free_messages_left - a.held_free_messages > 0;
  const postings: Posting[] = [{ type: 'message_received', amountMicros: useFree ? 0n : -messagePrice(svc), freeMessages: useFree ? 1 : 0, messageId }];
  const attach = useFree ? 0n : attachmentMicros(attachmentBytes);
  if (attach > 0n) postings.push({ type: 'attachments', amountMicros: -attach, messageId, quantity: BigInt(attachmentBytes) });
  return postings;
}

export interface CreditBalanceView {
  credit_balance_cents: number;
  credit_balance_usd: string;
  held_usd: string;
  free_messages_left: number;
  free_messages_total: number;
  emails_covered: number;
  balance_state: BalanceState;
  low_balance: boolean;
  deficit: boolean;
  sending_blocked: boolean;
  alert_thresholds: { first_cents: number | null; second_cents: number | null };
  price_per_message_usd: string;
  trailer: TrailerStatus;
}

export interface TrailerStatus {
  enabled: boolean;
  /** on (default), surcharge (opted out, paying per message), paid_off (opted out, nothing more to pay). */
  status: 'on' | 'surcharge' | 'paid_off';
  surcharge_per_message_usd: string;
  surcharge_paid_usd: string;
  surcharge_remaining_usd: string;
}

export function trailerStatus(a: { trailerOptedOutAt: Date | null; trailerPaidMicros: bigint }): TrailerStatus {
  const remaining = maxBig(0n, TRAILER_PAYOFF_MICROS - a.trailerPaidMicros);
  const status = a.trailerOptedOutAt === null ? 'on' : remaining > 0n ? 'surcharge' : 'paid_off';
  return {
    enabled: a.trailerOptedOutAt === null,
    status,
    surcharge_per_message_usd: microsToUsd(status === 'surcharge' ? BigInt(PRICES_MICROS.trailerSurcharge) : 0n),
    surcharge_paid_usd: microsToUsd(a.trailerPaidMicros),
    surcharge_remaining_usd: microsToUsd(remaining),
  };
}

export async function creditBalance(svc: Services, accountId: string): Promise<CreditBalanceView> {
  const a = await svc.db.account.findUniqueOrThrow({
    where: { id: accountId },
    select: {
      balanceMicros: true,
      heldMicros: true,
      freeMessagesLeft: true,
      heldFreeMessages: true,
      alertFirstMicros: true,
      alertSecondMicros: true,
      trailerOptedOutAt: true,
      trailerPaidMicros: true,
    },
  });
  const price = messagePrice(svc);
  const trailer = trailerStatus(a);
  const perMessage = price + (trailer.status === 'surcharge' ? BigInt(PRICES_MICROS.trailerSurcharge) : 0n);
  const spendable = a.balanceMicros - a.heldMicros;
  const freeLeft = Math.max(0, a.freeMessagesLeft - a.heldFreeMessages);
  const negative = a.balanceMicros < 0n;
  const covered = negative ? 0 : freeLeft + (spendable > 0n ? Number(spendable / perMessage) : 0);
  const state = balanceState(a.balanceMicros, { first: a.alertFirstMicros, second: a.alertSecondMicros });
  return {
    credit_balance_cents: microsToCents(a.balanceMicros),
    credit_balance_usd: microsToUsd(a.balanceMicros),
    held_usd: microsToUsd(a.heldMicros),
    free_messages_left: freeLeft,
    free_messages_total: FREE_MESSAGES,
    emails_covered: covered,
    balance_state: state,
    low_balance: state !== 'ok',
    deficit: negative,
    sending_blocked: negative,
    alert_thresholds: {
      first_cents: a.alertFirstMicros === null ? null : microsToCents(a.alertFirstMicros),
      second_cents: a.alertSecondMicros === null ? null : microsToCents(a.alertSecondMicros),
    },
    price_per_message_usd: microsToUsd(price),
    trailer,
  };
}
