/** GET /account and the callback webhook URL. */
import { z } from 'zod';
import { closeProtectionOf, enableCloseProtection, getAccount, reputationCounts, requestClose, setCallbackWebhook, setSearchIndexing } from '@boxes/core';
import {
  AccountOutput,
  CallbackWebhookInput,
  CallbackWebhookOutput,
  CloseAccountInput,
  CloseAccountOutput,
  CloseProtectionInput,
  CloseProtectionOutput,
  ReputationOutput,
  SearchIndexingInput,
  SearchIndexingOutput,
} from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

export const accountRouter = router({
  get: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/account',
        tags: ['account'],
        summary: 'The account',
        description: 'Status, primary address, domain, callback webhook and creation time. Any valid key.',
      },
    })
    .input(z.void())
    .output(AccountOutput)
    .query(({ ctx }) => getAccount(ctx.svc, { accountId: ctx.account.id })),
  getCallbackWebhook: keyProcedure
    .meta({
      scope: 'admin',
      openapi: {
        method: 'GET',
        path: '/account/callback-webhook',
        tags: ['account'],
        summary: 'The callback webhook URL',
        description: 'Needs the admin scope.',
      },
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
    .mutation(({ ctx, input }) => setCallbackWebhook(ctx.svc, { accountId: ctx.account.id, url: input.agent_callback_webhook, actorKeyId: ctx.key.id })),
  reputation: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/account/reputation',
        tags: ['account'],
        summary: 'Sending reputation',
        description:
          'Sent, bounced and complained counts over 7 days and their rates; reputation.warning fires above 3% bounces or 0.05% complaints. Any valid key.',
      },
    })
    .input(z.void())
    .output(ReputationOutput)
    .query(({ ctx }) => reputationCounts(ctx.svc.db, ctx.account.id, ctx.svc.clock.now())),
  closeProtection: keyProcedure
    .meta({
      openapi: { method: 'GET', path: '/account/close-protection', tags: ['account'], summary: 'Close protection state', description: 'Any valid key.' },
    })
    .input(z.void())
    .output(CloseProtectionOutput)
    .query(({ ctx }) => closeProtectionOf(ctx.account)),
  enableCloseProtection: keyProcedure
    .meta({
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'POST',
        path: '/account/close-protection',
        tags: ['account'],
        summary: 'Turn close protection on',
        description:
          'Body {"enabled": true} only: set-only, the API cannot turn it off (support can). With it on, DELETE /account waits for the owner to approve by an emailed link. Admin scope, unrestricted key.',
      },
    })
    .input(CloseProtectionInput)
    .output(CloseProtectionOutput)
    .mutation(({ ctx }) => enableCloseProtection(ctx.svc, { accountId: ctx.account.id, actorKeyId: ctx.key.id })),
  setSearchIndexing: keyProcedure
    .meta({
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'PUT',
        path: '/account/search-indexing',
        tags: ['account'],
        summary: 'Turn the search index on or off',
        description:
          'The search index (GET /messages/search) keeps, per message, the normalised words of its subject, addresses, body and attachments with their positions, not the text; bodies themselves are encrypted at rest. {"enabled": false} drops the account\'s index now and keeps none; {"enabled": true} (the default) indexes again. Admin scope, unrestricted key.',
      },
    })
    .input(SearchIndexingInput)
    .output(SearchIndexingOutput)
    .mutation(({ ctx, input }) => setSearchIndexing(ctx.svc, ctx.account.id, input.enabled)),
  close: keyProcedure
    .meta({
      errors: ['conflict', 'not_found'],
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'DELETE',
        path: '/account',
        tags: ['account'],
        summary: 'Close the account',
        description:
          'confirm_domain (query parameter or JSON body) must equal the account domain: without it or wrong, 400, nothing closes and the owner is emailed. With close protection on, the owner approves by an emailed link first (status pending_owner_approval). Closing revokes every key at once, appends account.closing, makes the MX refuse mail for the domain, stops queued and deferred deliveries, holds a registered domain for transfer and returns the data-export link (also mailed to the owner). Data is deleted for good after ACCOUNT_DELETION_GRACE_DAYS (30). Admin scope, unrestricted key.',
      },
    })
    .input(CloseAccountInput)
    .output(CloseAccountOutput)
    .mutation(({ ctx, input }) => requestClose(ctx.svc, { accountId: ctx.account.id, keyId: ctx.key.id, confirmDomain: input.confirm_domain })),
});
