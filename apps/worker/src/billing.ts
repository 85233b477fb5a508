/**
 * Billing, domain verification and notices. The billing queue runs the repeatable cycle (a BullMQ job
 * scheduler: recurring debits, then a sweep of payments whose deadline passed), one-off payment checks (an MPP
 * token due 3 s after approval), closing accounts' data exports, the repeatable audit job (chain checkpoints,
 * body retention, deletion of closed accounts) and the repeatable domain verifier (pending claims due for a DNS check). Notices (mail the service sends) are enqueued when their transaction commits
 * (LISTEN boxes_notices) and by a sweeper, and sent with the delivery machinery. The same queue finishes the
 * provisioning of dedicated sending IPs and sends auto-forwarded copies (forward runs, swept with the notices).
 */
import { Worker, type ConnectionOptions, type Job } from 'bullmq';
import type { Config } from '@boxes/config';
import {
  backfillSearchIndex,
  buildExport,
  deleteClosedAccounts,
  deliverNotice,
  finishPendingSendingIps,
  finishProvisioning,
  runForward,
  sweepForwardRuns,
  isServiceUnavailable,
  NOTICES_CHANNEL,
  pendingExports,
  reclaimExpiredBodies,
  reevaluateReputations,
  refreshPayment,
  runBillingCycle,
  runDomainVerification,
  signMovedHeads,
  type NoticeDeps,
  type Services,
} from '@boxes/core';
import {
  AUDIT_SCHEDULER_ID,
  BILLING_SCHEDULER_ID,
  createRedis,
  DOMAIN_VERIFY_SCHEDULER_ID,
  NOTICE_ATTEMPTS,
  QUEUE,
  RECURRING_SCHEDULER_IDS,
  type BillingJob,
  type NoticeJob,
  type RecurringSchedulerId,
} from '@boxes/jobs';
import type { Logger } from 'pino';
import { listenForever, logQueueError, pauseOnOutage, retryAtStart } from './outage';
import type { ExportStatus, NoticeStatus, PaymentStatus } from '@boxes/core';

/** Messages the audit job's search backfill indexes per statement, and at most per pass. */
const SEARCH_BACKFILL_BATCH = 500;
const SEARCH_BACKFILL_MAX = 50_000;

export interface BillingHandle {
  /** Runs one billing cycle now (what the repeatable job does). */
  cycle(): Promise<{ accounts: number; entries: number; payments: number; recovered: number }>;
  /** Runs one audit pass now (what the repeatable audit job does). */
  audit(): Promise<{ checkpoints: number; reclaimed: number; deleted: string[]; exports: number; indexed: number }>;
  sweepNotices(): Promise<number>;
  /** Creates the recurring jobs' schedules that Redis lost; returns which. */
  ensureSchedules(): Promise<string[]>;
  stop(): Promise<void>;
}

/** Payments whose deadline or token time has passed: expired or charged by the cycle even if no one reads them. */
async function sweepPayments(svc: Services): Promise<number> {
  const now = svc.clock.now();
  const due = await svc.db.payment.findMany({
    where: {
      OR: [
        { status: { in: ['requires_approval', 'pending_approval'] satisfies PaymentStatus[] }, expiresAt: { lte: now } },
        { status: 'approved' satisfies PaymentStatus, tokenDueAt: { lte: now } },
      ],
    },
    select: { id: true },
    take: 1000,
  });
  for (const p of due) await refreshPayment(svc, p.id);
  return due.length;
}

export async function startBilling(config: Config, deps: { svc: Services; log: Logger; notice: NoticeDeps; sweepIntervalMs?: number }): Promise<BillingHandle> {
  const { svc, log } = deps;
  const connection = createRedis(config);
  const cycle = async () => {
    const r = await runBillingCycle(svc);
    const payments = await sweepPayments(svc);
    await finishPendingSendingIps(svc);
    // Bounces and complaints age out of the reputation window with no new mail to prompt a look.
    const recovered = await reevaluateReputations(svc);
    if (r.entries || payments || recovered) log.info({ ...r, payments, recovered }, 'billing cycle');
    return { ...r, payments, recovered };
  };
  // Hourly: sign every moved chain head, reclaim bodies past their retention window, delete the data of accounts
  // closed longer ago than the grace period, and enqueue any export whose job was lost.
  const audit = async () => {
    const checkpoints = await signMovedHeads(svc);
    const reclaimed = await reclaimExpiredBodies(svc);
    const deleted = await deleteClosedAccounts(svc);
    const exports = await pendingExports(svc);
    for (const id of exports) await svc.jobs.enqueueExport(id);
    // The search backfill: messages stored before the index existed, or while their account kept none.
    let indexed = 0;
    for (let n = SEARCH_BACKFILL_BATCH; n === SEARCH_BACKFILL_BATCH && indexed < SEARCH_BACKFILL_MAX; indexed += n) {
      n = await backfillSearchIndex(svc, SEARCH_BACKFILL_BATCH);
    }
    if (checkpoints || reclaimed || deleted.length || indexed) log.info({ checkpoints, reclaimed, deleted: deleted.length, indexed }, 'audit job');
    return { checkpoints, reclaimed, deleted, exports: exports.length, indexed };
  };
  const exportJob = async (job: Job<BillingJob>, exportId: string) => {
    try {
      await buildExport(svc, exportId);
    } catch (err) {
      // The last attempt marks the export failed (the download link says so) instead of leaving it building.
      if (!isServiceUnavailable(err) && job.attemptsMade + 1 >= (job.opts.attempts ?? 1)) {
        await svc.db.accountExport.updateMany({
          where: { id: exportId, status: 'building' satisfies ExportStatus },
          data: { status: 'failed' satisfies ExportStatus, error: (err as Error).message.slice(0, 1000) },
        });
        log.error({ err, exportId }, 'data export failed');
      }
      throw err;
    }
  };
  const billing: Worker<BillingJob> = new Worker<BillingJob>(
    QUEUE.billing,
    async (job): Promise<void> => {
      try {
        if (job.name === 'payment' && job.data.paymentId) await refreshPayment(svc, job.data.paymentId);
        else if (job.name === 'cycle') await cycle();
        else if (job.name === 'audit') await audit();
        else if (job.name === 'export' && job.data.exportId) await exportJob(job, job.data.exportId);
        else if (job.name === 'sending-ip' && job.data.sendingIpId) await finishProvisioning(svc, job.data.sendingIpId);
        else if (job.name === 'forward' && job.data.forwardRunId) await runForward(svc, job.data.forwardRunId);
        else if (job.name === 'domains') {
          const r = await runDomainVerification(svc);
          if (r.live || r.expired) log.info(r, 'domain verification');
        }
      } catch (err) {
        return pauseOnOutage(billing, svc, log, err);
      }
    },
    { connection: connection as ConnectionOptions, prefix: config.redisPrefix, concurrency: 4 },
  );
  billing.on('error', logQueueError(log, 'billing worker error'));
  billing.on('failed', (job, err) => log.warn({ job: job?.name, err: err.message }, 'billing job failed'));
  const schedule: Record<RecurringSchedulerId, () => Promise<void>> = {
    [BILLING_SCHEDULER_ID]: () => svc.jobs.scheduleBillingCycle(config.billing.cycleMs),
    [DOMAIN_VERIFY_SCHEDULER_ID]: () => svc.jobs.scheduleDomainVerification(config.dns.verifyIntervalMs),
    [AUDIT_SCHEDULER_ID]: () => svc.jobs.scheduleAudit(config.audit.cycleMs),
  };
  await retryAtStart(log, 'schedule the repeatable jobs', async () => {
    for (const id of RECURRING_SCHEDULER_IDS) await schedule[id]();
  });
  // The schedules live only in Redis: a Redis flushed, failed over to an empty replica or restarted without its
  // data loses them, and nothing else would bring them back before the next worker start.
  const ensureSchedules = async (): Promise<RecurringSchedulerId[]> => {
    const missing = await svc.jobs.missingSchedules();
    for (const id of missing) await schedule[id]();
    if (missing.length) log.warn({ schedules: missing }, 'recurring job schedules were missing from Redis: created again');
    return missing;
  };
  const scheduleTimer = setInterval(() => {
    ensureSchedules().catch((err: Error) => log.warn({ err: err.message }, 'could not check the recurring job schedules'));
  }, config.workerSweepIntervalMs);
  scheduleTimer.unref();

  const notices: Worker<NoticeJob> = new Worker<NoticeJob>(
    QUEUE.notices,
    async (job): Promise<void> => {
      // Outside production the service's own mail is also printed, so owner links work without a mail setup.
      if (config.nodeEnv !== 'production' && job.attemptsMade === 0) {
        const n = await svc.db.notice.findUnique({ where: { id: job.data.noticeId }, select: { to: true, subject: true, text: true } });
        if (n) log.info({ to: n.to, subject: n.subject }, `mail from the service (shown outside production):\n${n.text}`);
      }
      let r: Awaited<ReturnType<typeof deliverNotice>>;
      try {
        r = await deliverNotice(svc, deps.notice, job.data.noticeId, job.attemptsMade + 1 >= NOTICE_ATTEMPTS);
      } catch (err) {
        return pauseOnOutage(notices, svc, log, err);
      }
      if (!r.done) throw new Error(r.error);
    },
    { connection: connection as ConnectionOptions, prefix: config.redisPrefix, concurrency: 10 },
  );
  notices.on('error', logQueueError(log, 'notice worker error'));

  const sweepNotices = async () => {
    const pending = await svc.db.notice.findMany({
      where: { status: 'pending' satisfies NoticeStatus, createdAt: { lt: new Date(Date.now() - 30_000) } },
      select: { id: true },
      take: 1000,
    });
    await svc.jobs.enqueueNotices(pending.map((n) => n.id));
    return pending.length;
  };
  // Committed notices announce themselves; the sweeper catches any whose NOTIFY was missed (a reconnect too).
  const listener = await listenForever({
    databaseUrl: config.directDatabaseUrl,
    channel: NOTICES_CHANNEL,
    log,
    onNotify: (id) => void svc.jobs.enqueueNotices([id]).catch(logQueueError(log, 'enqueue notice failed')),
    onReconnect: () => void sweepNotices().catch(logQueueError(log, 'notice sweep failed')),
  });
  const timer = setInterval(() => {
    sweepNotices().catch(logQueueError(log, 'notice sweep failed'));
    sweepForwardRuns(svc).catch(logQueueError(log, 'forward sweep failed'));
  }, deps.sweepIntervalMs ?? 30_000);
  timer.unref();

  await Promise.all([billing.waitUntilReady(), notices.waitUntilReady()]);
  return {
    cycle,
    audit,
    sweepNotices,
    ensureSchedules,
    async stop() {
      clearInterval(timer);
      clearInterval(scheduleTimer);
      await listener.close();
      await billing.close();
      await notices.close();
      connection.disconnect();
    },
  };
}
