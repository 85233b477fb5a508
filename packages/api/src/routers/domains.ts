/** The account's domains, their verification and moves: GET and POST /account/domain, POST /account/domain/verify. */
import { z } from 'zod';
import { accountDomains, startDomainMove, verifyAccountDomains } from '@boxes/core';
import { DomainMoveInput, DomainsOutput } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

export const domainsRouter = router({
  get: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/account/domain',
        tags: ['domains'],
        summary: "The account's domains and their verification",
        description:
          'Each domain with its mode and status; a pending bring-your-own claim lists every required record with its state at the last check (found, missing or different), when it was checked, when the next check is due and when the claim expires. Any valid key.',
      },
    })
    .input(z.void())
    .output(DomainsOutput)
    .query(async ({ ctx }) => ({ domains: await accountDomains(ctx.svc, ctx.account.id) })),
  verify: keyProcedure
    .meta({
      errors: ['domain_claim_expired'],
      openapi: {
        method: 'POST',
        path: '/account/domain/verify',
        tags: ['domains'],
        summary: 'Check pending domains now',
        description:
          'Looks up the records of every pending claim of the account at once (instead of waiting for the next scheduled check) and answers like GET /account/domain. A claim found complete goes live here (domain.ready). An expired claim is 410 domain_claim_expired. Any valid key.',
      },
    })
    .input(z.void())
    .output(DomainsOutput)
    .mutation(async ({ ctx }) => ({ domains: await verifyAccountDomains(ctx.svc, ctx.account.id) })),
  move: keyProcedure
    .meta({
      errors: ['conflict', 'domain_taken', 'not_found', 'payment_required'],
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'POST',
        path: '/account/domain',
        tags: ['domains'],
        summary: 'Move the account onto a new domain',
        description:
          "Body: mode (byo_manual, byo_delegated or register) and domain. The new domain goes through its mode's path (DNS records and proof, delegation, or registration paid from the credit: 402 without enough) while the current one stays live; when it is live it becomes the primary domain: agent@<new> and every box move onto it (same box ids, same keys), domain.moved is appended, and the old domain keeps receiving for DOMAIN_MOVE_GRACE_DAYS (30) before it is retired. A second move while one is pending replaces it. A domain live on another account is 409 domain_taken with suggestions. Needs the admin scope and an unrestricted key.",
      },
    })
    .input(DomainMoveInput)
    .output(DomainsOutput)
    .mutation(({ ctx, input }) => startDomainMove(ctx.svc, ctx.account.id, input)),
});
