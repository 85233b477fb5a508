/** The account's domains and their verification: GET /account/domain, POST /account/domain/verify. */
import { z } from 'zod';
import { accountDomains, verifyAccountDomains } from '@boxes/core';
import { DomainsOutput } from '@boxes/schemas';
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
});
