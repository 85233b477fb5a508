/** Credit: the balance (top-ups and usage come with the payments work). */
import { z } from 'zod';
import { creditBalance } from '@boxes/core';
import { CreditBalance } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

export const creditRouter = router({
  balance: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/account/credit/balance',
        tags: ['credit'],
        summary: 'Credit balance',
        description: 'credit_balance_cents (may be negative), free messages left (of 250), how many emails the balance covers. Any valid key.',
      },
    })
    .input(z.void())
    .output(CreditBalance)
    .query(({ ctx }) => creditBalance(ctx.svc, ctx.account.id)),
});
