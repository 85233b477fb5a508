import { z } from 'zod';
import { PaymentView } from './credit';
import { EmailAddress, HttpsUrl, Timestamp } from './common';

export const DOMAIN_MODES = ['subdomain', 'register', 'byo_manual', 'byo_delegated'] as const;

export const DomainIntent = z
  .strictObject({
    mode: z.enum(DOMAIN_MODES).meta({ description: 'How the account gets its mail domain', example: 'subdomain' }),
    slug_style: z
      .enum(['word_pair'])
      .optional()
      .meta({ description: 'With mode subdomain: the shape of the generated name (default word_pair: <word>-<word>)', example: 'word_pair' }),
    register_domain: z.string().max(253).optional().meta({ description: 'With mode register: the domain to register', example: 'my-agent.com' }),
    byo_domain: z
      .string()
      .max(253)
      .optional()
      .meta({ description: 'With byo_manual or byo_delegated: your own apex or third-level domain', example: 'mail.example.com' }),
  })
  .superRefine((v, ctx) => {
    if ((v.mode === 'byo_manual' || v.mode === 'byo_delegated') && !v.byo_domain) {
      ctx.addIssue({ code: 'custom', path: ['byo_domain'], message: `byo_domain is required with mode ${v.mode}` });
    }
    if (v.mode === 'register' && !v.register_domain) {
      ctx.addIssue({ code: 'custom', path: ['register_domain'], message: 'register_domain is required with mode register' });
    }
  })
  .meta({ id: 'DomainIntent', description: 'The mail domain the account wants' });

export const SignupInput = z.strictObject({
  human_email: EmailAddress.meta({ description: "The human owner's email; the owner approves payments", example: 'owner@example.com' }),
  domain_intent: DomainIntent,
  agent_callback_webhook: HttpsUrl.optional().meta({
    description:
      'Optional https URL that receives signup.completed and later events (the push path). A funded or register signup also completes without it: poll POST /signup/agentic/claim with the claim_secret',
  }),
  initial_credit_cents: z
    .number()
    .int()
    .min(100)
    .optional()
    .meta({ description: 'Funded signup: prepaid credit the owner approves (at least 100)', example: 500 }),
});

const IntentId = z
  .string()
  .max(40)
  .regex(/^int_[0-9a-z]{20}$/, 'must be an intent id (int_...)')
  .meta({ example: 'int_8f3k2m9x0c7b1n3p5q8r' });

export const SignupOutput = z.object({
  intent_id: z.string().meta({ description: 'Signup intent id; pass it to /signup/agentic/confirm', example: 'int_8f3k2m9x0c7b1n3p5q8r' }),
  full_domain: z.string().meta({ description: 'The domain the account will use', example: 'brave-otter.boxes.localhost' }),
  mode: z.enum(DOMAIN_MODES),
  status: z.enum(['pending_confirmation', 'pending_payment']).meta({
    description:
      'pending_confirmation: call confirm. pending_payment (funded signup, mode register): the owner pays; the account is provisioned then, with no confirm call',
  }),
  expires_at: Timestamp.meta({ description: 'Confirm (or have the owner pay) before this time' }),
  next_step: z
    .object({
      method: z.literal('POST'),
      url: z.string().meta({ example: 'http://localhost:3000/api/v1/signup/agentic/confirm' }),
      body: z.object({ intent_id: z.string(), claim_secret: z.string().optional() }),
    })
    .meta({ description: 'The next call: confirm (pending_confirmation), or the claim poll (pending_payment), its body ready to send' }),
  claim_secret: z.string().optional().meta({
    description:
      'Funded signup and mode register: the secret that claims the account, shown only here. Poll POST /signup/agentic/claim with intent_id and claim_secret (every retry_after_seconds): once the owner has paid, the answer carries the api_key, exactly once. With agent_callback_webhook, signup.completed carries it instead if it gets there first',
    example: 'bxs_claim_Vd3kq0Yx8m2Zp4Rt6Wb9Nc1Hf5Js7Lg0Qe2Ua4Ox6Iy',
  }),
  local_payment_intent: PaymentView.extend({
    client_secret: z.string().meta({ description: 'Card-form path: confirms the payment on approval_url?client_secret=...; shown once' }),
  })
    .optional()
    .meta({
      description:
        'Funded signup and mode register: the payment intent of the payment provider (here the built-in local provider, hence the name) that the owner approves from the link emailed to human_email. The account is provisioned then; its api_key comes from POST /signup/agentic/claim (or signup.completed at agent_callback_webhook)',
    }),
  local_wallet_spend_request: z
    .object({
      id: z.string().meta({ example: 'spr_0a1b2c3d4e5f6g7h8j9k' }),
      status: z.string().meta({ description: 'pending_approval, then approved, denied or expired' }),
      payer_email: z.string(),
      amount_cents: z.number().int().meta({ description: 'The first year of the registration plus initial_credit_cents' }),
      currency: z.literal('usd'),
      expires_at: Timestamp,
    })
    .optional()
    .meta({
      description:
        "Mode register: the spend request in the owner's wallet (the built-in local wallet) for the first year and the initial credit. Approved, the payment clears, the domain is registered and its zone served, and the account is provisioned; denied or expired, nothing is registered or charged",
    }),
  registration: z
    .object({
      domain: z.string(),
      registrar: z.string().meta({ description: 'The registrar; the built-in local registrar is simulated' }),
      price_cents_per_year: z.number().int(),
      years: z.literal(1),
    })
    .optional()
    .meta({ description: 'Mode register: what will be registered, by whom, at what price' }),
});

export const ConfirmInput = z.strictObject({
  intent_id: IntentId,
});

export const ConfirmOutput = z.object({
  account_id: z.string().meta({ example: 'acct_0a1b2c3d4e5f6g7h8j9k' }),
  primary_address: z.string().meta({ description: 'agent@<domain>', example: 'agent@brave-otter.boxes.localhost' }),
  api_key: z.string().meta({ description: 'The owner key (scopes send, receive, admin). Shown once; store it now.', example: 'bxs_live_...' }),
  key_id: z.string().meta({ example: 'key_0a1b2c3d4e5f6g7h8j9k' }),
  account_status: z.enum(['active']),
  domain: z.string(),
  domain_status: z.enum(['active', 'pending_dns', 'pending_delegation']).meta({
    description: 'active: mail flows now. pending_dns / pending_delegation: see the domain.dns_required or domain.delegation_required event',
  }),
});

export const ClaimInput = z.strictObject({
  intent_id: IntentId,
  claim_secret: z
    .string()
    .max(100)
    .meta({ description: 'claim_secret from the answer of POST /signup/agentic', example: 'bxs_claim_Vd3kq0Yx8m2Zp4Rt6Wb9Nc1Hf5Js7Lg0Qe2Ua4Ox6Iy' }),
});

export const ClaimOutput = z.object({
  intent_id: z.string().meta({ example: 'int_8f3k2m9x0c7b1n3p5q8r' }),
  full_domain: z.string().meta({ example: 'brave-otter.boxes.localhost' }),
  status: z.enum(['pending_payment', 'delivering_to_callback', 'completed', 'payment_denied', 'payment_failed', 'expired']).meta({
    description:
      'pending_payment: the owner has not paid yet; ask again after retry_after_seconds. delivering_to_callback: the account exists and signup.completed with the api_key is being POSTed to agent_callback_webhook right now; ask again after retry_after_seconds (if that POST fails, the claim hands the key out; if it succeeds, the claim is 409). completed: the account exists and account carries the api_key (this once; a later claim is 409). payment_denied: the owner said no (do not retry without their consent). payment_failed: the payment was declined (final; start again with another card or wallet). expired: the payment or the intent timed out; start again',
  }),
  payment: z
    .object({
      id: z.string().meta({ example: 'pi_0a1b2c3d4e5f6g7h8j9k' }),
      status: z
        .string()
        .meta({ description: 'The payment intent status: requires_approval, pending_approval, approved, succeeded, denied, expired or failed' }),
      decline_code: z.string().nullable().meta({ description: 'Set when the owner tried a card that was declined; the payment still waits for another card' }),
    })
    .nullable(),
  retry_after_seconds: z.number().int().nullable().meta({ description: 'With pending_payment: when to ask again', example: 5 }),
  account: ConfirmOutput.nullable().meta({ description: 'With completed: the account and its owner key (api_key shown only in this answer)' }),
});
