/**
 * apps/worker: runs the queued work. Deliveries: one BullMQ job per recipient, retried with the schedule in
 * packages/jobs. A sweeper re-enqueues deliveries whose job was lost (a crash between commit and enqueue, a
 * flushed Redis); handlers are idempotent, so a job that runs twice does nothing the second time.
 */
import { Worker, type ConnectionOptions } from 'bullmq';
import type { Config } from '@boxes/config';
import { attemptDelivery, type DeliveryDeps, type Services } from '@boxes/core';
import { createRedis, DELIVERY_ATTEMPTS, deliveryRetryDelayMs, QUEUE, type DeliveryJob } from '@boxes/jobs';
import { dnsMxResolver, parseRelayUrl, parseStaticRoutes, SmtpSender, staticResolver, type MxResolver } from '@boxes/mail';
import type { Logger } from 'pino';
import type { PublishFn } from '@boxes/core';
import { startPush, type PushEngine } from './push';
import { startBilling, type BillingHandle } from './billing';

export { startPush, type PushEngine } from './push';
export { startBilling, type BillingHandle } from './billing';

export interface WorkerHandle {
  /** Enqueues every delivery the sweeper finds left behind; returns how many. */
  sweep(): Promise<number>;
  push: PushEngine;
  billing: BillingHandle;
  stop(): Promise<void>;
}

/** Queued deliveries older than this with no job, or deferred ones this far past due, are re-enqueued. */
const SWEEP_GRACE_MS = 60_000;

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
    relay: config.smtp.relayUrl ? parseRelayUrl(config.smtp.relayUrl) : undefined,
    retryDelayMs,
    maxAttempts: DELIVERY_ATTEMPTS,
  };
  const connection = createRedis(config.redisUrl);
  const worker = new Worker<DeliveryJob>(
    QUEUE.deliveries,
    async (job) => {
      const result = await attemptDelivery(svc, deliveryDeps, job.data.deliveryId, job.attemptsMade);
      // Throwing hands the job back to BullMQ, which retries it after backoffStrategy's delay.
      if (!result.done) throw new Error(result.error);
    },
    {
      connection: connection as ConnectionOptions,
      prefix: config.redisPrefix,
      concurrency: config.deliveryConcurrency,
      settings: { backoffStrategy: (attemptsMade: number) => retryDelayMs(attemptsMade) },
    },
  );
  worker.on('failed', (job, err) => {
    if (job && job.attemptsMade >= DELIVERY_ATTEMPTS) log.warn({ deliveryId: job.data.deliveryId, err: err.message }, 'delivery failed for good');
  });
  worker.on('error', (err) => log.error({ err }, 'worker error'));

  const sweep = async (): Promise<number> => {
    const now = Date.now();
    const stuck = await svc.db.delivery.findMany({
      where: {
        OR: [
          { status: 'queued', createdAt: { lt: new Date(now - SWEEP_GRACE_MS) } },
          { status: 'deferred', nextAttemptAt: { lt: new Date(now - SWEEP_GRACE_MS) } },
        ],
      },
      select: { id: true },
      take: 1000,
    });
    await svc.jobs.enqueueDeliveries(stuck.map((d) => d.id));
    return stuck.length;
  };
  const timer = setInterval(() => {
    sweep().catch((err) => log.error({ err }, 'sweep failed'));
  }, deps.sweepIntervalMs ?? 30_000);
  timer.unref();

  await worker.waitUntilReady();
  const push = await startPush(config, { svc, log, publish: deps.publish ?? null });
  const billing = await startBilling(config, { svc, log, notice: { sender, resolver, relay: deliveryDeps.relay } });
  return {
    sweep,
    push,
    billing,
    async stop() {
      clearInterval(timer);
      await billing.stop();
      await push.stop();
      await worker.close();
      connection.disconnect();
      sender.close();
    },
  };
}
