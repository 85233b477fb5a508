/**
 * GET /events/stream (Server-Sent Events) with plain clients: curl -N and the `eventsource` package. Events are
 * appended concurrently by other clients while the connection is dropped and resumed (Last-Event-ID, since):
 * the events seen, put together, are exactly the account's stream, with no gap and no duplicate. A second
 * server on the same database serves the stream of events appended through the first.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import net, { type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventSource } from 'eventsource';
import { BoxesStreamError, streamEvents } from '@boxes/sdk';
import { mintKey, rest, signupAccount, startTestServer, waitFor, type ApiEvent, type TestAccount, type TestServer } from '@boxes/testing';

let t: TestServer;
let t2: TestServer;

beforeAll(async () => {
  // A short heartbeat, so the test sees one without waiting long.
  t = await startTestServer({ env: { SSE_HEARTBEAT_MS: '300' } });
  t2 = await startTestServer({ sameStoreAs: t, env: { SSE_HEARTBEAT_MS: '300' } });
});
afterAll(async () => {
  await t2?.stop();
  await t?.stop();
});

interface SseMessage {
  id: string | null;
  data: string | null;
}

/** Complete SSE messages (ended by a blank line) in a text; comments are returned apart. */
function parseSse(text: string): { messages: SseMessage[]; comments: string[] } {
  const messages: SseMessage[] = [];
  const comments: string[] = [];
  const blocks = text.split('\n\n');
  blocks.pop(); // an unfinished message at the end (the connection was cut mid-way) is not one
  for (const block of blocks) {
    let id: string | null = null;
    let data: string | null = null;
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) comments.push(line.slice(1).trim());
      else if (line.startsWith('id: ')) id = line.slice(4);
      else if (line.startsWith('data: ')) data = (data === null ? '' : `${data}\n`) + line.slice(6);
    }
    if (id !== null || data !== null) messages.push({ id, data });
  }
  return { messages, comments };
}

/** curl -N reading the stream; its output so far. */
function curlStream(url: string, headers: Record<string, string>): { proc: ChildProcess; out: () => string } {
  const args = ['-N', '-sS', ...Object.entries(headers).flatMap(([k, v]) => ['-H', `${k}: ${v}`]), url];
  const proc = spawn('curl', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let text = '';
  proc.stdout!.setEncoding('utf8');
  proc.stdout!.on('data', (c: string) => (text += c));
  return { proc, out: () => text };
}

async function kill(proc: ChildProcess) {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise((r) => proc.once('exit', r));
  proc.kill('SIGTERM');
  await exited;
}

/** Appends events concurrently (box.created, through the API) from several clients until stopped. */
function appender(server: TestServer, key: string, writers = 3) {
  let running = true;
  let made = 0;
  const loops = Array.from({ length: writers }, async (_, w) => {
    for (let i = 0; running; i++) {
      const r = await rest(server, 'POST', '/boxes', { key, body: { address: `s${w}-${i}-${Math.random().toString(36).slice(2, 7)}` } });
      if (r.status !== 200) throw new Error(`box: ${r.status} ${JSON.stringify(r.body)}`);
      made++;
    }
  });
  return {
    made: () => made,
    async stop() {
      running = false;
      await Promise.all(loops);
    },
  };
}

async function allEvents(key: string): Promise<ApiEvent[]> {
  const out: ApiEvent[] = [];
  let since = '0';
  for (;;) {
    const r = await rest<{ events: ApiEvent[]; next_cursor: string; has_more: boolean }>(t, 'GET', `/events?limit=500&since=${since}`, { key });
    out.push(...r.body.events);
    since = r.body.next_cursor;
    if (!r.body.has_more) return out;
  }
}

/** The seqs seen, checked to be exactly the stream: every seq from 1 to the head, once, in order. */
function expectExactly(seen: number[], all: ApiEvent[]) {
  expect(seen.length).toBe(all.length);
  expect(seen).toEqual(all.map((e) => e.seq));
  expect(new Set(seen).size).toBe(seen.length);
}

describe('curl -N', () => {
  it('streams events, resumes after a dropped connection with Last-Event-ID and with since, while events are appended: no gap, no duplicate; heartbeats', async () => {
    const a = await signupAccount(t, 'sse-curl@example.com');
    const url = `${t.apiBase}/events/stream`;
    const auth = { authorization: `Bearer ${a.apiKey}` };
    const writing = appender(t, a.apiKey);
    try {
      // First connection: read a while, then drop it.
      const first = curlStream(url, auth);
      await waitFor('some events on the first connection', () => parseSse(first.out()).messages.filter((m) => m.data).length >= 10, 20_000);
      await kill(first.proc);
      const one = parseSse(first.out()).messages;
      const lastId = one[one.length - 1]!.id!;

      // Second connection resumes with Last-Event-ID (what EventSource sends), the third with ?since=.
      const second = curlStream(url, { ...auth, 'Last-Event-ID': lastId });
      await waitFor('events on the second connection', () => parseSse(second.out()).messages.filter((m) => m.data).length >= 10, 20_000);
      await kill(second.proc);
      const two = parseSse(second.out()).messages;
      const lastId2 = two[two.length - 1]!.id!;

      const third = curlStream(`${url}?since=${lastId2}`, auth);
      await waitFor('events on the third connection', () => parseSse(third.out()).messages.filter((m) => m.data).length >= 5, 20_000);
      await writing.stop();
      const all = await allEvents(a.apiKey);
      const head = all[all.length - 1]!.seq;
      await waitFor('the third connection to reach the head', () => parseSse(third.out()).messages.some((m) => Number(m.id) === head), 20_000);
      // Quiet now: a heartbeat comment follows.
      await waitFor('a heartbeat', () => parseSse(third.out()).comments.includes('heartbeat'), 20_000);
      await kill(third.proc);

      const seen = [one, two, parseSse(third.out()).messages].flatMap((ms) => ms.filter((m) => m.data).map((m) => JSON.parse(m.data!) as ApiEvent));
      for (const e of seen) expect(e.account_id).toBe(a.accountId);
      // Each message's id is its seq, and the events are those of GET /events, hashes included.
      expectExactly(
        seen.map((e) => e.seq),
        all,
      );
      expect(seen.map((e) => e._chain.hash)).toEqual(all.map((e) => e._chain.hash));
      expect(writing.made()).toBeGreaterThan(0);
    } finally {
      await writing.stop();
    }
  });

  it('refuses what GET /events refuses: no key (401 with getting_started), no receive scope (403), a bad or future cursor (400)', async () => {
    const a = await signupAccount(t, 'sse-auth@example.com');
    const url = `${t.apiBase}/events/stream`;
    const none = await fetch(url);
    expect(none.status).toBe(401);
    const body = (await none.json()) as any;
    expect(body.error.code).toBe('unauthorized');
    expect(body.error.getting_started.signup).toBe(`${t.apiBase}/signup/agentic`);
    const sendOnly = await mintKey(t, a.apiKey, ['send', 'admin']);
    const forbidden = await fetch(url, { headers: { authorization: `Bearer ${sendOnly.api_key}` } });
    expect(forbidden.status).toBe(403);
    expect(((await forbidden.json()) as any).error).toMatchObject({ code: 'insufficient_scope', required_scope: 'receive' });
    for (const [query, headers] of [
      ['?since=abc', {}],
      ['?since=999999', {}],
      ['', { 'last-event-id': 'x' }],
      ['?nonsense=1', {}],
    ] as const) {
      const r = await fetch(`${url}${query}`, { headers: { authorization: `Bearer ${a.apiKey}`, ...headers } });
      expect(r.status, query).toBe(400);
      expect(((await r.json()) as any).error.request_id).toMatch(/^req_/);
    }
  });
});

/** A TCP proxy in front of the server whose open connections the test can cut, as a network failure would. */
async function cuttableProxy(target: string) {
  const { hostname, port } = new URL(target);
  const open = new Set<net.Socket>();
  let connections = 0;
  const server = net.createServer((client) => {
    connections++;
    const upstream = net.connect(Number(port), hostname);
    open.add(client);
    open.add(upstream);
    client.pipe(upstream).pipe(client);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    connections: () => connections,
    cut() {
      for (const s of open) s.destroy();
      open.clear();
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

it('a stream ends when its key is revoked, and reconnecting is refused', async () => {
  const a = await signupAccount(t, 'sse-revoke@example.com');
  const k = await mintKey(t, a.apiKey, ['receive']);
  const res = await fetch(`${t.apiBase}/events/stream`, { headers: { authorization: `Bearer ${k.api_key}` } });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let text = '';
  while (!text.includes('"api_key.created"')) text += (await reader.read()).value ?? '';
  expect((await rest(t, 'DELETE', `/account/keys/${k.id}`, { key: a.apiKey })).status).toBe(200);
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += value;
  }
  expect(text).toContain(': the API key was revoked');
  expect((await fetch(`${t.apiBase}/events/stream`, { headers: { authorization: `Bearer ${k.api_key}` } })).status).toBe(401);
});

it('one key holds at most SSE_MAX_STREAMS_PER_KEY (10) open streams on a server: the next is 429 until one closes; other keys are not affected', async () => {
  const a = await signupAccount(t, 'sse-many@example.com');
  const k = await mintKey(t, a.apiKey, ['receive']);
  const open = (key: string) => {
    const ac = new AbortController();
    return fetch(`${t.apiBase}/events/stream`, { headers: { authorization: `Bearer ${key}` }, signal: ac.signal }).then((res) => ({ res, ac }));
  };
  const streams = [];
  for (let i = 0; i < 10; i++) {
    const s = await open(k.api_key);
    expect(s.res.status).toBe(200);
    streams.push(s);
  }
  const refused = await open(k.api_key);
  expect(refused.res.status).toBe(429);
  const body = (await refused.res.json()) as { error: { code: string; message: string; limit: number } };
  expect(body.error).toMatchObject({ code: 'rate_limited', limit: 10 });
  expect(body.error.message).toMatch(/open event streams/);
  // Another key of the same account has its own count.
  const other = await open(a.apiKey);
  expect(other.res.status).toBe(200);
  other.ac.abort();
  // One closes: a new one may open (the server sees the close when the connection goes).
  streams.pop()!.ac.abort();
  await waitFor('a stream slot to be free again', async () => {
    const s = await open(k.api_key);
    if (s.res.status === 200) {
      streams.push(s);
      return true;
    }
    await s.res.body?.cancel();
    return false;
  });
  for (const s of streams) s.ac.abort();
});

/**
 * Cuts the proxied connection three times while events keep being appended (the client must reconnect each
 * time), stops the appends, and checks the client saw exactly the account's stream: no gap, no duplicate.
 */
async function cutThreeTimesThenCompare(
  proxy: Awaited<ReturnType<typeof cuttableProxy>>,
  writing: ReturnType<typeof appender>,
  seen: ApiEvent[],
  apiKey: string,
  client: string,
): Promise<void> {
  for (let cut = 1; cut <= 3; cut++) {
    const before = seen.length;
    await waitFor(`events before cut ${cut}`, () => seen.length >= before + 8, 20_000);
    proxy.cut();
    await waitFor(`reconnection ${cut}`, () => proxy.connections() > cut, 20_000);
  }
  await writing.stop();
  const all = await allEvents(apiKey);
  await waitFor(`${client} to reach the head`, () => seen.length >= all.length && seen[seen.length - 1]!.seq === all[all.length - 1]!.seq, 20_000);
  expectExactly(
    seen.map((e) => e.seq),
    all,
  );
}

describe('the eventsource package', () => {
  it('reconnects by itself after the connection is cut and resumes with Last-Event-ID: every event once, in order', async () => {
    const a = await signupAccount(t, 'sse-es@example.com');
    const proxy = await cuttableProxy(t.url);
    const seen: ApiEvent[] = [];
    const es = new EventSource(`${proxy.url}/api/v1/events/stream`, {
      fetch: (input, init) => fetch(input, { ...init, headers: { ...init.headers, authorization: `Bearer ${a.apiKey}` } }),
    });
    es.onmessage = (m) => seen.push(JSON.parse(m.data) as ApiEvent);
    const writing = appender(t, a.apiKey);
    try {
      await cutThreeTimesThenCompare(proxy, writing, seen, a.apiKey, 'the stream');
    } finally {
      es.close();
      await writing.stop();
      await proxy.close();
    }
  });

  it('a box-restricted key streams only the events of its boxes; type filters; another server on the same database streams what the first appends', async () => {
    const a: TestAccount = await signupAccount(t, 'sse-box@example.com');
    const own = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'watched' } });
    const k = await mintKey(t, a.apiKey, ['receive'], { allowed_boxes: ['watched'] });
    const seen: ApiEvent[] = [];
    const typed: ApiEvent[] = [];
    // On the second server: its own LISTEN connection, its own process state.
    const restricted = new EventSource(`${t2.apiBase}/events/stream`, {
      fetch: (i, init) => fetch(i, { ...init, headers: { ...init.headers, authorization: `Bearer ${k.api_key}` } }),
    });
    restricted.onmessage = (m) => seen.push(JSON.parse(m.data) as ApiEvent);
    const byType = new EventSource(`${t2.apiBase}/events/stream?type=box.signature_updated`, {
      fetch: (i, init) => fetch(i, { ...init, headers: { ...init.headers, authorization: `Bearer ${a.apiKey}` } }),
    });
    byType.onmessage = (m) => typed.push(JSON.parse(m.data) as ApiEvent);
    try {
      await waitFor('the watched box.created', () => seen.some((e) => e.type === 'box.created'), 20_000);
      const other = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'unwatched' } });
      await rest(t, 'PUT', `/boxes/${other.body.id}/signature`, { key: a.apiKey, body: { signature: 'other' } });
      await rest(t, 'PUT', `/boxes/${own.body.id}/signature`, { key: a.apiKey, body: { signature: 'mine' } });
      await waitFor('the watched signature update', () => seen.some((e) => e.type === 'box.signature_updated'), 20_000);
      await waitFor('both signature updates by type', () => typed.length === 2, 20_000);
      expect(seen.map((e) => [e.type, e.data.box?.id ?? e.data.box_id])).toEqual([
        ['box.created', own.body.id],
        ['box.signature_updated', own.body.id],
      ]);
      expect(typed.map((e) => e.data.box?.id ?? e.data.box_id)).toEqual([other.body.id, own.body.id]);
    } finally {
      restricted.close();
      byType.close();
    }
  });
});

describe('the SDK', () => {
  it('streamEvents is an async iterator that survives cut connections: every event once, in order', async () => {
    const a = await signupAccount(t, 'sse-sdk@example.com');
    const proxy = await cuttableProxy(t.url);
    const writing = appender(t, a.apiKey);
    const seen: ApiEvent[] = [];
    const stop = new AbortController();
    const loop = (async () => {
      for await (const e of streamEvents({ baseUrl: `${proxy.url}/api/v1`, apiKey: a.apiKey, signal: stop.signal, reconnectDelayMs: 50 }))
        seen.push(e as ApiEvent);
    })();
    try {
      await cutThreeTimesThenCompare(proxy, writing, seen, a.apiKey, 'the iterator');
    } finally {
      stop.abort();
      await loop;
      await writing.stop();
      await proxy.close();
    }
    // Breaking out of the loop ends the iteration; a refusal is a BoxesStreamError with the REST code.
    const first: string[] = [];
    for await (const e of streamEvents({ baseUrl: t.url, apiKey: a.apiKey, since: '0' })) {
      first.push(e.type);
      if (first.length === 2) break;
    }
    expect(first[0]).toBe('signup.completed');
    const send = await mintKey(t, a.apiKey, ['send']);
    const refused = await (async () => {
      for await (const _ of streamEvents({ baseUrl: t.url, apiKey: send.api_key })) return null;
      return null;
    })().catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(BoxesStreamError);
    expect(refused).toMatchObject({ code: 'insufficient_scope', status: 403 });
  });
});
