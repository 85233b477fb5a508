/** The event log: paging with a cursor, and recomputing the hash chain. */
import { z } from 'zod';
import { listEvents, verifyChain } from '@boxes/core';
import { ListEventsInput, ListEventsOutput, VerifyOutput } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

export const eventsRouter = router({
  list: keyProcedure
    .meta({
      errors: ['invalid_cursor'],
      scope: 'receive',
      openapi: {
        method: 'GET',
        path: '/events',
        tags: ['events'],
        summary: 'Page through the event stream',
        description:
          'Events in order (seq ascending). Pass next_cursor as since to continue; a page never skips or repeats an event, even while events are appended. A box-restricted key sees only events of its boxes. The same events are pushed as Server-Sent Events by GET /api/v1/events/stream (same key, scope, since and type; the guide: /docs/guide/push).',
      },
    })
    .input(ListEventsInput)
    .output(ListEventsOutput)
    .query(({ ctx, input }) =>
      listEvents({
        db: ctx.svc.db,
        accountId: ctx.account.id,
        since: input.since,
        types: input.type
          ?.split(',')
          .map((s) => s.trim())
          .filter(Boolean),
        limit: input.limit,
        boxIds: ctx.boxScope,
      }),
    ),
  verify: keyProcedure
    .meta({
      scope: 'receive',
      openapi: {
        method: 'GET',
        path: '/events/verify',
        tags: ['events'],
        summary: 'Verify the hash chain',
        description: 'Recomputes every hash from the first event and reports anomalies (the first with at_seq).',
      },
    })
    .input(z.void())
    .output(VerifyOutput)
    .query(({ ctx }) => verifyChain({ db: ctx.svc.db, accountId: ctx.account.id })),
});
