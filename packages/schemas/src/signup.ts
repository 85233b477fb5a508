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
  agent_callback_webhook: HttpsUrl.optional().meta({ description: 'https URL that receives signup.completed and later events' }),
  initial_credit_cents: z
    .number()
    .int()
    .min(100)
    .optional()
    .meta({ description: 'Funded signup: prepaid credit the owner approves (at least 100)', example: 500 }),
});

export const SignupOutput = z.object({
  intent_id: z.string().meta({ description: 'Signup intent id; pass it to /signup/agentic/confirm', example: 'int_8f3k2m9x0c7b1n3p5q8r' }),
  full_domain: z.string().meta({ description: 'The domain the account will use', example: 'brave-otter.boxes.localhost' }),
  mode: z.enum(DOMAIN_MODES),
  status: z.enum(['pending_confirmation', 'pending_payment']).meta({
    description: 'pending_confirmation: call confirm. pending_payment (funded signup, mode register): the owner pays; the account is provisioned then, with no confirm call',
  }),
  expires_at: Timestamp.meta({ description: 'Confirm (or have the owner pay) before this time' }),
  next_step: z.object({
    method: z.literal('POST'),
    url: z.string().meta({ example: 'http://localhost:3000/api/v1/signup/agentic/confirm' }),
    body: z.object({ intent_id: z.string() }),
  }).nullable().meta({ description: 'The confirm call; null for a funded signup' }),
  local_payment_intent: PaymentView.extend({
    client_secret: z.string().meta({ description: 'Card-form path: confirms the payment on approval_url?client_secret=...; shown once' }),
  })
    .optional()
    .meta({ description: "Funded signup and mode register: the payment intent of the payment provider (here the built-in local provider, hence the name) that the owner approves from the link emailed to human_email. signup.completed with the api_key then goes to agent_callback_webhook" }),
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
    .meta({ description: "Mode register: the spend request in the owner's wallet (the built-in local wallet) for the first year and the initial credit. Approved, the payment clears, the domain is registered and its zone served, and the account is provisioned; denied or expired, nothing is registered or charged" }),
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
  intent_id: z.string().max(40).regex(/^int_[0-9a-z]{20}$/, 'must be an intent id (int_...)').meta({ example: 'int_8f3k2m9x0c7b1n3p5q8r' }),
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
