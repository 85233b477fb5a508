/**
 * Queues (BullMQ on Redis): names, job payloads (ids only, never secrets or bodies), retry schedules and the
 * enqueue helpers core and the apps use. Every handler must be idempotent: BullMQ delivers at least once.
 */
import { Queue, type ConnectionOptions } from 'bullmq';
import { Redis, type RedisOptions } from 'ioredis';
import { z } from 'zod';

export const QUEUE = { deliveries: 'deliveries', billing: 'billing', notices: 'notices', bulk: 'bulk', attachmentText: 'attachment-text' } as const;

/** Extracts the text of one stored attachment (apps/worker); the job id is the attachment id. */
export const AttachmentTextJob = z.object({ attachmentId: z.string() });
export type AttachmentTextJob = z.infer<typeof AttachmentTextJob>;

/** Billing queue jobs: the repeatable cycle (recurring debits, payment sweep) and one payment's due check. */
export const BillingJob = z.object({
  paymentId: z.string().optional(),
  exportId: z.string().optional(),
  /** sending-ip: finish provisioning a live dedicated sending IP. */
  sendingIpId: z.string().optional(),
  /** forward: send one auto-forwarded copy (a forward run). */
  forwardRunId: z.string().optional(),
});
export type BillingJob = z.infer<typeof BillingJob>;
export const NoticeJob = z.object({ noticeId: z.string() });
export type NoticeJob = z.infer<typeof NoticeJob>;
export const BILLING_SCHEDULER_ID = 'billing-cycle';
/** The repeatable domain verifier (on the billing queue): checks pending domain claims that are due. */
export const DOMAIN_VERIFY_SCHEDULER_ID = 'domain-verification';
/** The repeatable audit job (on the billing queue): chain checkpoints, body retention, deletion of closed accounts. */
export const AUDIT_SCHEDULER_ID = 'audit';
/** The recurring jobs, by scheduler id: created at a worker's start and again whenever Redis lost them. */
export const RECURRING_SCHEDULER_IDS = [BILLING_SCHEDULER_ID, DOMAIN_VERIFY_SCHEDULER_ID, AUDIT_SCHEDULER_ID] as const;
export type RecurringSchedulerId = (typeof RECURRING_SCHEDULER_IDS)[number];
/** Attempts of a notice (mail the service sends) before it is marked failed: about 2 days with exponential backoff. */
export const NOTICE_ATTEMPTS = 12;

/** One batch of a bulk send job (core/bulk): the job id with the batch's index. */
export const BulkBatchJob = z.object({ bulkJobId: z.string(), batch: z.number().int().min(0) });
export type BulkBatchJob = z.infer<typeof BulkBatchJob>;

export const DeliveryJob = z.object({
  deliveryId: z.string(),
  /** Set by a run whose remote 250 the database could not record: the next run records it instead of sending. */
  accepted: z.object({ mta: z.string().nullable(), response: z.string() }).optional(),
});
export type DeliveryJob = z.infer<typeof DeliveryJob>;

/**
 * Retry schedule of a deferred delivery, in seconds after each failed attempt: 1 min, 5 min, 15 min, 30 min,
 * 1 h, 2 h, 4 h, 8 h, 12 h, 24 h. Eleven attempts over about 52 hours; then the delivery fails.
 */
export const DELIVERY_RETRY_SECONDS = [60, 300, 900, 1800, 3600, 7200, 14_400, 28_800, 43_200, 86_400] as const;
export const DELIVERY_ATTEMPTS = DELIVERY_RETRY_SECONDS.length + 1;

export function deliveryRetryDelayMs(attemptsMade: number, scale = 1): number {
  const i = Math.min(Math.max(attemptsMade - 1, 0), DELIVERY_RETRY_SECONDS.length - 1);
  return Math.round(DELIVERY_RETRY_SECONDS[i]! * 1000 * scale);
}

export interface JobsOptions {
  redisUrl: string;
  /** Key prefix in Redis; tests give each file its own. */
  prefix: string;
}

/** Sentinels to ask for the current primary (packages/config: REDIS_SENTINELS, REDIS_SENTINEL_NAME). */
export interface RedisSentinelTarget {
  sentinels: { host: string; port: number }[];
  name: string;
  password?: string | undefined;
}

/**
 * Where Redis is: a URL (one server), or the configuration's pair of REDIS_URL and Sentinel (when the sentinels
 * are set, the URL gives only the credentials, the database number and TLS).
 */
export type RedisTarget = string | { redisUrl: string; redisSentinel: RedisSentinelTarget | null };

/** What a failover needs of every connection under Sentinel. */
function sentinelOptions(url: string, s: RedisSentinelTarget): RedisOptions {
  const u = new URL(url);
  const db = Number(u.pathname.slice(1) || 0);
  return {
    sentinels: s.sentinels,
    name: s.name,
    ...(u.username ? { username: decodeURIComponent(u.username) } : {}),
    ...(u.password ? { password: decodeURIComponent(u.password) } : {}),
    ...(s.password ? { sentinelPassword: s.password } : {}),
    ...(Number.isInteger(db) && db > 0 ? { db } : {}),
    ...(u.protocol === 'rediss:' ? { tls: {}, enableTLSForSentinelMode: true } : {}),
    // A sentinel that does not answer is skipped after this, not waited for.
    sentinelCommandTimeout: REDIS_COMMAND_TIMEOUT_MS,
    // While the sentinels still name the dead primary, every attempt is refused at once: try again every 100 ms
    // up to every second (the default backs off to 5 s, which would keep a connection away for seconds after the
    // promotion).
    retryStrategy: (times) => Math.min(times * 100, 1000),
    // A primary that is demoted rather than killed has its clients disconnected by the sentinels when they
    // reconfigure it (CLIENT KILL), so connections ask again; a write that reaches it first gets READONLY:
    // reconnect and send the command again there. (ioredis' failoverDetector is not used: a +switch-master that
    // arrives while a connection is resolving the primary ends that connection for good.)
    reconnectOnError: (err) => (err.message.startsWith('READONLY') ? 2 : false),
  };
}

/**
 * The one place a Redis connection is made: the queues, the workers (BullMQ duplicates them for its blocking
 * reads, keeping these options), the rate counts, the push locks. A URL connects to that server; with Sentinel
 * every connection asks the sentinels for the primary and asks again whenever it reconnects, so a promoted
 * replica is followed without a restart.
 */
export function connectRedis(target: RedisTarget, options: RedisOptions = {}): Redis {
  if (typeof target === 'string') return new Redis(target, options);
  if (!target.redisSentinel) return new Redis(target.redisUrl, options);
  return new Redis({ ...sentinelOptions(target.redisUrl, target.redisSentinel), ...options });
}

/** Where a target points, for one-line messages: the URL's host and port, or the sentinels and master name. */
export function describeRedisTarget(target: RedisTarget): string {
  if (typeof target !== 'string' && target.redisSentinel) {
    const s = target.redisSentinel;
    return `the primary "${s.name}" of the sentinels ${s.sentinels.map((x) => `${x.host.includes(':') ? `[${x.host}]` : x.host}:${x.port}`).join(', ')}`;
  }
  const u = new URL(typeof target === 'string' ? target : target.redisUrl);
  return `${u.hostname}:${u.port || 6379}`;
}

/** A Redis connection suitable for BullMQ (workers need maxRetriesPerRequest: null). */
export function createRedis(target: RedisTarget): Redis {
  return connectRedis(target, { maxRetriesPerRequest: null, enableReadyCheck: true });
}

/**
 * A Redis connection for commands that a request waits on (enqueueing, rate counts): while Redis is away a
 * command fails after one reconnection attempt or REDIS_COMMAND_TIMEOUT_MS instead of waiting for Redis to come
 * back, so the caller can answer 503 (or leave the job to the sweeper). Not for workers' blocking reads.
 */
export const REDIS_COMMAND_TIMEOUT_MS = 1000;
/**
 * How long one connection attempt may take. Not the command timeout: a process busy starting (loading and
 * compiling its apps) can hold its event loop for more than a second while the socket connects, and a 1 s
 * connect timeout then failed healthy connections. Commands still fail after REDIS_COMMAND_TIMEOUT_MS, queued
 * or not, so a request never waits for this.
 */
export const REDIS_CONNECT_TIMEOUT_MS = 10_000;
export function createCommandRedis(target: RedisTarget, opts: { failFast?: boolean } = {}): Redis {
  return connectRedis(target, {
    maxRetriesPerRequest: 1,
    commandTimeout: REDIS_COMMAND_TIMEOUT_MS,
    connectTimeout: REDIS_CONNECT_TIMEOUT_MS,
    enableReadyCheck: true,
    // failFast: while disconnected a command fails at once instead of waiting for the next reconnection
    // (for counts that a call may skip, such as the per-key rate count).
    ...(opts.failFast ? { enableOfflineQueue: false } : {}),
  });
}

export class Jobs {
  readonly deliveries: Queue<DeliveryJob>;
  readonly billing: Queue<BillingJob>;
  readonly notices: Queue<NoticeJob>;
  readonly bulk: Queue<BulkBatchJob>;
  readonly attachmentText: Queue<AttachmentTextJob>;

  constructor(
    readonly connection: Redis,
    readonly prefix: string,
  ) {
    this.deliveries = new Queue<DeliveryJob>(QUEUE.deliveries, { connection: connection as ConnectionOptions, prefix });
    this.billing = new Queue<BillingJob>(QUEUE.billing, { connection: connection as ConnectionOptions, prefix });
    this.notices = new Queue<NoticeJob>(QUEUE.notices, { connection: connection as ConnectionOptions, prefix });
    this.bulk = new Queue<BulkBatchJob>(QUEUE.bulk, { connection: connection as ConnectionOptions, prefix });
    this.attachmentText = new Queue<AttachmentTextJob>(QUEUE.attachmentText, { connection: connection as ConnectionOptions, prefix });
    // A queue re-emits its connection's errors, and with no listener BullMQ prints them with their stack. The
    // connection's owner listens to the connection itself and logs them once.
    for (const q of [this.deliveries, this.billing, this.notices, this.bulk, this.attachmentText]) q.on('error', () => undefined);
  }

  /**
   * Enqueues one batch of a bulk job, due after delayMs (the cool-off). The job id names the job and the batch,
   * so enqueueing twice is harmless; the handler reads the job's state and does only what is left.
   */
  async enqueueBulkBatch(bulkJobId: string, batch: number, delayMs = 0): Promise<void> {
    await this.bulk.add(
      'batch',
      { bulkJobId, batch },
      {
        jobId: `${bulkJobId}-${batch}`,
        delay: Math.max(0, delayMs),
        attempts: 20,
        backoff: { type: 'exponential', delay: 5_000 },
        removeOnComplete: { age: 3600 },
        removeOnFail: { age: 7 * 86_400 },
      },
    );
  }

  /** Checks a payment when something about it falls due (an MPP token after approval); id-deduplicated. */
  async schedulePaymentCheck(paymentId: string, delayMs: number): Promise<void> {
    await this.billing.add(
      'payment',
      { paymentId },
      {
        jobId: `payment-${paymentId}-${Date.now() + delayMs}`,
        delay: delayMs,
        attempts: 5,
        backoff: { type: 'exponential', delay: 1000 },
        removeOnComplete: { count: 1000 },
        removeOnFail: { age: 86_400 },
      },
    );
  }

  /** The repeatable billing job (BullMQ job scheduler): one per instance, however many workers start it. */
  async scheduleBillingCycle(everyMs: number): Promise<void> {
    await this.billing.upsertJobScheduler(
      BILLING_SCHEDULER_ID,
      { every: everyMs },
      { name: 'cycle', data: {}, opts: { removeOnComplete: { count: 100 }, removeOnFail: { count: 100 } } },
    );
  }

  /** The repeatable domain verifier: one per instance, however many workers start it. */
  async scheduleDomainVerification(everyMs: number): Promise<void> {
    await this.billing.upsertJobScheduler(
      DOMAIN_VERIFY_SCHEDULER_ID,
      { every: everyMs },
      { name: 'domains', data: {}, opts: { removeOnComplete: { count: 100 }, removeOnFail: { count: 100 } } },
    );
  }

  /** The repeatable audit job: one per instance, however many workers start it. */
  async scheduleAudit(everyMs: number): Promise<void> {
    await this.billing.upsertJobScheduler(
      AUDIT_SCHEDULER_ID,
      { every: everyMs },
      { name: 'audit', data: {}, opts: { removeOnComplete: { count: 100 }, removeOnFail: { count: 100 } } },
    );
  }

  /** The recurring jobs whose scheduler is not in Redis (a flushed or replaced Redis). */
  async missingSchedules(): Promise<RecurringSchedulerId[]> {
    const found = await Promise.all(RECURRING_SCHEDULER_IDS.map((id) => this.billing.getJobScheduler(id)));
    return RECURRING_SCHEDULER_IDS.filter((_, i) => !found[i]);
  }

  /** Builds a closing account's data export (the job id is the export id, so enqueueing twice is harmless). */
  async enqueueExport(exportId: string): Promise<void> {
    await this.billing.add(
      'export',
      { exportId },
      {
        jobId: `export-${exportId}`,
        attempts: 5,
        backoff: { type: 'exponential', delay: 5_000 },
        removeOnComplete: { age: 3600 },
        removeOnFail: { age: 7 * 86_400 },
      },
    );
  }

  /** Enqueues a notice; the job id is the notice id, so enqueueing twice is harmless. */
  async enqueueNotices(noticeIds: string[]): Promise<void> {
    if (!noticeIds.length) return;
    await this.notices.addBulk(
      noticeIds.map((noticeId) => ({
        name: 'notice',
        data: { noticeId },
        opts: {
          jobId: noticeId,
          attempts: NOTICE_ATTEMPTS,
          backoff: { type: 'exponential', delay: 5_000 },
          removeOnComplete: { age: 3600 },
          removeOnFail: { age: 7 * 86_400 },
        },
      })),
    );
  }

  /** Enqueues delivery jobs; the job id is the delivery id, so enqueueing twice is harmless. */
  async enqueueDeliveries(deliveryIds: string[], delayMs = 0): Promise<void> {
    await this.enqueueDeliveryGroups([{ deliveryIds, delayMs }]);
  }

  /**
   * Enqueues the delivery jobs of several callers, each group with its own delay, in one addBulk: one round trip
   * to Redis for all of them.
   */
  async enqueueDeliveryGroups(groups: readonly { deliveryIds: readonly string[]; delayMs: number }[]): Promise<void> {
    const jobs = groups.flatMap(({ deliveryIds, delayMs }) =>
      deliveryIds.map((deliveryId) => ({
        name: 'deliver',
        data: { deliveryId },
        opts: {
          jobId: deliveryId,
          delay: delayMs,
          attempts: DELIVERY_ATTEMPTS,
          backoff: { type: 'boxes' },
          removeOnComplete: { age: 3600, count: 10_000 },
          removeOnFail: { age: 7 * 86_400 },
        },
      })),
    );
    if (!jobs.length) return;
    await this.deliveries.addBulk(jobs);
  }

  /** Enqueues text extraction of stored attachments; the job id is the attachment id, so enqueueing twice is harmless. */
  async enqueueAttachmentText(attachmentIds: string[]): Promise<void> {
    if (!attachmentIds.length) return;
    await this.attachmentText.addBulk(
      attachmentIds.map((attachmentId) => ({
        name: 'extract',
        data: { attachmentId },
        opts: {
          jobId: attachmentId,
          attempts: 5,
          backoff: { type: 'exponential', delay: 5_000 },
          removeOnComplete: { age: 3600, count: 10_000 },
          removeOnFail: { age: 7 * 86_400 },
        },
      })),
    );
  }

  async close(): Promise<void> {
    await this.attachmentText.close();
    await this.deliveries.close();
    await this.billing.close();
    await this.notices.close();
    await this.bulk.close();
  }
}

/**
 * Webhook retry schedule, in seconds after each failed attempt: 10 s, 30 s, 1 min, 2 min, 5 min, 10 min, 30 min,
 * 1 h, 2 h, 4 h, 8 h, 12 h, then 24 h. An event is given up at its first failure more than
 * WEBHOOK_GIVE_UP_SECONDS (3 days) after it was created: for the event at the head that is the 15th attempt,
 * about 3.2 days in (at most 16 attempts). Events queued behind a dead endpoint are past that age when their
 * turn comes, so each is tried once more and given up, instead of waiting days each.
 */
export const WEBHOOK_RETRY_SECONDS = [10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14_400, 28_800, 43_200, 86_400, 86_400, 86_400] as const;
export const WEBHOOK_MAX_ATTEMPTS = WEBHOOK_RETRY_SECONDS.length + 1;
export const WEBHOOK_GIVE_UP_SECONDS = 3 * 86_400;

export function webhookRetryDelayMs(failedAttempts: number, scale = 1): number {
  const i = Math.min(Math.max(failedAttempts - 1, 0), WEBHOOK_RETRY_SECONDS.length - 1);
  return Math.round(WEBHOOK_RETRY_SECONDS[i]! * 1000 * scale);
}

/** Wakes the push drainer of one account at a given time (webhook retries). */
export const PushJob = z.object({ accountId: z.string() });
export type PushJob = z.infer<typeof PushJob>;
export const PUSH_QUEUE = 'push';

/** Deletes every key under `<prefix>:` (a test file's or a benchmark's queues and counters). */
export async function deleteKeysWithPrefix(target: RedisTarget, prefix: string): Promise<number> {
  const redis = connectRedis(target, { maxRetriesPerRequest: 1 });
  let cursor = '0';
  let deleted = 0;
  try {
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
      if (keys.length) deleted += await redis.del(...keys);
      cursor = next;
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
  return deleted;
}
