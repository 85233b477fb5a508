/** POST /signup/agentic, /signup/agentic/confirm and /signup/agentic/claim: the only calls that need no key. */
import { claimSignup, confirmSignup, createSignupIntent, rateLimit } from '@boxes/core';
import { ClaimInput, ClaimOutput, ConfirmInput, ConfirmOutput, SignupInput, SignupOutput } from '@boxes/schemas';
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
          'Creates a signup intent for a mail domain. Mode subdomain picks a free <word>-<word>.<base_domain>. Confirm it with POST /signup/agentic/confirm within 24 hours. With initial_credit_cents (>= 100) the signup is funded: the response carries local_payment_intent and a claim_secret (shown once), the owner approves the payment from an emailed link, and the account is provisioned then with that credit (no confirm). Mode register registers register_domain through the registrar (the built-in local registrar is simulated): the response carries local_payment_intent, local_wallet_spend_request for the first year plus any initial credit, and a claim_secret; a taken or unavailable name is 409 domain_taken with suggestions; once the owner approves, the domain is registered, its zone served, and the account provisioned. Either way the api_key comes once: poll POST /signup/agentic/claim with intent_id and claim_secret (next_step is that call), or, with agent_callback_webhook (optional), in signup.completed at the callback, whichever is first.',
        successDescription: 'The intent',
      },
    })
    .input(SignupInput)
    .output(SignupOutput)
    .mutation(async ({ ctx, input }) => {
      await rateLimit(ctx.svc, {
        bucket: 'signup',
        key: ctx.clientIp?.() ?? 'unknown',
        limit: ctx.svc.config.signupRateLimitPerHour,
        windowSeconds: 3600,
        what: 'signups',
      });
      const intent = await createSignupIntent(ctx.svc, input);
      const base = { intent_id: intent.id, full_domain: intent.fullDomain, mode: intent.mode as 'subdomain', expires_at: intent.expiresAt.toISOString() };
      if (intent.funding) {
        return {
          ...base,
          status: 'pending_payment' as const,
          next_step: {
            method: 'POST' as const,
            url: `${ctx.svc.config.apiBaseUrl}/signup/agentic/claim`,
            body: { intent_id: intent.id, claim_secret: intent.funding.claim_secret },
          },
          claim_secret: intent.funding.claim_secret,
          local_payment_intent: { ...intent.funding.payment, client_secret: intent.funding.client_secret },
          ...(intent.funding.wallet_spend_request
            ? {
                local_wallet_spend_request: intent.funding.wallet_spend_request,
                registration: {
                  domain: intent.fullDomain,
                  registrar: ctx.svc.registrar.label,
                  price_cents_per_year: intent.registrationPriceCents!,
                  years: 1 as const,
                },
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
  claim: publicProcedure
    .meta({
      errors: ['intent_already_confirmed', 'not_found'],
      openapi: {
        method: 'POST',
        path: '/signup/agentic/claim',
        tags: ['signup'],
        protect: false,
        summary: 'Claim a paid signup',
        description:
          'For a funded or register signup (which has no confirm): with the intent_id and the claim_secret of POST /signup/agentic, answers pending_payment (ask again after retry_after_seconds) until the owner pays, then completed with the account and its api_key, exactly once; a later claim is 409 intent_already_confirmed, as is a claim after signup.completed took the key to the callback webhook. delivering_to_callback means that POST is on its way right now (ask again: if it fails, the claim gets the key). payment_denied, payment_failed and expired are final. An unknown intent and a wrong claim_secret are both 404.',
      },
    })
    .input(ClaimInput)
    .output(ClaimOutput)
    .mutation(({ ctx, input }) => claimSignup(ctx.svc, input)),
});
