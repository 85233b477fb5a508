/**
 * apps/worker: runs the queued work. Deliveries: one BullMQ job per recipient, retried with the schedule in
 * packages/jobs. A sweeper re-enqueues deliveries whose job was lost (a crash between commit and enqueue, a
 * flushed Redis); handlers are idempotent, so a job that runs twice does nothing the second time.
 */
import { Worker, type ConnectionOptions, type Job } from 'bullmq';
import type { Config } from '@boxes/config';
import { attemptDelivery, expireReviews, type DeliveryDeps, type DeliveryStatus, type Services } from '@boxes/core';
import { createRedis, DELIVERY_ATTEMPTS, deliveryRetryDelayMs, QUEUE, type DeliveryJob } from '@boxes/jobs';
import { dnsMxResolver, parseRelayUrl, parseStaticRoutes, SmtpSender, staticResolver, type MxResolver } from '@boxes/mail';
import type { Logger } from 'pino';
import type { PublishFn } from '@boxes/core';
import { startPush, type PushEngine } from './push';
import { startBilling, type BillingHandle } from './billing';
import { logQueueError, pauseOnOutage } from './outage';
import { startBulk, type BulkHandle } from './bulk';
import { startAttachmentText, type AttachmentTextHandle } from './attachment-text';

export { startPush, WAKE_CHECK, type PushEngine } from './push';
export { startBilling, type BillingHandle } from './billing';
export { startBulk, type BulkHandle } from './bulk';
export { EXTRACTION_LIMITS, extractText, startAttachmentText, type AttachmentTextHandle } from './attachment-text';

export interface WorkerHandle {
  /** Enqueues every delivery the sweeper finds left behind (queued or due longer than graceMs); returns how many. */
  sweep(graceMs?: number): Promise<number>;
  push: PushEngine;
  billing: BillingHandle;
  /** Bulk send jobs (queue bulk). */
  bulk: BulkHandle;
  /** Text extraction of attachments (queue attachment-text). */
  attachmentText: AttachmentTextHandle;
  stop(): Promise<void>;
}

/**
 * Deferred deliveries this far past due, or scheduled ones, are re-enqueued. Queued ones sooner (QUEUED_GRACE_MS):
 * a send stored by a process that died before queueing its deliveries waits only for the next sweep after it.
 */
const SWEEP_GRACE_MS = 60_000;
const QUEUED_GRACE_MS = 10_000;

export async function start(
  config: Config,
  deps: { svc: Services; log: Logger; resolver?: MxResolver; sweepIntervalMs?: number; publish?: PublishFn | null },
): Promise<WorkerHandle> {
  const { svc, log } = deps;
  const sender = new SmtpSender({ heloName: config.mailHost });
  const routes = parseStaticRoutes(config.smtp.staticRoutes);
  const resolver = deps.resolver ?? staticResolver(routes, dnsMxResolver(config.smtp.deliveryPort));
  const retryDelayMs = (attemptsMade: number) => deliveryRetryDelayMs(attemptsMade, config.deliveryRetryScale);
  const deliveryDeps: DeliveryDeps = {
    sender,
    resolver,
    // Everything leaves through the relay: by default as many connections to it as deliveries run at once (with
    // the 5 kept per MX host, deliveries queued for a connection and the relay bounded the instance's rate).
    relay: config.smtp.relayUrl ? { ...parseRelayUrl(config.smtp.relayUrl), maxConnections: config.smtp.relayConnections } : undefined,
    retryDelayMs,
    maxAttempts: DELIVERY_ATTEMPTS,
  };
  const connection = createRedis(config);
  /**
   * Attempts running in this process, by delivery. A job can come back while its first run still goes on: its
   * lock ran out (a stalled event loop), or Redis failed over before the replica had seen the job taken (the new
   * primary hands it out again). The second run here waits for the first, then finds the delivery recorded.
   */
  const inFlight = new Map<string, Promise<void>>();
  const runDelivery = async (job: Job<DeliveryJob>): Promise<void> => {
    let result: Awaited<ReturnType<typeof attemptDelivery>>;
    try {
      result = await attemptDelivery(svc, deliveryDeps, job.data.deliveryId, job.attemptsMade, {
        accepted: job.data.accepted,
        // Kept in the job (Redis), which outlives the database outage, so the retry does not send it twice.
        keepAcceptance: async (accepted) => {
          await job.updateData({ ...job.data, accepted });
          // The only fact that lives in Redis alone for a while. Behind Sentinel, a write the primary
          // acknowledged is lost if it fails over before its replica has it (replication is asynchronous): wait
          // (up to 1 s) until a replica acknowledges this connection's writes.
          if (config.redisSentinel) await connection.wait(1, 1000).catch(() => undefined);
        },
      });
    } catch (err) {
      // The database away is no failed attempt: the queue pauses and the job waits (outage.ts).
      return pauseOnOutage(worker, svc, log, err);
    }
    // Throwing hands the job back to BullMQ, which retries it after backoffStrategy's delay.
    if (!result.done) throw new Error(result.error);
  };
  const worker: Worker<DeliveryJob> = new Worker<DeliveryJob>(
    QUEUE.deliveries,
    async (job): Promise<void> => {
      const id = job.data.deliveryId;
      for (let earlier = inFlight.get(id); earlier; earlier = inFlight.get(id)) await earlier.catch(() => undefined);
      const run = runDelivery(job);
      inFlight.set(id, run);
      try {
        await run;
      } finally {
        if (inFlight.get(id) === run) inFlight.delete(id);
      }
    },
    {
      connection: connection as ConnectionOptions,
      prefix: config.redisPrefix,
      concurrency: config.deliveryConcurrency,
      settings: { backoffStrategy: (attemptsMade: number) => retryDelayMs(attemptsMade) },
      // A worker that dies (SIGKILL, a lost machine) holds its active deliveries until their locks expire, and
      // another worker takes them at its next stalled check: 4 s locks renewed every second and a check every
      // second hand them over 3 to 5 s after the death (BullMQ's defaults, 30 s + 30 s; 10 s + 5 s here before
      // gave pauses of 16-21 s with the restart). A live worker loses a lock only if its event loop stalls for 3 s.
      // The check is one small script per second per worker. A delivery that stalls again and again (a worker
      // dying each time) is still handed on rather than failed: failed, its job id would block the sweeper.
      lockDuration: 4_000,
      lockRenewTime: 1_000,
      stalledInterval: 1_000,
      maxStalledCount: 10,
    },
  );
  worker.on('failed', (job, err) => {
    if (job && job.attemptsMade >= DELIVERY_ATTEMPTS) log.warn({ deliveryId: job.data.deliveryId, err: err.message }, 'delivery failed for good');
  });
  worker.on('error', logQueueError(log, 'delivery worker error'));

  const sweep = async (graceMs = SWEEP_GRACE_MS): Promise<number> => {
    const now = Date.now();
    const stuck = await svc.db.delivery.findMany({
      where: {
        OR: [
          // Re-enqueueing a delivery whose job is only waiting its turn does nothing (the job id is the delivery id).
          { status: 'queued' satisfies DeliveryStatus, createdAt: { lt: new Date(now - Math.min(graceMs, QUEUED_GRACE_MS)) } },
          { status: 'deferred' satisfies DeliveryStatus, nextAttemptAt: { lt: new Date(now - graceMs) } },
          // A scheduled send whose delayed job was lost (Redis lost its data): due is due.
          { status: 'scheduled' satisfies DeliveryStatus, message: { sendAt: { lt: new Date(now - graceMs) } } },
        ],
      },
      select: { id: true },
      take: 1000,
    });
    await svc.jobs.enqueueDeliveries(stuck.map((d) => d.id));
    return stuck.length;
  };
  const timer = setInterval(() => {
    sweep().catch(logQueueError(log, 'sweep failed'));
    // Sends held for the owner's review past REVIEW_TTL_HOURS expire (review.expired): nothing was sent.
    expireReviews(svc).catch(logQueueError(log, 'review expiry sweep failed'));
  }, deps.sweepIntervalMs ?? config.workerSweepIntervalMs);
  timer.unref();
  // Redis back after an outage: sends committed meanwhile could not enqueue their deliveries (and a Redis that
  // lost its data lost their jobs). Enqueueing is idempotent (the job id is the delivery id): sweep at once.
  // The queues' own connection (the one enqueueing goes through) says when Redis is back.
  const onRedisBack = () => {
    log.info('redis is back: sweeping deliveries, bulk batches and attachment texts, checking the recurring job schedules');
    sweep(0).catch(logQueueError(log, 'sweep failed'));
    billingHandle?.ensureSchedules().catch((err: Error) => log.warn({ err: err.message }, 'could not check the recurring job schedules'));
    bulkHandle?.sweep(0).catch(logQueueError(log, 'bulk sweep failed'));
    attachmentTextHandle?.sweep(0).catch(logQueueError(log, 'attachment text sweep failed'));
  };
  let lost = false;
  let bulkHandle: BulkHandle | null = null;
  let billingHandle: BillingHandle | null = null;
  let attachmentTextHandle: AttachmentTextHandle | null = null;
  const onClose = () => {
    lost = true;
  };
  const onReady = () => {
    if (!lost) return;
    lost = false;
    onRedisBack();
  };
  svc.jobs.connection.on('close', onClose);
  svc.jobs.connection.on('ready', onReady);

  await worker.waitUntilReady();
  const push = await startPush(config, { svc, log, publish: deps.publish ?? null });
  const billing = await startBilling(config, { svc, log, notice: { sender, resolver, relay: deliveryDeps.relay } });
  const bulk = await startBulk(config, { svc, log, delivery: deliveryDeps, ...(deps.sweepIntervalMs ? { sweepIntervalMs: deps.sweepIntervalMs } : {}) });
  const attachmentText = await startAttachmentText(config, { svc, log, ...(deps.sweepIntervalMs ? { sweepIntervalMs: deps.sweepIntervalMs } : {}) });
  bulkHandle = bulk;
  billingHandle = billing;
  attachmentTextHandle = attachmentText;
  return {
    sweep,
    push,
    billing,
    bulk,
    attachmentText,
    async stop() {
      await attachmentText.stop();
      clearInterval(timer);
      svc.jobs.connection.off('close', onClose);
      svc.jobs.connection.off('ready', onReady);
      await bulk.stop();
      await billing.stop();
      await push.stop();
      await worker.close();
      connection.disconnect();
      sender.close();
    },
  };
}
