/**
 * PostgreSQL and Redis going away while the service runs, for real: the test starts its own PostgreSQL cluster
 * and Redis server on ephemeral ports, keeps sending (REST) and delivering mail in (SMTP to the MX) while it
 * stops and starts them, and counts. While PostgreSQL is away every route answers a JSON 503
 * service_unavailable within a bounded time and the MX answers 4xx; while Redis is away every route answers 503
 * too (the rate limits fail closed) and the MX keeps storing mail. The senders retry (same idempotency
 * key, same message); afterwards every message accepted is delivered or stored exactly once, and both event
 * chains verify.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import nodemailer from 'nodemailer';
import pg from 'pg';
import { ensureDatabase, migrate } from '@boxes/db';
import {
  rest,
  signupAccount,
  startPrivatePostgres,
  startPrivateRedis,
  startTestServer,
  waitFor,
  type PrivatePostgres,
  type PrivateRedis,
  type TestAccount,
  type TestServer,
} from '@boxes/testing';

/** The longest a request may take while a dependency is away (the connect timeout is 5 s). */
const BOUND_MS = 10_000;

let pgs: PrivatePostgres;
let redis: PrivateRedis;
let t: TestServer;
let a: TestAccount;
let b: TestAccount;
let dbUrl: string;
let load: Load | null = null;

beforeAll(async () => {
  pgs = await startPrivatePostgres();
  redis = await startPrivateRedis();
  dbUrl = pgs.urlFor('boxes');
  await ensureDatabase(dbUrl);
  await migrate(dbUrl);
  t = await startTestServer({
    databaseUrl: dbUrl,
    worker: true,
    mail: true,
    // Both limits on (high), as in production: every call counts in Redis.
    env: { REDIS_URL: redis.url, KEY_RATE_LIMIT_PER_MINUTE: '1000000', SIGNUP_RATE_LIMIT_PER_HOUR: '1000000' },
  });
  a = await signupAccount(t);
  b = await signupAccount(t);
}, 120_000);

afterAll(async () => {
  // Whatever a failed test left stopped comes back first: the load's senders retry until their call is taken,
  // so they finish only once both are back, and stop() can then close cleanly.
  await pgs?.start().catch(() => undefined);
  await redis?.start().catch(() => undefined);
  await load?.stop();
  await t?.stop();
  await redis?.destroy();
  await pgs?.destroy();
}, 60_000);

async function timed<T>(fn: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const started = Date.now();
  const value = await fn();
  return { value, ms: Date.now() - started };
}

/** One request for every operation of the OpenAPI document, each as a careful client would make it. */
async function everyRoute(): Promise<{ name: string; status: number; body: any; retryAfter: string | null; ms: number }[]> {
  const doc = (await (await fetch(`${t.url}/openapi.json`)).json()) as { paths: Record<string, Record<string, { security?: unknown[] }>> };
  const bodies: Record<string, unknown> = {
    'POST /signup/agentic': { human_email: 'owner@example.com', domain_intent: { mode: 'subdomain' } },
    'POST /signup/agentic/confirm': { intent_id: 'int_aaaaaaaaaaaaaaaaaaaa' },
    'POST /signup/agentic/claim': { intent_id: 'int_aaaaaaaaaaaaaaaaaaaa', claim_secret: 'bxs_claim_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' },
    'POST /messages/send': { to: b.primaryAddress, text: 'probe' },
  };
  const out = [];
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      const name = `${method.toUpperCase()} ${path}`;
      const url = path.replace(/\{[^}]+\}/g, 'x_0a1b2c3d4e5f6g7h8j9k');
      const body = ['post', 'put'].includes(method) ? (bodies[name] ?? {}) : undefined;
      const res = await timed(() => rest(t, method.toUpperCase(), url, { key: op.security?.length ? a.apiKey : undefined, body }));
      out.push({ name, status: res.value.status, body: res.value.body, retryAfter: res.value.headers.get('retry-after'), ms: res.ms });
    }
  }
  return out;
}

async function trpcAndMcp(): Promise<{ name: string; status: number; text: string; ms: number }[]> {
  const headers = { authorization: `Bearer ${a.apiKey}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
  const trpc = await timed(() => fetch(`${t.url}/trpc/account.get`, { headers }));
  const mcp = await timed(() =>
    fetch(`${t.url}/mcp`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'account_get', arguments: {} } }),
    }),
  );
  return [
    { name: 'tRPC account.get', status: trpc.value.status, text: await trpc.value.text(), ms: trpc.ms },
    { name: 'MCP tools/call account_get', status: mcp.value.status, text: await mcp.value.text(), ms: mcp.ms },
  ];
}

function expectAllUnavailable(routes: Awaited<ReturnType<typeof everyRoute>>, others: Awaited<ReturnType<typeof trpcAndMcp>>) {
  const wrong = routes.filter(
    (r) =>
      r.status !== 503 || r.body?.error?.code !== 'service_unavailable' || r.retryAfter === null || r.ms > BOUND_MS || /stack/.test(JSON.stringify(r.body)),
  );
  expect(wrong.map((r) => `${r.name}: ${r.status} in ${r.ms} ms ${JSON.stringify(r.body).slice(0, 200)}`)).toEqual([]);
  for (const o of others) {
    expect(o.ms, o.name).toBeLessThan(BOUND_MS);
    expect(o.text, o.name).toMatch(/service_unavailable/);
    expect(o.text, o.name).not.toMatch(/"stack"/);
  }
  expect(others.map((o) => o.status)).toEqual([503, 503]);
}

/** Smtp answers while a dependency is away: a 4xx, never 250 for mail that cannot be stored. */
async function mxAnswer(subject: string): Promise<number> {
  const transport = nodemailer.createTransport({
    host: '127.0.0.1',
    port: t.smtpPort!,
    secure: false,
    tls: { rejectUnauthorized: false },
    name: 'sender.outside.test',
  });
  try {
    await transport.sendMail({ from: 'probe@outside.test', to: b.primaryAddress, subject, text: 'probe' });
    return 250;
  } catch (err) {
    return (err as { responseCode?: number }).responseCode ?? 0;
  } finally {
    transport.close();
  }
}

interface Load {
  stop(): Promise<void>;
  accepted: Set<number>;
  smtpAccepted: Set<number>;
  unexpected: string[];
  unavailable: number;
  smtpDeferred: number;
}

/** Two REST senders (A to B, each message under its idempotency key) and one SMTP sender into B, retrying. */
function startLoad(): Load {
  let running = true;
  const load: Load = { stop: async () => {}, accepted: new Set(), smtpAccepted: new Set(), unexpected: [], unavailable: 0, smtpDeferred: 0 };
  let next = 0;
  const restSender = async () => {
    while (running) {
      const i = next++;
      for (;;) {
        let res: { status: number; body: any } | null = null;
        try {
          res = await timed(() =>
            rest(t, 'POST', '/messages/send', {
              key: a.apiKey,
              body: { to: b.primaryAddress, subject: `load-${i}`, text: `message ${i}`, idempotency_key: `load-${i}` },
            }),
          ).then((r) => {
            if (r.ms > BOUND_MS) load.unexpected.push(`send ${i} took ${r.ms} ms`);
            return r.value;
          });
        } catch (err) {
          load.unexpected.push(`send ${i}: ${(err as Error).message}`);
        }
        if (res?.status === 200) {
          load.accepted.add(i);
          break;
        }
        if (res?.status === 503 && res.body?.error?.code === 'service_unavailable') load.unavailable++;
        else if (res) load.unexpected.push(`send ${i}: ${res.status} ${JSON.stringify(res.body).slice(0, 300)}`);
        // The sender's retry: the same message under the same idempotency key, a moment later.
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  };
  let smtpNext = 0;
  const transport = nodemailer.createTransport({
    host: '127.0.0.1',
    port: t.smtpPort!,
    secure: false,
    tls: { rejectUnauthorized: false },
    name: 'sender.outside.test',
  });
  const smtpSender = async () => {
    while (running) {
      const i = smtpNext++;
      for (;;) {
        try {
          await transport.sendMail({
            from: 'load@outside.test',
            to: b.primaryAddress,
            subject: `smtp-${i}`,
            text: `inbound ${i}`,
            messageId: `<smtp-${i}@outside.test>`,
          });
          load.smtpAccepted.add(i);
          break;
        } catch (err) {
          const code = (err as { responseCode?: number }).responseCode ?? 0;
          if (code >= 400 && code < 500) load.smtpDeferred++;
          else load.unexpected.push(`smtp ${i}: ${code} ${(err as Error).message}`);
          await new Promise((r) => setTimeout(r, 200));
        }
      }
    }
  };
  const loops = [restSender(), restSender(), smtpSender()];
  load.stop = async () => {
    running = false;
    await Promise.all(loops);
    transport.close();
  };
  return load;
}

async function waitUntilServing(): Promise<void> {
  await waitFor('the API to answer again', async () => (await rest(t, 'GET', '/account', { key: a.apiKey })).status === 200, 30_000);
}

describe('PostgreSQL and Redis going away under load', () => {
  it('answers 503 (and 4xx at the MX) while each is away, recovers by itself, and loses or doubles nothing', async () => {
    const started = Date.now();
    const mark = (what: string) => console.log(`faults: ${what} at ${((Date.now() - started) / 1000).toFixed(1)} s`);
    const l = startLoad();
    load = l;
    await waitFor('some mail accepted', () => l.accepted.size >= 5 && l.smtpAccepted.size >= 2, 30_000);

    mark('load running');
    // PostgreSQL stops (clients disconnected, as in a restart).
    await pgs.stop('fast');
    expectAllUnavailable(await everyRoute(), await trpcAndMcp());
    expect(await mxAnswer('while PostgreSQL is away')).toBeGreaterThanOrEqual(400);
    expect(await mxAnswer('while PostgreSQL is away')).toBeLessThan(500);
    await new Promise((r) => setTimeout(r, 1500)); // the load keeps knocking
    await pgs.start();
    await waitUntilServing();
    const afterPg = l.accepted.size;
    await waitFor('sends accepted again', () => l.accepted.size > afterPg + 5, 30_000);

    mark('PostgreSQL back');
    // Redis stops: the rate counts and the queues are away. Every call is 503 (the per-key limit fails closed, as
    // the signup limit does), in bounded time; the MX still takes mail, which it can store (its deliveries and
    // pushes are driven from PostgreSQL by the sweeper once Redis is back).
    await redis.stop('SIGTERM');
    // The service knows once its connection's close arrives (a route that needs nothing of Redis answers as usual
    // until then): from that moment every call is refused.
    await waitFor('the service to see Redis gone', () => t.svc.redis.status !== 'ready', 10_000);
    expectAllUnavailable(await everyRoute(), await trpcAndMcp());
    const smtpDuringRedis = l.smtpAccepted.size;
    await waitFor('the MX to keep taking mail while Redis is away', () => l.smtpAccepted.size > smtpDuringRedis + 2, 15_000);
    await new Promise((r) => setTimeout(r, 1500));
    await redis.start();
    await waitUntilServing();
    const afterRedis = l.accepted.size;
    await waitFor('sends accepted again', () => l.accepted.size > afterRedis + 5, 30_000);

    mark('Redis back');
    // PostgreSQL dies (immediate: no shutdown checkpoint, recovery at start) in the middle of the traffic.
    await pgs.stop('immediate');
    await new Promise((r) => setTimeout(r, 1500));
    await pgs.start();
    await waitUntilServing();
    const afterCrash = l.accepted.size;
    await waitFor('sends accepted again', () => l.accepted.size > afterCrash + 5 && l.smtpAccepted.size > 5, 30_000);
    await l.stop();
    mark('PostgreSQL back after the crash; load stopped');

    expect(l.unexpected).toEqual([]);
    expect(l.unavailable).toBeGreaterThan(0);
    expect(l.smtpDeferred).toBeGreaterThan(0);

    // Every accepted send delivered exactly once, every accepted SMTP message stored exactly once.
    const db = new pg.Client({ connectionString: dbUrl });
    await db.connect();
    try {
      await waitFor(
        'every delivery of A to finish',
        async () => {
          const r = await db.query(`SELECT count(*)::int AS n FROM deliveries WHERE account_id = $1 AND status <> 'delivered'`, [a.accountId]);
          return r.rows[0].n === 0;
        },
        // A send accepted while Redis was coming back may have lost its enqueue: the worker's sweeper picks
        // such deliveries up once they are 10 s old (it runs every 5 s).
        120_000,
      ).catch(async (err) => {
        const r = await db.query(
          `SELECT d.id, d.status, d.attempts, d.created_at, m.subject FROM deliveries d JOIN messages m ON m.id = d.message_id WHERE d.account_id = $1 AND d.status <> 'delivered'`,
          [a.accountId],
        );
        throw new Error(`${(err as Error).message}: ${JSON.stringify(r.rows)}`);
      });
      mark('every delivery done');
      const received = await db.query<{ subject: string; n: number }>(
        `SELECT subject, count(*)::int AS n FROM messages WHERE account_id = $1 AND direction = 'received' GROUP BY subject`,
        [b.accountId],
      );
      const counts = new Map(received.rows.map((r) => [r.subject, r.n]));
      const sent = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM messages WHERE account_id = $1 AND direction = 'sent'`, [a.accountId]);
      // The accepted sends, and nothing the probes sent while a dependency was away.
      expect(sent.rows[0]!.n).toBe(l.accepted.size);
      const wrong: string[] = [];
      for (const i of l.accepted) if (counts.get(`load-${i}`) !== 1) wrong.push(`load-${i}: ${counts.get(`load-${i}`) ?? 0}`);
      for (const i of l.smtpAccepted) if (counts.get(`smtp-${i}`) !== 1) wrong.push(`smtp-${i}: ${counts.get(`smtp-${i}`) ?? 0}`);
      // Nothing the probes sent while a dependency was away was stored.
      if (counts.has('while PostgreSQL is away')) wrong.push('a message refused with 4xx was stored');
      expect(wrong).toEqual([]);
      console.log(
        `faults: ${l.accepted.size} sends and ${l.smtpAccepted.size} inbound messages, each stored once; ${l.unavailable} answers 503 and ${l.smtpDeferred} SMTP 4xx on the way`,
      );
    } finally {
      await db.end();
    }
    for (const acct of [a, b]) {
      const v = await rest(t, 'GET', '/events/verify', { key: acct.apiKey });
      expect(v.body.ok, JSON.stringify(v.body)).toBe(true);
    }
  }, 330_000);
});
