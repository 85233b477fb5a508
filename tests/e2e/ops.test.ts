/**
 * What operators watch: /healthz, /readyz (PostgreSQL and Redis, a dependency that stops answering makes it 503
 * naming it) and /metrics in Prometheus's text format with the request, queue, delivery, inbound, push, pool
 * and event-loop series; a process without the HTTP server serves its own on METRICS_PORT. The Redis of this
 * file is its own redis-server, so stopping it touches nothing else.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { freePort, rest, signupAccount, startTestServer, waitFor, type TestServer } from '@boxes/testing';

let t: TestServer;
/** An API-only server (no worker) on its own redis-server, which the last test stops and starts again. */
let t2: TestServer;
let redis: ChildProcess;
let redisPort: number;

async function startRedis(): Promise<void> {
  redis = spawn('redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  await waitFor(
    'redis-server',
    () =>
      new Promise<boolean>((r) =>
        net
          .connect(redisPort, '127.0.0.1')
          .on('connect', function (this: net.Socket) {
            this.destroy();
            r(true);
          })
          .on('error', () => r(false)),
      ),
  );
}

beforeAll(async () => {
  redisPort = await freePort();
  await startRedis();
  t = await startTestServer({ worker: true });
  t2 = await startTestServer({ env: { REDIS_URL: `redis://127.0.0.1:${redisPort}` } });
});
afterAll(async () => {
  await t?.stop();
  await t2?.stop();
  redis?.kill('SIGKILL');
});

const get = async (path: string, on: TestServer = t) => {
  const r = await fetch(`${on.url}${path}`);
  return { status: r.status, type: r.headers.get('content-type') ?? '', text: await r.text() };
};

it('/healthz answers; /readyz checks PostgreSQL and Redis', async () => {
  const h = await get('/healthz');
  expect(h.status).toBe(200);
  expect(JSON.parse(h.text)).toEqual({ status: 'ok' });
  const r = await get('/readyz');
  expect(r.status).toBe(200);
  expect(JSON.parse(r.text)).toEqual({ status: 'ready', checks: { postgresql: 'ok', redis: 'ok' } });
});

it('/metrics: requests by route and status, queues, deliveries, inbound, push lag, pool and event loop', async () => {
  const a = await signupAccount(t);
  await rest(t, 'GET', '/account', { key: a.apiKey });
  await rest(t, 'GET', '/messages/msg_00000000000000000000', { key: a.apiKey });
  await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: a.primaryAddress, subject: 'metrics', text: 'x' } });
  await waitFor('the delivery', async () => (await rest(t, 'GET', '/messages?direction=received', { key: a.apiKey })).body.messages.length === 1);
  const m = await get('/metrics');
  expect(m.status).toBe(200);
  expect(m.type).toContain('text/plain');
  // Route labels are the OpenAPI templates, not the raw paths (bounded cardinality).
  expect(m.text).toMatch(/boxes_http_requests_total\{method="GET",route="\/api\/v1\/account",status="200"\} [1-9]/);
  expect(m.text).toMatch(/boxes_http_requests_total\{method="GET",route="\/api\/v1\/messages\/\{id\}",status="404"\} 1/);
  expect(m.text).not.toContain('msg_00000000000000000000');
  expect(m.text).toMatch(/boxes_http_request_duration_seconds_bucket\{le="0.5",method="POST",route="\/api\/v1\/messages\/send"\} 1/);
  expect(m.text).toMatch(/boxes_queue_jobs\{queue="deliveries",state="waiting"\} \d+/);
  expect(m.text).toMatch(/boxes_queue_oldest_waiting_seconds\{queue="deliveries"\} \d/);
  expect(m.text).toMatch(/boxes_deliveries\{status="delivered"\} [1-9]/);
  expect(m.text).toMatch(/boxes_messages_received [1-9]/);
  expect(m.text).toMatch(/boxes_push_lag_events\{channel="webhook"\} \d+/);
  expect(m.text).toMatch(/boxes_db_pool_clients\{state="total"\} [1-9]/);
  expect(m.text).toMatch(/boxes_process_nodejs_eventloop_lag_seconds \d/);
});

it('Redis stops answering: /readyz is 503 naming it, /healthz and /metrics still answer; back, it is ready again', async () => {
  redis.kill('SIGKILL');
  await new Promise((r) => redis.once('exit', r));
  const r = await waitFor('readyz to fail', async () => {
    const x = await get('/readyz', t2);
    return x.status === 503 ? x : null;
  });
  const body = JSON.parse(r.text);
  expect(body.status).toBe('unavailable');
  expect(body.checks.postgresql).toBe('ok');
  expect(body.checks.redis).not.toBe('ok');
  expect((await get('/healthz', t2)).status).toBe(200);
  const m = await get('/metrics', t2);
  expect(m.status).toBe(200);
  expect(m.text).toContain('boxes_http_requests_total');

  await startRedis();
  await waitFor('readyz to recover', async () => (await get('/readyz', t2)).status === 200, 20_000);
}, 60_000);

it('a process without the HTTP server (boxes start worker) serves its own /metrics and /healthz on METRICS_PORT', async () => {
  const root = path.resolve(import.meta.dirname, '../..');
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(root, 'apps/server/src/cli.ts'), 'start', 'worker'], {
    cwd: root,
    env: {
      ...process.env,
      PORT: '0',
      DATABASE_URL: t.config.databaseUrl,
      REDIS_PREFIX: t.config.redisPrefix,
      BOXES_SECRET_KEY: t.svc.secretKey.toString('hex'),
      METRICS_PORT: '0',
      LOG_LEVEL: 'error',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  try {
    const url = await waitFor(
      'the worker to start',
      () => {
        if (child.exitCode !== null) throw new Error(`the worker exited ${child.exitCode}: ${out.slice(-2000)}`);
        return /boxes: running worker \(pid \d+\); metrics on (\S+)/.exec(out)?.[1] ?? null;
      },
      90_000,
    );
    const m = await fetch(url);
    expect(m.status).toBe(200);
    expect(m.headers.get('content-type')).toContain('text/plain');
    const text = await m.text();
    // Its own process: Node's metrics, its database pool, its group commits (none yet: the family is there).
    expect(text).toMatch(/^boxes_process_process_cpu_user_seconds_total \d/m);
    expect(text).toMatch(/^boxes_process_nodejs_eventloop_lag_seconds \d/m);
    expect(text).toMatch(/^boxes_db_pool_clients\{state="total"\} \d+$/m);
    expect(text).toContain('# TYPE boxes_group_commit_batches gauge');
    // What only the HTTP server reports stays there.
    expect(text).not.toContain('boxes_http_requests_total');
    expect(text).not.toContain('boxes_queue_jobs');
    const base = url.replace(/\/metrics$/, '');
    const h = await fetch(`${base}/healthz`);
    expect(h.status).toBe(200);
    expect(await h.json()).toEqual({ status: 'ok' });
    expect((await fetch(`${base}/other`)).status).toBe(404);
    expect((await fetch(url, { method: 'POST' })).status).toBe(405);
  } finally {
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    await exited;
  }
  expect(child.exitCode).toBe(0);
}, 120_000);
