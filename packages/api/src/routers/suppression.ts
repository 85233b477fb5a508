/** The suppression list: addresses that bounced or complained. */
import { z } from 'zod';
import { getSuppression, listSuppressions, unblock } from '@boxes/core';
import { SuppressionAddressInput, SuppressionList, SuppressionStatus, UnblockOutput } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

export const suppressionRouter = router({
  list: keyProcedure
    .meta({ scope: 'send', openapi: { method: 'GET', path: '/suppression', tags: ['suppression'], summary: 'List suppressed addresses' } })
    .input(z.void())
    .output(SuppressionList)
    .query(async ({ ctx }) => ({ suppressions: await listSuppressions(ctx.svc.db, ctx.account.id) })),
  get: keyProcedure
    .meta({ scope: 'send', openapi: { method: 'GET', path: '/suppression/{address}', tags: ['suppression'], summary: 'Status of one address' } })
    .input(SuppressionAddressInput)
    .output(SuppressionStatus)
    .query(({ ctx, input }) => getSuppression(ctx.svc.db, ctx.account.id, input.address)),
  unblock: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'POST',
        path: '/suppression/{address}/unblock',
        tags: ['suppression'],
        summary: 'Remove an address from the list',
        description: 'Sends to it are attempted again. 404 if it is not listed.',
      },
    })
    .input(SuppressionAddressInput)
    .output(UnblockOutput)
    .mutation(({ ctx, input }) => unblock(ctx.svc.db, ctx.account.id, input.address, ctx.key.id)),
});
