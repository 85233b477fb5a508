/** API keys: mint, list, revoke (admin scope, unrestricted key). */
import { z } from 'zod';
import { capsInput, checkKeyExpiry, listKeys, mintKey, presentKeys, resolveBoxRestriction, revokeKey } from '@boxes/core';
import { CreatedKeyOutput, CreateKeyInput, KeyIdInput, KeyListOutput, RevokedKeyOutput } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';
import { eventsStep, keyChecks, withEvidence } from '../evidence';

export const keysRouter = router({
  create: keyProcedure
    .meta({
      errors: ['key_outlives_parent'],
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'POST',
        path: '/account/keys',
        tags: ['keys'],
        summary: 'Mint an API key',
        description:
          "Scopes are any of send, receive, admin. allowed_boxes (addresses) or allowed_box_ids restrict the key to those boxes. expires_at (optional) ends the key at that time (then 401 key_expired); a key that expires cannot mint one that outlives it (400 key_outlives_parent). caps (optional) sets send caps of the key (GET /account/keys/{id}/caps). review (none, new_recipients or all; default none) holds the key's sends for the owner's approval; the stricter of the key's and the box's policy applies (GET /reviews). The raw api_key is returned only here.",
      },
    })
    .input(CreateKeyInput)
    .output(CreatedKeyOutput)
    .mutation(async ({ ctx, input }) => {
      const db = ctx.svc.db;
      const expiresAt = checkKeyExpiry(input.expires_at, ctx.key, ctx.svc.clock.now());
      const allowedBoxIds = await resolveBoxRestriction({
        db,
        accountId: ctx.account.id,
        allowedBoxes: input.allowed_boxes,
        allowedBoxIds: input.allowed_box_ids,
      });
      const { key, raw } = await mintKey({
        db,
        accountId: ctx.account.id,
        label: input.label,
        scopes: input.scopes,
        allowedBoxIds,
        ...(input.review ? { review: input.review } : {}),
        actorKeyId: ctx.key.id,
        expiresAt,
        sendCaps: capsInput(input.caps),
      });
      const [view] = await presentKeys(db, [key]);
      const checks = keyChecks(ctx, 'admin', true);
      if (allowedBoxIds.length)
        checks.push({ check: 'box_restriction', result: 'passed', detail: `every box of the restriction (${allowedBoxIds.length}) is a box of this account` });
      return withEvidence(ctx, { ...view!, api_key: raw }, { capability: 'keys.create', checks, next: eventsStep(ctx.svc) });
    }),
  list: keyProcedure
    .meta({
      scope: 'admin',
      accountWide: true,
      openapi: { method: 'GET', path: '/account/keys', tags: ['keys'], summary: 'List active API keys', description: 'Never returns raw keys.' },
    })
    .input(z.void())
    .output(KeyListOutput)
    .query(async ({ ctx }) => ({ keys: await listKeys({ db: ctx.svc.db, accountId: ctx.account.id }) })),
  revoke: keyProcedure
    .meta({
      errors: ['not_found', 'owner_key_protected'],
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'DELETE',
        path: '/account/keys/{id}',
        tags: ['keys'],
        summary: 'Revoke an API key',
        description: 'Takes effect on the next request. The original owner key cannot be revoked (403 owner_key_protected).',
      },
    })
    .input(KeyIdInput)
    .output(RevokedKeyOutput)
    .mutation(async ({ ctx, input }) => {
      const out = await revokeKey({ db: ctx.svc.db, accountId: ctx.account.id, keyId: input.id, actorKeyId: ctx.key.id });
      const checks = [
        ...keyChecks(ctx, 'admin', true),
        { check: 'owner_key_protected', result: 'passed' as const, detail: 'the key is not the original owner key' },
      ];
      return withEvidence(ctx, out, { capability: 'keys.revoke', checks, next: eventsStep(ctx.svc) });
    }),
});
