/** Conversations: threads of messages joined by In-Reply-To and References. */
import { changeLabels, getThread, listThreads } from '@boxes/core';
import { GetThreadInput, LABEL_RULES, ListThreadsInput, ListThreadsOutput, ThreadDetail, ThreadLabelsInput, ThreadLabelsOutput } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';
import { withLabels } from './messages';

export const threadsRouter = router({
  list: keyProcedure
    .meta({
      errors: ['invalid_cursor', 'invalid_label', 'not_found'],
      scope: 'receive',
      openapi: {
        method: 'GET',
        path: '/threads',
        tags: ['threads'],
        summary: 'List conversations',
        description:
          "Threads, newest activity first. Every message has a thread_id: a message that answers another (In-Reply-To, then References, matched against the Message-IDs of this account's mail) joins its thread; any other starts one. box narrows to the messages of one box; label=<label> keeps the threads with a message carrying it (label=unread: threads with unread mail). labels are those of the thread's messages together. A box-restricted key sees only the messages of its boxes.",
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
      return { ...t, messages: await withLabels(ctx.svc, t.messages) };
    }),
  labels: keyProcedure
    .meta({
      errors: ['invalid_label', 'label_conflict', 'label_read_only', 'not_found', 'too_many_labels'],
      scope: 'receive',
      openapi: {
        method: 'POST',
        path: '/threads/{id}/labels',
        tags: ['threads'],
        summary: 'Add or remove labels on a conversation',
        description: `The same as POST /messages/{id}/labels for every message of the thread the key sees ({"add": ["invoices"], "remove": ["unread"]} files a conversation and marks it read), in one transaction; message.labels_changed is appended for each message that changed. ${LABEL_RULES}`,
      },
    })
    .input(ThreadLabelsInput)
    .output(ThreadLabelsOutput)
    .mutation(async ({ ctx, input }) => {
      const r = await changeLabels(ctx.svc, {
        accountId: ctx.account.id,
        scope: ctx.boxScope,
        target: { threadId: input.id },
        add: input.add ?? [],
        remove: input.remove ?? [],
        actor: { via: 'api', keyId: ctx.key.id },
      });
      return { id: input.id, messages: r.messages, changed: r.messages.filter((m) => m.added.length || m.removed.length).length };
    }),
});
