/**
 * streamEvents: GET /events/stream (Server-Sent Events) as an async iterator. It reconnects by itself when the
 * connection drops, sending the id of the last event it yielded as Last-Event-ID, so a loop over it sees
 * every event of the stream once, in order. No dependencies: the SSE parsing is the few rules of the format.
 */
import type { BoxesEvent } from './index';

export interface StreamEventsOptions {
  /** The site (http://localhost:3000) or the API base (http://localhost:3000/api/v1). */
  baseUrl: string;
  /** A bxs_live_ key with the receive scope. */
  apiKey: string;
  /** Start after this cursor (a seq or a next_cursor of GET /events); default: from the first event. */
  since?: string;
  /** Only these event types. */
  types?: string[];
  /** Stops the iteration (the loop ends without an error). */
  signal?: AbortSignal;
  /** Wait before reconnecting after a dropped connection, unless the server said otherwise (retry:). Default 1000. */
  reconnectDelayMs?: number;
  fetch?: typeof fetch;
}

/** A refusal of the stream (bad key, missing scope, bad cursor): the same code, status and request_id as REST. */
export class BoxesStreamError extends Error {
  override name = 'BoxesStreamError';
  constructor(
    message: string,
    readonly code: string,
    readonly status: number,
    readonly requestId: string | null,
    readonly details: Record<string, unknown>,
  ) {
    super(message);
  }
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });

export async function* streamEvents(options: StreamEventsOptions): AsyncGenerator<BoxesEvent, void, undefined> {
  const f = options.fetch ?? fetch;
  const site = options.baseUrl.replace(/\/+$/, '').replace(/\/api\/v1$/, '');
  const url = new URL(`${site}/api/v1/events/stream`);
  if (options.types?.length) url.searchParams.set('type', options.types.join(','));
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  options.signal?.addEventListener('abort', onAbort, { once: true });
  let lastId = options.since ?? '';
  let delay = options.reconnectDelayMs ?? 1000;
  try {
    while (!stop.signal.aborted) {
      let res: Response;
      try {
        res = await f(url, {
          headers: { authorization: `Bearer ${options.apiKey}`, accept: 'text/event-stream', ...(lastId ? { 'last-event-id': lastId } : {}) },
          signal: stop.signal,
        });
      } catch {
        await sleep(delay, stop.signal);
        continue;
      }
      if (!res.ok || !res.body) {
        const text = await res.text().catch(() => '');
        if (res.status >= 400 && res.status < 500 && res.status !== 408 && res.status !== 429) {
          let err: { code?: string; message?: string; request_id?: string } & Record<string, unknown> = {};
          try {
            err = (JSON.parse(text) as { error: typeof err }).error ?? {};
          } catch {
            // not JSON
          }
          const { code, message, request_id, ...details } = err;
          throw new BoxesStreamError(message ?? `GET /events/stream: ${res.status}`, code ?? `http_${res.status}`, res.status, request_id ?? null, details);
        }
        await sleep(delay, stop.signal);
        continue;
      }
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      let data: string[] = [];
      let id: string | null = null;
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          const lines = buffer.split(/\r\n|\r|\n/);
          buffer = lines.pop() ?? '';
          for (const line of lines) {
            if (line === '') {
              // End of a message: an id moves the cursor even when no data came with it.
              if (id !== null) lastId = id;
              const payload = data.join('\n');
              data = [];
              id = null;
              if (payload) yield JSON.parse(payload) as BoxesEvent;
              continue;
            }
            if (line.startsWith(':')) continue;
            const colon = line.indexOf(':');
            const field = colon === -1 ? line : line.slice(0, colon);
            const v = colon === -1 ? '' : line.slice(colon + 1).replace(/^ /, '');
            if (field === 'data') data.push(v);
            else if (field === 'id' && !v.includes('\0')) id = v;
            else if (field === 'retry' && /^\d+$/.test(v)) delay = Number(v);
          }
        }
      } catch {
        // The connection dropped: reconnect below.
      } finally {
        reader.cancel().catch(() => undefined);
      }
      if (!stop.signal.aborted) await sleep(delay, stop.signal);
    }
  } finally {
    options.signal?.removeEventListener('abort', onAbort);
    stop.abort();
  }
}
