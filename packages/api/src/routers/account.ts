/** GET /account and the callback webhook URL. */
import { z } from 'zod';
import { getAccount, reputationCounts, setCallbackWebhook } from '@boxes/core';
import { AccountOutput, CallbackWebhookInput, CallbackWebhookOutput, ReputationOutput } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

export const accountRouter = router({
  get: keyProcedure
    .meta({
      openapi: { method: 'GET', path: '/account', tags: ['account'], summary: 'The account', description: 'Status, primary address, domain, callback webhook and creation time. Any valid key.' },
    })
    .input(z.void())
    .output(AccountOutput)
    .query(({ ctx }) => getAccount(ctx.svc, { accountId: ctx.account.id })),
  getCallbackWebhook: keyProcedure
    .meta({
      scope: 'admin',
      openapi: { method: 'GET', path: '/account/callback-webhook', tags: ['account'], summary: 'The callback webhook URL', description: 'Needs the admin scope.' },
    })
    .input(z.void())
    .output(CallbackWebhookOutput)
    .query(({ ctx }) => ({ agent_callback_webhook: ctx.account.callbackWebhook })),
  setCallbackWebhook: keyProcedure
    .meta({
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'PUT',
        path: '/account/callback-webhook',
        tags: ['account'],
        summary: 'Set the callback webhook URL',
        description: 'https only (the field is agent_callback_webhook); null removes it. Needs the admin scope and an unrestricted key.',
      },
    })
    .input(CallbackWebhookInput)
    .output(CallbackWebhookOutput)
    .mutation(({ ctx, input }) =>
      setCallbackWebhook(ctx.svc, { accountId: ctx.account.id, url: input.agent_callback_webhook, actorKeyId: ctx.key.id }),
    ),
  reputation: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/account/reputation',
        tags: ['account'],
        summary: 'Sending reputation',
        description: 'Sent, bounced and complained counts over 7 days and their rates; reputation.warning fires above 3% bounces or 0.05% complaints. Any valid key.',
      },
    })
    .input(z.void())
    .output(ReputationOutput)
    .query(({ ctx }) => reputationCounts(ctx.svc.db, ctx.account.id)),
});
