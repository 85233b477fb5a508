/**
 * The ledger. A send reserves (holds) one message per recipient when it is accepted, from the free allowance
 * first and then from credit, under the account row lock, so parallel sends cannot overspend. The hold is
 * settled when delivery ends: charged when delivered, released when it bounces or fails. Inbound mail is
 * charged when stored and is never refused for credit (the balance may go negative).
 */
import type { Delivery, Tx } from '@boxes/db';
import { AppError } from '../shared/errors';
import { newId } from '../shared/ids';
import type { Services } from '../shared/context';
import { FREE_MESSAGES, microsToCents, microsToUsd, PRICES_MICROS } from './prices';

export interface LockedAccount {
  id: string;
  balance_micros: bigint;
  held_micros: bigint;
  free_messages_left: number;
  held_free_messages: number;
}

/** Locks the account row (the same lock the event log takes) and reads its credit. */
export async function lockAccountCredit(tx: Tx, accountId: string): Promise<LockedAccount> {
  const rows = await tx.$queryRaw<LockedAccount[]>`
    SELECT id, balance_micros, held_micros, free_messages_left, held_free_messages
    FROM accounts WHERE id = ${accountId} FOR NO KEY UPDATE`;
  if (!rows[0]) throw new AppError('not_found', `account ${accountId} not found`);
  return rows[0];
}

export function messagePrice(_svc?: Services): bigint {
  return BigInt(PRICES_MICROS.message);
}

export interface Reservation {
  /** Per recipient: true when a free message was reserved, else the micro-dollars held. */
  perRecipient: { free: boolean; micros: bigint }[];
  freeUsed: number;
  heldMicros: bigint;
  /** The account's credit after the reservation (the row stays locked until the transaction ends). */
  after: { balanceMicros: bigint; freeMessagesLeft: number; heldFreeMessages: number };
}

export function paymentRequired(svc: Services, message: string, extra: Record<string, unknown> = {}): AppError {
  return new AppError('payment_required', message, {
    top_up: {
      mpp: { method: 'POST', url: `${svc.config.apiBaseUrl}/account/credit/topup/mpp`, description: 'Machine Payments Protocol challenge; your agent runs the payment client' },
      card: { method: 'POST', url: `${svc.config.apiBaseUrl}/account/credit/topup`, description: 'payment intent (amount_cents) for the owner to approve' },
      human_approval:
        'Your human owner approves the payment in their wallet; tell them what it is for and wait for approved, denied or expired. Do not retry a denied payment without their consent.',
    },
    balance: { method: 'GET', url: `${svc.config.apiBaseUrl}/account/credit/balance` },
    ...extra,
  });
}

/** Reserves `count` messages for a send, or throws 402 with nothing reserved. */
export async function reserveMessages(svc: Services, tx: Tx, accountId: string, count: number): Promise<Reservation> {
  const a = await lockAccountCredit(tx, accountId);
  const price = messagePrice(svc);
  if (a.balance_micros < 0n) {
    throw paymentRequired(svc, `Sending is blocked while the balance is negative (${microsToUsd(a.balance_micros)} USD). Top up to resume; inbound mail keeps arriving.`, {
      credit_balance_cents: microsToCents(a.balance_micros),
    });
  }
  const freeAvailable = Math.max(0, a.free_messages_left - a.held_free_messages);
  const freeUsed = Math.min(count, freeAvailable);
  const paid = count - freeUsed;
  const need = BigInt(paid) * price;
  const spendable = a.balance_micros - a.held_micros;
  if (need > spendable) {
    throw paymentRequired(
      svc,
      `Not enough credit: this send needs ${microsToUsd(need)} USD for ${paid} message(s) beyond the free allowance, and ${microsToUsd(spendable > 0n ? spendable : 0n)} USD is available. Nothing was sent.`,
      { required_usd: microsToUsd(need), available_usd: microsToUsd(spendable > 0n ? spendable : 0n), credit_balance_cents: microsToCents(a.balance_micros) },
    );
  }
  await tx.$executeRaw`
    UPDATE accounts SET held_micros = held_micros + ${need}, held_free_messages = held_free_messages + ${freeUsed}
    WHERE id = ${accountId}`;
  const perRecipient = Array.from({ length: count }, (_, i) => (i < freeUsed ? { free: true, micros: 0n } : { free: false, micros: price }));
  return {
    perRecipient,
    freeUsed,
    heldMicros: need,
    after: { balanceMicros: a.balance_micros, freeMessagesLeft: a.free_messages_left, heldFreeMessages: a.held_free_messages + freeUsed },
  };
}

/**
 * Settles one delivery's hold: 'charge' debits it (ledger entry message_sent), 'release' returns it.
 * Idempotent: a delivery already settled is left alone. The caller has read the delivery; the columns used
 * here never change after it is created.
 */
export async function settleDelivery(
  tx: Tx,
  d: Pick<Delivery, 'id' | 'accountId' | 'messageId' | 'heldMicros' | 'usedFree'>,
  outcome: 'charge' | 'release',
): Promise<void> {
  const claimed = await tx.delivery.updateMany({ where: { id: d.id, settledAt: null }, data: { settledAt: new Date() } });
  if (claimed.count === 0) return;
  const a = await lockAccountCredit(tx, d.accountId);
  const free = d.usedFree ? 1 : 0;
  if (outcome === 'release') {
    await tx.$executeRaw`UPDATE accounts SET held_micros = held_micros - ${d.heldMicros}, held_free_messages = held_free_messages - ${free} WHERE id = ${d.accountId}`;
    return;
  }
  const balanceAfter = a.balance_micros - d.heldMicros;
  await tx.$executeRaw`
    UPDATE accounts SET held_micros = held_micros - ${d.heldMicros}, held_free_messages = held_free_messages - ${free},
      balance_micros = ${balanceAfter}, free_messages_left = free_messages_left - ${free}
    WHERE id = ${d.accountId}`;
  await tx.ledgerEntry.create({
    data: {
      id: newId('led'),
      accountId: d.accountId,
      type: 'message_sent',
      amountMicros: -d.heldMicros,
      freeMessages: free,
      balanceAfter,
      messageId: d.messageId,
      deliveryId: d.id,
    },
  });
}

/** Charges one received message to the receiving account: free allowance first, then credit, even below zero. */
export async function chargeReceived(svc: Services, tx: Tx, accountId: string, messageId: string): Promise<void> {
  const a = await lockAccountCredit(tx, accountId);
  const useFree = a.free_messages_left - a.held_free_messages > 0;
  const amount = useFree ? 0n : messagePrice(svc);
  const balanceAfter = a.balance_micros - amount;
  await tx.$executeRaw`
    UPDATE accounts SET balance_micros = ${balanceAfter}, free_messages_left = free_messages_left - ${useFree ? 1 : 0}
    WHERE id = ${accountId}`;
  await tx.ledgerEntry.create({
    data: { id: newId('led'), accountId, type: 'message_received', amountMicros: -amount, freeMessages: useFree ? 1 : 0, balanceAfter, messageId },
  });
}

export async function creditBalance(svc: Services, accountId: string) {
  const a = await svc.db.account.findUniqueOrThrow({
    where: { id: accountId },
    select: { balanceMicros: true, heldMicros: true, freeMessagesLeft: true, heldFreeMessages: true },
  });
  const price = messagePrice(svc);
  const spendable = a.balanceMicros - a.heldMicros;
  const freeLeft = Math.max(0, a.freeMessagesLeft - a.heldFreeMessages);
  const covered = freeLeft + (spendable > 0n ? Number(spendable / price) : 0);
  return {
    credit_balance_cents: microsToCents(a.balanceMicros),
    credit_balance_usd: microsToUsd(a.balanceMicros),
    held_usd: microsToUsd(a.heldMicros),
    free_messages_left: freeLeft,
    free_messages_total: FREE_MESSAGES,
    emails_covered: covered,
    balance_state: (a.balanceMicros < 0n ? 'critical' : 'ok') as 'ok' | 'low' | 'critical',
    low_balance: a.balanceMicros < 0n,
    price_per_message_usd: microsToUsd(price),
  };
}
