/**
 * The push engine: every committed event reaches the account's webhook, its webhook endpoints and MQTT
 * subscribers, in order, at least once. PostgreSQL NOTIFY (sent by each append at commit) wakes the drainer of that account at once; a Redis lock
 * keeps one drainer per account across all workers; webhook retries are delayed BullMQ jobs; and a sweeper
 * re-drives any account whose cursors lag its chain head (a missed notification, a crash mid-delivery). Each
 * webhook endpoint is its own stream with its own lock and drain, run concurrently with the others: a hung or
 * dead endpoint costs its own drain a timeout per attempt and delays no one else.
 */
import { randomUUID } from 'node:crypto';
import { Queue, Worker, type ConnectionOptions } from 'bullmq';
import type { Config } from '@boxes/config';
import {
  drainEndpoint,
  EVENTS_CHANNEL,
  mqttStream,
  webhookHttpDeps,
  webhookStream,
  type PublishFn,
  type PushStream,
  type Services,
  type WebhookDeps,
} from '@boxes/core';
import { parameterRows, poolRows as sqlRows, sql, tbl } from '@boxes/db';
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
/**
 * A drainer keeps its lock (and its cursor, in memory) this long after its last delivery, so an account with a
 * steady stream of events costs no lock round trips and no cursor read per event; what it delivered is recorded
 * once the stream has been idle FLUSH_IDLE_MS, and when it lets go.
 */
const LINGER_MS = 2_000;
const FLUSH_IDLE_MS = 200;
/**
 * Wake-ups are gathered this long before they are acted on: the drains they start read together (readPushDue
 * answers every read of one turn in one statement), so at a steady rate each read carries the events of several
 * NOTIFYs instead of one. In bench:push (200 events/s over 10 accounts) 10 ms took the statements per event from
 * 2.1 to 1.45 and about a quarter off the server's and PostgreSQL's CPU per event, for about that much latency.
 */
const WAKE_GATHER_MS = 10;

const a = tbl('accounts', 'a');
const cred = tbl('iot_credentials', 'c');
/** An account with events for its webhook, no retry pending in the future. */
const webhookDue = sql<boolean>`(${a.callback_webhook} IS NOT NULL AND ${a.webhook_cursor} < ${a.chain_seq}
  AND (${a.webhook_next_attempt_at} IS NULL OR ${a.webhook_next_attempt_at} <= now()))`;
const we = tbl('webhook_endpoints', 'we');
/** The enabled webhook endpoints of an account with events after their cursor and no retry pending in the future. */
const endpointsDue = sql<string[]>`ARRAY(SELECT ${we.id} FROM ${we.$} WHERE ${we.account_id} = ${a.id} AND ${we.enabled}
  AND ${we.cursor} < ${a.chain_seq} AND (${we.next_attempt_at} IS NULL OR ${we.next_attempt_at} <= now()))`;
/** An account with events for MQTT and a live IoT credential. */
const mqttDue = sql<boolean>`(${a.mqtt_cursor} < ${a.chain_seq}
  AND EXISTS (SELECT 1 FROM ${cred.$} WHERE ${cred.account_id} = ${a.id} AND ${cred.revoked_at} IS NULL))`;

/**
 * Which of the accounts woken have something due, on which channel: one row of parameters per account
 * (parameterRows), so each connection keeps its plan; as one array of ids it was planned on every check.
 */
export const WAKE_CHECK = parameterRows<string, { id: string; webhook: boolean; mqtt: boolean; endpoints: string[] }>({
  types: ['text'],
  values: (id) => [id],
  build: (values) => sql`SELECT ${a.id}, ${webhookDue} AS webhook, ${mqttDue} AS mqtt, ${endpointsDue} AS endpoints
    FROM ${values} AS q(i, id) JOIN ${a.$} ON ${a.id} = q.id`,
});

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
    scheduleRetry: async (accountId, at, endpointId) => {
      await queue.add(
        'retry',
        { accountId },
        {
          delay: Math.max(0, at.getTime() - Date.now()),
          jobId: `retry-${endpointId ?? accountId}-${at.getTime()}`,
          removeOnComplete: true,
          removeOnFail: 100,
        },
      );
    },
    stopping: () => stopped,
  };

  let stopped = false;
  let stopping: Promise<void> | null = null;

  /**
   * One ordered stream per account and channel. The channels drain independently (MQTT never waits behind a
   * slow webhook), each under its own per-account Redis lock, so one drainer per account and channel runs
   * across all workers.
   */
  type Channel = {
    name: 'webhook' | 'mqtt' | 'endpoint';
    open: (accountId: string) => PushStream;
    running: Set<string>;
    dirty: Set<string>;
    /** Lingering drainers waiting for a wake-up. */
    waiting: Map<string, () => void>;
  };
  const channels: (Channel & { name: 'webhook' | 'mqtt' })[] = [
    {
      name: 'webhook',
      open: (id) => webhookStream(svc, webhookDeps, id),
      running: new Set(),
      dirty: new Set(),
      waiting: new Map(),
    },
    ...(deps.publish
      ? [
          {
            name: 'mqtt' as const,
            open: (id: string) => mqttStream(svc, deps.publish!, id),
            running: new Set<string>(),
            dirty: new Set<string>(),
            waiting: new Map<string, () => void>(),
          },
        ]
      : []),
  ];
  /** Webhook endpoints: keyed by endpoint id (not account id), so each endpoint drains on its own. */
  const endpointChannel: Channel = {
    name: 'endpoint',
    open: (id) => ({ drain: () => drainEndpoint(svc, webhookDeps, id), flush: async () => undefined }),
    running: new Set(),
    dirty: new Set(),
    waiting: new Map(),
  };
  const allChannels = [...channels, endpointChannel];
  const lockKey = (ch: Channel, id: string) => `${config.redisPrefix}:push-lock:${ch.name}:${id}`;

  /** Resolves true when the account's channel is woken within ms, false when it is not. */
  function wokenWithin(ch: Channel, accountId: string, ms: number): Promise<boolean> {
    if (ch.dirty.has(accountId) || stopped) return Promise.resolve(ch.dirty.has(accountId));
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        ch.waiting.delete(accountId);
        resolve(false);
      }, ms);
      ch.waiting.set(accountId, () => {
        clearTimeout(timer);
        ch.waiting.delete(accountId);
        resolve(true);
      });
    });
  }

  async function drainOnce(ch: Channel, accountId: string): Promise<boolean> {
    const token = randomUUID();
    const got = await redis.set(lockKey(ch, accountId), token, 'PX', LOCK_TTL_MS, 'NX');
    if (got !== 'OK') return false; // another drainer has it; it re-checks after releasing
    const renew = setInterval(() => {
      redis.eval(RENEW_IF_OURS, 1, lockKey(ch, accountId), token, LOCK_TTL_MS).catch(() => undefined);
    }, LOCK_RENEW_MS);
    const stream = ch.open(accountId);
    try {
      for (;;) {
        do {
          ch.dirty.delete(accountId);
          await stream.drain();
        } while (ch.dirty.has(accountId) && !stopped);
        // Linger with the lock: every process hears every NOTIFY, so the events of this account wake this
        // drainer (wake() below) while others find the lock taken.
        const idleSince = Date.now();
        let woken = false;
        while (!stopped && !woken) {
          woken = await wokenWithin(ch, accountId, FLUSH_IDLE_MS);
          if (!woken) await stream.flush();
          if (Date.now() - idleSince >= LINGER_MS) break;
        }
        if (!woken || stopped) break;
      }
    } finally {
      clearInterval(renew);
      try {
        await stream.flush();
      } finally {
        // Release only our own lock.
        await redis.eval("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end", 1, lockKey(ch, accountId), token);
      }
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
   * Wake-ups arrive in bursts (a NOTIFY per committed event): they are gathered for WAKE_GATHER_MS and checked
   * in one query, and a channel is drained only for accounts that have something due on it (most
   * accounts have no webhook and no MQTT client: their events cost no lock and no drain).
   */
  const kicked = new Set<string>();
  let kickScheduled = false;
  function kick(accountId: string): void {
    if (stopped) return;
    kicked.add(accountId);
    if (!kickScheduled) {
      kickScheduled = true;
      setTimeout(() => void flushKicks(), WAKE_GATHER_MS);
    }
  }
  const wake = (ch: Channel, id: string) => {
    if (ch.running.has(id)) {
      ch.dirty.add(id);
      ch.waiting.get(id)?.();
    } else void run(ch, id);
  };
  /**
   * The last check of each account woken lately. While every channel it found due is drained here (its drainer
   * lingers with the lock) and no webhook endpoint was due, a wake-up within RECHECK_MS goes straight to those
   * drainers, which read the account's state anyway: a busy account costs one check a second, not one per event.
   * A channel or endpoint configured meanwhile is found by the next check (or the sweep).
   */
  const checked = new Map<string, { at: number; due: Set<Channel['name']> }>();
  const RECHECK_MS = 1_000;
  async function flushKicks(): Promise<void> {
    kickScheduled = false;
    const ids: string[] = [];
    const now = Date.now();
    for (const id of kicked) {
      const last = checked.get(id);
      if (last && now - last.at < RECHECK_MS && last.due.size && channels.every((ch) => !last.due.has(ch.name) || ch.running.has(id))) {
        for (const ch of channels) if (last.due.has(ch.name)) wake(ch, id);
      } else ids.push(id);
    }
    kicked.clear();
    if (!ids.length || stopped) return;
    try {
      const rows = await WAKE_CHECK.run(svc.db, ids);
      const at = Date.now();
      for (const r of rows) {
        const due = new Set<Channel['name']>();
        for (const ch of channels)
          if (r[ch.name]) {
            due.add(ch.name);
            wake(ch, r.id);
          }
        for (const endpointId of r.endpoints) wake(endpointChannel, endpointId);
        if (r.endpoints.length) checked.delete(r.id);
        else checked.set(r.id, { at, due });
      }
      if (checked.size > 10_000) for (const [id, c] of checked) if (at - c.at >= RECHECK_MS) checked.delete(id);
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
    const rows = await sqlRows(
      svc.db,
      sql<{ id: string }>`SELECT ${a.id} FROM ${a.$} WHERE ${webhookDue} OR ${mqttDue} OR cardinality(${endpointsDue}) > 0 LIMIT 1000`,
    );
    for (const r of rows) kick(r.id);
    return rows.length;
  };
  const timer = setInterval(() => void sweep().catch(logQueueError(log, 'push sweep failed')), SWEEP_MS);
  timer.unref();
  void sweep().catch(() => undefined);

  return {
    kick,
    sweep,
    stop() {
      // Once: a runtime stops its worker's engine again after a caller (bench:push) stopped it; a second call
      // waits for the first.
      stopping ??= (async () => {
        stopped = true;
        clearInterval(timer);
        // Lingering drainers let go now (recording what they delivered).
        for (const ch of allChannels) for (const release of [...ch.waiting.values()]) release();
        await retryWorker.close();
        await listener.close();
        // A drain in flight finishes the delivery in hand (bounded by the webhook timeout), records it, schedules
        // its retry and releases its account lock while Redis is still connected: a lock left behind would stall
        // that account's webhook on every other worker until the lock's TTL runs out.
        const deadline = Date.now() + config.webhook.timeoutMs + 5_000;
        while (allChannels.some((ch) => ch.running.size) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
        webhookDeps.agent?.destroy();
        await queue.close();
        retryConnection.disconnect();
        redis.disconnect();
      })();
      return stopping;
    },
  };
}
