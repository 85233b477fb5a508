/**
 * What the workers do while PostgreSQL is away: a job that failed because the database cannot be reached goes
 * back to its queue without using up an attempt, and the queue pauses for OUTAGE_PAUSE_MS before it tries
 * again (BullMQ's manual rate limit, shared by every worker of that queue). When the database answers again
 * the jobs run as if nothing happened. LISTEN connections reconnect by themselves and catch up on what they
 * missed. (While Redis is away BullMQ itself waits: its connections reconnect and the workers resume.)
 */
import { Worker } from 'bullmq';
import pg from 'pg';
import { isServiceUnavailable, type Services } from '@boxes/core';
import { rows, sql } from '@boxes/db';
import type { Logger } from 'pino';

export const OUTAGE_PAUSE_MS = 2000;

async function databaseAnswers(svc: Services): Promise<boolean> {
  try {
    await rows(svc.db, sql`SELECT 1`);
    return true;
  } catch {
    return false;
  }
}

/**
 * Rethrows err, unless it says the database is unreachable and a ping agrees: then the queue pauses and the job
 * goes back to waiting with its attempts untouched.
 */
export async function pauseOnOutage(worker: Worker, svc: Services, log: Logger, err: unknown): Promise<never> {
  if (isServiceUnavailable(err) && !(await databaseAnswers(svc))) {
    log.warn({ queue: worker.name, pauseMs: OUTAGE_PAUSE_MS }, 'database unreachable: queue paused');
    await worker.rateLimit(OUTAGE_PAUSE_MS);
    throw Worker.RateLimitError();
  }
  throw err;
}

/**
 * Runs a step of a worker's start that needs Redis or PostgreSQL (scheduling the repeatable jobs), again after a
 * short wait when the dependency is slow or away for a moment (a machine busy starting many processes), so a
 * worker does not die at start for what a retry a second later gets through. Other errors, and a dependency
 * away for longer, still fail the start.
 */
export async function retryAtStart<T>(log: Logger, what: string, fn: () => Promise<T>, attempts = 5): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await fn();
    } catch (err) {
      if (i >= attempts || !isServiceUnavailable(err)) throw err;
      log.warn({ what, attempt: i, err: (err as Error).message }, 'dependency slow at start: trying again');
      await new Promise((r) => setTimeout(r, 500 * i));
    }
  }
}

/**
 * The 'error' listener of a BullMQ worker or queue, and the catch of a periodic sweep: PostgreSQL or Redis
 * unreachable is an expected condition (connections retry by themselves, the next sweep runs anyway), logged as a
 * warning with its message; anything else as an error with its stack.
 */
export function logQueueError(log: Logger, what: string): (err: unknown) => void {
  return (err) => {
    if (isServiceUnavailable(err)) log.warn({ err: (err as Error).message }, `${what}: dependency unreachable, retrying`);
    else log.error({ err }, what);
  };
}

export interface Listener {
  close(): Promise<void>;
}

/** active: its own LISTEN is done (listenForever answered); only then is it told of notifications and reconnects. */
type Subscriber = { channel: string; onNotify: (payload: string) => void; onReconnect: () => void; active: boolean };

/** Calls a listener's callback; one that throws neither stops the others nor fails the connection. */
function tell(hub: Hub, s: Subscriber, call: () => void): void {
  if (!s.active) return;
  try {
    call();
  } catch (err) {
    hub.log.error({ err, channel: s.channel }, 'event listener callback failed');
  }
}

/** The LISTEN connection to one database, shared by every listener of this process on it. */
interface Hub {
  url: string;
  log: Logger;
  subscribers: Set<Subscriber>;
  client: pg.Client | null;
  /** The channels the current connection LISTENs on. */
  listening: Set<string>;
  /** Changes to the connection run one after the other. */
  queue: Promise<unknown>;
  retryTimer: NodeJS.Timeout | null;
  delay: number;
}
const hubs = new Map<string, Hub>();

/** The channels the hub's listeners want, each once. */
function channelsOf(hub: Hub): string[] {
  return [...new Set([...hub.subscribers].map((s) => s.channel))];
}

function runInHub<T>(hub: Hub, op: () => Promise<T>): Promise<T> {
  const next = hub.queue.then(op, op);
  hub.queue = next.catch(() => undefined);
  return next;
}

/** Connects and LISTENs on every channel subscribed to (the hub's queue runs it). */
async function connectHub(hub: Hub): Promise<void> {
  const c = new pg.Client({ connectionString: hub.url, connectionTimeoutMillis: 5000 });
  let broken = false;
  const onBroken = (err?: Error) => {
    if (broken) return;
    broken = true;
    c.end().catch(() => undefined);
    if (hub.client !== c) return;
    hub.client = null;
    hub.listening = new Set();
    if (!hub.subscribers.size) return;
    if (err) hub.log.warn({ err: err.message, channels: channelsOf(hub) }, 'event listener lost its connection; reconnecting');
    scheduleReconnect(hub);
  };
  c.on('error', onBroken);
  c.on('end', () => onBroken());
  c.on('notification', (msg) => {
    if (!msg.payload) return;
    const payload = msg.payload;
    for (const s of hub.subscribers) if (s.channel === msg.channel) tell(hub, s, () => s.onNotify(payload));
  });
  try {
    await c.connect();
    const channels = channelsOf(hub);
    if (channels.length) await c.query(channels.map((ch) => `LISTEN ${ch}`).join('; '));
    if (!hub.subscribers.size) {
      await c.end().catch(() => undefined);
      return;
    }
    hub.client = c;
    hub.listening = new Set(channels);
    hub.delay = 100;
  } catch (err) {
    broken = true;
    c.end().catch(() => undefined);
    throw err;
  }
}

function scheduleReconnect(hub: Hub): void {
  if (hub.retryTimer || !hub.subscribers.size) return;
  hub.retryTimer = setTimeout(() => {
    hub.retryTimer = null;
    runInHub(hub, async () => {
      if (hub.client || !hub.subscribers.size) return;
      await connectHub(hub);
      // Notifications sent while the connection was down are lost: each listener picks up what it missed.
      for (const s of hub.subscribers) tell(hub, s, () => s.onReconnect());
    }).catch(() => {
      hub.delay = Math.min(hub.delay * 2, 5000);
      scheduleReconnect(hub);
    });
  }, hub.delay);
  hub.retryTimer.unref();
}

/**
 * LISTEN on a channel for as long as the worker runs: when the connection breaks (PostgreSQL restarted) it
 * reconnects, backing off up to 5 s, and calls onReconnect so the caller can pick up notifications it missed.
 * The listeners of a process share one connection per database (the push engine's wake-ups and the billing
 * notices): PostgreSQL wakes every listening connection of the database on every NOTIFY, whatever its channel,
 * so each connection more costs the server a wake-up per event appended anywhere.
 */
export async function listenForever(opts: {
  /**
   * PostgreSQL itself (DIRECT_DATABASE_URL), never a pooler in transaction mode: there LISTEN would hold only
   * until the pooler gave the server connection to another client, and notifications would stop without an error.
   */
  databaseUrl: string;
  channel: string;
  log: Logger;
  onNotify: (payload: string) => void;
  onReconnect: () => void;
}): Promise<Listener> {
  let hub = hubs.get(opts.databaseUrl);
  if (!hub) {
    hub = {
      url: opts.databaseUrl,
      log: opts.log,
      subscribers: new Set(),
      client: null,
      listening: new Set(),
      queue: Promise.resolve(),
      retryTimer: null,
      delay: 100,
    };
    hubs.set(opts.databaseUrl, hub);
  }
  const h = hub;
  const sub: Subscriber = { channel: opts.channel, onNotify: opts.onNotify, onReconnect: opts.onReconnect, active: false };
  const leave = async () => {
    h.subscribers.delete(sub);
    if (h.subscribers.size) return;
    if (hubs.get(h.url) === h) hubs.delete(h.url);
    if (h.retryTimer) clearTimeout(h.retryTimer);
    h.retryTimer = null;
    const c = h.client;
    h.client = null;
    await c?.end().catch(() => undefined);
  };
  h.subscribers.add(sub);
  try {
    await runInHub(h, async () => {
      if (!h.client) {
        // Not connected: connect now, unless a reconnect is already scheduled (it LISTENs on this channel too).
        if (!h.retryTimer) await connectHub(h);
      } else if (!h.listening.has(opts.channel)) {
        await h.client.query(`LISTEN ${opts.channel}`);
        h.listening.add(opts.channel);
      }
    });
  } catch (err) {
    await runInHub(h, leave);
    throw err;
  }
  sub.active = true;
  let closed = false;
  return {
    async close() {
      if (closed) return;
      closed = true;
      await runInHub(h, leave);
    },
  };
}
