/**
 * One batch of a bulk job, run by apps/worker (queue `bulk`). Typed SQL on this hot path (see docs/ARCHITECTURE.md, "Hot paths"):
 *
 * 1. Start: under the account's row lock, reserve the batch's credit (402 rules per message; short credit halts
 *    the job), write its messages and one delivery per recipient not on the suppression list, in one statement.
 *    Remote deliveries get status `bulk` (owned by this batch: the delivery sweeper leaves them alone); local ones
 *    are `queued` and go through the ordinary delivery jobs.
 * 2. Send: each message is composed and DKIM-signed once in memory and handed to the recipient's MX over pooled
 *    SMTP connections, BULK_CONCURRENCY transactions in flight.
 * 3. Record: outcomes are written in groups (FLUSH_SIZE, or every FLUSH_MS): delivered ones charged from their
 *    holds in one claim statement and one ledger write (which also sets the messages' statuses and stores their
 *    signed bytes), bounces through the shared outcome path (suppression, mail.bounced), 4xx handed to the
 *    ordinary retry schedule. Each flush reads the job's status (a cancel stops the batch) and the breaker's
 *    figures (the job's own bounces and complaints).
 * 4. Finish: bulk.batch_completed; the next batch after the cool-off, or bulk.completed.
 *
 * Idempotent: a delivery is sent only while its status is `bulk`, and leaves that status in the flush that
 * records it. A batch run again (a worker restart, BullMQ's at-least-once) sends exactly the deliveries not yet
 * recorded. A worker that is stopped finishes the SMTP transactions in flight, records them and hands the batch
 * back, so a restart sends nothing twice and skips nothing. A process killed outright can leave the outcomes of
 * up to one flush unrecorded; those recipients are sent again when the batch resumes (at least once, as for
 * single sends).
 */
import { exec, k, poolRows, poolTransaction, prismaTx, rows as run, sql, tbl, type SqlClient, type Tx } from '@boxes/db';
import type { SmtpDestination } from '@boxes/mail';
import { deliveryCharge, lockAccountCredit, planReservation, type LockedAccount } from '../credit/ledger';
import { writeBatch, type AccountChange } from '../store/write';
import type { MessageRow } from '../store/rows';
import type { EventDataInput } from '@boxes/schemas';
import { appendEvent } from '../events/append';
import { domainOf } from '../messages/addresses';
import { describeStored, enqueueAttachmentText } from '../messages/attachments';
import { openBody, type StoredBody } from '../messages/body';
import { composableOf, composeSigned, type DeliveryDeps, type DeliveryMessageRow } from '../messages/deliver';
import { searchBodyText } from '../search/vector';
import { markBounced, markDeferred, markFailed, messageStatusAndRawUpdate, rawsUpdate, refreshMessageStatuses, sealRaws } from '../messages/outcomes';
import { bounceAddress } from '../messages/receive';
import { sendingSource, type DeliverySendingIp } from '../sending-ips/sending-ips';
import type { Services } from '../shared/context';
import { open } from '../shared/crypto';
import { AppError } from '../shared/errors';
import { newId } from '../shared/ids';
import { isServiceUnavailable } from '../shared/unavailable';
import { BULK_PAUSE_POLL_MS, bulkHeldByPause } from '../guard/pause';
import { bulkOutcomes, FINISHED_BULK, rate, type BulkOutcomes } from './view';
import { BULK_STATUSES, type BulkStatus, DELIVERY_STATUSES, FINAL_DELIVERY_STATUSES, type DeliveryStatus, type MessageStatus } from '@boxes/schemas';
import { narrowStatus, statusIn, statusLit } from '../shared/statuses';

/** A delivery status as a checked literal. */
const dlv = (v: DeliveryStatus) => statusLit(DELIVERY_STATUSES, v);

export interface BulkDeps extends DeliveryDeps {
  /** SMTP transactions in flight. */
  concurrency: number;
}

/** done: nothing more for this queue job. later: hand the batch back, due after delayMs (a worker stopping). */
export type BatchResult = { kind: 'done' } | { kind: 'later'; delayMs: number };

const FLUSH_SIZE = 250;
const FLUSH_MS = 200;
/** The breaker looks at a batch in flight once this many of the job's recipients were attempted. */
export const BREAKER_MIN_SAMPLE = 100;
const TX = { maxWait: 10_000, timeout: 60_000 };
/**
 * How long a flush is tried again while the database is unreachable. Its outcomes hold remote 250s: a batch handed
 * back unrecorded would send those messages again when it resumes. Sending waits meanwhile (at most two flushes
 * are ever unrecorded), and a worker that stops gives up at once.
 */
const RECORD_OUTAGE_MS = 5 * 60_000;

interface JobRow {
  id: string;
  account_id: string;
  status: string;
  batch_size: number;
  batch_count: number;
  batches_done: number;
  cool_off_seconds: number;
  max_bounce_rate: number;
  max_complaint_rate: number;
  trailer: boolean;
  next_batch_at: Date | null;
}

async function loadJob(db: Services['db'] | Tx, id: string, lock = false): Promise<JobRow | null> {
  const q = k
    .selectFrom('bulk_jobs')
    .select([
      'id',
      'account_id',
      'status',
      'batch_size',
      'batch_count',
      'batches_done',
      'cool_off_seconds',
      'max_bounce_rate',
      'max_complaint_rate',
      'trailer',
      'next_batch_at',
    ])
    .where('id', '=', id);
  const found: JobRow[] = await run(db, lock ? q.forUpdate() : q);
  return found[0] ?? null;
}

type Trip = { reason: 'bounce_rate' | 'complaint_rate'; message: string; figures: HaltFigures };
/** What a halt reports beside its reason and message (bulk.halted in the event catalogue). */
type Halted = EventDataInput<'bulk.halted'>;
type HaltFigures = Omit<Halted, 'bulk_job_id' | 'reason' | 'message' | 'batches_completed' | 'batches_total'>;

/** The circuit breaker: the job's own bounces or complaints over its limits (strictly above). */
export function breaker(job: Pick<JobRow, 'max_bounce_rate' | 'max_complaint_rate'>, o: BulkOutcomes): Trip | null {
  if (o.attempted === 0) return null;
  const figures = {
    attempted: o.attempted,
    bounced: o.bounced,
    complaints: o.complaints,
    bounce_rate: rate(o.bounced, o.attempted),
    complaint_rate: rate(o.complaints, o.attempted),
  };
  if (o.bounced / o.attempted > job.max_bounce_rate) {
    return {
      reason: 'bounce_rate',
      message: `Halted: ${o.bounced} of ${o.attempted} attempted recipients bounced (${(figures.bounce_rate * 100).toFixed(2)}%), above this job's limit of ${(job.max_bounce_rate * 100).toFixed(2)}%. Clean the list (bounced addresses are on the suppression list now) and send the rest as a new job.`,
      figures: { ...figures, max_bounce_rate: job.max_bounce_rate },
    };
  }
  if (o.complaints / o.attempted > job.max_complaint_rate) {
    return {
      reason: 'complaint_rate',
      message: `Halted: ${o.complaints} of ${o.attempted} attempted recipients complained (${(figures.complaint_rate * 100).toFixed(2)}%), above this job's limit of ${(job.max_complaint_rate * 100).toFixed(2)}%. Send only to people who asked for this mail.`,
      figures: { ...figures, max_complaint_rate: job.max_complaint_rate },
    };
  }
  return null;
}

/** Halts the job (once) and appends bulk.halted; the caller releases what was not sent. */
async function halt(
  tx: Tx,
  job: Pick<JobRow, 'id' | 'account_id' | 'batches_done' | 'batch_count'>,
  reason: Halted['reason'],
  message: string,
  figures: HaltFigures,
): Promise<boolean> {
  const at = new Date().toISOString();
  const n = await exec(
    tx,
    k
      .updateTable('bulk_jobs')
      .set({
        status: statusLit(BULK_STATUSES, 'halted'),
        halt_reason: reason,
        halt_detail: sql`${JSON.stringify({ message, at, ...figures })}::jsonb`,
        finished_at: sql`now()`,
        next_batch_at: null,
        updated_at: sql`now()`,
      })
      .where('id', '=', job.id)
      .where('status', 'not in', [...FINISHED_BULK]),
  );
  if (n !== 1) return false;
  await appendEvent({
    db: tx,
    accountId: job.account_id,
    type: 'bulk.halted',
    data: { bulk_job_id: job.id, reason, message, batches_completed: job.batches_done, batches_total: job.batch_count, ...figures },
  });
  return true;
}

/**
 * Deliveries of the job still waiting for its sender (the job was cancelled or halted mid-batch): failed, holds
 * released, in one transaction. Idempotent.
 */
export async function releaseUnsent(svc: Services, jobId: string, why: string): Promise<number> {
  return svc.db.$transaction(async (tx) => {
    const [set, d, i] = [tbl('deliveries'), tbl('deliveries', 'd'), tbl('bulk_job_items', 'i')];
    const rows = await run(
      tx,
      sql<{ account_id: string | null; held: bigint | null; free: bigint; messages: string[] | null; n: bigint }>`
      WITH rel AS (
        UPDATE ${d.$} SET ${set.status} = ${dlv('failed')}, ${set.last_error} = ${why}, ${set.settled_at} = now(), ${set.next_attempt_at} = NULL, ${set.updated_at} = now()
        FROM ${i.$}
        WHERE ${i.job_id} = ${jobId} AND ${d.message_id} = ${i.message_id} AND ${d.status} = ${dlv('bulk')} AND ${d.settled_at} IS NULL
        RETURNING ${sql.join([d.account_id, d.held_micros, d.used_free, d.message_id])}
      )
      SELECT min(account_id) AS account_id, sum(held_micros)::bigint AS held, count(*) FILTER (WHERE used_free) AS free,
        array_agg(DISTINCT message_id) AS messages, count(*) AS n FROM rel`,
    );
    const r = rows[0]!;
    if (!r.account_id || Number(r.n) === 0) return 0;
    await lockAccountCredit(tx, r.account_id);
    await exec(
      tx,
      k
        .updateTable('accounts')
        .set((eb) => ({ held_micros: eb('held_micros', '-', r.held ?? 0n), held_free_messages: eb('held_free_messages', '-', Number(r.free)) }))
        .where('id', '=', r.account_id),
    );
    await refreshMessageStatuses(tx, r.messages ?? []);
    return Number(r.n);
  }, TX);
}

/**
 * What the writer derives from a batch message's sealed body: its search text, and its attachments' rows. A body
 * without attachments is kept in opened (by message id) for composing the message, which then need not open it again.
 */
function stored(
  svc: Services,
  messageId: string,
  bodyEnc: string,
  withFiles: boolean,
  opened: Map<string, StoredBody>,
): Pick<MessageRow, 'attachments' | 'search_text'> {
  const body = openBody(svc.secretKey, bodyEnc);
  if (!body.attachments.length) opened.set(messageId, body);
  return { search_text: searchBodyText(body), attachments: withFiles ? describeStored(body.attachments) : undefined };
}

/** A message of a batch as its job stored it (bulk_job_items), before it starts. */
interface BatchItem {
  index: number;
  message_id: string;
  recipients: string[];
  attachment_bytes: number;
  box_id: string | null;
  rfc_message_id: string;
  in_reply_to: string | null;
  references: string[];
  from_address: string | null;
  to_addresses: string[];
  cc_addresses: string[];
  bcc_addresses: string[];
  subject: string | null;
  size_bytes: number;
  body_enc: string | null;
  context: unknown;
  thread_id: string;
}

/**
 * Starts the batch: reserves its credit and writes its messages and deliveries (only for messages not started yet,
 * so a repeated start does nothing). Returns the local deliveries to enqueue, or null when the job stopped.
 */
async function startBatch(
  svc: Services,
  jobId: string,
  batch: number,
): Promise<{ local: string[]; attachmentIds?: string[]; bodies?: Map<string, StoredBody> } | null> {
  return svc.db.$transaction(async (tx) => {
    const job = await loadJob(tx, jobId, true);
    if (!job || FINISHED_BULK.includes(job.status) || job.batches_done !== batch) return null;
    const a = await lockAccountCredit(tx, job.account_id);
    const items: BatchItem[] = await run(
      tx,
      k
        .selectFrom('bulk_job_items')
        .select([
          'index',
          'message_id',
          'recipients',
          'attachment_bytes',
          'box_id',
          'rfc_message_id',
          'in_reply_to',
          'references',
          'from_address',
          'to_addresses',
          'cc_addresses',
          'bcc_addresses',
          'subject',
          'size_bytes',
          'body_enc',
          'context',
          'thread_id',
        ])
        .where('job_id', '=', jobId)
        .where('batch', '=', batch)
        .where('started_at', 'is', null)
        .orderBy('index'),
    );
    if (!items.length) {
      const sending = statusLit(BULK_STATUSES, 'sending');
      await exec(tx, k.updateTable('bulk_jobs').set({ status: sending, updated_at: sql`now()` }).where('id', '=', jobId).where('status', '<>', sending));
      return { local: [] };
    }
    const all = [...new Set(items.flatMap((i) => i.recipients))];
    const domains = [...new Set(all.map(domainOf))];
    const [sup, dom] = [tbl('suppressions'), tbl('domains')];
    const [ctx] = await run(
      tx,
      sql<{ suppressed: string[] | null; hosted: string[] | null }>`
      SELECT (SELECT array_agg(${sup.address}) FROM ${sup.$} WHERE ${sup.account_id} = ${job.account_id} AND ${sup.address} = ANY(${all}::text[])) AS suppressed,
        (SELECT array_agg(${dom.live_name}) FROM ${dom.$} WHERE ${dom.live_name} = ANY(${domains}::text[])) AS hosted`,
    );
    const suppressed = new Set(ctx?.suppressed ?? []);
    const hosted = new Set(ctx?.hosted ?? []);

    let sim: LockedAccount = { ...a };
    let held = 0n;
    let free = 0;
    const deliveries: {
      id: string;
      message_id: string;
      recipient: string;
      route: string;
      status: DeliveryStatus;
      held_micros: bigint;
      used_free: boolean;
      attachment_micros: bigint;
      surcharge_micros: bigint;
    }[] = [];
    const marks: { index: number; suppressed: number; status: MessageStatus }[] = [];
    for (const item of items) {
      const recipients = item.recipients.filter((r) => !suppressed.has(r));
      marks.push({ index: item.index, suppressed: item.recipients.length - recipients.length, status: recipients.length ? 'queued' : 'suppressed' });
      if (!recipients.length) continue;
      let r: ReturnType<typeof planReservation>;
      try {
        r = planReservation(svc, sim, recipients.length, { attachmentBytes: item.attachment_bytes, trailer: job.trailer });
      } catch (err) {
        if (!(err instanceof AppError) || err.code !== 'payment_required') throw err;
        // The credit was checked for the whole job when it was accepted; it was spent elsewhere since.
        await halt(
          tx,
          job,
          'insufficient_credit',
          `Halted before batch ${batch}: ${err.message.replace(/ Nothing was sent\.$/, '')}. Top up, then send the remaining messages as a new job.`,
          {
            top_up: err.details.top_up as Record<string, unknown>,
            required_usd: err.details.required_usd as string,
            available_usd: err.details.available_usd as string,
          },
        );
        return null;
      }
      sim = { ...sim, held_micros: sim.held_micros + r.heldMicros, held_free_messages: sim.held_free_messages + r.freeUsed };
      held += r.heldMicros;
      free += r.freeUsed;
      recipients.forEach((recipient, k) => {
        const hold = r.perRecipient[k]!;
        const local = hosted.has(domainOf(recipient));
        deliveries.push({
          id: newId('dlv'),
          message_id: item.message_id,
          recipient,
          route: local ? 'local' : 'remote',
          status: local ? 'queued' : 'bulk',
          held_micros: hold.micros,
          used_free: hold.free,
          attachment_micros: hold.attachmentMicros,
          surcharge_micros: hold.surchargeMicros,
        });
      });
    }
    // One statement (store/write.ts): the holds, the messages (their sealed bodies move from the items), the
    // deliveries, the items marked started and the job sending. Every CTE reads the rows as they were before it.
    const status = new Map(marks.map((m) => [m.index, m.status]));
    const bodies = new Map<string, StoredBody>();
    const messages: MessageRow[] = items.map((i) => ({
      id: i.message_id,
      account_id: job.account_id,
      box_id: i.box_id,
      direction: 'sent',
      status: status.get(i.index)!,
      rfc_message_id: i.rfc_message_id,
      in_reply_to: i.in_reply_to,
      references: i.references,
      from_address: i.from_address,
      to_addresses: i.to_addresses,
      cc_addresses: i.cc_addresses,
      bcc_addresses: i.bcc_addresses,
      subject: i.subject,
      size_bytes: i.size_bytes,
      context: i.context,
      thread_id: i.thread_id,
      body_enc: i.body_enc,
      // The messages with attachments get their attachment rows, as every stored message.
      ...(i.body_enc ? stored(svc, i.message_id, i.body_enc, i.attachment_bytes > 0, bodies) : {}),
    }));
    const [items$, i$, jobs$] = [tbl('bulk_job_items'), tbl('bulk_job_items', 'i'), tbl('bulk_jobs')];
    const { attachmentIds } = await writeBatch(svc, tx, {
      locked: new Map([[a.id, a]]),
      changes: [{ accountId: job.account_id, hold: { micros: held, freeMessages: free } }],
      messages,
      deliveries: deliveries.map((d) => ({ ...d, account_id: job.account_id })),
      also: [
        sql`x AS (SELECT * FROM jsonb_to_recordset(${JSON.stringify(marks)}::jsonb) AS x(index int, suppressed int, status text))`,
        sql`itm AS (UPDATE ${i$.$} SET ${items$.started_at} = now(), ${items$.suppressed} = x.suppressed, ${items$.body_enc} = NULL
          FROM x WHERE ${i$.job_id} = ${jobId} AND ${i$.index} = x.index)`,
        sql`job AS (UPDATE ${jobs$.$} SET ${jobs$.status} = 'sending', ${jobs$.next_batch_at} = CASE WHEN ${jobs$.status} = 'sending' THEN ${jobs$.next_batch_at} ELSE now() END,
          ${jobs$.updated_at} = now() WHERE ${jobs$.id} = ${jobId})`,
      ],
    });
    return { local: deliveries.filter((d) => d.status === 'queued').map((d) => d.id), attachmentIds: [...attachmentIds.values()].flat(), bodies };
  }, TX);
}

/** A recipient of the batch still to send: the delivery's row as single deliveries read it, and its attempts. */
interface Pending extends DeliveryMessageRow {
  attempts: number;
}

type Outcome =
  | { kind: 'delivered'; d: Pending; mta: string }
  | { kind: 'bounced'; d: Pending; code: number | null; response: string }
  | { kind: 'deferred'; d: Pending; error: string }
  | { kind: 'failed'; d: Pending; error: string };

export async function runBulkBatch(svc: Services, deps: BulkDeps, input: { bulkJobId: string; batch: number }, signal?: AbortSignal): Promise<BatchResult> {
  const { bulkJobId: jobId, batch } = input;
  const job = await loadJob(svc.db, jobId);
  if (!job) return { kind: 'done' };
  if (FINISHED_BULK.includes(job.status)) {
    await releaseUnsent(svc, jobId, `not sent: the bulk job was ${job.status}`);
    return { kind: 'done' };
  }
  if (job.batches_done !== batch) return { kind: 'done' };
  if (job.status === 'cooling_off' && job.next_batch_at && job.next_batch_at.getTime() > Date.now() + 50) {
    return { kind: 'later', delayMs: job.next_batch_at.getTime() - Date.now() };
  }
  // A paused account or box: the next batch waits until it is resumed (a batch already sending finishes).
  if (await bulkHeldByPause(svc, jobId)) return { kind: 'later', delayMs: BULK_PAUSE_POLL_MS };
  // Bounces and complaints reported after the last batch (DSNs, feedback reports) count before this one starts.
  if (job.status !== 'sending') {
    const trip = breaker(job, await bulkOutcomes(svc.db, jobId));
    if (trip) {
      await svc.db.$transaction((tx) => halt(tx, job, trip.reason, trip.message, trip.figures), TX);
      return { kind: 'done' };
    }
  }
  const started = await startBatch(svc, jobId, batch);
  if (!started) {
    await releaseUnsent(svc, jobId, 'not sent: the bulk job stopped');
    return { kind: 'done' };
  }
  if (started.local.length) await svc.jobs.enqueueDeliveries(started.local).catch(() => undefined);
  await enqueueAttachmentText(svc, started.attachmentIds ?? []);

  // Its rows (a thousand messages' sealed bodies and addresses) come straight from the pg pool: Prisma's client
  // spends several times the statement's own client side reading them (poolRows; the same values).
  const rows: Omit<Pending, 'dkim_selector' | 'dkim_private_key_enc'>[] = await poolRows(
    svc.db,
    k
      .selectFrom('bulk_job_items as i')
      .innerJoin('deliveries as d', 'd.message_id', 'i.message_id')
      .innerJoin('messages as m', 'm.id', 'i.message_id')
      .select([
        'd.id',
        'd.recipient',
        'd.attempts',
        'm.id as message_id',
        'm.raw_enc',
        'm.body_enc',
        'm.from_address',
        'm.to_addresses',
        'm.cc_addresses',
        'm.subject',
        'm.rfc_message_id',
        'm.recorded_at',
      ])
      .where('i.job_id', '=', jobId)
      .where('i.batch', '=', batch)
      .where('d.status', '=', dlv('bulk'))
      .orderBy('i.index')
      .orderBy('d.id'),
  );
  // The sending domains' DKIM keys, read once for the batch rather than with each of its rows (a sealed key is a
  // few KB, and a batch's messages nearly always share one sender): each row then holds the same key string.
  const senderDomain = (from: string | null) => (from === null ? null : (from.split('@')[1] ?? ''));
  const senders = [...new Set(rows.map((r) => senderDomain(r.from_address)).filter((x): x is string => x !== null))];
  const keys = new Map<string, { dkim_selector: string; dkim_private_key_enc: string }>();
  if (senders.length) {
    const found = await poolRows(
      svc.db,
      k.selectFrom('domains').select(['live_name', 'dkim_selector', 'dkim_private_key_enc']).where('live_name', 'in', senders),
    );
    for (const f of found) if (f.live_name !== null) keys.set(f.live_name, f);
  }
  const pending: Pending[] = rows.map((r) => {
    const key = keys.get(senderDomain(r.from_address) ?? '');
    return { ...r, dkim_selector: key?.dkim_selector ?? null, dkim_private_key_enc: key?.dkim_private_key_enc ?? null };
  });

  const sender = new BatchSender(svc, deps, job, signal, started.bodies);
  const stop = await sender.run(pending);
  if (stop === 'interrupted') return { kind: 'later', delayMs: 0 };
  if (stop === 'stopped') {
    await releaseUnsent(svc, jobId, 'not sent: the bulk job was cancelled or halted');
    return { kind: 'done' };
  }
  return finishBatch(svc, jobId, batch);
}

/** Sends the batch's deliveries and records their outcomes in groups. */
class BatchSender {
  private readonly composed = new Map<string, Promise<Buffer>>();
  /** Signed bytes composed and not yet handed to a flush; each goes with the first outcome of its message. */
  private readonly unstored = new Map<string, Buffer>();
  /** Signed bytes of the messages whose outcomes are in the buffer, stored by the next flush with them. */
  private newRaw = new Map<string, Buffer>();
  private readonly destinations = new Map<string, Promise<SmtpDestination[]>>();
  private buffer: Outcome[] = [];
  private flushing: Promise<void> = Promise.resolve();
  private queuedFlushes = 0;
  private stop: null | 'interrupted' | 'stopped' = null;
  private error: unknown = null;
  /** Deliveries not handed to the MX yet; once none are left the breaker waits for the end of the batch. */
  private unsent = 0;
  /** The account's dedicated sending IP (read once per batch), as single sends use it. */
  private sendingIp: Promise<DeliverySendingIp | null> | null = null;

  constructor(
    private readonly svc: Services,
    private readonly deps: BulkDeps,
    private readonly job: JobRow,
    private readonly signal: AbortSignal | undefined,
    /** Bodies startBatch opened (a batch run again opens them when composing), each dropped once composed. */
    private readonly bodies: Map<string, StoredBody> = new Map(),
  ) {}

  async run(pending: Pending[]): Promise<null | 'interrupted' | 'stopped'> {
    let next = 0;
    this.unsent = pending.length;
    const timer = setInterval(() => void this.flush(), FLUSH_MS);
    try {
      await Promise.all(
        Array.from({ length: Math.min(this.deps.concurrency, pending.length) }, async () => {
          while (!this.stop && !this.error && next < pending.length) {
            if (this.signal?.aborted) {
              this.stop = 'interrupted';
              break;
            }
            // Recording keeps up with sending: with one flush running and another waiting, wait for them (so a
            // stop, a cancel or the breaker takes effect within moments, and little is unrecorded at any time).
            if (this.queuedFlushes > 1) {
              await this.flushing;
              continue;
            }
            const d = pending[next++]!;
            this.unsent--;
            // Not this.buffer.push(await ...): that would push into the array a flush took meanwhile.
            const outcome = await this.sendOne(d);
            // The bytes are stored by the flush that records the outcome, in the same write as the message's status.
            const raw = this.unstored.get(d.message_id);
            if (raw) {
              this.newRaw.set(d.message_id, raw);
              this.unstored.delete(d.message_id);
            }
            this.buffer.push(outcome);
            if (this.buffer.length >= FLUSH_SIZE) void this.flush();
          }
        }),
      );
    } finally {
      clearInterval(timer);
    }
    for (const [id, raw] of this.unstored) this.newRaw.set(id, raw);
    this.unstored.clear();
    await this.flush();
    if (this.error) throw this.error;
    return this.stop;
  }

  private flush(): Promise<void> {
    if (!this.buffer.length && !this.newRaw.size) return this.flushing;
    const outcomes = this.buffer;
    const raws = this.newRaw;
    this.buffer = [];
    this.newRaw = new Map();
    this.queuedFlushes++;
    this.flushing = this.flushing.then(async () => {
      try {
        if (!this.error) await this.recordThroughOutage(outcomes, raws);
      } catch (err) {
        this.error = err;
      } finally {
        this.queuedFlushes--;
      }
    });
    return this.flushing;
  }

  private compose(d: Pending): Promise<Buffer> {
    let p = this.composed.get(d.message_id);
    if (!p) {
      if (d.raw_enc) p = Promise.resolve(open(this.svc.secretKey, d.raw_enc));
      else {
        const { message, key } = composableOf(d);
        const body = this.bodies.get(d.message_id);
        this.bodies.delete(d.message_id);
        p = composeSigned(this.svc, message, key, body).then((raw) => {
          this.unstored.set(d.message_id, raw);
          return raw;
        });
      }
      this.composed.set(d.message_id, p);
    }
    return p;
  }

  private resolve(domain: string): Promise<SmtpDestination[]> {
    if (this.deps.relay) return Promise.resolve([this.deps.relay]);
    let p = this.destinations.get(domain);
    if (!p) {
      p = this.deps.resolver.resolve(domain);
      this.destinations.set(domain, p);
      // A failed lookup is not cached: the next recipient of that domain asks again.
      p.catch(() => this.destinations.delete(domain));
    }
    return p;
  }

  private async sendOne(d: Pending): Promise<Outcome> {
    let raw: Buffer;
    try {
      raw = await this.compose(d);
    } catch (err) {
      return { kind: 'failed', d, error: `could not compose the message: ${(err as Error).message}` };
    }
    const domain = domainOf(d.recipient);
    let destinations: SmtpDestination[];
    try {
      destinations = await this.resolve(domain);
    } catch (err) {
      if ((err as { code?: string }).code === 'ENOTFOUND') return { kind: 'bounced', d, code: null, response: `5.1.2 domain ${domain} does not exist` };
      return { kind: 'deferred', d, error: `DNS lookup for ${domain} failed: ${(err as Error).message}` };
    }
    if (destinations.length === 0) return { kind: 'bounced', d, code: null, response: `5.1.10 ${domain} accepts no mail (null MX)` };
    const envelope = { from: bounceAddress(d.id, domainOf(d.from_address!)), to: d.recipient };
    // Bound to the account's dedicated IP while it is provisioned and under today's warm-up cap, as single sends.
    this.sendingIp ??= run(
      this.svc.db,
      k
        .selectFrom('sending_ips')
        .select(['id', 'mode', 'ip', 'helo_name as heloName', 'warmup_started_at as warmupStartedAt'])
        .where('account_id', '=', this.job.account_id),
    ).then((r) => r[0] ?? null);
    const source = await sendingSource(this.svc, await this.sendingIp);
    let lastError = '';
    for (const dest of destinations) {
      const outcome = await this.deps.sender.send(dest, envelope, raw, source ?? undefined);
      if (outcome.kind === 'delivered') return { kind: 'delivered', d, mta: outcome.mta };
      if (outcome.kind === 'permanent') return { kind: 'bounced', d, code: outcome.code, response: outcome.response };
      lastError = `${outcome.mta}: ${outcome.response}`;
    }
    return { kind: 'deferred', d, error: lastError };
  }

  /** record(), again after a pause while the database is unreachable (its transaction is all or nothing). */
  private async recordThroughOutage(outcomes: Outcome[], raws: Map<string, Buffer>): Promise<void> {
    const until = Date.now() + RECORD_OUTAGE_MS;
    for (let wait = 250; ; wait = Math.min(wait * 2, 4000)) {
      try {
        return await this.record(outcomes, raws);
      } catch (err) {
        if (!isServiceUnavailable(err) || this.signal?.aborted || Date.now() + wait > until) throw err;
        await new Promise((r) => setTimeout(r, wait));
      }
    }
  }

  /** One flush: stored bytes, charges, bounces, deferrals, message statuses, then the job's status and breaker. */
  private async record(outcomes: Outcome[], raws: Map<string, Buffer>): Promise<void> {
    const svc = this.svc;
    const accountId = this.job.account_id;
    let deferred: { id: string; delayMs: number }[] = [];
    const sealed = sealRaws(svc.secretKey, raws);
    const delivered = outcomes.filter((o): o is Extract<Outcome, { kind: 'delivered' }> => o.kind === 'delivered');
    const others = outcomes.length - delivered.length;
    // A flush runs several times a second: on a connection of the pg pool, outside Prisma's interactive transaction
    // (poolTransaction, as the single sends' outcomes), whose client costs several times the statements' own. Its
    // bounces, failures and deferrals go through the shared outcome path on Prisma's models: a flush that holds any
    // runs in Prisma's transaction from the start (and the store writer may ask for one too, for an account with
    // something to announce: the flush then runs again from the start in one).
    const flush = async (tx: SqlClient): Promise<BulkStatus> => {
      deferred = [];
      const general = others ? prismaTx(tx, 'bounces, failures and deferrals are recorded on the shared outcome path') : null;
      // The first statement claims the delivered recipients and reads the job's status (a cancel or a halt stops
      // the batch after this flush). The signed bytes are stored with the messages' statuses in the store
      // writer's statement, so a message's row is written once per flush; in this first statement when no
      // recipient was delivered, and on their own when recipients were delivered but none was claimed here.
      const j = tbl('bulk_jobs', 'j');
      const jobStatus = sql`SELECT ${j.status}::text AS job_status FROM ${j.$} WHERE ${j.id} = ${this.job.id}`;
      let jobStatusRow: { job_status: string | null } | undefined;
      let claimed: { id: string; message_id: string; held_micros: bigint; used_free: boolean; attachment_micros: bigint; surcharge_micros: bigint }[] = [];
      if (delivered.length) {
        const [set, d] = [tbl('deliveries'), tbl('deliveries', 'd')];
        // The claimed rows, then one row with the job's status (its other columns null).
        const all = await run(
          tx,
          sql<{
            id: string | null;
            message_id: string;
            held_micros: bigint;
            used_free: boolean;
            attachment_micros: bigint;
            surcharge_micros: bigint;
            job_status: string | null;
          }>`WITH claimed AS (
            UPDATE ${d.$} SET ${set.status} = ${dlv('delivered')}, ${set.delivered_at} = now(), ${set.remote_mta} = x.mta, ${set.last_error} = NULL,
              ${set.next_attempt_at} = NULL, ${set.attempts} = ${d.attempts} + 1, ${set.settled_at} = now(), ${set.updated_at} = now()
            FROM jsonb_to_recordset(${JSON.stringify(delivered.map((o) => ({ id: o.d.id, mta: o.mta })))}::jsonb) AS x(id text, mta text)
            WHERE ${d.id} = x.id AND ${d.id} = ANY(${delivered.map((o) => o.d.id)}::text[]) AND ${d.status} NOT IN ${statusIn(DELIVERY_STATUSES, FINAL_DELIVERY_STATUSES)} AND ${d.settled_at} IS NULL
            RETURNING ${sql.join([d.id, d.message_id, d.held_micros, d.used_free, d.attachment_micros, d.surcharge_micros])})
          SELECT id, message_id, held_micros, used_free, attachment_micros, surcharge_micros, NULL::text AS job_status FROM claimed
          UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, s.job_status FROM (${jobStatus}) s`,
        );
        claimed = all.filter((r) => r.id !== null) as typeof claimed;
        jobStatusRow = all.find((r) => r.id === null);
      } else {
        [jobStatusRow] = await run(tx, sql<{ job_status: string | null }>`${sealed.length ? sql`WITH raws AS (${rawsUpdate(sealed)}) ` : sql``}${jobStatus}`);
      }
      if (claimed.length) {
        const a = await lockAccountCredit(tx, accountId);
        let paid = a.trailer_paid_micros;
        const changes: AccountChange[] = claimed.map((d) => {
          const c = deliveryCharge({ trailer_paid_micros: paid }, d);
          paid += c.surcharge;
          return {
            accountId,
            charge: { postings: c.postings, releaseHeld: { micros: d.held_micros, freeMessages: c.free }, trailerPaidMicros: c.surcharge },
          };
        });
        // The messages' statuses follow their claimed deliveries in the same statement as the charges, with the
        // signed bytes composed since the last flush.
        const messageIds = [...new Set(claimed.map((d) => d.message_id))];
        await writeBatch(svc, tx, { locked: new Map([[accountId, a]]), changes, also: [sql`mst AS (${messageStatusAndRawUpdate(messageIds, sealed)})`] });
      } else if (delivered.length && sealed.length) {
        await exec(tx, rawsUpdate(sealed));
      }
      if (general) {
        for (const o of outcomes) {
          const attempts = o.d.attempts + 1;
          if (o.kind === 'bounced') await markBounced(general, o.d.id, { code: o.code, response: o.response, source: 'smtp', attempts, now: svc.clock.now() });
          else if (o.kind === 'failed') await markFailed(general, o.d.id, { error: o.error, attempts });
          else if (o.kind === 'deferred') {
            const delayMs = this.deps.retryDelayMs(attempts);
            await markDeferred(general, o.d.id, { error: o.error, attempts, nextAttemptAt: new Date(Date.now() + delayMs) });
            deferred.push({ id: o.d.id, delayMs });
          }
        }
      }
      return jobStatusRow?.job_status ? narrowStatus(BULK_STATUSES, jobStatusRow.job_status) : 'cancelled';
    };
    const status = others ? await svc.db.$transaction((tx) => flush(tx), TX) : await poolTransaction(svc.db, flush, TX);
    // 4xx: the ordinary delivery jobs retry them on the delivery schedule (the sweeper re-drives a lost enqueue).
    for (const d of deferred) await svc.jobs.enqueueDeliveries([d.id], d.delayMs).catch(() => undefined);
    if (status !== 'sending') {
      this.stop = 'stopped';
      return;
    }
    if (this.unsent === 0) return;
    const o = await bulkOutcomes(svc.db, this.job.id);
    if (o.attempted >= BREAKER_MIN_SAMPLE) {
      const trip = breaker(this.job, o);
      if (trip) {
        await svc.db.$transaction((tx) => halt(tx, this.job, trip.reason, trip.message, trip.figures), TX);
        this.stop = 'stopped';
      }
    }
  }
}

/** The batch is out: bulk.batch_completed, then the cool-off and the next batch, or bulk.completed (or the breaker). */
async function finishBatch(svc: Services, jobId: string, batch: number): Promise<BatchResult> {
  const next = await svc.db.$transaction(async (tx) => {
    const job = await loadJob(tx, jobId, true);
    if (!job || job.status !== 'sending' || job.batches_done !== batch) return null;
    const o = await bulkOutcomes(tx, jobId);
    const [i, d] = [tbl('bulk_job_items'), tbl('deliveries', 'd')];
    const [b] = await run(
      tx,
      sql<{ messages: bigint; delivered: bigint; bounced: bigint; deferred: bigint; failed: bigint; pending: bigint; suppressed: bigint | null }>`
      WITH msgs AS (SELECT ${i.message_id}, ${i.suppressed} FROM ${i.$} WHERE ${i.job_id} = ${jobId} AND ${i.batch} = ${batch})
      SELECT m.messages, m.suppressed, c.* FROM
        (SELECT count(*) AS messages, sum(suppressed) AS suppressed FROM msgs) m,
        (SELECT count(*) FILTER (WHERE ${d.status} = ${dlv('delivered')}) AS delivered, count(*) FILTER (WHERE ${d.status} = ${dlv('bounced')}) AS bounced,
          count(*) FILTER (WHERE ${d.status} = ${dlv('deferred')}) AS deferred, count(*) FILTER (WHERE ${d.status} = ${dlv('failed')}) AS failed,
          count(*) FILTER (WHERE ${d.status} IN ${statusIn(DELIVERY_STATUSES, ['bulk', 'queued'])}) AS pending
        FROM ${d.$} JOIN msgs ON ${d.message_id} = msgs.message_id) c`,
    );
    const n = (x: bigint | null | undefined) => Number(x ?? 0n);
    const last = batch + 1 >= job.batch_count;
    const trip = last ? null : breaker(job, o);
    const now = new Date();
    const nextAt = last ? null : new Date(now.getTime() + job.cool_off_seconds * 1000);
    const entry = { index: batch, started_at: job.next_batch_at?.toISOString() ?? null, completed_at: now.toISOString() };
    await exec(
      tx,
      k
        .updateTable('bulk_jobs')
        .set((eb) => ({
          batches_done: batch + 1,
          batch_log: sql`${eb.ref('batch_log')} || ${JSON.stringify([entry])}::jsonb`,
          status: statusLit(BULK_STATUSES, last ? 'completed' : 'cooling_off'),
          next_batch_at: nextAt,
          finished_at: last ? now : null,
          updated_at: sql`now()`,
        }))
        .where('id', '=', jobId),
    );
    const { attempted: _a, lastStartedBatch: _l, ...totals } = o;
    await appendEvent({
      db: tx,
      accountId: job.account_id,
      type: 'bulk.batch_completed',
      data: {
        bulk_job_id: jobId,
        batch,
        batches_total: job.batch_count,
        counts: {
          messages: n(b?.messages),
          delivered: n(b?.delivered),
          bounced: n(b?.bounced),
          deferred: n(b?.deferred),
          failed: n(b?.failed),
          pending: n(b?.pending),
          suppressed: n(b?.suppressed),
        },
        totals,
        next_batch_at: trip ? null : (nextAt?.toISOString() ?? null),
      },
    });
    if (trip) {
      await halt(tx, { ...job, batches_done: batch + 1 }, trip.reason, trip.message, trip.figures);
      return null;
    }
    if (last) {
      await appendEvent({
        db: tx,
        accountId: job.account_id,
        type: 'bulk.completed',
        data: {
          bulk_job_id: jobId,
          batches: job.batch_count,
          counts: totals,
          bounce_rate: rate(o.bounced, o.attempted),
          complaint_rate: rate(o.complaints, o.attempted),
        },
      });
      return null;
    }
    return { batch: batch + 1, delayMs: job.cool_off_seconds * 1000 };
  }, TX);
  if (next) {
    try {
      await svc.jobs.enqueueBulkBatch(jobId, next.batch, next.delayMs);
    } catch {
      // Redis away: the bulk sweep enqueues due batches it finds.
    }
  }
  return { kind: 'done' };
}

/**
 * A batch whose queue job failed for good (every retry used up, e.g. an error that keeps coming back): the job
 * halts with reason batch_failed (bulk.halted) and what its batches did not send is released, so it does not stay
 * `sending` with its credit held (the sweeper cannot enqueue a batch whose failed queue job is still kept).
 */
export async function haltFailedBatch(svc: Services, input: { bulkJobId: string; batch: number }, error: string): Promise<boolean> {
  const halted = await svc.db.$transaction(async (tx) => {
    const [job] = await run(
      tx,
      k.selectFrom('bulk_jobs').select(['id', 'account_id', 'batches_done', 'batch_count']).where('id', '=', input.bulkJobId).forUpdate(),
    );
    if (!job) return false;
    return halt(
      tx,
      job,
      'batch_failed',
      `Batch ${input.batch + 1} failed after every retry: ${error.slice(0, 300)}. What was not sent is released (not charged).`,
      { batch: input.batch },
    );
  });
  if (halted) await releaseUnsent(svc, input.bulkJobId, 'not sent: the bulk job halted (a batch failed after every retry)');
  return halted;
}

/**
 * Bulk jobs whose next batch is due (or overdue) by graceMs: their batch jobs, enqueued again (harmless if queued);
 * and deliveries still waiting for the batch of a job that stopped, released.
 */
export async function sweepBulkJobs(svc: Services, graceMs: number): Promise<number> {
  const active = (['queued', 'sending', 'cooling_off'] as const).map((v) => statusLit(BULK_STATUSES, v));
  const due = await run(
    svc.db,
    k
      .selectFrom('bulk_jobs')
      .select(['id', 'batches_done', 'next_batch_at'])
      .where('status', 'in', active)
      .where('next_batch_at', '<', new Date(Date.now() - graceMs))
      .limit(1000),
  );
  for (const j of due) await svc.jobs.enqueueBulkBatch(j.id, j.batches_done);
  // A job cancelled or halted while no worker ran its batch (and whose queue job was lost): release what waits.
  const stopped = await run(
    svc.db,
    k
      .selectFrom('bulk_jobs as j')
      .innerJoin('bulk_job_items as i', 'i.job_id', 'j.id')
      .innerJoin('deliveries as d', 'd.message_id', 'i.message_id')
      .select(['j.id', 'j.status'])
      .distinct()
      .where('j.status', 'in', [...FINISHED_BULK])
      .where('j.updated_at', '<', new Date(Date.now() - graceMs))
      .where('d.status', '=', dlv('bulk'))
      .limit(100),
  );
  for (const j of stopped) await releaseUnsent(svc, j.id, `not sent: the bulk job was ${j.status}`);
  return due.length + stopped.length;
}
