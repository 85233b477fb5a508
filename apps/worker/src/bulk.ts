/**
 * Bulk send jobs (queue `bulk`): one queue job per batch, run by core's runBulkBatch. Stopping the worker stops
 * each batch in flight at a message boundary: the SMTP transactions already started finish and are recorded,
 * and the batch goes back to the queue for the next worker, which sends exactly what is left. A worker that dies
 * without stopping leaves its batch locked until BullMQ sees it stalled and hands it to another worker.
 */
import { DelayedError, Worker, type ConnectionOptions } from 'bullmq';
import type { Config } from '@boxes/config';
import { haltFailedBatch, runBulkBatch, sweepBulkJobs, type BulkDeps, type DeliveryDeps, type Services } from '@boxes/core';
import { createRedis, QUEUE, type BulkBatchJob } from '@boxes/jobs';
import { SmtpSender } from '@boxes/mail';
import type { Logger } from 'pino';
import { logQueueError, pauseOnOutage } from './outage';

export interface BulkHandle {
  /** Enqueues the batch of every job whose next batch is overdue by graceMs; returns how many. */
  sweep(graceMs?: number): Promise<number>;
  stop(): Promise<void>;
}

/** Batches of different jobs run side by side; each batch keeps BULK_CONCURRENCY SMTP transactions in flight. */
const BATCHES_IN_PARALLEL = 2;

export async function startBulk(config: Config, deps: { svc: Services; log: Logger; delivery: DeliveryDeps; sweepIntervalMs?: number }): Promise<BulkHandle> {
  const { svc, log } = deps;
  // Its own SMTP pool, BULK_SMTP_CONNECTIONS connections per destination, so a batch neither waits behind
  // single sends nor holds up their pool.
  const sender = new SmtpSender({ heloName: config.mailHost, maxConnections: config.bulk.connections });
  // The relay too: the single sends' relay entry asks for DELIVERY_CONCURRENCY connections, the bulk pool keeps its own number.
  const relay = deps.delivery.relay && { ...deps.delivery.relay, maxConnections: config.bulk.connections };
  const bulkDeps: BulkDeps = { ...deps.delivery, relay, sender, concurrency: config.bulk.concurrency };
  const connection = createRedis(config);
  // Each batch in flight: its abort switch and the promise of its whole handler (close() alone does not wait).
  const running = new Map<AbortController, Promise<unknown>>();
  const worker: Worker<BulkBatchJob> = new Worker<BulkBatchJob>(
    QUEUE.bulk,
    async (job, token): Promise<void> => {
      const abort = new AbortController();
      const handle = (async () => {
        let result: Awaited<ReturnType<typeof runBulkBatch>>;
        try {
          result = await runBulkBatch(svc, bulkDeps, job.data, abort.signal);
        } catch (err) {
          return pauseOnOutage(worker, svc, log, err);
        }
        if (result.kind === 'later') {
          // Back to the queue, due after delayMs, without using up an attempt.
          await job.moveToDelayed(Date.now() + result.delayMs, token);
          throw new DelayedError();
        }
      })();
      running.set(abort, handle);
      try {
        await handle;
      } finally {
        running.delete(abort);
      }
    },
    {
      connection: connection as ConnectionOptions,
      prefix: config.redisPrefix,
      concurrency: BATCHES_IN_PARALLEL,
      // A batch of 1,000 can take a while; a dead worker's batch is taken over once its lock lapses.
      lockDuration: 30_000,
      maxStalledCount: 100,
    },
  );
  worker.on('error', logQueueError(log, 'bulk worker error'));
  worker.on('failed', (job, err) => {
    log.warn({ job: job?.data, err: err.message }, 'bulk batch failed');
    // Every retry used up: halt the job rather than leave it sending with its credit held.
    if (job && job.attemptsMade >= (job.opts.attempts ?? 1)) {
      haltFailedBatch(svc, job.data, err.message).catch((e: Error) =>
        log.error({ err: e.message, job: job.data }, 'could not halt a bulk job whose batch failed'),
      );
    }
  });

  const sweep = (graceMs = 60_000) => sweepBulkJobs(svc, graceMs);
  const timer = setInterval(() => {
    sweep().catch(logQueueError(log, 'bulk sweep failed'));
  }, deps.sweepIntervalMs ?? 30_000);
  timer.unref();
  await worker.waitUntilReady();
  return {
    sweep,
    async stop() {
      clearInterval(timer);
      // Closing first stops the worker from taking the batches it hands back; then the batches in flight stop.
      const closing = worker.close();
      const inFlight = [...running];
      for (const [a] of inFlight) a.abort();
      await Promise.allSettled(inFlight.map(([, p]) => p));
      await closing;
      connection.disconnect();
      sender.close();
    },
  };
}
