/**
 * POST /messages/send/bulk: every message is planned by the planner of single sends (messages/plan.ts:
 * validation, sender, block lists, thread, configuration set, sealed body) before anything is stored; a message a
 * single send would refuse rejects the whole job with the same code, naming messages.<index>(.<field>). The credit
 * for the whole job is checked now (per message, as single sends price them) and reserved batch by batch when
 * each batch starts (run.ts). The job, its messages (bulk_job_items) and bulk.queued are written in one
 * transaction; then the first batch is enqueued.
 */
import canonicalize from 'canonicalize';
import type { z } from 'zod';
import { exec, k, rows, sql, type ApiKey, type Account, type DB, type Insertable } from '@boxes/db';
import { BULK_STATUSES, type BulkSendInput } from '@boxes/schemas';
import { columns, recordsetInsert } from '../store/rows';
import { statusLit } from '../shared/statuses';
import type { BoxScope } from '../boxes/boxes';
import { lockAccountCredit, paymentRequired, planReservation, type LockedAccount } from '../credit/ledger';
import { microsToUsd } from '../credit/prices';
import { appendEvent } from '../events/append';
import { parseMailbox } from '../messages/addresses';
import { checkMessage, loadSendState, planMessage, type MessagePlan } from '../messages/plan';
import { assertBulkNeedsNoReview } from '../reviews/reviews';
import type { Services } from '../shared/context';
import { sha256Hex } from '../shared/crypto';
import { AppError, invalidField, isUniqueViolation } from '../shared/errors';
import { newId } from '../shared/ids';
import { bulkJobView, type BulkJobView } from './view';
import { guardSend } from '../guard/pause';

type Input = z.infer<typeof BulkSendInput>;

export interface BulkCaller {
  account: Account;
  key: ApiKey;
  boxScope: BoxScope;
}

/** An AppError about one message, its paths moved under messages.<index>. */
function atIndex(err: unknown, index: number): unknown {
  if (!(err instanceof AppError)) return err;
  const prefix = `messages.${index}`;
  const fields = Array.isArray(err.details.fields) ? (err.details.fields as { path: string; message: string }[]) : [];
  // "to.2: not an email address" becomes "messages.3.to.2: ..."; a message that names no field gets "messages.3: ".
  const named = fields.some((f) => err.message.startsWith(`${f.path}:`));
  return new AppError(err.code, named ? `${prefix}.${err.message}` : `${prefix}: ${err.message}`, {
    ...err.details,
    index,
    ...(fields.length ? { fields: fields.map((f) => ({ ...f, path: `${prefix}.${f.path}` })) } : {}),
  });
}

const invalid = invalidField;

/** Runs one message's step, its error moved under messages.<index>. */
function atEach<T>(index: number, step: () => T): T {
  try {
    return step();
  } catch (err) {
    throw atIndex(err, index);
  }
}

/** A planned message as the job stores it until its batch starts (bulk/run.ts writes the message then). */
/** The columns of a job's items (bulk_job_items) the job writes. */
const ITEM_COLUMNS = columns<'bulk_job_items'>()(
  'job_id',
  'index',
  'batch',
  'message_id',
  'rfc_message_id',
  'thread_id',
  'box_id',
  'from_address',
  'to_addresses',
  'cc_addresses',
  'bcc_addresses',
  'recipients',
  'subject',
  'size_bytes',
  'attachment_bytes',
  'body_enc',
  'context',
  'in_reply_to',
  'references',
);

function itemOf(p: MessagePlan, index: number, batchSize: number): Omit<Insertable<DB['bulk_job_items']>, 'job_id'> {
  return {
    index,
    batch: Math.floor(index / batchSize),
    message_id: p.messageId,
    rfc_message_id: p.rfcMessageId,
    thread_id: p.threadId,
    box_id: p.box.id,
    from_address: p.from,
    to_addresses: p.to,
    cc_addresses: p.cc,
    bcc_addresses: p.bcc,
    // Every distinct recipient: the suppression list is looked at again when the batch starts.
    recipients: p.recipients,
    subject: p.subject,
    size_bytes: p.sizeBytes,
    attachment_bytes: p.attachmentBytes,
    body_enc: p.bodyEnc,
    context: p.context ?? null,
    in_reply_to: p.inReplyTo,
    references: p.references,
  };
}

/**
 * What reserving every message of the job would hold, message by message as the batches will reserve them (free
 * allowance first); 402 with the top-up guidance when the credit does not cover the whole job.
 */
export function planJobCredit(svc: Services, a: LockedAccount, messages: { recipients: number; attachmentBytes: number }[], trailer: boolean) {
  let sim: LockedAccount = { ...a };
  let need = 0n;
  let free = 0;
  let count = 0;
  for (const m of messages) {
    if (m.recipients === 0) continue;
    count += m.recipients;
    try {
      const r = planReservation(svc, sim, m.recipients, { attachmentBytes: m.attachmentBytes, trailer });
      sim = { ...sim, held_micros: sim.held_micros + r.heldMicros, held_free_messages: sim.held_free_messages + r.freeUsed };
      need += r.heldMicros;
      free += r.freeUsed;
    } catch (err) {
      if (!(err instanceof AppError) || err.code !== 'payment_required') throw err;
      const spendable = a.balance_micros - a.held_micros;
      throw paymentRequired(
        svc,
        `Not enough credit for this bulk job: its ${messages.length} message(s) go to ${messages.reduce((n, x) => n + x.recipients, 0)} recipient(s), more than the free allowance and the credit cover (${microsToUsd(spendable > 0n ? spendable : 0n)} USD available). Nothing was queued; top up and send the job again.`,
        { ...err.details, scope: 'bulk_job', messages: messages.length },
      );
    }
  }
  return { recipients: count, freeMessages: free, heldMicros: need };
}

export async function createBulkJob(svc: Services, caller: BulkCaller, input: Input): Promise<BulkJobView> {
  const accountId = caller.account.id;
  const { idempotency_key: idemKey, ...request } = input;
  const requestHash = sha256Hex(canonicalize(request) ?? '');
  if (idemKey) {
    const prior = await svc.db.bulkJob.findUnique({ where: { accountId_idempotencyKey: { accountId, idempotencyKey: idemKey } } });
    if (prior) return replay(svc, prior.id, prior.requestHash, requestHash, accountId);
  }

  const cfg = svc.config.bulk;
  const coolOff = input.cool_off_seconds ?? cfg.coolOffSeconds;
  if (coolOff < cfg.minCoolOffSeconds) {
    throw invalid('cool_off_seconds', `at least ${cfg.minCoolOffSeconds} seconds on this instance (the floor; default ${cfg.coolOffSeconds})`);
  }
  if (input.batch_size > cfg.maxBatchSize) {
    throw invalid('batch_size', `at most ${cfg.maxBatchSize} on this instance: the cool-off between batches applies to every job`);
  }
  const maxBounce = input.max_bounce_rate ?? cfg.maxBounceRate;
  const maxComplaint = input.max_complaint_rate ?? cfg.maxComplaintRate;
  if (maxBounce > cfg.maxBounceRate) throw invalid('max_bounce_rate', `at most ${cfg.maxBounceRate} on this instance`);
  if (maxComplaint > cfg.maxComplaintRate) throw invalid('max_complaint_rate', `at most ${cfg.maxComplaintRate} on this instance`);

  const defaultFrom = input.from ? parseMailbox(input.from, 'from') : { name: undefined, address: caller.account.primaryAddress };
  const checked = input.messages.map((m, i) => atEach(i, () => checkMessage(svc.config, m, defaultFrom)));
  const state = await loadSendState(svc, accountId, checked);
  const date = new Date();
  const plans = checked.map((m, i) => atEach(i, () => planMessage(svc, caller, m, state, date)));
  // Owner review holds single sends; a job it would hold is refused whole (reviews/reviews.ts).
  await assertBulkNeedsNoReview(svc, caller.key, plans);

  const jobId = newId('bulk');
  const batchSize = input.batch_size;
  const batchCount = Math.ceil(input.messages.length / batchSize);
  const trailer = caller.account.trailerOptedOutAt === null;
  const items = plans.map((p, i) => itemOf(p, i, batchSize));
  const boxIds = [...new Set(plans.map((p) => p.box.id))];
  // Pauses (403) then caps (429), for the whole job at once: every message counts now, and a job that would go
  // over a cap is refused as a whole (guard/pause.ts).
  const taken = await guardSend(svc, {
    accountId,
    key: caller.key,
    sends: plans.map((p) => ({ boxId: p.box.id, messages: 1, recipients: p.deliverTo })),
  });

  try {
    await svc.db.$transaction(
      async (tx) => {
        const a = await lockAccountCredit(tx, accountId);
        // Counted under the account's lock, so two jobs created at once cannot both take the last place.
        const [active] = await rows(
          tx,
          k
            .selectFrom('bulk_jobs')
            .select(sql<number>`count(*)::int`.as('n'))
            .where('account_id', '=', accountId)
            .where('status', 'in', [statusLit(BULK_STATUSES, 'queued'), statusLit(BULK_STATUSES, 'sending'), statusLit(BULK_STATUSES, 'cooling_off')]),
        );
        if ((active?.n ?? 0) >= cfg.maxActiveJobs) {
          throw new AppError(
            'too_many_bulk_jobs',
            `This account already has ${active?.n} bulk job(s) queued or sending, the most this instance runs at once; nothing was queued. Send this job when one of them completes (or cancel one).`,
            { active_jobs: active?.n, limit: cfg.maxActiveJobs },
          );
        }
        const plan = planJobCredit(
          svc,
          a,
          plans.map((p) => ({ recipients: p.deliverTo.length, attachmentBytes: p.attachmentBytes })),
          trailer,
        );
        await exec(
          tx,
          k.insertInto('bulk_jobs').values({
            id: jobId,
            account_id: accountId,
            status: statusLit(BULK_STATUSES, 'queued'),
            batch_size: batchSize,
            message_count: items.length,
            batch_count: batchCount,
            cool_off_seconds: coolOff,
            max_bounce_rate: maxBounce,
            max_complaint_rate: maxComplaint,
            trailer,
            box_ids: boxIds,
            next_batch_at: date,
            idempotency_key: idemKey ?? null,
            request_hash: requestHash,
            created_at: date,
            updated_at: date,
          }),
        );
        await exec(
          tx,
          recordsetInsert(
            'bulk_job_items',
            ITEM_COLUMNS,
            items.map((i) => ({ ...i, job_id: jobId })),
          ),
        );
        await appendEvent({
          db: tx,
          accountId,
          type: 'bulk.queued',
          data: {
            bulk_job_id: jobId,
            messages: items.length,
            recipients: plan.recipients,
            batch_size: batchSize,
            batches: batchCount,
            cool_off_seconds: coolOff,
            free_messages: plan.freeMessages,
            estimated_usd: microsToUsd(plan.heldMicros),
          },
        });
      },
      { maxWait: 10_000, timeout: 60_000 },
    );
  } catch (err) {
    await taken.refund().catch(() => undefined);
    if (idemKey && isUniqueViolation(err)) {
      const prior = await svc.db.bulkJob.findUnique({ where: { accountId_idempotencyKey: { accountId, idempotencyKey: idemKey } } });
      if (prior) return replay(svc, prior.id, prior.requestHash, requestHash, accountId);
    }
    throw err;
  }
  try {
    await svc.jobs.enqueueBulkBatch(jobId, 0);
  } catch {
    // Committed but not enqueued (Redis away): the worker's bulk sweep enqueues due batches it finds.
  }
  return bulkJobView(svc, { accountId, id: jobId, scope: null });
}

async function replay(svc: Services, id: string, priorHash: string, requestHash: string, accountId: string): Promise<BulkJobView> {
  if (priorHash !== requestHash) {
    throw new AppError(
      'idempotency_key_reused',
      'This idempotency_key was already used for a different bulk job; nothing was queued. Use a new key for a new job.',
      { bulk_job_id: id },
    );
  }
  return { ...(await bulkJobView(svc, { accountId, id, scope: null })), idempotent_replay: true };
}
