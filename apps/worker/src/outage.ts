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

/**
 * LISTEN on a channel for as long as the worker runs: when the connection breaks (PostgreSQL restarted) it
 * reconnects, backing off up to 5 s, and calls onReconnect so the caller can pick up notifications it missed.
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
  let closed = false;
  let client: pg.Client | null = null;
  let retryTimer: NodeJS.Timeout | null = null;
  let delay = 100;

  const connect = async (): Promise<void> => {
    const c = new pg.Client({ connectionString: opts.databaseUrl, connectionTimeoutMillis: 5000 });
    let broken = false;
    const onBroken = (err?: Error) => {
      if (broken) return;
      broken = true;
      if (client === c) client = null;
      c.end().catch(() => undefined);
      if (closed) return;
      if (err) opts.log.warn({ err: err.message, channel: opts.channel }, 'event listener lost its connection; reconnecting');
      schedule(true);
    };
    c.on('error', onBroken);
    c.on('end', () => onBroken());
    c.on('notification', (msg) => {
      if (msg.channel === opts.channel && msg.payload) opts.onNotify(msg.payload);
    });
    await c.connect();
    await c.query(`LISTEN ${opts.channel}`);
    if (closed) {
      await c.end().catch(() => undefined);
      return;
    }
    client = c;
    delay = 100;
  };

  const schedule = (reconnecting: boolean) => {
    if (closed || retryTimer) return;
    retryTimer = setTimeout(() => {
      retryTimer = null;
      connect()
        .then(() => {
          if (reconnecting && !closed) opts.onReconnect();
        })
        .catch(() => {
          delay = Math.min(delay * 2, 5000);
          schedule(reconnecting);
        });
    }, delay);
    retryTimer.unref();
  };

  await connect();
  return {
    async close() {
      closed = true;
      if (retryTimer) clearTimeout(retryTimer);
      await client?.end().catch(() => undefined);
    },
  };
}
