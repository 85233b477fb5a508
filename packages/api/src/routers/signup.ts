/** POST /signup/agentic and POST /signup/agentic/confirm: the only calls that need no key. */
import { confirmSignup, createSignupIntent, rateLimit } from '@boxes/core';
import { ConfirmInput, ConfirmOutput, SignupInput, SignupOutput } from '@boxes/schemas';
import { publicProcedure, router } from '../trpc';

export const signupRouter = router({
  create: publicProcedure
    .meta({
      errors: ['domain_taken', 'rate_limited'],
      openapi: {
        method: 'POST',
        path: '/signup/agentic',
        tags: ['signup'],
        protect: false,
        summary: 'Start a signup',
        description:
          'Creates a signup intent for a mail domain. Mode subdomain picks a free <word>-<word>.<base_domain>. Confirm it with POST /signup/agentic/confirm within 24 hours. With initial_credit_cents (>= 100, needs agent_callback_webhook) the signup is funded: the response carries local_payment_intent, the owner approves it from an emailed link, and the account is provisioned then with that credit (no confirm; signup.completed with the api_key goes to the callback webhook). Mode register (needs agent_callback_webhook) registers register_domain through the registrar (the built-in local registrar is simulated): the response carries local_payment_intent and local_wallet_spend_request for the first year plus any initial credit; a taken or unavailable name is 409 domain_taken with suggestions; once the owner approves, the domain is registered, its zone served, and the account provisioned (signup.completed to the callback).',
        successDescription: 'The intent',
      },
    })
    .input(SignupInput)
    .output(SignupOutput)
    .mutation(async ({ ctx, input }) => {
      await rateLimit(ctx.svc, { bucket: 'signup', key: ctx.clientIp?.() ?? 'unknown', limit: ctx.svc.config.signupRateLimitPerHour, windowSeconds: 3600, what: 'signups' });
      const intent = await createSignupIntent(ctx.svc, input);
      const base = { intent_id: intent.id, full_domain: intent.fullDomain, mode: intent.mode as 'subdomain', expires_at: intent.expiresAt.toISOString() };
      if (intent.funding) {
        return {
          ...base,
          status: 'pending_payment' as const,
          next_step: null,
          local_payment_intent: { ...intent.funding.payment, client_secret: intent.funding.client_secret },
          ...(intent.funding.wallet_spend_request
            ? {
                local_wallet_spend_request: intent.funding.wallet_spend_request,
                registration: { domain: intent.fullDomain, registrar: ctx.svc.registrar.label, price_cents_per_year: intent.registrationPriceCents!, years: 1 as const },
              }
            : {}),
        };
      }
      return {
        ...base,
        status: 'pending_confirmation' as const,
        next_step: { method: 'POST' as const, url: `${ctx.svc.config.apiBaseUrl}/signup/agentic/confirm`, body: { intent_id: intent.id } },
      };
    }),
  confirm: publicProcedure
    .meta({
      errors: ['box_exists', 'domain_taken', 'funded_signup', 'intent_already_confirmed', 'intent_expired', 'not_found'],
      openapi: {
        method: 'POST',
        path: '/signup/agentic/confirm',
        tags: ['signup'],
        protect: false,
        summary: 'Confirm a signup',
        description:
          'Provisions the account: the domain, the primary box agent@<domain> and the owner key (send, receive, admin). The api_key is shown only in this response. Confirming twice returns 409 and creates nothing.',
      },
    })
    .input(ConfirmInput)
    .output(ConfirmOutput)
    .mutation(({ ctx, input }) => confirmSignup(ctx.svc, input)),
});
