// The per-key rate limit (KEY_RATE_LIMIT_PER_MINUTE, windows of KEY_RATE_LIMIT_WINDOW_SECONDS): one count per key
// in Redis, shared by REST, tRPC and MCP tool calls and by every server process. Over it: 429 rate_limited with
// retry_after_seconds, Retry-After, and the RateLimit / RateLimit-Policy fields (draft-ietf-httpapi-ratelimit-
// headers), which every keyed response carries. Unkeyed calls (signup) are not counted per key.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { BoxesError, createBoxesClient } from '@boxes/sdk';
import { mintKey, rest, signupAccount, startTestServer, type TestServer } from '@boxes/testing';

const PER_MINUTE = 5;
let a: TestServer;
let a2: TestServer;
let short: TestServer;
const clients: Client[] = [];
beforeAll(async () => {
  a = await startTestServer({ env: { KEY_RATE_LIMIT_PER_MINUTE: String(PER_MINUTE) } });
  [a2, short] = await Promise.all([
    // A second server process of the same service: same database, same Redis prefix.
    startTestServer({ env: { KEY_RATE_LIMIT_PER_MINUTE: String(PER_MINUTE) }, sameStoreAs: a }),
    // 60 a minute counted in 2-second windows: 2 requests per window.
    startTestServer({ env: { KEY_RATE_LIMIT_PER_MINUTE: '60', KEY_RATE_LIMIT_WINDOW_SECONDS: '2' } }),
  ]);
});
afterAll(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
  await a2?.stop();
  await Promise.all([a?.stop(), short?.stop()]);
});

/** The RateLimit field's parameters (RateLimit: "default";r=3;t=57). */
function rateLimit(headers: Headers): { r: number; t: number } {
  const value = headers.get('ratelimit');
  expect(value, 'RateLimit field').toMatch(/^"default";r=\d+;t=\d+$/);
  const [, r, t] = /;r=(\d+);t=(\d+)$/.exec(value!)!;
  return { r: Number(r), t: Number(t) };
}

/** A keyed response within the limit: the fields, no Retry-After; returns what is left. */
function allowed(res: { status: number; headers: Headers; body?: unknown }, policy = `"default";q=${PER_MINUTE};w=60`): number {
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  expect(res.headers.get('ratelimit-policy')).toBe(policy);
  expect(res.headers.get('retry-after')).toBeNull();
  const { r, t } = rateLimit(res.headers);
  expect(t).toBeGreaterThanOrEqual(1);
  expect(t).toBeLessThanOrEqual(Number(/w=(\d+)/.exec(policy)![1]));
  return r;
}

/** A refused REST (or MCP) call: 429, the JSON error and the fields agreeing with it. */
function refused(res: { status: number; headers: Headers; body: any }, window = 60): void {
  expect(res.status, JSON.stringify(res.body)).toBe(429);
  expect(res.body.error).toMatchObject({ code: 'rate_limited', limit: expect.any(Number), window_seconds: window });
  expect(res.body.error.request_id).toBe(res.headers.get('x-request-id'));
  const after = res.body.error.retry_after_seconds;
  expect(after).toBeGreaterThanOrEqual(1);
  expect(after).toBeLessThanOrEqual(window);
  expect(res.headers.get('retry-after')).toBe(String(after));
  expect(rateLimit(res.headers)).toEqual({ r: 0, t: after });
  expect(res.headers.get('ratelimit-policy')).toMatch(new RegExp(`^"default";q=\\d+;w=${window}$`));
}

/** A fetch that keeps the last response's headers (for the SDK and the MCP client, which hide them). */
function recordingFetch() {
  const seen: { last: Headers | null } = { last: null };
  const f: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    seen.last = res.headers;
    return res;
  };
  return { fetch: f, seen };
}

describe('REST', () => {
  it('goes 200 then 429 with Retry-After, RateLimit, RateLimit-Policy and the JSON error; other keys go on', async () => {
    const owner = await signupAccount(a);
    const other = await signupAccount(a, 'other@example.com');
    // Minting is a keyed call too: the first of the owner's five.
    const second = await mintKey(a, owner.apiKey, ['send', 'receive']);
    for (let left = PER_MINUTE - 2; left >= 0; left--) {
      expect(allowed(await rest(a, 'GET', '/account', { key: owner.apiKey }))).toBe(left);
    }
    const over = await rest(a, 'GET', '/account', { key: owner.apiKey });
    refused(over);
    expect(over.body.error.limit).toBe(PER_MINUTE);
    // Every route of the key, with or without a body, is refused now.
    refused(await rest(a, 'POST', '/boxes', { key: owner.apiKey, body: { address: 'late' } }));
    expect(await a.db.box.count({ where: { localPart: 'late' } })).toBe(0);

    // Another key of the same account, and another account's key, have their own counts.
    expect(allowed(await rest(a, 'GET', '/account', { key: second.api_key }))).toBe(PER_MINUTE - 1);
    expect(allowed(await rest(a, 'GET', '/boxes', { key: other.apiKey }))).toBe(PER_MINUTE - 1);
    // A call the key lacks the scope for still counts (and says so).
    const forbidden = await rest(a, 'GET', '/account/keys', { key: second.api_key });
    expect(forbidden.status).toBe(403);
    expect(rateLimit(forbidden.headers).r).toBe(PER_MINUTE - 2);
  });

  it('unkeyed calls are not counted per key and carry no RateLimit fields; nor do refused keys', async () => {
    const owner = await signupAccount(a, 'spent@example.com');
    for (let i = 0; i < PER_MINUTE; i++) expect((await rest(a, 'GET', '/account', { key: owner.apiKey })).status).toBe(200);
    refused(await rest(a, 'GET', '/account', { key: owner.apiKey }));
    // Signup has its own limit (per client address); a spent key's header does not make it a keyed call.
    const signup = await rest(a, 'POST', '/signup/agentic', {
      key: owner.apiKey,
      body: { human_email: 'new@example.com', domain_intent: { mode: 'subdomain', slug_style: 'word_pair' } },
    });
    expect(signup.status).toBe(200);
    expect(signup.headers.get('ratelimit')).toBeNull();
    expect(signup.headers.get('ratelimit-policy')).toBeNull();
    // Unknown keys are refused before anything is counted.
    const unknown = await rest(a, 'GET', '/account', { key: `bxs_live_${'x'.repeat(43)}` });
    expect(unknown.status).toBe(401);
    expect(unknown.headers.get('ratelimit')).toBeNull();
    expect((await rest(a, 'GET', '/account')).headers.get('ratelimit')).toBeNull();
  });
});

describe('tRPC and MCP', () => {
  it('share the key count with REST: a tool call counts, protocol messages do not; over it each face refuses', async () => {
    const owner = await signupAccount(a, 'faces@example.com');
    expect(allowed(await rest(a, 'GET', '/account', { key: owner.apiKey }))).toBe(4);

    // tRPC over plain fetch, then the SDK.
    const trpc = await fetch(`${a.url}/trpc/account.get`, { headers: { authorization: `Bearer ${owner.apiKey}` } });
    expect(allowed(trpc)).toBe(3);
    const recorded = recordingFetch();
    const sdk = createBoxesClient({ baseUrl: a.url, apiKey: owner.apiKey, fetch: recorded.fetch });
    expect((await sdk.account.get.query()).id).toBe(owner.accountId);
    expect(allowed({ status: 200, headers: recorded.seen.last! })).toBe(2);

    // MCP: initialize and tools/list are not counted; a tool call is.
    const mcpFetch = recordingFetch();
    const client = new Client({ name: 'rate-limit-e2e', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${a.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${owner.apiKey}` } },
        fetch: mcpFetch.fetch,
      }),
    );
    clients.push(client);
    expect((await client.listTools()).tools.length).toBeGreaterThan(0);
    expect(allowed({ status: 200, headers: mcpFetch.seen.last! })).toBe(2);
    const viaMcp = await client.callTool({ name: 'account_get', arguments: {} });
    expect(viaMcp.isError).toBeFalsy();
    expect(allowed({ status: 200, headers: mcpFetch.seen.last! })).toBe(1);

    expect(allowed(await rest(a, 'GET', '/boxes', { key: owner.apiKey }))).toBe(0);

    // Over the limit: tRPC answers 429 with the error in error.data.boxes; the SDK raises it.
    const err = await sdk.account.get.query().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BoxesError);
    expect((err as BoxesError).status).toBe(429);
    expect((err as BoxesError).code).toBe('rate_limited');
    const after = (err as BoxesError).details.retry_after_seconds as number;
    expect(after).toBeGreaterThanOrEqual(1);
    expect(recorded.seen.last!.get('retry-after')).toBe(String(after));
    expect(rateLimit(recorded.seen.last!)).toEqual({ r: 0, t: after });
    const raw = await fetch(`${a.url}/trpc/account.get`, { headers: { authorization: `Bearer ${owner.apiKey}` } });
    expect(raw.status).toBe(429);
    expect(((await raw.json()) as any).error.data.boxes).toMatchObject({
      code: 'rate_limited',
      status: 429,
      details: { retry_after_seconds: expect.any(Number) },
    });

    // MCP: a tool call is an HTTP 429 (the same JSON error as REST); listing tools still works.
    const call = await fetch(`${a.url}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${owner.apiKey}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'account_get', arguments: {} } }),
    });
    refused({ status: call.status, headers: call.headers, body: await call.json() });
    // The SDK client raises the HTTP error with our body in its message.
    await expect(client.callTool({ name: 'account_get', arguments: {} })).rejects.toMatchObject({
      code: 429,
      message: expect.stringMatching(/rate_limited.*retry_after_seconds/),
    });
    expect((await client.listTools()).tools.length).toBeGreaterThan(0);
    expect(rateLimit(mcpFetch.seen.last!).r).toBe(0);
  });
});

it('two server processes share one count per key', async () => {
  const owner = await signupAccount(a, 'two@example.com');
  const servers = [a, a2, a, a2, a];
  for (const [i, server] of servers.entries()) {
    expect(allowed(await rest(server, 'GET', '/account', { key: owner.apiKey })), `call ${i + 1}`).toBe(PER_MINUTE - 1 - i);
  }
  refused(await rest(a2, 'GET', '/account', { key: owner.apiKey }));
  refused(await rest(a, 'GET', '/account', { key: owner.apiKey }));
});

it('the window resets: after Retry-After seconds the key is served again', async () => {
  const owner = await signupAccount(short, 'reset@example.com');
  const policy = '"default";q=2;w=2';
  expect(allowed(await rest(short, 'GET', '/account', { key: owner.apiKey }), policy)).toBe(1);
  expect(allowed(await rest(short, 'GET', '/account', { key: owner.apiKey }), policy)).toBe(0);
  const over = await rest(short, 'GET', '/account', { key: owner.apiKey });
  refused(over, 2);
  await new Promise((r) => setTimeout(r, over.body.error.retry_after_seconds * 1000 + 100));
  expect(allowed(await rest(short, 'GET', '/account', { key: owner.apiKey }), policy)).toBe(1);
});

it('with KEY_RATE_LIMIT_PER_MINUTE=0 (the test default) nothing is counted and no RateLimit field is sent', async () => {
  const off = await startTestServer();
  try {
    const owner = await signupAccount(off, 'off@example.com');
    for (let i = 0; i < 3; i++) {
      const res = await rest(off, 'GET', '/account', { key: owner.apiKey });
      expect(res.status).toBe(200);
      expect(res.headers.get('ratelimit')).toBeNull();
      expect(res.headers.get('ratelimit-policy')).toBeNull();
    }
    expect(await off.svc.redis.keys(`${off.config.redisPrefix}:rl:*`)).toEqual([]);
  } finally {
    await off.stop();
  }
});
