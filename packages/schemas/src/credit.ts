/** Credit, usage, alert thresholds, the trailer, and payments (card top-ups, MPP challenges, payer email). */
import { z } from 'zod';
import { EmailAddress, Timestamp } from './common';

export const TrailerStatus = z
  .object({
    enabled: z.boolean().meta({ description: 'Whether sent messages carry the short trailer (default true)' }),
    status: z.enum(['on', 'surcharge', 'paid_off']).meta({
      description:
        'on: trailer added. surcharge: opted out, each sent message pays a surcharge until the opt-out is paid off. paid_off: opted out, nothing more to pay',
    }),
    surcharge_per_message_usd: z.string().meta({ example: '0.001' }),
    surcharge_paid_usd: z.string(),
    surcharge_remaining_usd: z.string().meta({ description: 'What POST /account/trailer/buyout would charge', example: '5' }),
  })
  .meta({ id: 'TrailerStatus' });

export const CreditBalance = z.object({
  credit_balance_cents: z.number().int().meta({ description: 'Prepaid credit in cents, rounded down; negative in deficit', example: 499 }),
  credit_balance_usd: z.string().meta({ description: 'Exact balance in USD (micro-dollar precision)', example: '4.9968' }),
  held_usd: z.string().meta({ description: 'Reserved by sends still being delivered' }),
  free_messages_left: z.number().int(),
  free_messages_total: z.number().int(),
  emails_covered: z.number().int().meta({ description: 'Estimate: messages the free allowance and the spendable balance still cover (0 in deficit)' }),
  balance_state: z.enum(['ok', 'low', 'critical']).meta({
    description:
      'critical: negative, or below the second (urgent) alert threshold; low: below the first; ok otherwise (without thresholds an account is ok until negative)',
  }),
  low_balance: z.boolean().meta({ description: 'The low-balance flag: true when balance_state is not ok' }),
  deficit: z.boolean().meta({ description: 'The balance is negative (billing.deficit)' }),
  sending_blocked: z.boolean().meta({ description: 'Sends get 402 until a top-up brings the balance back to zero or above; inbound mail and reads continue' }),
  alert_thresholds: z.object({ first_cents: z.number().int().nullable(), second_cents: z.number().int().nullable() }),
  price_per_message_usd: z.string(),
  trailer: TrailerStatus,
});

export const UsageInput = z.object({
  since: Timestamp.optional().meta({ description: 'Window start (inclusive), ISO 8601' }),
  before: Timestamp.optional().meta({ description: 'Window end (exclusive), ISO 8601' }),
});

export const UsageOutput = z.object({
  since: z.string().nullable(),
  before: z.string().nullable(),
  usage: z.array(
    z.object({
      type: z.string().meta({
        description:
          'Ledger entry type: message_sent, message_received, attachments, storage, domain_hosting, domain_maintenance, dns_overage, trailer_surcharge, trailer_buyout (charges, negative) or topup, signup_credit (credits, positive)',
        example: 'message_sent',
      }),
      entries: z.number().int().meta({ description: 'Number of ledger entries' }),
      amount_micros: z.number().int().meta({ description: 'Sum in micro-dollars (1 USD = 1,000,000); negative for charges', example: -3200 }),
      amount_usd: z.string().meta({ example: '-0.0032' }),
      free_messages: z.number().int().meta({ description: 'Messages taken from the free allowance' }),
    }),
  ),
  totals: z.object({
    charges_micros: z.number().int(),
    charges_usd: z.string(),
    credits_micros: z.number().int(),
    credits_usd: z.string(),
    net_micros: z.number().int(),
    net_usd: z.string(),
  }),
});

const ThresholdCents = z.number().int().min(0).max(10_000_000).nullable();
export const AlertThresholdsInput = z.strictObject({
  first_cents: ThresholdCents.meta({
    description: 'Early alert: low_balance {alert: first} when a charge takes the balance below this many cents; null clears it',
    example: 500,
  }),
  second_cents: ThresholdCents.meta({ description: 'Urgent alert (at most first_cents): low_balance {alert: second}; null clears it', example: 100 }),
});
export const AlertThresholdsOutput = z.object({
  first_cents: z.number().int().nullable(),
  second_cents: z.number().int().nullable(),
  balance_state: z.enum(['ok', 'low', 'critical']),
  credit_balance_cents: z.number().int(),
});

export const AmountInput = z.strictObject({
  amount_cents: z.number().int().min(100).max(100_000).meta({ description: 'Amount in cents, 100 ($1) to 100000 ($1,000)', example: 500 }),
});

export const PaymentView = z
  .object({
    id: z.string().meta({ example: 'pi_0a1b2c3d4e5f6g7h8j9k' }),
    kind: z.enum(['topup', 'signup', 'mpp']),
    status: z.string().meta({
      description:
        'Card payments: requires_approval, succeeded, denied, expired, failed. MPP: pending_approval, approved (token attaching), succeeded, denied, expired, failed (card declined)',
      example: 'requires_approval',
    }),
    amount_cents: z.number().int(),
    currency: z.literal('usd'),
    provider: z.string().meta({ description: 'The payment provider; the built-in local one says so' }),
    paid_via: z.string().nullable().meta({ description: 'mandate (saved card within the caps), owner (approved on the owner page), wallet (MPP)' }),
    decline_code: z.string().nullable().meta({ description: "The card network's decline code, when the card was declined", example: 'insufficient_funds' }),
    created_at: Timestamp,
    expires_at: Timestamp.meta({ description: 'Approval deadline (MPP: the 15-minute challenge TTL; approval does not extend it)' }),
    decided_at: Timestamp.nullable(),
    settled_at: Timestamp.nullable(),
    approval_url: z.string().meta({ description: 'Public status page of this payment; the owner approves through the single-use link emailed to them' }),
    owner_email_hint: z.string().meta({ example: 'o****@example.com' }),
    spend_request: z
      .object({
        id: z.string().meta({ example: 'spr_0a1b2c3d4e5f6g7h8j9k' }),
        status: z.string().meta({ description: 'pending_approval, approved, denied or expired' }),
        payer_email: z.string().nullable(),
        shared_payment_token: z.string().nullable().meta({ description: 'Set about 3 s after approval; the credit lands with it' }),
        token_attached_at: Timestamp.nullable(),
      })
      .nullable(),
  })
  .meta({ id: 'Payment' });

const Mandate = z.object({
  active: z.boolean(),
  per_topup_cents: z.number().int().nullable(),
  per_30d_cents: z.number().int().nullable(),
  used_30d_cents: z.number().int(),
  card: z.string().nullable().meta({ example: 'visa •••• 4242' }),
  applied: z.boolean().meta({ description: 'Whether the saved-card mandate settled this top-up without an approval' }),
  reason: z.string(),
});

export const TopupOutput = z.object({
  payment: PaymentView,
  client_secret: z.string().nullable().meta({
    description:
      'Card-form path: a page you host confirms the payment with it (open approval_url?client_secret=...). Shown once; null when the mandate settled it',
  }),
  mandate: Mandate,
  next_steps: z.array(z.string()),
});

export const PaymentIdInput = z.object({
  id: z.string().min(3).max(64).meta({ example: 'pi_0a1b2c3d4e5f6g7h8j9k' }),
  wait_seconds: z.coerce
    .number<number>()
    .int()
    .min(0)
    .max(25)
    .optional()
    .meta({ description: 'Wait up to this many seconds for the status to leave pending_approval / requires_approval / approved', example: 25 }),
});

export const MppChallengeOutput = z.object({
  challenge_id: z.string().meta({ example: 'mpp_0a1b2c3d4e5f6g7h8j9k' }),
  status: z.string(),
  amount_cents: z.number().int(),
  currency: z.literal('usd'),
  provider: z.string(),
  pay_url: z.string().meta({ description: 'Public pay URL of the challenge (status page, JSON with Accept: application/json)' }),
  payment: z.object({
    amount_cents: z.number().int(),
    currency: z.literal('usd'),
    ttl_seconds: z.number().int().meta({ example: 900 }),
    expires_at: Timestamp,
    warning: z.string().meta({ description: 'The 15-minute TTL is on the challenge; approval does not reset it' }),
  }),
  spend_request: PaymentView.shape.spend_request,
  preflight: z.object({
    payer_email: z
      .string()
      .nullable()
      .meta({ description: 'The payer found by the lookup; null when there is none or the lookup failed (the top-up still works, with the default)' }),
    payer_email_default: z.string().meta({ description: "The account owner's email, used when payer_email is null" }),
    mpp_client_hint: z.string(),
    flow: z.literal('wallet_approval'),
  }),
  next_steps: z.array(z.string()),
});

export const PayerEmailOutput = z.object({
  payer_email: z.string(),
  is_default: z.boolean().meta({ description: "true: no payment customer exists yet; the owner's email is shown" }),
  customer_exists: z.boolean(),
  used_for: z.string(),
});
export const PayerEmailInput = z.strictObject({ email: EmailAddress.meta({ example: 'billing@example.com' }) });

export const TrailerBuyoutOutput = TrailerStatus.extend({ charged_usd: z.string().meta({ example: '5' }) });
