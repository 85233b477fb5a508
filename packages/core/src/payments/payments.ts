/**
 * Payments: card top-ups (a payment intent the owner approves, or that a saved-card mandate settles at once
 * within its caps), Machine Payments Protocol top-ups (a 15-minute challenge and a wallet spend request the
 * owner approves; a shared payment token attaches about 3 s later and the credit lands), and funded signups
 * (the account is provisioned when the owner pays). The provider (svc.payments) does the processor's and the
 * wallet's part; states, TTLs and approval live here, the same for every provider.
 *
 * Every transition happens under the payment's row lock and checks the state it leaves, so a repeated job, a
 * double click or two workers cannot pay twice; the credit entry also carries the key payment:<id>.
 */
import type { EventDataInput, NewEvent } from '@boxes/schemas';
import { PAYMENT_STATUSES, type PaymentStatus } from '@boxes/schemas';
import { narrowStatus } from '../shared/statuses';
import { randomBytes } from 'node:crypto';
import type { Account, Payment, Tx, Wallet } from '@boxes/db';
import type { Prisma } from '@boxes/db';
import { k, rows } from '@boxes/db';
import { chargeRegistration, prepareProvisioning, provisionFunded } from '../accounts/signup';
import { appendEvent } from '../events/append';
import { postEntries } from '../store/ledger';
import { centsToMicros } from '../credit/prices';
import { queueNotice } from '../notices/notices';
import type { Services } from '../shared/context';
import { sha256Hex } from '../shared/crypto';
import { AppError } from '../shared/errors';
import { newId } from '../shared/ids';
import { createOwnerLink } from './owner';
import type { CardInput } from './provider';

export const CARD_APPROVAL_TTL_MS = 24 * 60 * 60 * 1000;
/** The MPP challenge's time to live. Approval does not extend it. */
export const MPP_TTL_MS = 15 * 60 * 1000;
/** How long after approval the wallet attaches the shared payment token. */
export const TOKEN_DELAY_MS = 3_000;
export const TOPUP_MIN_CENTS = 100;
/** Payments of one account waiting for approval at once; each mails the owner, so this bounds that mail. */
export const MAX_PENDING_PAYMENTS = 10;
/** A wallet enrollment mail goes to an address at most this often. */
const ENROLL_MAIL_INTERVAL_MS = 10 * 60 * 1000;
export const TOPUP_MAX_CENTS = 100_000;
/** Saved-card mandate tiers: per top-up and per 30 days, in cents. The first is where every mandate starts. */
export const MANDATE_TIERS = [
  { per_topup_cents: 500, per_30d_cents: 1_000 },
  { per_topup_cents: 1_000, per_30d_cents: 2_500 },
  { per_topup_cents: 2_500, per_30d_cents: 5_000 },
] as const;
const DAY_MS = 86_400_000;

const PENDING: string[] = ['requires_approval', 'pending_approval'] satisfies PaymentStatus[];

/** Whose wallet pays a payment, and so who may approve it. */
export const payerOf = (p: Pick<Payment, 'payerEmail' | 'ownerEmail'>): string => p.payerEmail ?? p.ownerEmail;

export const usd = (cents: number) => `$${(cents / 100).toFixed(2)}`;

export function maskEmail(email: string): string {
  const [local = '', domain = ''] = email.split('@');
  return `${local.slice(0, 1)}${'*'.repeat(Math.max(1, Math.min(local.length - 1, 6)))}@${domain}`;
}

async function checkPendingLimit(svc: Services, accountId: string): Promise<void> {
  const pending = await svc.db.payment.count({ where: { accountId, status: { in: PENDING }, expiresAt: { gt: svc.clock.now() } } });
  if (pending >= MAX_PENDING_PAYMENTS) {
    throw new AppError(
      'rate_limited',
      `${pending} payments of this account are already waiting for the owner's approval; wait for them to be decided or to expire before asking for more.`,
      {
        pending_payments: pending,
      },
    );
  }
}

function checkAmount(amountCents: number): void {
  if (!Number.isInteger(amountCents) || amountCents < TOPUP_MIN_CENTS || amountCents > TOPUP_MAX_CENTS) {
    throw new AppError(
      'validation_error',
      `amount_cents: between ${TOPUP_MIN_CENTS} and ${TOPUP_MAX_CENTS} (${usd(TOPUP_MIN_CENTS)} to ${usd(TOPUP_MAX_CENTS)})`,
      {
        fields: [{ path: 'amount_cents', message: 'out of range' }],
      },
    );
  }
}

type NewPayment = Omit<Prisma.PaymentUncheckedCreateInput, 'id' | 'provider' | 'createdAt' | 'status'> & { status: PaymentStatus };

/**
 * Creates a payment with its id (pi_ for card payments, mpp_ for challenges), the provider's name and the
 * service's time as created_at: the mandate's 30-day window is measured on that clock, not the database's.
 */
function createPayment(svc: Services, tx: Tx, data: NewPayment): Promise<Payment> {
  return tx.payment.create({ data: { ...data, id: newId(data.kind === 'mpp' ? 'mpp' : 'pi'), provider: svc.payments.name, createdAt: svc.clock.now() } });
}

async function lockPayment(tx: Tx, id: string): Promise<Payment | null> {
  const [locked] = await rows(tx, k.selectFrom('payments').select('id').where('id', '=', id).forUpdate());
  if (!locked) return null;
  return tx.payment.findUniqueOrThrow({ where: { id } });
}

function what(p: Pick<Payment, 'kind' | 'amountCents'>): string {
  if (p.kind === 'signup') return `initial credit of ${usd(p.amountCents)} for a new Boxes account`;
  if (p.kind === 'mpp') return `a ${usd(p.amountCents)} top-up through your wallet (Machine Payments Protocol)`;
  return `a ${usd(p.amountCents)} credit top-up`;
}

type TopupFacts = Omit<EventDataInput<'credit.topup.succeeded'>, 'status'>;
/** The event that announces each final status of a payment. */
const TOPUP_EVENT = {
  succeeded: (f: TopupFacts): NewEvent => ({ type: 'credit.topup.succeeded', data: { ...f, status: 'succeeded' } }),
  failed: (f: TopupFacts): NewEvent => ({ type: 'credit.topup.failed', data: { ...f, status: 'failed' } }),
  denied: (f: TopupFacts): NewEvent => ({ type: 'credit.topup.denied', data: { ...f, status: 'denied' } }),
  expired: (f: TopupFacts): NewEvent => ({ type: 'credit.topup.expired', data: { ...f, status: 'expired' } }),
};

/** Announces a settled or final payment on the account's event stream. */
async function announce(tx: Tx, p: Payment): Promise<void> {
  if (!p.accountId) return;
  if (!Object.hasOwn(TOPUP_EVENT, p.status)) throw new Error(`payment ${p.id} is ${p.status}: only final payments are announced`);
  const facts: TopupFacts = {
    payment_id: p.id,
    kind: p.kind as TopupFacts['kind'],
    amount_cents: p.amountCents,
    decline_code: p.declineCode,
    paid_via: p.paidVia as TopupFacts['paid_via'],
  };
  await appendEvent({ db: tx, accountId: p.accountId, ...TOPUP_EVENT[p.status as keyof typeof TOPUP_EVENT](facts) });
}

/** Moves a locked payment to a final status and announces it. */
async function conclude(tx: Tx, id: string, data: Prisma.PaymentUncheckedUpdateInput & { status: PaymentStatus }): Promise<Payment> {
  const done = await tx.payment.update({ where: { id }, data });
  await announce(tx, done);
  return done;
}

/** Lands the credit of a paid payment (idempotent through the ledger key payment:<id>). */
async function landCredit(svc: Services, tx: Tx, p: Payment, accountId: string, type: 'topup' | 'signup_credit'): Promise<void> {
  await postEntries(svc, tx, accountId, [
    { type, amountMicros: centsToMicros(p.amountCents), paymentId: p.id, idempotencyKey: `payment:${p.id}`, description: what(p) },
  ]);
}

async function wallet(tx: Tx | Services['db'], email: string): Promise<Wallet | null> {
  return tx.wallet.findUnique({ where: { ownerEmail: email.toLowerCase() } });
}

/** Whether the owner of this wallet has approved a payment of this account before (and it was paid). */
async function accountTrustedByWallet(svc: Services, accountId: string, email: string): Promise<boolean> {
  const n = await svc.db.payment.count({
    where: {
      accountId,
      status: 'succeeded' satisfies PaymentStatus,
      paidVia: { in: ['owner', 'wallet'] },
      OR: [{ payerEmail: email }, { payerEmail: null, ownerEmail: email }],
    },
  });
  return n > 0;
}

/** Mandate use of a wallet in the last 30 days, in cents. */
async function mandateUsed30d(svc: Services, email: string): Promise<number> {
  const since = new Date(svc.clock.now().getTime() - 30 * DAY_MS);
  const r = await svc.db.payment.aggregate({
    where: { ownerEmail: email.toLowerCase(), paidVia: 'mandate', status: 'succeeded' satisfies PaymentStatus, createdAt: { gte: since } },
    _sum: { amountCents: true },
  });
  return r._sum.amountCents ?? 0;
}

export interface MandateView {
  active: boolean;
  per_topup_cents: number | null;
  per_30d_cents: number | null;
  used_30d_cents: number;
  card: string | null;
}

async function mandateView(svc: Services, w: Wallet | null, email: string): Promise<MandateView> {
  const active = !!(w?.mandateAcceptedAt && w.cardRef);
  return {
    active,
    per_topup_cents: active ? w!.mandatePerTopupCents : null,
    per_30d_cents: active ? w!.mandatePer30dCents : null,
    used_30d_cents: active ? await mandateUsed30d(svc, email) : 0,
    card: w?.cardLast4 ? `${w.cardBrand} •••• ${w.cardLast4}` : null,
  };
}

export interface PaymentView {
  id: string;
  kind: 'topup' | 'signup' | 'mpp';
  status: string;
  amount_cents: number;
  currency: 'usd';
  provider: string;
  paid_via: string | null;
  decline_code: string | null;
  created_at: string;
  expires_at: string;
  decided_at: string | null;
  settled_at: string | null;
  /** Public page of this payment (status only; the owner approves through the link emailed to them). */
  approval_url: string;
  owner_email_hint: string;
  spend_request: { id: string; status: string; payer_email: string | null; shared_payment_token: string | null; token_attached_at: string | null } | null;
}

export function paymentView(svc: Services, p: Payment): PaymentView {
  const spendStatus = p.kind !== 'mpp' ? null : p.status === 'succeeded' || p.status === 'failed' ? 'approved' : p.status;
  return {
    id: p.id,
    kind: p.kind as PaymentView['kind'],
    status: p.status,
    amount_cents: p.amountCents,
    currency: 'usd',
    provider: svc.payments.label,
    paid_via: p.paidVia,
    decline_code: p.declineCode,
    created_at: p.createdAt.toISOString(),
    expires_at: p.expiresAt.toISOString(),
    decided_at: p.decidedAt?.toISOString() ?? null,
    settled_at: p.settledAt?.toISOString() ?? null,
    approval_url: `${svc.config.siteUrl}/pay/${p.id}`,
    owner_email_hint: maskEmail(p.ownerEmail),
    spend_request:
      p.kind === 'mpp'
        ? {
            id: p.spendRequestId!,
            status: spendStatus!,
            payer_email: p.payerEmail,
            shared_payment_token: p.sharedPaymentToken,
            token_attached_at: p.sharedPaymentToken ? ((p.settledAt ?? p.decidedAt)?.toISOString() ?? null) : null,
          }
        : null,
  };
}

/**
 * Brings a payment up to date with the clock: a pending one past its TTL expires; an approved MPP payment
 * whose token is due gets it and is charged (or expires, when the challenge lapsed before that: approval
 * does not reset the TTL). Idempotent; run by readers, by the delayed job and by the billing sweep.
 */
export async function refreshPayment(svc: Services, id: string): Promise<KnownPayment | null> {
  const p = await refreshPaymentRow(svc, id);
  return p && { ...p, status: narrowStatus(PAYMENT_STATUSES, p.status) };
}

/** A payment row whose status is read as the vocabulary's union (the column is text; its CHECK keeps it in the list). */
export type KnownPayment = Omit<Payment, 'status'> & { status: PaymentStatus };

async function refreshPaymentRow(svc: Services, id: string): Promise<Payment | null> {
  const now = svc.clock.now();
  const quick = await svc.db.payment.findUnique({ where: { id } });
  if (!quick) return null;
  const due =
    (PENDING.includes(quick.status) && quick.expiresAt <= now) || (quick.status === 'approved' && quick.tokenDueAt !== null && quick.tokenDueAt <= now);
  if (!due) return quick;
  return svc.db.$transaction(
    async (tx) => {
      const p = await lockPayment(tx, id);
      if (!p) return null;
      if (PENDING.includes(p.status) && p.expiresAt <= now) {
        return conclude(tx, id, { status: 'expired', decidedAt: now });
      }
      if (p.status !== 'approved' || !p.tokenDueAt || p.tokenDueAt > now) return p;
      if (p.expiresAt <= now) {
        return conclude(tx, id, { status: 'expired' });
      }
      const token = p.sharedPaymentToken ?? svc.payments.issueSharedPaymentToken(p.spendRequestId!);
      const w = await wallet(tx, payerOf(p));
      const charge = w?.cardRef
        ? await svc.payments.chargeCard(tx, w.cardRef, p.amountCents, what(p), `${p.id}:${token}`)
        : ({ ok: false, declineCode: 'card_not_found', message: 'No card in the wallet' } as const);
      if (!charge.ok) {
        return conclude(tx, id, { status: 'failed', sharedPaymentToken: token, declineCode: charge.declineCode });
      }
      const done = await tx.payment.update({
        where: { id },
        data: { status: 'succeeded' satisfies PaymentStatus, sharedPaymentToken: token, settledAt: now, paidVia: 'wallet' },
      });
      await landCredit(svc, tx, done, done.accountId!, 'topup');
      await announce(tx, done);
      return done;
    },
    { maxWait: 10_000, timeout: 20_000 },
  );
}

/** A payment of this account, brought up to date. */
export async function getAccountPayment(svc: Services, accountId: string, id: string, kind?: 'mpp' | 'card'): Promise<KnownPayment> {
  const p = await refreshPayment(svc, id);
  if (!p || p.accountId !== accountId || (kind === 'mpp' && p.kind !== 'mpp') || (kind === 'card' && p.kind === 'mpp')) {
    throw new AppError('not_found', `payment ${id} not found`);
  }
  return p;
}

/** Waits (up to waitMs) until the payment leaves its current in-between state; returns it up to date. */
export async function waitForPayment(svc: Services, accountId: string, id: string, kind: 'mpp' | 'card', waitMs: number): Promise<KnownPayment> {
  const end = Date.now() + waitMs;
  let p = await getAccountPayment(svc, accountId, id, kind);
  while (Date.now() < end && ['requires_approval', 'pending_approval', 'approved'].includes(p.status)) {
    await new Promise((r) => setTimeout(r, 250));
    p = await getAccountPayment(svc, accountId, id, kind);
  }
  return p;
}

// ---------------------------------------------------------------------------------------------------------
// Card top-ups

export interface TopupResult {
  payment: PaymentView;
  client_secret: string | null;
  mandate: MandateView & { applied: boolean; reason: string };
  next_steps: string[];
}

export async function createCardTopup(
  svc: Services,
  account: Pick<Account, 'id' | 'humanEmail' | 'primaryAddress' | 'payerEmail' | 'payerCustomerId'>,
  amountCents: number,
): Promise<TopupResult> {
  checkAmount(amountCents);
  // The card path pays from the payment customer's wallet: the payer email when one is set, else the owner's.
  const owner = (account.payerCustomerId && account.payerEmail ? account.payerEmail : account.humanEmail).toLowerCase();
  const w = await wallet(svc.db, owner);
  // Anyone can name an email at signup or as payer email: a wallet's mandate serves only accounts its owner has
  // paid for before (approved a payment of this account from this wallet). A stranger's first top-up is a
  // request the owner can deny, and the stranger does not learn which card the wallet holds.
  const trusted = await accountTrustedByWallet(svc, account.id, owner);
  const m = trusted ? await mandateView(svc, w, owner) : { active: false, per_topup_cents: null, per_30d_cents: null, used_30d_cents: 0, card: null };
  const now = svc.clock.now();
  let reason: string;
  if (w?.mandateAcceptedAt && !trusted)
    reason =
      "the wallet's mandate covers accounts its owner has paid for before: the owner approves this first payment, later ones within the caps settle at once";
  else if (!m.active) reason = 'no saved-card mandate: the owner approves this payment (and can save a card with a mandate on the approval page)';
  else if (amountCents > m.per_topup_cents!) reason = `above the mandate's per-top-up cap of ${usd(m.per_topup_cents!)}: the owner approves it`;
  else if (m.used_30d_cents + amountCents > m.per_30d_cents!)
    reason = `above the mandate's 30-day cap of ${usd(m.per_30d_cents!)} (${usd(m.used_30d_cents)} used): the owner approves it`;
  else reason = 'within the saved-card mandate: settled without a per-payment approval';
  const applies = reason.startsWith('within');

  if (applies) {
    // The mandate's 30-day cap is checked again under the wallet's lock, so parallel top-ups cannot exceed it.
    const result = await svc.db.$transaction(
      async (tx) => {
        await rows(tx, k.selectFrom('wallets').select('id').where('owner_email', '=', owner).forUpdate());
        if ((await mandateUsed30d(svc, owner)) + amountCents > m.per_30d_cents!) return null;
        const charge = await svc.payments.chargeCard(
          tx,
          w!.cardRef!,
          amountCents,
          `top-up of ${account.primaryAddress}`,
          `mandate:${account.id}:${randomBytes(12).toString('hex')}`,
        );
        const p = await createPayment(svc, tx, {
          kind: 'topup',
          accountId: account.id,
          ownerEmail: owner,
          amountCents,
          status: charge.ok ? 'succeeded' : 'failed',
          paidVia: 'mandate',
          declineCode: charge.ok ? null : charge.declineCode,
          expiresAt: now,
          decidedAt: now,
          settledAt: charge.ok ? now : null,
        });
        if (charge.ok) await landCredit(svc, tx, p, account.id, 'topup');
        await announce(tx, p);
        return { p, charge };
      },
      { maxWait: 10_000, timeout: 20_000 },
    );
    if (result && !result.charge.ok) {
      throw new AppError(
        'card_declined',
        `The saved card was declined (${result.charge.declineCode}): ${result.charge.message} Ask the owner to update the card.`,
        {
          decline_code: result.charge.declineCode,
          payment: paymentView(svc, result.p),
        },
      );
    }
    if (result) {
      return {
        payment: paymentView(svc, result.p),
        client_secret: null,
        mandate: { ...(await mandateView(svc, w, owner)), applied: true, reason },
        next_steps: ['The credit has landed: GET /account/credit/balance.'],
      };
    }
    reason = `above the mandate's 30-day cap of ${usd(m.per_30d_cents!)}: the owner approves it`;
  }

  await checkPendingLimit(svc, account.id);
  const clientSecret = `pi_secret_${randomBytes(24).toString('base64url')}`;
  const p = await svc.db.$transaction(async (tx) => {
    const p = await createPayment(svc, tx, {
      kind: 'topup',
      accountId: account.id,
      ownerEmail: owner,
      amountCents,
      status: 'requires_approval',
      clientSecretHash: sha256Hex(clientSecret),
      expiresAt: new Date(now.getTime() + CARD_APPROVAL_TTL_MS),
    });
    await askOwner(svc, tx, p, account.primaryAddress);
    return p;
  });
  return {
    payment: paymentView(svc, p),
    client_secret: clientSecret,
    mandate: { ...m, applied: false, reason },
    next_steps: [
      `Tell your owner that ${what(p)} awaits their approval: a single-use link went to ${maskEmail(owner)}.`,
      `Poll GET /account/credit/topup/${p.id}?wait_seconds=25 until status is succeeded, denied or expired.`,
      'The client_secret lets a card form you host confirm this payment (card-form path); keep it out of logs.',
    ],
  };
}

/** Emails the owner a single-use link to the approval page of a payment. */
async function askOwner(svc: Services, tx: Tx, p: Payment, accountLabel: string): Promise<void> {
  const to = payerOf(p);
  const link = await createOwnerLink(svc, tx, { email: to, purpose: 'payment', paymentId: p.id, expiresAt: p.expiresAt });
  await queueNotice(tx, {
    accountId: p.accountId,
    kind: 'payment.approval',
    to,
    subject: `Approve ${usd(p.amountCents)} for ${accountLabel}?`,
    text: [
      `${accountLabel} asks you to approve ${what(p)}.`,
      '',
      `Review it and approve or deny: ${link}`,
      '',
      `The link works once and expires at ${p.expiresAt.toISOString()}.${p.kind === 'mpp' ? ' The request lapses 15 minutes after it was made; approving does not extend it.' : ''}`,
      `Payment provider: ${svc.payments.label}.`,
      'If you did not expect this, deny it or ignore this mail; nothing is charged without your approval.',
    ].join('\n'),
  });
}

// ---------------------------------------------------------------------------------------------------------
// Machine Payments Protocol

export interface MppChallenge {
  challenge_id: string;
  status: string;
  amount_cents: number;
  currency: 'usd';
  provider: string;
  pay_url: string;
  payment: { amount_cents: number; currency: 'usd'; ttl_seconds: number; expires_at: string; warning: string };
  spend_request: PaymentView['spend_request'];
  preflight: { payer_email: string | null; payer_email_default: string; mpp_client_hint: string; flow: 'wallet_approval' };
  next_steps: string[];
}

async function lookupPayerEmail(svc: Services, account: Pick<Account, 'id'>): Promise<string | null> {
  try {
    const payer = await svc.payments.lookupPayer(svc.db, account.id);
    return payer?.email ?? null;
  } catch {
    return null;
  }
}

export async function createMppChallenge(
  svc: Services,
  account: Pick<Account, 'id' | 'humanEmail' | 'primaryAddress'>,
  amountCents: number,
): Promise<MppChallenge> {
  checkAmount(amountCents);
  const payerDefault = account.humanEmail.toLowerCase();
  const payerEmail = await lookupPayerEmail(svc, account);
  const walletEmail = payerEmail ?? payerDefault;
  const w = await wallet(svc.db, walletEmail);
  if (!w?.cardRef) {
    const recent = await svc.db.notice.count({
      where: { to: walletEmail, kind: 'wallet.enroll', createdAt: { gt: new Date(Date.now() - ENROLL_MAIL_INTERVAL_MS) } },
    });
    if (!recent)
      await svc.db.$transaction(async (tx) => {
        const link = await createOwnerLink(svc, tx, { email: walletEmail, purpose: 'card' });
        await queueNotice(tx, {
          accountId: account.id,
          kind: 'wallet.enroll',
          to: walletEmail,
          subject: `Set up your wallet to pay for ${account.primaryAddress}`,
          text: [
            `${account.primaryAddress} tried to top up its credit (${usd(amountCents)}) with a wallet payment, but your wallet has no card yet.`,
            '',
            `Save a card (you approve every wallet payment; nothing is charged now): ${link}`,
            `Payment provider: ${svc.payments.label}.`,
          ].join('\n'),
        });
      });
    throw new AppError(
      'wallet_not_enrolled',
      `The payer's wallet (${maskEmail(walletEmail)}) is not enrolled: it has no card. The owner was emailed a link to enroll (at most once every 10 minutes); start a new top-up once they have.`,
      {
        payer_email: payerEmail,
        payer_email_default: payerDefault,
      },
    );
  }
  await checkPendingLimit(svc, account.id);
  const now = svc.clock.now();
  const p = await svc.db.$transaction(async (tx) => {
    const p = await createPayment(svc, tx, {
      kind: 'mpp',
      accountId: account.id,
      ownerEmail: payerDefault,
      payerEmail: walletEmail,
      amountCents,
      status: 'pending_approval',
      spendRequestId: newId('spr'),
      expiresAt: new Date(now.getTime() + MPP_TTL_MS),
    });
    await askOwner(svc, tx, p, account.primaryAddress);
    return p;
  });
  const view = paymentView(svc, p);
  const status = `${svc.config.apiBaseUrl}/account/credit/topup/mpp/${p.id}`;
  return {
    challenge_id: p.id,
    status: p.status,
    amount_cents: amountCents,
    currency: 'usd',
    provider: svc.payments.label,
    pay_url: `${svc.config.siteUrl}/pay/${p.id}`,
    payment: {
      amount_cents: amountCents,
      currency: 'usd',
      ttl_seconds: MPP_TTL_MS / 1000,
      expires_at: p.expiresAt.toISOString(),
      warning: `IMPORTANT: this challenge expires at ${p.expiresAt.toISOString()} (15 minutes). The owner must approve before then; approval does not extend it. After it lapses, start a new top-up.`,
    },
    spend_request: view.spend_request,
    preflight: {
      payer_email: payerEmail,
      payer_email_default: payerDefault,
      mpp_client_hint: `Wait on GET ${status}?wait_seconds=25 (repeat) until status is succeeded, denied, expired or failed; the shared payment token attaches about ${TOKEN_DELAY_MS / 1000} s after approval and the credit lands with it.`,
      flow: 'wallet_approval',
    },
    next_steps: [
      `Tell your owner: approve ${usd(amountCents)} in your wallet (a single-use link went to ${maskEmail(walletEmail)}) before ${p.expiresAt.toISOString()}.`,
      `Wait: GET ${status}?wait_seconds=25, repeated, until the status is final.`,
      'succeeded: the credit has landed. denied: the owner said no; do not retry without their consent. expired (402): start a new top-up. failed (402): the card was declined (decline_code).',
    ],
  };
}

// ---------------------------------------------------------------------------------------------------------
// The owner's decisions (owner pages)

export type OwnerDecision = { action: 'deny' } | { action: 'approve'; card?: CardInput; mandateTier?: number | null; saveCard?: boolean };

/** Payments waiting for this owner, newest first (the owner's home page). */
export async function ownerPayments(svc: Services, email: string): Promise<Payment[]> {
  const rows = await svc.db.payment.findMany({ where: { OR: [{ ownerEmail: email }, { payerEmail: email }] }, orderBy: { createdAt: 'desc' }, take: 20 });
  return Promise.all(rows.map(async (p) => (await refreshPayment(svc, p.id)) ?? p));
}

export async function ownerPayment(svc: Services, email: string, id: string): Promise<{ payment: KnownPayment; account: string; wallet: Wallet | null }> {
  const p = await refreshPayment(svc, id);
  if (!p || (p.ownerEmail !== email && p.payerEmail !== email)) throw new AppError('not_found', 'No such payment for you.');
  const account = p.accountId
    ? (await svc.db.account.findUniqueOrThrow({ where: { id: p.accountId }, select: { primaryAddress: true } })).primaryAddress
    : `agent@${(await svc.db.signupIntent.findUniqueOrThrow({ where: { id: p.signupIntentId! }, select: { fullDomain: true } })).fullDomain} (new account)`;
  return { payment: p, account, wallet: await wallet(svc.db, payerOf(p)) };
}

/** Saves (or replaces) the wallet's card and, optionally, a mandate at one of the tiers. */
export async function saveCard(svc: Services, db: Tx | Services['db'], email: string, card: CardInput, mandateTier: number | null): Promise<Wallet> {
  const t = await svc.payments.tokenizeCard(db, card);
  if (!t.ok) throw new AppError('validation_error', t.message, { fields: [{ path: 'card', message: t.code }] });
  const tier = mandateTier === null ? null : MANDATE_TIERS[mandateTier];
  if (mandateTier !== null && !tier) throw new AppError('validation_error', 'Unknown mandate tier');
  const data = {
    cardBrand: t.brand,
    cardLast4: t.last4,
    cardExp: t.exp,
    cardRef: t.ref,
    mandatePerTopupCents: tier?.per_topup_cents ?? null,
    mandatePer30dCents: tier?.per_30d_cents ?? null,
    mandateAcceptedAt: tier ? svc.clock.now() : null,
  };
  return db.wallet.upsert({ where: { ownerEmail: email }, create: { id: newId('wal'), ownerEmail: email, ...data }, update: data });
}

export async function setMandate(svc: Services, email: string, mandateTier: number | null): Promise<Wallet> {
  const w = await wallet(svc.db, email);
  if (!w?.cardRef) throw new AppError('validation_error', 'Save a card first.');
  const tier = mandateTier === null ? null : MANDATE_TIERS[mandateTier];
  if (mandateTier !== null && !tier) throw new AppError('validation_error', 'Unknown mandate tier');
  return svc.db.wallet.update({
    where: { ownerEmail: email },
    data: {
      mandatePerTopupCents: tier?.per_topup_cents ?? null,
      mandatePer30dCents: tier?.per_30d_cents ?? null,
      mandateAcceptedAt: tier ? svc.clock.now() : null,
    },
  });
}

export async function removeCard(svc: Services, email: string): Promise<void> {
  await svc.db.wallet.updateMany({
    where: { ownerEmail: email },
    data: { cardBrand: null, cardLast4: null, cardExp: null, cardRef: null, mandatePerTopupCents: null, mandatePer30dCents: null, mandateAcceptedAt: null },
  });
}

export async function walletOf(svc: Services, email: string): Promise<{ wallet: Wallet | null; mandate: MandateView }> {
  const w = await wallet(svc.db, email);
  return { wallet: w, mandate: await mandateView(svc, w, email) };
}

/**
 * Approve or deny, from the owner page. Approving a card payment charges the wallet's card (or the card the
 * owner enters, which is saved to the wallet; on the card-form path, saveCard: false, it is not); a decline
 * leaves the payment waiting, so another card can be tried. Approving an MPP spend request schedules the
 * token. A funded signup is provisioned on payment.
 */
export async function decidePayment(svc: Services, email: string, id: string, decision: OwnerDecision): Promise<KnownPayment> {
  const { payment: current } = await ownerPayment(svc, email, id);
  if (!PENDING.includes(current.status)) {
    throw new AppError('payment_not_pending', `This payment is ${current.status}; nothing to decide.`, { status: current.status });
  }
  // Approving charges the payer's wallet: only the payer may do it. (An MPP payment's owner_email is the
  // account's human, who may see and deny it but must not spend a wallet the agent merely named as payer.)
  if (decision.action === 'approve' && email !== payerOf(current)) {
    throw new AppError('forbidden', `Only the payer (${maskEmail(payerOf(current))}) can approve this payment: it is charged to their wallet.`);
  }
  // A funded signup is provisioned in the same transaction as its payment: its DKIM key is made first.
  const dkim = current.kind === 'signup' && decision.action === 'approve' ? await prepareProvisioning(svc) : null;
  const now = svc.clock.now();
  const result = await svc.db.$transaction(
    async (tx) => {
      const p = await lockPayment(tx, id);
      if (!p || !PENDING.includes(p.status))
        throw new AppError('payment_not_pending', `This payment is ${p?.status ?? 'gone'}; nothing to decide.`, { status: p?.status });
      if (p.expiresAt <= now) {
        return { p: await conclude(tx, id, { status: 'expired', decidedAt: now }), error: null };
      }
      if (decision.action === 'deny') {
        return { p: await conclude(tx, id, { status: 'denied', decidedAt: now }), error: null };
      }
      let cardRef = (await wallet(tx, payerOf(p)))?.cardRef ?? null;
      if (decision.card && decision.saveCard === false) {
        // The card-form path: whoever holds the client_secret pays with this card; the owner's wallet (card and mandate) stays as it is.
        const tk = await svc.payments.tokenizeCard(tx, decision.card);
        if (!tk.ok) throw new AppError('validation_error', tk.message, { fields: [{ path: 'card', message: tk.code }] });
        cardRef = tk.ref;
      } else if (decision.card) {
        cardRef = (await saveCard(svc, tx, payerOf(p), decision.card, decision.mandateTier ?? null)).cardRef;
      }
      if (!cardRef) throw new AppError('validation_error', 'Enter a card to pay with.', { fields: [{ path: 'card', message: 'required' }] });
      if (p.kind === 'mpp') {
        const done = await tx.payment.update({
          where: { id },
          data: { status: 'approved' satisfies PaymentStatus, decidedAt: now, tokenDueAt: new Date(now.getTime() + TOKEN_DELAY_MS) },
        });
        return { p: done, error: null };
      }
      const charge = await svc.payments.chargeCard(tx, cardRef, p.amountCents, what(p), `${p.id}:${cardRef}`);
      if (!charge.ok) {
        const done = await tx.payment.update({ where: { id }, data: { declineCode: charge.declineCode } });
        if (done.accountId) {
          await appendEvent({
            db: tx,
            accountId: done.accountId,
            type: 'credit.topup.declined',
            data: { payment_id: id, amount_cents: done.amountCents, decline_code: charge.declineCode },
          });
        }
        return { p: done, error: `${charge.message} (${charge.declineCode}) Try another card.` };
      }
      let done = await tx.payment.update({
        where: { id },
        data: { status: 'succeeded' satisfies PaymentStatus, decidedAt: now, settledAt: now, paidVia: 'owner', declineCode: null },
      });
      if (p.kind === 'signup') {
        const accountId = await provisionFunded(svc, tx, p.signupIntentId!, dkim!);
        done = await tx.payment.update({ where: { id }, data: { accountId } });
        await landCredit(svc, tx, done, accountId, 'signup_credit');
        // Mode register: the payment covered the first year; it is taken from the credit just landed.
        await chargeRegistration(svc, tx, p.signupIntentId!, accountId);
      } else {
        await landCredit(svc, tx, done, p.accountId!, 'topup');
      }
      await announce(tx, done);
      return { p: done, error: null };
    },
    { maxWait: 10_000, timeout: 20_000 },
  );
  if (result.p.kind === 'mpp' && result.p.status === 'approved') {
    await svc.jobs.schedulePaymentCheck(id, TOKEN_DELAY_MS).catch(() => undefined);
  }
  if (result.error) throw new AppError('card_declined', result.error, { decline_code: result.p.declineCode });
  return { ...result.p, status: narrowStatus(PAYMENT_STATUSES, result.p.status) };
}

/** The public pay page's view of a payment with its client_secret (card-form path): pay with a card. */
export async function payWithClientSecret(svc: Services, id: string, clientSecret: string, card: CardInput): Promise<Payment> {
  const p = await svc.db.payment.findUnique({ where: { id } });
  if (!p || !p.clientSecretHash || p.clientSecretHash !== sha256Hex(clientSecret)) throw new AppError('not_found', 'No such payment.');
  return decidePayment(svc, payerOf(p), id, { action: 'approve', card, saveCard: false });
}

// ---------------------------------------------------------------------------------------------------------
// Funded signup

export async function createSignupPayment(
  svc: Services,
  tx: Tx,
  intent: { id: string; humanEmail: string; fullDomain: string; expiresAt: Date },
  amountCents: number,
  opts: { walletSpendRequest?: boolean } = {},
) {
  const clientSecret = `pi_secret_${randomBytes(24).toString('base64url')}`;
  const p = await createPayment(svc, tx, {
    kind: 'signup',
    signupIntentId: intent.id,
    ownerEmail: intent.humanEmail,
    amountCents,
    status: 'requires_approval',
    clientSecretHash: sha256Hex(clientSecret),
    // Mode register: the owner approves it as a spend request of their wallet (the same approval, by link).
    spendRequestId: opts.walletSpendRequest ? newId('spr') : null,
    expiresAt: intent.expiresAt,
  });
  await askOwner(svc, tx, p, `agent@${intent.fullDomain} (a new account)`);
  return { payment: paymentView(svc, p), client_secret: clientSecret, wallet_spend_request: opts.walletSpendRequest ? walletSpendRequestView(p) : null };
}

/** The wallet side of a signup payment of mode register: the spend request the owner approves or denies. */
export function walletSpendRequestView(p: Payment) {
  const status = p.status === 'requires_approval' ? 'pending_approval' : p.status === 'succeeded' ? 'approved' : p.status;
  return {
    id: p.spendRequestId!,
    status,
    payer_email: payerOf(p),
    amount_cents: p.amountCents,
    currency: 'usd' as const,
    expires_at: p.expiresAt.toISOString(),
  };
}

// ---------------------------------------------------------------------------------------------------------
// Payer email

export async function getPayerEmail(svc: Services, account: Pick<Account, 'id' | 'humanEmail' | 'payerEmail' | 'payerCustomerId'>) {
  const exists = !!account.payerCustomerId;
  return {
    payer_email: exists ? account.payerEmail! : account.humanEmail,
    is_default: !exists,
    customer_exists: exists,
    used_for: "card top-ups (POST /account/credit/topup: this wallet's card, mandate and approval mail) and the MPP preflight (payer_email)",
  };
}

export async function setPayerEmail(svc: Services, account: Pick<Account, 'id' | 'humanEmail' | 'payerEmail' | 'payerCustomerId'>, email: string) {
  const next = email.trim().toLowerCase();
  const customerId = account.payerCustomerId ?? (await svc.payments.createCustomer(svc.db, next)).customerId;
  const previous = account.payerCustomerId ? account.payerEmail : null;
  await svc.db.$transaction(async (tx) => {
    await tx.account.update({ where: { id: account.id }, data: { payerEmail: next, payerCustomerId: customerId } });
    await appendEvent({
      db: tx,
      accountId: account.id,
      type: 'account.credit.payer_email_updated',
      data: { payer_email: next, previous_payer_email: previous, customer_created: !account.payerCustomerId },
    });
  });
  return getPayerEmail(svc, { ...account, payerEmail: next, payerCustomerId: customerId });
}
