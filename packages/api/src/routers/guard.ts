/**
 * Guardrails: pause and resume the account or a box (admin), read the pauses (any key), and the send caps of a
 * box (read: any key that sees it; set: admin) and of an API key (admin, unrestricted key).
 */
import { z } from 'zod';
import { boxCaps, capsInput, keyCaps, pauseOverview, setAccountPause, setBoxCaps, setBoxPause } from '@boxes/core';
import { BoxCapsInput, BoxPauseInput, BoxPauseState, CapsOutput, KeyCapsInput, PauseOverview, PauseState, SetBoxCapsInput } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

const PAUSE_NOTE =
  'While paused every send is refused with 403 (single sends, replies, bulk jobs, auto-forwards, SMTP submission); scheduled messages that fall due wait and go on resume; inbound mail is received and pushed as usual.';
const RESUME_NOTE =
  'A pause the owner set on the owner pages can only be lifted there: 403 paused_by_owner for every API key, the owner key included. Idempotent.';

export const guardRouter = router({
  pauseState: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/account/pause',
        tags: ['guardrails'],
        summary: 'Pauses of the account and its boxes',
        description: 'Whether the account and each box the key sees is paused, since when and by whom (owner or key).',
      },
    })
    .input(z.void())
    .output(PauseOverview)
    .query(({ ctx }) => pauseOverview(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope })),
  pauseAccount: keyProcedure
    .meta({
      errors: ['not_found', 'paused_by_owner'],
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'POST',
        path: '/account/pause',
        tags: ['guardrails'],
        summary: 'Pause the account',
        description: `${PAUSE_NOTE} Idempotent; event account.paused. POST /account/resume (admin) lifts it.`,
      },
    })
    .input(z.void())
    .output(PauseState)
    .mutation(({ ctx }) => setAccountPause(ctx.svc, { accountId: ctx.account.id, actor: { kind: 'key', keyId: ctx.key.id }, paused: true })),
  resumeAccount: keyProcedure
    .meta({
      errors: ['not_found', 'paused_by_owner'],
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'POST',
        path: '/account/resume',
        tags: ['guardrails'],
        summary: 'Resume the account',
        description: `${RESUME_NOTE} Event account.resumed.`,
      },
    })
    .input(z.void())
    .output(PauseState)
    .mutation(({ ctx }) => setAccountPause(ctx.svc, { accountId: ctx.account.id, actor: { kind: 'key', keyId: ctx.key.id }, paused: false })),
  pauseBox: keyProcedure
    .meta({
      errors: ['not_found', 'paused_by_owner'],
      scope: 'admin',
      openapi: {
        method: 'POST',
        path: '/boxes/{id}/pause',
        tags: ['guardrails'],
        summary: 'Pause a box',
        description: `Sends from the box are refused (403 box_paused). ${PAUSE_NOTE} Idempotent; event box.paused. A box-restricted admin key pauses its own boxes.`,
      },
    })
    .input(BoxPauseInput)
    .output(BoxPauseState)
    .mutation(({ ctx, input }) =>
      setBoxPause(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, boxId: input.id, actor: { kind: 'key', keyId: ctx.key.id }, paused: true }),
    ),
  resumeBox: keyProcedure
    .meta({
      errors: ['not_found', 'paused_by_owner'],
      scope: 'admin',
      openapi: {
        method: 'POST',
        path: '/boxes/{id}/resume',
        tags: ['guardrails'],
        summary: 'Resume a box',
        description: `${RESUME_NOTE} Event box.resumed.`,
      },
    })
    .input(BoxPauseInput)
    .output(BoxPauseState)
    .mutation(({ ctx, input }) =>
      setBoxPause(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, boxId: input.id, actor: { kind: 'key', keyId: ctx.key.id }, paused: false }),
    ),
  boxCaps: keyProcedure
    .meta({
      errors: ['not_found'],
      openapi: {
        method: 'GET',
        path: '/boxes/{id}/caps',
        tags: ['guardrails'],
        summary: "A box's send caps and their use",
        description:
          'Each cap that is set (per_minute, per_hour, per_day: messages; new_recipients_per_day: distinct new recipients, those the box never wrote to nor heard from) with what the current window has used and when it resets. Any key that sees the box.',
      },
    })
    .input(BoxCapsInput)
    .output(CapsOutput)
    .query(({ ctx, input }) => boxCaps(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, boxId: input.id })),
  setBoxCaps: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'admin',
      openapi: {
        method: 'PUT',
        path: '/boxes/{id}/caps',
        tags: ['guardrails'],
        summary: "Set a box's send caps",
        description:
          'Replaces the caps (a cap left out or null is removed; {} removes them all). Counting goes on in the current windows. A send over a cap gets 429 cap_exceeded with details.cap (box.per_hour, ...) and Retry-After.',
      },
    })
    .input(SetBoxCapsInput)
    .output(CapsOutput)
    .mutation(({ ctx, input }) => setBoxCaps(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, boxId: input.id, caps: capsInput(input.caps) })),
  keyCaps: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'GET',
        path: '/account/keys/{id}/caps',
        tags: ['guardrails'],
        summary: "An API key's send caps and their use",
        description: 'The caps given when the key was minted, with what the current windows have used. Key caps count every send the key makes, from any box.',
      },
    })
    .input(KeyCapsInput)
    .output(CapsOutput)
    .query(({ ctx, input }) => keyCaps(ctx.svc, { accountId: ctx.account.id, keyId: input.id })),
});
