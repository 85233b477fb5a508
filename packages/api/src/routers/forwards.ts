/** Auto-forwarding per box: POST/GET /boxes/{id}/forwards, DELETE /boxes/{id}/forwards/{forward_id}. */
import { createForward, deleteForward, listForwards } from '@boxes/core';
import { CreateForwardInput, ForwardDeleted, ForwardIdInput, ForwardListInput, ForwardListOutput, ForwardOutput } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

export const forwardsRouter = router({
  create: keyProcedure
    .meta({
      errors: ['forward_exists', 'not_found'],
      scope: 'admin',
      openapi: {
        method: 'POST',
        path: '/boxes/{id}/forwards',
        tags: ['boxes'],
        summary: "Forward a box's mail to a person",
        description:
          "Copies of the box's incoming mail (all of it, or what matches from_contains and subject_contains) go to `to`, once that address has confirmed: it is mailed a link to a confirmation page, and the forward stays pending_confirmation (nothing forwarded) until the link's Confirm is pressed (7 days). Each copy is a new message from the box with the original attached unchanged (message/rfc822), DKIM-signed by the box's domain and charged as a sent message. Copies carry X-Boxes-Forwarded-By; mail carrying it is never forwarded again (no loops). A bounced copy stops the forward (status stopped, stop_reason bounced). At most 10 forwards per box; 409 forward_exists for a second one to the same address. Events box.forward.created, .confirmed, .skipped, .stopped, .deleted.",
      },
    })
    .input(CreateForwardInput)
    .output(ForwardOutput)
    .mutation(({ ctx, input }) =>
      createForward(ctx.svc, {
        accountId: ctx.account.id,
        scope: ctx.boxScope,
        boxId: input.id,
        to: input.to,
        fromContains: input.from_contains ?? null,
        subjectContains: input.subject_contains ?? null,
      }),
    ),
  list: keyProcedure
    .meta({
      errors: ['not_found'],
      openapi: {
        method: 'GET',
        path: '/boxes/{id}/forwards',
        tags: ['boxes'],
        summary: "A box's forwards",
        description: 'Every forward of the box with its status (stopped ones stay listed with their stop_reason). Any key that sees the box.',
      },
    })
    .input(ForwardListInput)
    .output(ForwardListOutput)
    .query(async ({ ctx, input }) => ({ forwards: await listForwards(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, boxId: input.id }) })),
  delete: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'admin',
      openapi: {
        method: 'DELETE',
        path: '/boxes/{id}/forwards/{forward_id}',
        tags: ['boxes'],
        summary: 'Remove a forward',
        description: 'Nothing more is forwarded by it; copies already queued are skipped.',
      },
    })
    .input(ForwardIdInput)
    .output(ForwardDeleted)
    .mutation(({ ctx, input }) => deleteForward(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, boxId: input.id, forwardId: input.forward_id })),
});
