/** Bulk send jobs: create, read, list, cancel (core/bulk). */
import { bulkJobView, cancelBulkJob, createBulkJob, listBulkJobs } from '@boxes/core';
import { BulkJob, BulkJobIdInput, BulkSendInput, ListBulkJobsInput, ListBulkJobsOutput } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

export const bulkRouter = router({
  send: keyProcedure
    .meta({
      errors: [
        'account_paused',
        'box_paused',
        'box_restricted_key',
        'cap_exceeded',
        'domain_not_verified',
        'from_domain_mismatch',
        'idempotency_key_reused',
        'not_found',
        'payment_required',
        'recipient_blocked',
        'review_required',
        'too_many_bulk_jobs',
      ],
      scope: 'send',
      openapi: {
        method: 'POST',
        path: '/messages/send/bulk',
        tags: ['messages'],
        summary: 'Send many messages as a bulk job',
        description:
          'Up to 5,000 messages, each with the fields of POST /messages/send (idempotency_key excepted: the job has its own). Every message is validated first: one bad message rejects the job with 400 naming messages.<index>.<field>, and nothing is queued. The credit for every message is checked now (402 with top-up guidance when short) and reserved batch by batch. Batches of batch_size (at most BULK_MAX_BATCH_SIZE, default 1000) go out one after another with cool_off_seconds between them (default 600, also the instance floor BULK_MIN_COOL_OFF_SECONDS). An account runs at most BULK_MAX_ACTIVE_JOBS jobs at once (default 3): one more is 409 too_many_bulk_jobs. A circuit breaker halts the job when its own bounces pass max_bounce_rate (default 0.02) or its complaints max_complaint_rate (default 0.005) of its attempted recipients. Events: bulk.queued, bulk.batch_completed, bulk.completed, bulk.halted, bulk.cancelled; bounced and failed recipients also get mail.bounced and mail.failed (delivered ones are counted in bulk.batch_completed instead of one mail.sent and mail.delivered each). Owner review: a job is never held; 403 review_required when a sending box or the key has the review policy all, or new_recipients and a message names an address its box never wrote to nor heard from (nothing is queued).',
      },
    })
    .input(BulkSendInput)
    .output(BulkJob)
    .mutation(({ ctx, input }) => createBulkJob(ctx.svc, { account: ctx.account, key: ctx.key, boxScope: ctx.boxScope }, input)),
  list: keyProcedure
    .meta({
      errors: ['invalid_cursor'],
      scope: 'send',
      openapi: {
        method: 'GET',
        path: '/messages/send/bulk',
        tags: ['messages'],
        summary: 'List bulk jobs',
        description: 'Newest first. A box-restricted key sees the jobs that send only from its boxes.',
      },
    })
    .input(ListBulkJobsInput)
    .output(ListBulkJobsOutput)
    .query(({ ctx, input }) => listBulkJobs(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, ...input })),
  get: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'send',
      openapi: {
        method: 'GET',
        path: '/messages/send/bulk/{id}',
        tags: ['messages'],
        summary: 'Read a bulk job',
        description: 'Status, counts per outcome (per recipient), the batches, the next batch time and, when halted, why.',
      },
    })
    .input(BulkJobIdInput)
    .output(BulkJob)
    .query(({ ctx, input }) => bulkJobView(ctx.svc, { accountId: ctx.account.id, id: input.id, scope: ctx.boxScope })),
  cancel: keyProcedure
    .meta({
      errors: ['conflict', 'not_found'],
      scope: 'send',
      openapi: {
        method: 'POST',
        path: '/messages/send/bulk/{id}/cancel',
        tags: ['messages'],
        summary: 'Cancel a bulk job',
        description:
          'No further batch starts; a batch going out stops within moments, and its messages not yet handed over are not sent (their holds are released). Cancelling a cancelled job answers it again; a completed or halted job is 409 conflict.',
      },
    })
    .input(BulkJobIdInput)
    .output(BulkJob)
    .mutation(({ ctx, input }) => cancelBulkJob(ctx.svc, { accountId: ctx.account.id, id: input.id, scope: ctx.boxScope, keyId: ctx.key.id })),
});
