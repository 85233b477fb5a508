/**
 * A worker killed (SIGKILL) with deliveries in flight: another worker takes them over within a few seconds (the
 * job locks are short and the stalled check frequent, apps/worker/src/index.ts), not after BullMQ's default
 * tens of seconds. Two worker processes (`boxes start worker`) against one database and Redis; the sink holds
 * every message until one worker is killed, so that worker dies with deliveries active.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { rest, signupAccount, startTestServer, waitFor, type TestAccount, type TestServer } from '@boxes/testing';
import { MailSink, unique } from './mail-send-helpers';

const root = path.resolve(import.meta.dirname, '../..');
const SENDS = 16;

let t: TestServer;
let sink: MailSink;
const workers: { child: ChildProcess; out: string }[] = [];

function startWorker(): Promise<{ child: ChildProcess; out: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(root, 'apps/server/src/cli.ts'), 'start', 'worker'], {
    cwd: root,
    env: {
      ...process.env,
      DATABASE_URL: t.config.databaseUrl,
      REDIS_URL: t.config.redisUrl,
      REDIS_PREFIX: t.config.redisPrefix,
      BOXES_SECRET_KEY: t.svc.secretKey.toString('hex'),
      SMTP_RELAY_URL: `smtp://127.0.0.1:${sink.port}`,
      DELIVERY_CONCURRENCY: '10',
      LOG_LEVEL: 'error',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const w = { child, out: '' };
  child.stdout!.on('data', (d: Buffer) => (w.out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (w.out += d.toString()));
  workers.push(w);
  return waitFor(
    'a worker to start',
    () => {
      if (child.exitCode !== null) throw new Error(`worker exited ${child.exitCode}: ${w.out.slice(-2000)}`);
      return /boxes: running/.test(w.out) ? w : null;
    },
    90_000,
  );
}

beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  t = await startTestServer();
}, 60_000);

afterAll(async () => {
  for (const w of workers) w.child.kill('SIGKILL');
  await t?.stop();
  await sink?.close();
});

it('hands a killed worker’s deliveries to the other worker within a few seconds', async () => {
  const [w1] = await Promise.all([startWorker(), startWorker()]);
  const a: TestAccount = await signupAccount(t);
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let holding = 0;
  sink.beforeAccept = () => {
    holding++;
    return held;
  };
  const tag = unique();
  const ids: string[] = [];
  for (let i = 0; i < SENDS; i++) {
    const r = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: `kill-${tag}-${i}@remote.test`, subject: `kill ${i}`, text: 'x' } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    ids.push(r.body.message_id);
  }
  // Both workers have deliveries waiting on the sink's answer (as many as their SMTP pools carry at once).
  await waitFor('deliveries to be at the sink', () => holding >= 4, 30_000);
  await new Promise((r) => setTimeout(r, 2000));
  w1!.child.kill('SIGKILL');
  const killedAt = Date.now();
  sink.beforeAccept = null;
  release();

  const db = new pg.Client({ connectionString: t.config.databaseUrl });
  await db.connect();
  try {
    await waitFor(
      'every delivery to be delivered',
      async () => (await db.query(`SELECT count(*)::int AS n FROM deliveries WHERE message_id = ANY($1) AND status = 'delivered'`, [ids])).rows[0].n === SENDS,
      60_000,
    );
  } finally {
    await db.end();
  }
  const pause = (Date.now() - killedAt) / 1000;
  console.log(`worker-kill: ${holding} deliveries were at the sink at the kill`);
  console.log(`worker-kill: the killed worker's deliveries were delivered ${pause.toFixed(1)} s after the kill`);
  // Locks of 4 s renewed every second and a stalled check every second: 3 to 5 s, and some slack for a busy machine.
  expect(pause).toBeLessThan(7);
  // Two processes starting at once on a busy machine, Redis healthy: no connect timeout, no stack trace.
  const survivor = workers[1]!.out;
  expect(survivor).not.toMatch(/ETIMEDOUT|\n\s+at /);
}, 180_000);
