/**
 * Reading bulk jobs: one job with its counts per outcome (from the deliveries of its messages), its batches and
 * the next batch time; the account's jobs, newest first; the job's own outcome figures the breaker reads.
 */
import type { BulkJob } from '@boxes/db';
import type { BoxScope } from '../boxes/boxes';
import type { Services } from '../shared/context';
import { poolRows, sql, tbl, type DbClient } from '@boxes/db';
import { AppError } from '../shared/errors';
import { BULK_STATUSES, DELIVERY_STATUSES, FINAL_BULK_STATUSES, type BulkStatus, type DeliveryStatus } from '@boxes/schemas';
import { narrowStatus, statusIn, statusLit } from '../shared/statuses';

export type { BulkStatus };
export const FINISHED_BULK: readonly string[] = FINAL_BULK_STATUSES;

export interface BulkOutcomes {
  recipients: number;
  pending: number;
  delivered: number;
  deferred: number;
  bounced: number;
  failed: number;
  suppressed: number;
  complaints: number;
  /** Recipients an attempt was made for (delivered, bounced, deferred, or failed after trying). */
  attempted: number;
  /** The highest batch that started (-1: none). */
  lastStartedBatch: number;
}

/**
 * The job's outcomes so far, in one round trip. The deliveries of the job's started messages are counted in one
 * pass (a count per outcome with FILTER): the breaker reads this after every flush of a batch in flight, so its
 * cost grows with the part of the job already started. Outside a transaction it runs on the pg pool (poolRows:
 * the same values, without Prisma's client around a statement read after every flush).
 */
export async function bulkOutcomes(db: DbClient, jobId: string): Promise<BulkOutcomes> {
  return outcomesOf(await poolRows(db, bulkOutcomesStatement(jobId)));
}

export function bulkOutcomesStatement(jobId: string) {
  const [i, d, sp, j] = [tbl('bulk_job_items'), tbl('deliveries', 'd'), tbl('suppressions', 's'), tbl('bulk_jobs', 'j')];
  const is = (v: DeliveryStatus) => statusLit(DELIVERY_STATUSES, v);
  return sql<OutcomeCounts>`
    WITH msgs AS (SELECT ${i.message_id}, ${i.suppressed}, ${i.batch} FROM ${i.$} WHERE ${i.job_id} = ${jobId} AND ${i.started_at} IS NOT NULL)
    SELECT c.*, m.suppressed, m.last_batch,
      (SELECT count(*) FROM ${sp.$} JOIN ${j.$} ON ${j.account_id} = ${sp.account_id}
        WHERE ${j.id} = ${jobId} AND ${sp.reason} = 'complaint' AND ${sp.message_id} IN (SELECT message_id FROM msgs)) AS complaints
    FROM (SELECT
        count(*) FILTER (WHERE ${d.status} IN ${statusIn(DELIVERY_STATUSES, ['bulk', 'queued'])}) AS pending,
        count(*) FILTER (WHERE ${d.status} = ${is('delivered')}) AS delivered,
        count(*) FILTER (WHERE ${d.status} = ${is('deferred')}) AS deferred,
        count(*) FILTER (WHERE ${d.status} = ${is('bounced')}) AS bounced,
        count(*) FILTER (WHERE ${d.status} = ${is('failed')}) AS failed,
        count(*) FILTER (WHERE ${d.attempts} > 0 OR ${d.status} = ${is('bounced')}) AS attempted
      FROM ${d.$} JOIN msgs ON ${d.message_id} = msgs.message_id) c,
      (SELECT sum(suppressed) AS suppressed, max(batch) AS last_batch FROM msgs) m`;
}

interface OutcomeCounts {
  pending: bigint;
  delivered: bigint;
  deferred: bigint;
  bounced: bigint;
  failed: bigint;
  attempted: bigint;
  suppressed: bigint | null;
  complaints: bigint;
  last_batch: number | null;
}

function outcomesOf(rows: OutcomeCounts[]): BulkOutcomes {
  const r = rows[0]!;
  const n = (x: bigint | null) => Number(x ?? 0n);
  const out = {
    pending: n(r.pending),
    delivered: n(r.delivered),
    deferred: n(r.deferred),
    bounced: n(r.bounced),
    failed: n(r.failed),
    suppressed: n(r.suppressed),
    complaints: n(r.complaints),
    attempted: n(r.attempted),
  };
  return { ...out, recipients: out.pending + out.delivered + out.deferred + out.bounced + out.failed + out.suppressed, lastStartedBatch: r.last_batch ?? -1 };
}

export const rate = (part: number, whole: number): number => (whole > 0 ? Math.round((part / whole) * 10_000) / 10_000 : 0);

export interface BulkJobView {
  id: string;
  status: BulkStatus;
  batch_size: number;
  cool_off_seconds: number;
  max_bounce_rate: number;
  max_complaint_rate: number;
  batches_total: number;
  batches_completed: number;
  batches: {
    index: number;
    messages: number;
    status: 'pending' | 'sending' | 'completed' | 'stopped' | 'skipped';
    started_at: string | null;
    completed_at: string | null;
  }[];
  next_batch_at: string | null;
  counts: Omit<BulkOutcomes, 'attempted' | 'lastStartedBatch'> & { messages: number };
  bounce_rate: number;
  complaint_rate: number;
  halted: ({ reason: 'bounce_rate' | 'complaint_rate' | 'insufficient_credit'; message: string; at: string } & Record<string, unknown>) | null;
  box_ids: string[];
  idempotency_key: string | null;
  created_at: string;
  finished_at: string | null;
  idempotent_replay?: boolean;
}

interface LogEntry {
  index: number;
  started_at: string | null;
  completed_at: string | null;
}

function toView(job: BulkJob, o: BulkOutcomes): BulkJobView {
  const log = new Map(((job.batchLog as unknown as LogEntry[]) ?? []).map((e) => [e.index, e]));
  const finished = FINISHED_BULK.includes(job.status);
  const batches = Array.from({ length: job.batchCount }, (_, index) => {
    const messages = Math.min(job.batchSize, job.messageCount - index * job.batchSize);
    const done = log.get(index);
    if (index < job.batchesDone)
      return { index, messages, status: 'completed' as const, started_at: done?.started_at ?? null, completed_at: done?.completed_at ?? null };
    if (index === job.batchesDone && job.status === 'sending')
      return { index, messages, status: 'sending' as const, started_at: job.nextBatchAt?.toISOString() ?? null, completed_at: null };
    // Halted or cancelled while this batch was going out: part of it was sent.
    if (index === job.batchesDone && finished && index <= o.lastStartedBatch)
      return { index, messages, status: 'stopped' as const, started_at: null, completed_at: null };
    return { index, messages, status: finished ? ('skipped' as const) : ('pending' as const), started_at: null, completed_at: null };
  });
  const { attempted, lastStartedBatch: _last, ...counts } = o;
  return {
    id: job.id,
    status: narrowStatus(BULK_STATUSES, job.status),
    batch_size: job.batchSize,
    cool_off_seconds: job.coolOffSeconds,
    max_bounce_rate: job.maxBounceRate,
    max_complaint_rate: job.maxComplaintRate,
    batches_total: job.batchCount,
    batches_completed: job.batchesDone,
    batches,
    next_batch_at: job.status === 'queued' || job.status === 'cooling_off' ? (job.nextBatchAt?.toISOString() ?? null) : null,
    counts: { messages: job.messageCount, ...counts },
    bounce_rate: rate(o.bounced, attempted),
    complaint_rate: rate(o.complaints, attempted),
    halted:
      job.status === 'halted' && job.haltReason
        ? ({ ...((job.haltDetail as Record<string, unknown>) ?? {}), reason: job.haltReason } as BulkJobView['halted'])
        : null,
    box_ids: job.boxIds,
    idempotency_key: job.idempotencyKey,
    created_at: job.createdAt.toISOString(),
    finished_at: job.finishedAt?.toISOString() ?? null,
  };
}

/** A box-restricted key sees a job only when it holds every box the job sends from. */
const visible = (scope: BoxScope, job: Pick<BulkJob, 'boxIds'>) => scope === null || job.boxIds.every((b) => scope.includes(b));

export async function bulkJobView(svc: Services, input: { accountId: string; id: string; scope: BoxScope }): Promise<BulkJobView> {
  const job = await svc.db.bulkJob.findFirst({ where: { id: input.id, accountId: input.accountId } });
  if (!job || !visible(input.scope, job)) throw new AppError('not_found', `bulk job ${input.id} not found`);
  return toView(job, await bulkOutcomes(svc.db, job.id));
}

export async function listBulkJobs(
  svc: Services,
  input: { accountId: string; scope: BoxScope; status?: BulkStatus | undefined; limit: number; cursor?: string | undefined },
): Promise<{ jobs: BulkJobView[]; next_cursor: string | null }> {
  let before: { createdAt: Date; id: string } | null = null;
  if (input.cursor) {
    const m = /^(\d+)\.(bulk_[0-9a-z]{20})$/.exec(input.cursor);
    if (!m) throw new AppError('invalid_cursor', 'cursor: not a next_cursor of this list');
    before = { createdAt: new Date(Number(m[1])), id: m[2]! };
  }
  const rows = await svc.db.bulkJob.findMany({
    where: {
      accountId: input.accountId,
      ...(input.status ? { status: input.status } : {}),
      ...(before ? { OR: [{ createdAt: { lt: before.createdAt } }, { createdAt: before.createdAt, id: { lt: before.id } }] } : {}),
    },
    orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
    take: input.limit + 1,
  });
  const page = rows.slice(0, input.limit);
  const jobs = [];
  for (const job of page) if (visible(input.scope, job)) jobs.push(toView(job, await bulkOutcomes(svc.db, job.id)));
  const last = page[page.length - 1];
  return { jobs, next_cursor: rows.length > input.limit && last ? `${last.createdAt.getTime()}.${last.id}` : null };
}
