/** POST /messages/send/bulk/{id}/cancel: no further batch starts; a batch in flight stops at its next flush. */
import type { Tx } from '@boxes/db';
import { exec, k, rows, sql, tbl } from '@boxes/db';
import type { BoxScope } from '../boxes/boxes';
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';
import { AppError } from '../shared/errors';
import { releaseUnsent } from './run';
import { bulkJobView, type BulkJobView } from './view';
import { BULK_STATUSES } from '@boxes/schemas';
import { narrowStatus, statusIn, statusLit } from '../shared/statuses';

/** What cancelling writes: no further batch, finished now. */
const cancelled = {
  status: statusLit(BULK_STATUSES, 'cancelled'),
  finished_at: sql<Date>`now()`,
  next_batch_at: null,
  updated_at: sql<Date>`now()`,
};

export async function cancelBulkJob(svc: Services, input: { accountId: string; id: string; scope: BoxScope; keyId: string }): Promise<BulkJobView> {
  const before = await bulkJobView(svc, { accountId: input.accountId, id: input.id, scope: input.scope });
  if (before.status === 'cancelled') return before;
  if (before.status === 'completed' || before.status === 'halted') {
    throw new AppError('conflict', `This bulk job is ${before.status}; there is nothing left to cancel.`, { bulk_job_id: input.id, status: before.status });
  }
  const wasSending = await svc.db.$transaction(async (tx) => {
    const [locked] = await rows(tx, k.selectFrom('bulk_jobs').select('status').where('id', '=', input.id).forUpdate());
    const status = locked ? narrowStatus(BULK_STATUSES, locked.status) : undefined;
    if (!status || !['queued', 'sending', 'cooling_off'].includes(status)) return null;
    await exec(tx, k.updateTable('bulk_jobs').set(cancelled).where('id', '=', input.id));
    await appendEvent({
      db: tx,
      accountId: input.accountId,
      type: 'bulk.cancelled',
      data: { bulk_job_id: input.id, batches_completed: before.batches_completed, batches_total: before.batches_total, cancelled_by_key: input.keyId },
    });
    return status === 'sending';
  });
  // A batch in flight releases what it did not send itself (it may be handing a message over right now).
  if (wasSending === false) await releaseUnsent(svc, input.id, 'not sent: the bulk job was cancelled');
  return bulkJobView(svc, { accountId: input.accountId, id: input.id, scope: input.scope });
}

/**
 * The account is closing: its unfinished bulk jobs are cancelled, each with bulk.cancelled (the caller fails the
 * deliveries still waiting for a batch, holds released).
 */
export async function stopBulkJobs(tx: Tx, accountId: string): Promise<number> {
  const jobs = await rows(
    tx,
    k
      .updateTable('bulk_jobs')
      .set(cancelled)
      .where('account_id', '=', accountId)
      .where(sql<boolean>`${tbl('bulk_jobs').status} IN ${statusIn(BULK_STATUSES, ['queued', 'sending', 'cooling_off'])}`)
      .returning(['id', 'batches_done', 'batch_count']),
  );
  for (const j of jobs) {
    await appendEvent({
      db: tx,
      accountId,
      type: 'bulk.cancelled',
      data: { bulk_job_id: j.id, batches_completed: j.batches_done, batches_total: j.batch_count, reason: 'the account is closing' },
    });
  }
  return jobs.length;
}
