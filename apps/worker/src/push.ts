/**
 * The push engine: every committed event reaches the account's webhook and MQTT subscribers, in order, at least
 * once. PostgreSQL NOTIFY (sent by each append at commit) wakes the drainer of that account at once; a Redis lock
 * keeps one drainer per account across all workers; webhook retries are delayed BullMQ jobs; and a sweeper
 * re-drives any account whose cursors lag its chain head (a missed notification, a crash mid-delivery).
 */
import { randomUUID } from 'node:crypto';
import { Queue, Worker, type ConnectionOptions } from 'bullmq';
import type { Config } from '@boxes/config';
import { drainMqtt, drainWebhook, EVENTS_CHANNEL, webhookHttpDeps, type PublishFn, type Services, type WebhookDeps } from '@boxes/core';
import { rows as sqlRows, sql, tbl } from '@boxes/db';
import { createRedis, PUSH_QUEUE, webhookRetryDelayMs, WEBHOOK_GIVE_UP_SECONDS, type PushJob } from '@boxes/jobs';
import type { Logger } from 'pino';
import { listenForever, logQueueError } from './outage';

/**
 * A drainer's account lock lives this long unless renewed; the holder renews it every LOCK_RENEW_MS while it
 * drains, so a worker killed mid-drain (SIGKILL, a lost machine) holds the account up for seconds, not a minute.
 */
const LOCK_TTL_MS = 10_000;
const LOCK_RENEW_MS = 3_000;
const RENEW_IF_OURS = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
const SWEEP_MS = 5_000;

const a = tbl('accounts', 'a');
const cred = tbl('iot_credentials', 'c');
/** An account with events for its webhook, no retry pending in the future. */
const webhookDue = sql<boolean>`(${a.callback_webhook} IS NOT NULL AND ${a.webhook_cursor} < ${a.chain_seq}
  AND (${a.webhook_next_attempt_at} IS NULL OR ${a.webhook_next_attempt_at} <= now()))`;
/** An account with events for MQTT and a live IoT credential. */
const mqttDue = sql<boolean>`(${a.mqtt_cursor} < ${a.chain_seq}
  AND EXISTS (SELECT 1 FROM ${cred.$} WHERE ${cred.account_id} = ${a.id} AND ${cred.revoked_at} IS NULL))`;

export interface PushEngine {
  /** Drains one account now (tests and the sweeper use it). */
  kick(accountId: string): void;
  sweep(): Promise<number>;
  stop(): Promise<void>;
}

export async function startPush(config: Config, deps: { svc: Services; log: Logger; publish: PublishFn | null }): Promise<PushEngine> {
  const { svc, log } = deps;
  const redis = createRedis(config);
  const queue = new Queue<PushJob>(PUSH_QUEUE, { connection: redis as ConnectionOptions, prefix: config.redisPrefix });
  queue.on('error', logQueueError(log, 'push queue error'));
  const webhookDeps: WebhookDeps = {
    ...webhookHttpDeps(config),
    retryDelayMs: (n) => webhookRetryDelayMs(n, config.webhook.retryScale),
    giveUpAfterMs: WEBHOOK_GIVE_UP_SECONDS * 1000 * config.webhook.retryScale,
    scheduleRetry: async (accountId, at) => {
      await queue.add(
        'retry',
        { accountId },
        { delay: Math.max(0, at.getTime() - Date.now()), jobId: `retry-${accountId}-${at.getTime()}`, removeOnComplete: true, removeOnFail: 100 },
      );
    },
    stopping: () => stopped,
  };

  let stopped = false;

  /**
   * One ordered stream per account and channel. The channels drain independently (MQTT never waits behind a
   * slow webhook), each under its own per-account Redis lock, so one drainer per account and channel runs
   * across all workers.
   */
  type Channel = {
    name: 'webhook' | 'mqtt';
    drain: (accountId: string) => Promise<void>;
    running: Set<string>;
    dirty: Set<string>;
  };
  const channels: Channel[] = [
    {
      name: 'webhook',
      drain: (id) => drainWebhook(svc, webhookDeps, id),
      running: new Set(),
      dirty: new Set(),
    },
    ...(deps.publish
      ? [
          {
            name: 'mqtt' as const,
            drain: (id: string) => drainMqtt(svc, deps.publish!, id),
            running: new Set<string>(),
            dirty: new Set<string>(),
          },
        ]
      : []),
  ];
  const lockKey = (ch: Channel, id: string) => `${config.redisPrefix}:push-lock:${ch.name}:${id}`;

  async function drainOnce(ch: Channel, accountId: string): Promise<boolean> {
    const token = randomUUID();
    const got = await redis.set(lockKey(ch, accountId), token, 'PX', LOCK_TTL_MS, 'NX');
    if (got !== 'OK') return false; // another drainer has it; it re-checks after releasing
    const renew = setInterval(() => {
      redis.eval(RENEW_IF_OURS, 1, lockKey(ch, accountId), token, LOCK_TTL_MS).catch(() => undefined);
    }, LOCK_RENEW_MS);
    try {
      do {
        ch.dirty.delete(accountId);
        await ch.drain(accountId);
      } while (ch.dirty.has(accountId) && !stopped);
    } finally {
      clearInterval(renew);
      // Release only our own lock.
      await redis.eval("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end", 1, lockKey(ch, accountId), token);
    }
    return true;
  }

  async function run(ch: Channel, accountId: string): Promise<void> {
    ch.running.add(accountId);
    try {
      // After releasing the lock, go again if an event was announced meanwhile (every process hears every
      // NOTIFY, so the holder of the lock sees the events committed while it held it; the sweeper backs this up).
      for (let i = 0; i < 100 && !stopped; i++) {
        const drained = await drainOnce(ch, accountId);
        if (!drained || !ch.dirty.has(accountId)) break;
      }
    } catch (err) {
      log.error({ err, accountId, channel: ch.name }, 'push drain failed');
    } finally {
      ch.running.delete(accountId);
    }
  }

  /**
   * Wake-ups arrive in bursts (a NOTIFY per committed event): they are gathered for one turn of the event loop
   * and checked in one query, and a channel is drained only for accounts that have something due on it (most
   * accounts have no webhook and no MQTT client: their events cost no lock and no drain).
   */
  const kicked = new Set<string>();
  let kickScheduled = false;
  function kick(accountId: string): void {
    if (stopped) return;
    kicked.add(accountId);
    if (!kickScheduled) {
      kickScheduled = true;
      setImmediate(() => void flushKicks());
    }
  }
  async function flushKicks(): Promise<void> {
    kickScheduled = false;
    const ids = [...kicked];
    kicked.clear();
    if (!ids.length || stopped) return;
    try {
      const rows = await sqlRows(
        svc.db,
        sql<{ id: string; webhook: boolean; mqtt: boolean }>`
        SELECT ${a.id}, ${webhookDue} AS webhook, ${mqttDue} AS mqtt
        FROM ${a.$} WHERE ${a.id} = ANY(${ids}::text[])`,
      );
      for (const r of rows) {
        for (const ch of channels) {
          if (!r[ch.name]) continue;
          if (ch.running.has(r.id)) ch.dirty.add(r.id);
          else void run(ch, r.id);
        }
      }
    } catch (err) {
      // The sweeper re-drives whatever this missed.
      logQueueError(log, 'push wake-up check failed')(err);
    }
  }

  // Wake-ups: NOTIFY at commit; after a reconnect (PostgreSQL restarted), the sweep finds what was missed.
  const listener = await listenForever({
    databaseUrl: config.directDatabaseUrl,
    channel: EVENTS_CHANNEL,
    log,
    onNotify: kick,
    onReconnect: () => void sweep().catch(logQueueError(log, 'push sweep failed')),
  });

  // Wake-ups: scheduled retries.
  const retryConnection = createRedis(config);
  const retryWorker = new Worker<PushJob>(PUSH_QUEUE, async (job) => kick(job.data.accountId), {
    connection: retryConnection as ConnectionOptions,
    prefix: config.redisPrefix,
    concurrency: 10,
  });
  retryWorker.on('error', logQueueError(log, 'push retry worker error'));

  // Wake-ups: anything left behind.
  const sweep = async (): Promise<number> => {
    const rows = await sqlRows(svc.db, sql<{ id: string }>`SELECT ${a.id} FROM ${a.$} WHERE ${webhookDue} OR ${mqttDue} LIMIT 1000`);
    for (const r of rows) kick(r.id);
    return rows.length;
  };
  const timer = setInterval(() => void sweep().catch(logQueueError(log, 'push sweep failed')), SWEEP_MS);
  timer.unref();
  void sweep().catch(() => undefined);

  return {
    kick,
    sweep,
    async stop() {
      stopped = true;
      clearInterval(timer);
      await retryWorker.close();
      await listener.close();
      // A drain in flight finishes the delivery in hand (bounded by the webhook timeout), records it, schedules
      // its retry and releases its account lock while Redis is still connected: a lock left behind would stall
      // that account's webhook on every other worker until the lock's TTL runs out.
      const deadline = Date.now() + config.webhook.timeoutMs + 5_000;
      while (channels.some((ch) => ch.running.size) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      webhookDeps.agent?.destroy();
      await queue.close();
      retryConnection.disconnect();
      redis.disconnect();
    },
  };
}
