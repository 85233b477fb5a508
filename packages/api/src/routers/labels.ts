/** Labels: the IMAP flags and keywords of messages, as an agent triages with them. */
import { listLabels } from '@boxes/core';
import { LABEL_RULES, ListLabelsInput, ListLabelsOutput } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

export const labelsRouter = router({
  list: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'receive',
      openapi: {
        method: 'GET',
        path: '/labels',
        tags: ['messages'],
        summary: 'List labels with their counts',
        description: `Every system label (unread, flagged, answered, draft, spam, sent) and every label of your own in use, with how many messages carry it; box narrows to one box. A box-restricted key counts only its boxes. Filter with GET /messages?label= or GET /threads?label=; change with POST /messages/{id}/labels or /threads/{id}/labels. ${LABEL_RULES}`,
      },
    })
    .input(ListLabelsInput)
    .output(ListLabelsOutput)
    .query(({ ctx, input }) => listLabels(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, box: input.box })),
});
