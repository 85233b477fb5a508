/**
 * GET /api/v1/events/stream: the account's event stream as Server-Sent Events, on the API's own port, for
 * agents that cannot receive a webhook. The same events, filters and cursor as GET /events: each event is one
 * SSE message whose id is its seq, so a client that reconnects with Last-Event-ID (or ?since=) resumes right
 * after the last event it saw.
 *
 * Nothing here lives in one process's memory: every append NOTIFYs boxes_events with its account, wherever it
 * was made; one LISTEN connection per server process (opened while streams are open) wakes the streams of
 * that account, and each stream reads its next page from PostgreSQL. A heartbeat comment is written when
 * nothing was sent for a while; the stream also re-reads then, in case a notification was lost with a
 * dropped LISTEN connection.
 */
import pg from 'pg';
import { authenticateCall, toAppError } from '@boxes/api';
import { AppError, EVENTS_CHANNEL, listEvents, newId, parseCursor, type Services } from '@boxes/core';
import type { Logger } from './logger';
import { errorResponse } from './rest';

/** Events read per page; a stream keeps reading pages while more are waiting. */
const PAGE = 200;

type Waker = () => void;

/** One LISTEN connection per process, open while at least one stream is. */
class EventWakeHub {
  private readonly wakers = new Map<string, Set<Waker>>();
  private client: pg.Client | null = null;
  private connecting: Promise<void> | null = null;
  private retry: NodeJS.Timeout | null = null;

  constructor(
    private readonly databaseUrl: string,
    private readonly log: Logger,
  ) {}

  /** Registers a stream; resolves once notifications are being received (or the retry loop has taken over). */
  async subscribe(accountId: string, wake: Waker): Promise<() => void> {
    let set = this.wakers.get(accountId);
    if (!set) {
      set = new Set();
      this.wakers.set(accountId, set);
    }
    set.add(wake);
    await this.ensureListening();
    return () => {
      const s = this.wakers.get(accountId);
      s?.delete(wake);
      if (s && s.size === 0) this.wakers.delete(accountId);
      if (this.wakers.size === 0) this.close();
    };
  }

  private ensureListening(): Promise<void> {
    if (this.client) return Promise.resolve();
    if (!this.connecting) {
      this.connecting = this.connect().finally(() => {
        this.connecting = null;
      });
    }
    return this.connecting;
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({ connectionString: this.databaseUrl, connectionTimeoutMillis: 5000 });
    const lost = (err?: Error) => {
      if (this.client !== client) return;
      this.client = null;
      client.end().catch(() => undefined);
      if (err) this.log.warn({ err: err.message }, 'event stream listener lost its connection; reconnecting');
      this.scheduleReconnect();
    };
    client.on('notification', (msg) => {
      if (msg.channel !== EVENTS_CHANNEL || !msg.payload) return;
      for (const wake of this.wakers.get(msg.payload) ?? []) wake();
    });
    client.on('error', (err) => lost(err));
    client.on('end', () => lost());
    try {
      await client.connect();
      await client.query(`LISTEN ${EVENTS_CHANNEL}`);
    } catch (err) {
      client.end().catch(() => undefined);
      this.log.warn({ err: (err as Error).message }, 'event stream listener could not connect; streams fall back to the heartbeat re-read');
      this.scheduleReconnect();
      return;
    }
    if (this.wakers.size === 0) {
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
    // Whatever was appended while not listening.
    for (const set of this.wakers.values()) for (const wake of set) wake();
  }

  private scheduleReconnect() {
    if (this.retry || this.wakers.size === 0) return;
    this.retry = setTimeout(() => {
      this.retry = null;
      if (this.wakers.size > 0) void this.ensureListening();
    }, 1000);
    this.retry.unref();
  }

  private close() {
    if (this.retry) clearTimeout(this.retry);
    this.retry = null;
    const c = this.client;
    this.client = null;
    c?.end().catch(() => undefined);
  }
}

const encoder = new TextEncoder();

/** SSE field values must not contain line breaks; JSON.stringify never emits raw ones. */
function sseMessage(seq: number, json: string): string {
  return `id: ${seq}\ndata: ${json}\n\n`;
}

export function createEventStreamHandler(svc: Services, log: Logger) {
  const hub = new EventWakeHub(svc.config.directDatabaseUrl, log);
  // Below the idle timeout, or the server would close a quiet stream.
  const heartbeatMs = Math.max(50, Math.min(svc.config.http.sseHeartbeatMs, Math.floor(svc.config.http.idleTimeoutMs / 2)));

  // Streams open on this process per API key: one key may not hold the server's connections and LISTEN wake-ups
  // without bound (SSE_MAX_STREAMS_PER_KEY; beyond it 429, the stream refused before it starts).
  const openByKey = new Map<string, number>();

  return async (req: Request): Promise<Response> => {
    const requestId = newId('req');
    const url = new URL(req.url);
    const responseHeaders = new Headers();
    let auth: Awaited<ReturnType<typeof authenticateCall>>;
    let cursor: number;
    let types: string[] | undefined;
    try {
      auth = await authenticateCall({ svc, authorization: req.headers.get('authorization'), responseHeaders }, { scope: 'receive' });
      for (const name of url.searchParams.keys()) {
        if (!['since', 'type'].includes(name)) {
          throw new AppError('validation_error', `unknown query parameter ${name.slice(0, 40)}; this route takes since and type`, {
            fields: [{ path: name.slice(0, 40), message: 'unknown parameter' }],
          });
        }
      }
      // Last-Event-ID is what a reconnecting EventSource sends: it wins over the since of the original URL.
      const lastEventId = req.headers.get('last-event-id');
      const since = lastEventId !== null && lastEventId.trim() !== '' ? lastEventId.trim() : (url.searchParams.get('since') ?? undefined);
      cursor = parseCursor(since);
      const type = url.searchParams.get('type');
      if (type !== null && type.length > 500)
        throw new AppError('validation_error', 'type: at most 500 characters', { fields: [{ path: 'type', message: 'too long' }] });
      types = type
        ?.split(',')
        .map((s) => s.trim())
        .filter(Boolean);
      // A cursor ahead of the stream is refused here, as GET /events refuses it, before the stream starts.
      await listEvents({ db: svc.db, accountId: auth.account.id, since: String(cursor), types, limit: 1, boxIds: auth.boxScope });
    } catch (err) {
      const e = toAppError(err);
      return errorResponse(e, requestId, Object.fromEntries(responseHeaders));
    }
    const accountId = auth.account.id;
    const boxIds = auth.boxScope;
    const keyId = auth.key.id;
    const max = svc.config.http.sseMaxStreamsPerKey;
    const open = openByKey.get(keyId) ?? 0;
    if (open >= max) {
      const e = new AppError(
        'rate_limited',
        `This API key already holds ${open} open event streams on this server (at most ${max}); close one, or use one stream per agent.`,
        {
          retry_after_seconds: 5,
          limit: max,
        },
      );
      return errorResponse(e, requestId, Object.fromEntries(responseHeaders));
    }
    openByKey.set(keyId, open + 1);
    let counted = true;
    const release = () => {
      if (!counted) return;
      counted = false;
      const n = (openByKey.get(keyId) ?? 1) - 1;
      if (n <= 0) openByKey.delete(keyId);
      else openByKey.set(keyId, n);
    };

    let wakeUp: (() => void) | null = null;
    let pending = true;
    const wake = () => {
      pending = true;
      const w = wakeUp;
      wakeUp = null;
      w?.();
    };
    let closed = false;
    let unsubscribe: (() => void) | null = null;
    // Backpressure: after a page, the loop waits until the response has taken it (pull), so a slow client
    // holds at most one page in memory, however long the backlog.
    let pulled: (() => void) | null = null;
    const onPull = () => {
      const p = pulled;
      pulled = null;
      p?.();
    };
    const finish = () => {
      release();
      if (closed) return;
      closed = true;
      unsubscribe?.();
      wake();
      onPull();
    };
    req.signal.addEventListener('abort', finish, { once: true });

    const stream = new ReadableStream<Uint8Array>({
      // The loop runs beside start, not in it: pull is called only once start has returned.
      start: (controller) => void run(controller),
      pull: () => onPull(),
      cancel: () => finish(),
    });

    async function run(controller: ReadableStreamDefaultController<Uint8Array>) {
      const write = (s: string) => {
        if (!closed) controller.enqueue(encoder.encode(s));
      };
      const taken = () =>
        closed || controller.desiredSize === null || controller.desiredSize > 0 ? Promise.resolve() : new Promise<void>((resolve) => (pulled = resolve));
      // retry: how long an EventSource waits before reconnecting; the comment opens the stream at once.
      write(`retry: 1000\n: connected; resuming after event ${cursor}\n\n`);
      try {
        unsubscribe = await hub.subscribe(accountId, wake);
        if (closed) unsubscribe();
        while (!closed) {
          if (pending) {
            pending = false;
            // Read until nothing more is waiting; a wake during the reads sets pending again.
            for (;;) {
              const page = await listEvents({ db: svc.db, accountId, since: String(cursor), types, limit: PAGE, boxIds });
              let out = '';
              for (const e of page.events) out += sseMessage(e.seq, JSON.stringify(e));
              const next = Number(page.next_cursor);
              const last = page.events[page.events.length - 1];
              // Events this key may not see (or did not ask for) moved the cursor past the last one sent: an
              // id-only message moves the client's Last-Event-ID there too, and dispatches nothing.
              if (next > (last?.seq ?? cursor)) out += `id: ${next}\n\n`;
              cursor = next;
              if (out) {
                write(out);
                await taken();
              }
              if (!page.has_more || closed) break;
            }
            continue;
          }
          const woke = await new Promise<boolean>((resolve) => {
            const timer = setTimeout(() => {
              wakeUp = null;
              resolve(false);
            }, heartbeatMs);
            timer.unref();
            wakeUp = () => {
              clearTimeout(timer);
              resolve(true);
            };
          });
          if (!woke && !closed) {
            // A key revoked meanwhile (or by closing the account) ends the stream; reconnecting then gets 401.
            const key = await svc.db.apiKey.findUnique({ where: { id: keyId }, select: { revokedAt: true } });
            if (!key || key.revokedAt) {
              write(': the API key was revoked\n\n');
              break;
            }
            write(': heartbeat\n\n');
            pending = true;
          }
        }
      } catch (err) {
        if (!closed) log.error({ err: (err as Error).message, requestId }, 'event stream failed');
      } finally {
        finish();
        try {
          controller.close();
        } catch {
          // Already closed by the client going away.
        }
      }
    }

    const headers = new Headers(responseHeaders);
    headers.set('content-type', 'text/event-stream; charset=utf-8');
    headers.set('cache-control', 'no-cache, no-transform');
    headers.set('connection', 'keep-alive');
    // Proxies such as nginx buffer responses unless told not to.
    headers.set('x-accel-buffering', 'no');
    headers.set('x-request-id', requestId);
    return new Response(stream, { status: 200, headers });
  };
}
