/** Owner review of sends, the agent's side: list, read and withdraw the sends held for the owner. */
import { getReview, listReviews, withdrawReview } from '@boxes/core';
import { ListReviewsInput, Review, ReviewIdInput, ReviewListOutput } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

export const reviewsRouter = router({
  list: keyProcedure
    .meta({
      scope: 'send',
      openapi: {
        method: 'GET',
        path: '/reviews',
        tags: ['reviews'],
        summary: "List sends held for the owner's review",
        description:
          "Sends the owner review policy held (POST /messages/send answered 202), newest first; status=pending for those still waiting. A pending review whose time passed is expired here. A box-restricted key sees its boxes' reviews.",
      },
    })
    .input(ListReviewsInput)
    .output(ReviewListOutput)
    .query(async ({ ctx, input }) => ({
      reviews: await listReviews(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, status: input.status, limit: input.limit }),
    })),
  get: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'send',
      openapi: {
        method: 'GET',
        path: '/reviews/{id}',
        tags: ['reviews'],
        summary: 'Read a held send',
        description:
          'Its status: pending (the owner has not decided), approved (sent: message_id), denied, expired or withdrawn (nothing sent, nothing charged). last_error says why an approval could not send (payment_required when the credit was short): it stays pending then.',
      },
    })
    .input(ReviewIdInput)
    .output(Review)
    .query(({ ctx, input }) => getReview(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, id: input.id })),
  withdraw: keyProcedure
    .meta({
      errors: ['conflict', 'not_found'],
      scope: 'send',
      openapi: {
        method: 'POST',
        path: '/reviews/{id}/withdraw',
        tags: ['reviews'],
        summary: 'Withdraw a held send',
        description:
          "Takes back a send still waiting for the owner: nothing is sent, the owner's page shows it withdrawn with nothing to decide, review.withdrawn is recorded. 409 conflict once it is no longer pending.",
      },
    })
    .input(ReviewIdInput)
    .output(Review)
    .mutation(({ ctx, input }) => withdrawReview(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, id: input.id, keyId: ctx.key.id })),
});
