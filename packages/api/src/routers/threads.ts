/** Conversations: threads of messages joined by In-Reply-To and References. */
import { getThread, listThreads, messageFlags } from '@boxes/core';
import { GetThreadInput, ListThreadsInput, ListThreadsOutput, ThreadDetail } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

export const threadsRouter = router({
  list: keyProcedure
    .meta({
      errors: ['invalid_cursor', 'not_found'],
      scope: 'receive',
      openapi: {
        method: 'GET',
        path: '/threads',
        tags: ['threads'],
        summary: 'List conversations',
        description:
          "Threads, newest activity first. Every message has a thread_id: a message that answers another (In-Reply-To, then References, matched against the Message-IDs of this account's mail) joins its thread; any other starts one. box narrows to the messages of one box. A box-restricted key sees only the messages of its boxes.",
      },
    })
    .input(ListThreadsInput)
    .output(ListThreadsOutput)
    .query(({ ctx, input }) => listThreads(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, ...input })),
  get: keyProcedure
    .meta({
      errors: ['invalid_cursor', 'not_found'],
      scope: 'receive',
      openapi: {
        method: 'GET',
        path: '/threads/{id}',
        tags: ['threads'],
        summary: 'Read a conversation',
        description:
          'The thread and its messages in the order they were recorded (oldest first); include=body adds the bodies. Reply to one with POST /messages/{id}/reply.',
      },
    })
    .input(GetThreadInput)
    .output(ThreadDetail)
    .query(async ({ ctx, input }) => {
      const t = await getThread(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, ...input });
      const flags = await messageFlags(
        ctx.svc,
        t.messages.map((m) => m.id),
      );
      return { ...t, messages: t.messages.map((m) => ({ ...m, flags: flags.get(m.id) ?? [] })) };
    }),
});
