/**
 * The payment provider interface: the processor (customers, cards, charges) and the wallet (spend requests
 * and shared payment tokens) are outside services in real life. LocalPaymentProvider is the built-in one:
 * it keeps customers and wallets in this database and charges cards on a SIMULATED card network, which
 * answers like a real one would for the well-known test card numbers (approve, or decline with a code).
 * Everything else about a payment (states, TTLs, approval by the owner) is real and the same for any provider.
 */
import { randomBytes } from 'node:crypto';
import type { DbClient } from '@boxes/db';

export interface CardInput {
  number: string;
  /** MM/YY */
  exp: string;
  cvc: string;
}

export type TokenizeResult =
  | { ok: true; ref: string; brand: string; last4: string; exp: string }
  | { ok: false; code: 'invalid_number' | 'invalid_expiry' | 'invalid_cvc'; message: string };

export type ChargeResult = { ok: true; chargeId: string } | { ok: false; declineCode: string; message: string };

export interface PaymentProvider {
  /** Short name; the API's processor field names use it (local_payment_intent). */
  readonly name: string;
  /** Shown in responses and pages, so nobody mistakes a local provider for a real one. */
  readonly label: string;
  tokenizeCard(db: DbClient, card: CardInput): Promise<TokenizeResult>;
  /**
   * Charges a saved card. Called inside the payment's database transaction, so a provider that talks to a
   * real processor must make the charge idempotent by `idempotencyKey` (a retried transaction charges once)
   * and reconcile charges whose transaction rolled back; the local provider's charges live in the same
   * transaction and roll back with it.
   */
  chargeCard(db: DbClient, cardRef: string, amountCents: number, description: string, idempotencyKey: string): Promise<ChargeResult>;
  /** The account's payer (payment customer), or null when none exists. Throws when the lookup itself fails. */
  lookupPayer(db: DbClient, accountId: string): Promise<{ customerId: string; email: string } | null>;
  createCustomer(db: DbClient, email: string): Promise<{ customerId: string }>;
  /** A shared payment token for an approved wallet spend request. */
  issueSharedPaymentToken(spendRequestId: string): string;
}

/** Test card numbers of the simulated network and what a charge to them does (approve unless listed). */
export const SIMULATED_DECLINES: Record<string, string> = {
  '4000000000000002': 'generic_decline',
  '4000000000009995': 'insufficient_funds',
  '4000000000009987': 'lost_card',
  '4000000000000069': 'expired_card',
  '4000000000000127': 'incorrect_cvc',
  '4000000000000119': 'processing_error',
};

const DECLINE_MESSAGES: Record<string, string> = {
  generic_decline: 'The card was declined.',
  insufficient_funds: 'The card has insufficient funds.',
  lost_card: 'The card was reported lost.',
  expired_card: 'The card has expired.',
  incorrect_cvc: 'The card security code is incorrect.',
  processing_error: 'An error occurred while processing the card.',
};

function luhn(digits: string): boolean {
  let sum = 0;
  for (let i = 0; i < digits.length; i++) {
    let d = Number(digits[digits.length - 1 - i]);
    if (i % 2 === 1) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
  }
  return sum % 10 === 0;
}

function brandOf(n: string): string {
  if (n.startsWith('4')) return 'visa';
  if (/^(5[1-5]|2[2-7])/.test(n)) return 'mastercard';
  if (/^3[47]/.test(n)) return 'amex';
  return 'card';
}

const token = (prefix: string) => `${prefix}_${randomBytes(12).toString('hex')}`;

export class LocalPaymentProvider implements PaymentProvider {
  readonly name = 'local';
  readonly label = 'local provider (built in; card network simulated, no real money moves)';

  async tokenizeCard(db: DbClient, card: CardInput): Promise<TokenizeResult> {
    const number = card.number.replace(/[\s-]/g, '');
    if (!/^\d{12,19}$/.test(number) || !luhn(number)) return { ok: false, code: 'invalid_number', message: 'The card number is not valid.' };
    const m = /^(\d{2})\s*\/\s*(\d{2}|\d{4})$/.exec(card.exp.trim());
    const month = m ? Number(m[1]) : 0;
    const year = m ? Number(m[2]!.length === 2 ? `20${m[2]}` : m[2]) : 0;
    const now = new Date();
    if (!m || month < 1 || month > 12 || year * 12 + month < now.getUTCFullYear() * 12 + now.getUTCMonth() + 1) {
      return { ok: false, code: 'invalid_expiry', message: 'The expiry date is not valid (MM/YY, not in the past).' };
    }
    if (!/^\d{3,4}$/.test(card.cvc.trim())) return { ok: false, code: 'invalid_cvc', message: 'The security code is 3 or 4 digits.' };
    const ref = token('simcard');
    await db.simulatedCard.create({ data: { ref, outcome: SIMULATED_DECLINES[number] ?? 'approve' } });
    return { ok: true, ref, brand: brandOf(number), last4: number.slice(-4), exp: `${String(month).padStart(2, '0')}/${String(year).slice(-2)}` };
  }

  async chargeCard(db: DbClient, cardRef: string, _amountCents: number, _description: string, _idempotencyKey: string): Promise<ChargeResult> {
    const card = await db.simulatedCard.findUnique({ where: { ref: cardRef } });
    if (!card) return { ok: false, declineCode: 'card_not_found', message: 'The saved card is unknown to the card network.' };
    if (card.outcome !== 'approve') return { ok: false, declineCode: card.outcome, message: DECLINE_MESSAGES[card.outcome] ?? 'The card was declined.' };
    return { ok: true, chargeId: token('ch') };
  }

  async lookupPayer(db: DbClient, accountId: string): Promise<{ customerId: string; email: string } | null> {
    const a = await db.account.findUnique({ where: { id: accountId }, select: { payerCustomerId: true, payerEmail: true } });
    return a?.payerCustomerId && a.payerEmail ? { customerId: a.payerCustomerId, email: a.payerEmail } : null;
  }

  async createCustomer(_db: DbClient, _email: string): Promise<{ customerId: string }> {
    return { customerId: token('cus') };
  }

  issueSharedPaymentToken(_spendRequestId: string): string {
    return token('spt');
  }
}
