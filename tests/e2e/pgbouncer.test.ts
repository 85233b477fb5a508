/**
 * The service behind PgBouncer (Debian's, in transaction pooling mode) for real: a PgBouncer on a free loopback
 * port with a generated configuration in a temporary directory stands in front of the test database, with fewer
 * server connections (4) than the service's own pool (20), so clients share them. DATABASE_URL points at it;
 * DIRECT_DATABASE_URL at PostgreSQL itself. The main flows run through it: signup, sends delivered to a local
 * sink (group commits, interactive transactions, row and advisory locks), mail in over the MX, a send between
 * two boxes of the instance, the events feed and its stream, webhooks and MQTT, IMAP login and fetch, a bulk job.
 * The LISTEN connections (which a transaction pooler cannot keep) must be PostgreSQL sessions of their own, not
 * PgBouncer's server connections.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import mqtt from 'mqtt';
import nodemailer from 'nodemailer';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  adminUrl,
  databaseUrlFor,
  deleteKeysWithPrefix,
  rest,
  signupAccount,
  startPgBouncer,
  startTestServer,
  type PgBouncer,
  type TestAccount,
  type TestServer,
} from '@boxes/testing';
import { MailSink } from './mail-send-helpers';
import { receiverCertificate, setCallback, startReceiver, type Receiver } from './push-helpers';
import { appPassword, withImap } from './imap-helpers';
import { createJob, messagesTo, waitForJob } from './bulk-helpers';
import { waitFor } from './mail-receive-helpers';

const POOL_SIZE = 4;

let bouncer: PgBouncer;
let sink: MailSink;
let receiver: Receiver;
let t: TestServer;
let a: TestAccount;
let b: TestAccount;

beforeAll(async () => {
  bouncer = await startPgBouncer(adminUrl(), { poolSize: POOL_SIZE });
  sink = new MailSink();
  await sink.start();
  const pems = await receiverCertificate();
  receiver = await startReceiver(pems);
  t = await startTestServer({
    worker: true,
    mail: true,
    push: true,
    resolver: sink.resolver(),
    pooled: (url) => bouncer.pooled(url),
    env: {
      WEBHOOK_ALLOW_PRIVATE: 'true',
      WEBHOOK_CA_FILE: pems.caFile,
      BULK_COOL_OFF_SECONDS: '0',
      BULK_MIN_COOL_OFF_SECONDS: '0',
    },
  });
  a = await signupAccount(t, 'pooled-a@example.com');
  b = await signupAccount(t, 'pooled-b@example.com');
}, 120_000);

afterAll(async () => {
  await t?.stop();
  await bouncer?.stop();
  await receiver?.close();
  await sink?.close();
});

const dbName = () => new URL(t.config.directDatabaseUrl).pathname.slice(1);

/** Message-ID headers of what the sink received, with how often each came. */
function sinkCounts(): Map<string, number> {
  const counts = new Map<string, number>();
  for (const m of sink.messages) {
    const head = m.raw
      .toString('latin1')
      .split(/\r?\n\r?\n/)[0]!
      .replace(/\r?\n[ \t]+/g, ' ');
    const id = /^message-id:\s*(<[^>]+>)/im.exec(head)?.[1];
    if (id) counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}

describe('behind PgBouncer in transaction mode', () => {
  it('the service talks to PostgreSQL through PgBouncer (transaction mode, fewer server connections than its pool)', async () => {
    expect(t.config.databaseUrl).toContain(`:${bouncer.port}/`);
    expect(t.config.directDatabaseUrl).not.toContain(`:${bouncer.port}/`);
    const [mode] = await bouncer.admin<{ key: string; value: string }>('SHOW CONFIG').then((r) => r.filter((x) => x.key === 'pool_mode'));
    expect(mode?.value).toBe('transaction');
    const pools = (await bouncer.admin<{ database: string; pool_mode: string }>('SHOW POOLS')).filter((p) => p.database === dbName());
    expect(pools.map((p) => p.pool_mode)).toEqual(['transaction']);
  });

  it('sends (concurrent: group commits, row locks) are delivered to a local sink exactly once; inbound mail over the MX is stored; a send between boxes is stored', async () => {
    const sends = await Promise.all(
      Array.from({ length: 24 }, (_, i) =>
        rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: `pooled-${i}@outside.test`, subject: `pooled ${i}`, text: `message ${i}` } }),
      ),
    );
    expect(sends.map((s) => s.status)).toEqual(sends.map(() => 200));
    const ids = sends.map((s) => s.body.rfc_message_id as string);
    await waitFor('every send at the sink', () => ids.every((id) => sinkCounts().has(id)), 30_000);
    const counts = sinkCounts();
    expect(ids.map((id) => counts.get(id))).toEqual(ids.map(() => 1));

    // In over the MX.
    const mx = nodemailer.createTransport({ host: '127.0.0.1', port: t.smtpPort!, secure: false, tls: { rejectUnauthorized: false }, name: 'out.test' });
    await mx.sendMail({ from: 'ann@outside.test', to: b.primaryAddress, subject: 'in through the pooler', text: 'over SMTP' });
    mx.close();
    // Between two boxes of the instance: one transaction with the recipient's copy and the delivery's state.
    const local = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: b.primaryAddress, subject: 'local through the pooler', text: 'hi b' } });
    expect(local.status, JSON.stringify(local.body)).toBe(200);
    const received = await waitFor('both messages in b', async () => {
      const r = await rest(t, 'GET', '/messages?direction=received', { key: b.apiKey });
      const subjects = (r.body.messages as { subject: string }[]).map((m) => m.subject);
      return subjects.includes('in through the pooler') && subjects.includes('local through the pooler') ? subjects : null;
    });
    expect(received.sort()).toEqual(['in through the pooler', 'local through the pooler']);
  }, 60_000);

  it('the events feed: the deliveries recorded, the chains verify; a checkpoint is signed (advisory lock)', async () => {
    const delivered = await waitFor('24 mail.delivered', async () => {
      const r = await rest(t, 'GET', '/events?type=mail.delivered&limit=500', { key: a.apiKey });
      return r.body.events.length >= 25 ? r.body.events : null;
    });
    expect(delivered.length).toBe(25);
    for (const acct of [a, b]) {
      const v = await rest(t, 'GET', '/events/verify', { key: acct.apiKey });
      expect(v.body.ok, JSON.stringify(v.body)).toBe(true);
    }
    const cp = await rest(t, 'POST', '/events/checkpoints', { key: a.apiKey });
    expect(cp.status, JSON.stringify(cp.body)).toBe(200);
  });

  it('the event stream is woken by NOTIFY (well before its heartbeat re-read)', async () => {
    const ctrl = new AbortController();
    const res = await fetch(`${t.apiBase}/events/stream?type=box.created`, { headers: { authorization: `Bearer ${b.apiKey}` }, signal: ctrl.signal });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    let text = '';
    const seen = (async () => {
      const decoder = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        text += decoder.decode(value);
      }
    })().catch(() => undefined);
    // The stream is open once its first bytes (or nothing) are in: give it a moment to subscribe.
    await new Promise((r) => setTimeout(r, 300));
    const started = Date.now();
    expect((await rest(t, 'POST', '/boxes', { key: b.apiKey, body: { address: 'streamed' } })).status).toBe(200);
    // The heartbeat re-read is 15 s away (SSE_HEARTBEAT_MS): only a NOTIFY wakes the stream this soon.
    await waitFor('box.created on the stream', () => text.includes('"streamed"'), 5_000);
    console.log(`pgbouncer: event stream woken ${Date.now() - started} ms after the append`);
    ctrl.abort();
    await seen;
  });

  it('webhooks and MQTT receive the events', async () => {
    await setCallback(t, a.apiKey, receiver.url('/pooled'));
    const prov = await rest(t, 'POST', '/account/iot/provision', { key: a.apiKey });
    expect(prov.status, JSON.stringify(prov.body)).toBe(200);
    const client = await mqtt.connectAsync(`mqtts://127.0.0.1:${t.mqttPort}`, {
      clientId: prov.body.client_id,
      key: prov.body.private_key,
      cert: prov.body.certificate,
      ca: [prov.body.ca_certificate],
      servername: 'localhost',
      reconnectPeriod: 0,
    });
    const messages: string[] = [];
    client.on('message', (_topic, payload) => messages.push(payload.toString()));
    await client.subscribeAsync(prov.body.topic, { qos: 1 });
    try {
      expect((await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'pushed' } })).status).toBe(200);
      const hooked = await waitFor('box.created at the webhook', () => receiver.requests.find((r) => r.event.type === 'box.created'), 15_000);
      expect(hooked.event.data.box.local_part).toBe('pushed');
      const over = await waitFor('box.created over MQTT', () => messages.map((m) => JSON.parse(m)).find((e) => e.type === 'box.created'), 15_000);
      expect(over.data.box.local_part).toBe('pushed');
    } finally {
      await client.endAsync();
    }
  });

  it('IMAP: login with an app-password and fetch a message (binary COPY through the pooler)', async () => {
    const password = (await appPassword(t, b)).password;
    await withImap(t, b.primaryAddress, password, async (c) => {
      await c.mailboxOpen('INBOX');
      const got: { subject: string; source: string }[] = [];
      for await (const m of c.fetch('1:*', { envelope: true, source: true })) got.push({ subject: m.envelope?.subject ?? '', source: m.source!.toString() });
      expect(got.map((m) => m.subject).sort()).toEqual(['in through the pooler', 'local through the pooler']);
      expect(got.find((m) => m.subject === 'in through the pooler')!.source).toContain('over SMTP');
    });
  });

  it('a bulk job of 3 batches is delivered, each message once', async () => {
    const before = sink.messages.length;
    await t.db.account.update({ where: { id: a.accountId }, data: { balanceMicros: 10_000_000n } });
    const tag = randomBytes(3).toString('hex');
    const job = await createJob(t, a.apiKey, { messages: messagesTo(30, `bulk-${tag}`, 'outside.test'), batch_size: 10, cool_off_seconds: 0 });
    expect(job.status, JSON.stringify(job.body)).toBe(200);
    const done = await waitForJob(t, a.apiKey, job.body.id, ['completed'], 60_000);
    expect(done.counts.delivered).toBe(30);
    await waitFor('30 bulk messages at the sink', () => sink.messages.length - before >= 30, 30_000);
    const mine = sink.messages.filter((m) => m.rcpt.some((r) => r.startsWith(`bulk-${tag}-`)));
    expect(mine.length).toBe(30);
    expect(new Set(mine.map((m) => m.rcpt[0])).size).toBe(30);
  }, 90_000);

  it('`boxes start` with DATABASE_URL through PgBouncer creates and migrates a new database over DIRECT_DATABASE_URL, then serves through the pooler', async () => {
    const name = `${dbName()}_start`;
    const direct = databaseUrlFor(name);
    // A PgBouncer that serves this database only: creating it (on the maintenance database) can go direct only.
    const only = await startPgBouncer(adminUrl(), { poolSize: POOL_SIZE, databases: [name] });
    const prefix = `boxes-test-${randomBytes(5).toString('hex')}`;
    const root = path.resolve(import.meta.dirname, '../..');
    const child = spawn(process.execPath, ['--import', 'tsx', path.join(root, 'apps/server/src/cli.ts'), 'start', 'server'], {
      cwd: root,
      env: {
        ...process.env,
        PORT: '0',
        DATABASE_URL: only.pooled(direct),
        DIRECT_DATABASE_URL: direct,
        REDIS_PREFIX: prefix,
        BOXES_SECRET_KEY: randomBytes(32).toString('hex'),
        SIGNUP_RATE_LIMIT_PER_HOUR: '0',
        LOG_LEVEL: 'error',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
    const admin = new pg.Client({ connectionString: adminUrl() });
    await admin.connect();
    try {
      const url = await waitFor(
        'the server to start',
        () => {
          if (child.exitCode !== null) throw new Error(`boxes start exited ${child.exitCode}: ${out.slice(-2000)}`);
          return /boxes: running server \(pid \d+\); HTTP on (\S+)/.exec(out)?.[1] ?? null;
        },
        90_000,
      );
      const signup = await rest({ apiBase: `${url}/api/v1` }, 'POST', '/signup/agentic', {
        body: { human_email: 'started@example.com', domain_intent: { mode: 'subdomain', slug_style: 'word_pair' } },
      });
      expect(signup.status, JSON.stringify(signup.body)).toBe(200);
      const confirmed = await rest({ apiBase: `${url}/api/v1` }, 'POST', '/signup/agentic/confirm', { body: { intent_id: signup.body.intent_id } });
      expect(confirmed.status, JSON.stringify(confirmed.body)).toBe(200);
      const db = new pg.Client({ connectionString: direct });
      await db.connect();
      try {
        const applied = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM "_prisma_migrations" WHERE finished_at IS NOT NULL');
        expect(applied.rows[0]!.n).toBeGreaterThan(10);
        const accounts = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM accounts');
        expect(accounts.rows[0]!.n).toBe(1);
      } finally {
        await db.end();
      }
      // Its queries went through PgBouncer: it has a pool for the new database.
      const pools = (await only.admin<{ database: string }>('SHOW POOLS')).filter((p) => p.database === name);
      expect(pools.length).toBe(1);
    } finally {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await exited;
      }
      await only.stop();
      await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      await admin.end();
      await deleteKeysWithPrefix(t.config, prefix);
    }
  }, 120_000);

  it('LISTEN runs on PostgreSQL sessions of its own, never on PgBouncer server connections; the pool stayed within its size', async () => {
    const direct = new pg.Client({ connectionString: t.config.directDatabaseUrl });
    await direct.connect();
    try {
      const listening = await direct.query<{ pid: number; query: string }>(
        `SELECT pid, query FROM pg_stat_activity WHERE datname = $1 AND query ILIKE 'LISTEN%'`,
        [dbName()],
      );
      // The worker's (push wake-ups and notices share one) and the IMAP server's hub at least.
      expect(listening.rows.length).toBeGreaterThanOrEqual(2);
      const servers = (await bouncer.admin<{ database: string; remote_pid: string | number }>('SHOW SERVERS')).filter((s) => s.database === dbName());
      expect(servers.length).toBeGreaterThan(0);
      expect(servers.length).toBeLessThanOrEqual(POOL_SIZE);
      const pooledPids = new Set(servers.map((s) => Number(s.remote_pid)));
      expect(listening.rows.filter((r) => pooledPids.has(r.pid))).toEqual([]);
      const stats = (await bouncer.admin<{ database: string; total_xact_count: string }>('SHOW STATS')).find((s) => s.database === dbName());
      console.log(
        `pgbouncer: ${stats?.total_xact_count} transactions over at most ${POOL_SIZE} server connections; ${listening.rows.length} LISTEN sessions direct`,
      );
      expect(Number(stats?.total_xact_count)).toBeGreaterThan(100);
    } finally {
      await direct.end();
    }
  });
});
