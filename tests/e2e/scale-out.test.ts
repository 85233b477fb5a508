/**
 * Many of each, as production runs them: two HTTP servers, two workers and two MX processes, each its own OS
 * process (`boxes start <app>`), against one PostgreSQL and one Redis. While REST sends (to another box of the
 * instance and to an outside MX) and inbound SMTP keep coming, one process of each kind is killed with SIGKILL
 * and started again. Then: every send accepted is stored once and delivered (mail between boxes exactly once,
 * mail to the outside MX at least once, the duplicates counted: only deliveries whose 250 had arrived just
 * before the kill may go twice), every inbound message accepted is stored exactly once (or twice if its attempt
 * at the killed MX broke off: stored, the process died before its 250, and the sender sent it again), each account's event
 * stream is gapless and verifies, and the webhook receiver got every event in order (what the killed worker
 * had sent but not recorded is replayed, never skipped). The times (restart, deliveries done once the load
 * stops), the client retries, the duplicates at the outside MX and the webhook replays are printed.
 */
import path from 'node:path';
import nodemailer from 'nodemailer';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  createTestDatabase,
  deleteKeysWithPrefix,
  freePort,
  type NodeProcess,
  repoRoot as root,
  rest,
  signupAccount,
  spawnNode,
  waitFor,
  type TestAccount,
} from '@boxes/testing';
import { MailSink } from './mail-send-helpers';
import { allEvents, deliveredEvents, receiverCertificate, setCallback, startReceiver, type Receiver } from './push-helpers';

type App = 'server' | 'worker' | 'mx';
const IN_FLIGHT = 10;

interface Proc extends NodeProcess {
  app: App;
  /** The HTTP base (servers) or SMTP port (MX). */
  url?: string;
  smtpPort?: number;
}

let db: { url: string; drop: () => Promise<void> };
let sink: MailSink;
let receiver: Receiver;
let env: Record<string, string>;
const procs: Proc[] = [];

function start(app: App, extra: Record<string, string> = {}): Promise<Proc> {
  const p: Proc = {
    app,
    ...spawnNode(['--import', 'tsx', path.join(root, 'apps/server/src/cli.ts'), 'start', app], { ...env, ...extra }),
    ...(extra.SMTP_PORT ? { smtpPort: Number(extra.SMTP_PORT) } : {}),
  };
  const { child } = p;
  procs.push(p);
  return waitFor(
    `${app} to start`,
    () => {
      if (child.exitCode !== null) throw new Error(`${app} exited ${child.exitCode}: ${p.out().slice(-2000)}`);
      const m = /boxes: running \S+ \(pid \d+\)(?:; HTTP on (\S+))?/.exec(p.out());
      if (!m) return null;
      if (m[1]) p.url = m[1];
      return p;
    },
    90_000,
  );
}

function kill(p: Proc): void {
  p.child.kill('SIGKILL');
  procs.splice(procs.indexOf(p), 1);
}

beforeAll(async () => {
  db = await createTestDatabase();
  sink = new MailSink();
  await sink.start();
  const pems = await receiverCertificate();
  receiver = await startReceiver(pems);
  env = {
    PORT: '0',
    DATABASE_URL: db.url,
    REDIS_PREFIX: `boxes-scale-${Date.now()}`,
    BOXES_SECRET_KEY: 'ab'.repeat(32),
    LOG_LEVEL: 'error',
    SMTP_RELAY_URL: `smtp://127.0.0.1:${sink.port}`,
    WEBHOOK_ALLOW_PRIVATE: 'true',
    WEBHOOK_CA_FILE: pems.caFile,
    DELIVERY_RETRY_SCALE: '0.01',
    // At most this many deliveries are in flight in a worker: the bound on what a kill may send twice.
    DELIVERY_CONCURRENCY: String(IN_FLIGHT),
    SIGNUP_RATE_LIMIT_PER_HOUR: '0',
    KEY_RATE_LIMIT_PER_MINUTE: '0',
    IMAP_PORT: '0',
    SUBMISSION_PORT: '0',
  };
}, 60_000);

afterAll(async () => {
  for (const p of procs.splice(0)) p.child.kill('SIGKILL');
  await sink?.close();
  await receiver?.close();
  await db?.drop();
  // The processes' queues and counters live under this run's prefix; nothing else reads them.
  if (env?.REDIS_PREFIX) await deleteKeysWithPrefix(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', env.REDIS_PREFIX);
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

it('two of each app as processes; one of each SIGKILLed and restarted under load: nothing lost, local and inbound mail once, events in order', async () => {
  const mxPorts = [await freePort(), await freePort()];
  const [s1, s2] = await Promise.all([start('server'), start('server')]);
  await Promise.all([start('worker'), start('worker'), start('mx', { SMTP_PORT: String(mxPorts[0]) }), start('mx', { SMTP_PORT: String(mxPorts[1]) })]);
  const servers = [s1!, s2!];
  const api = (i: number) => ({ apiBase: `${servers[i % 2]!.url}/api/v1` });

  const a: TestAccount = await signupAccount(api(0));
  const b: TestAccount = await signupAccount(api(1));
  // Enough free messages for the whole run (the load goes on while processes start, which can take a while).
  const admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
  await admin.query(`UPDATE accounts SET free_messages_left = 100000 WHERE id = $1`, [a.accountId]);
  // The webhook gets what is appended after it is set (its cursor starts at the head).
  const hookFrom = new Map<string, number>();
  for (const acct of [a, b]) {
    await setCallback({ apiBase: api(0).apiBase } as never, acct.apiKey, receiver.url(`/${acct.accountId}`));
    hookFrom.set(acct.accountId, (await admin.query(`SELECT webhook_cursor FROM accounts WHERE id = $1`, [acct.accountId])).rows[0].webhook_cursor);
  }
  await admin.end();

  // The load: REST sends from A (to B, a box of this instance, and to the outside MX) and inbound SMTP to B,
  // each retried on the other process (same idempotency key, same message) when one does not answer.
  const accepted = new Set<number>();
  const smtpAccepted = new Set<number>();
  let stopping = false;
  let retries = 0;
  // Inbound messages whose attempt at the killed MX broke off: SMTP is at least once there, since a message stored
  // just before the kill never got its 250, and the sender sends it again (to the other MX).
  let mxKilled = false;
  const cutAtKill = new Set<number>();
  const unexpected: string[] = [];
  const sender = async (lane: number) => {
    for (let i = lane; !stopping; i += 4) {
      const body = { to: i % 2 ? `out-${i}@remote.test` : b.primaryAddress, subject: `send-${i}`, text: `message ${i}`, idempotency_key: `scale-${i}` };
      for (let attempt = 0; ; attempt++) {
        const r = await rest(api(i + attempt), 'POST', '/messages/send', { key: a.apiKey, body }).catch((err: Error) => ({ status: 0, body: err.message }));
        if (r.status === 200) {
          accepted.add(i);
          break;
        }
        if (r.status !== 0 && r.status !== 503) unexpected.push(`send-${i}: ${r.status} ${JSON.stringify(r.body).slice(0, 200)}`);
        if (attempt > 50) break;
        retries++;
        await sleep(100);
      }
    }
  };
  const inbound = async (lane: number) => {
    for (let i = lane; !stopping; i += 2) {
      for (let attempt = 0; ; attempt++) {
        const port = mxPorts[(i + attempt) % 2]!;
        const transport = nodemailer.createTransport({
          host: '127.0.0.1',
          port,
          secure: false,
          tls: { rejectUnauthorized: false },
          connectionTimeout: 3000,
          greetingTimeout: 3000,
        });
        try {
          await transport.sendMail({
            from: 'someone@outside.test',
            to: b.primaryAddress,
            subject: `in-${i}`,
            text: `inbound ${i}`,
            messageId: `<in-${i}@outside.test>`,
          });
          smtpAccepted.add(i);
          break;
        } catch (err) {
          const code = (err as { responseCode?: number }).responseCode;
          if (code && code >= 500) {
            unexpected.push(`in-${i}: ${(err as Error).message}`);
            break;
          }
          if (attempt > 50) break;
          if (mxKilled && port === mxPorts[0]) cutAtKill.add(i);
          retries++;
          await sleep(100);
        } finally {
          transport.close();
        }
      }
    }
  };
  const lanes = [0, 1, 2, 3].map(sender).concat([0, 1].map(inbound));

  await waitFor('load to run', () => accepted.size >= 30 && smtpAccepted.size >= 10, 60_000);
  // One of each dies at once, mid-burst, and comes back.
  const victims = [servers[0]!, procs.find((p) => p.app === 'worker')!, procs.find((p) => p.smtpPort === mxPorts[0])!];
  const mxPortOfVictim = mxPorts[0]!;
  const killedAt = Date.now();
  const atKill = { accepted: accepted.size, maxI: Math.max(...accepted) };
  mxKilled = true;
  for (const v of victims) kill(v);
  const [s1b] = await Promise.all([start('server'), start('worker'), start('mx', { SMTP_PORT: String(mxPortOfVictim) })]);
  servers[0] = s1b!;
  const restartedAt = Date.now();
  const before = accepted.size;
  await waitFor('load to go on after the restart', () => accepted.size >= before + 30, 60_000).catch((err) => {
    throw new Error(
      `${(err as Error).message}: ${accepted.size - before} sends and ${smtpAccepted.size} inbound since; ${retries} retries; ${unexpected.slice(0, 5).join('; ')}; ${procs.map((p) => `${p.app}: ${p.out().slice(-600)}`).join('\n')}`,
    );
  });
  stopping = true;
  await Promise.all(lanes);
  const loadStoppedAt = Date.now();

  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  try {
    // Everything accepted reaches its end; how long that took after the restart is the recovery time.
    await waitFor(
      'every delivery to finish',
      async () => (await c.query(`SELECT count(*)::int AS n FROM deliveries WHERE account_id = $1 AND status <> 'delivered'`, [a.accountId])).rows[0].n === 0,
      60_000,
    );
    const doneAfterLoadS = (Date.now() - loadStoppedAt) / 1000;

    const sent = await c.query<{ subject: string; n: number }>(
      `SELECT subject, count(*)::int AS n FROM messages WHERE account_id = $1 AND direction = 'sent' GROUP BY subject`,
      [a.accountId],
    );
    const received = await c.query<{ subject: string; n: number }>(
      `SELECT subject, count(*)::int AS n FROM messages WHERE account_id = $1 AND direction = 'received' GROUP BY subject`,
      [b.accountId],
    );
    const sentCount = new Map(sent.rows.map((r) => [r.subject, r.n]));
    const recvCount = new Map(received.rows.map((r) => [r.subject, r.n]));
    const wrong: string[] = [];
    let outsideDuplicates = 0;
    let webhookReplays = 0;
    const dupList: number[] = [];
    for (const i of accepted) {
      if (sentCount.get(`send-${i}`) !== 1) wrong.push(`send-${i} stored ${sentCount.get(`send-${i}`) ?? 0} times`);
      if (i % 2) {
        const n = sink.to(`out-${i}@remote.test`).length;
        if (n === 0) wrong.push(`send-${i} never reached the outside MX`);
        outsideDuplicates += Math.max(0, n - 1);
        if (n > 1) dupList.push(i);
      } else if (recvCount.get(`send-${i}`) !== 1) wrong.push(`send-${i} received by B ${recvCount.get(`send-${i}`) ?? 0} times`);
    }
    for (const i of smtpAccepted) {
      const n = recvCount.get(`in-${i}`) ?? 0;
      if (n !== 1 && !(n === 2 && cutAtKill.has(i))) wrong.push(`in-${i} stored ${n} times`);
    }
    expect(unexpected).toEqual([]);
    expect(wrong).toEqual([]);
    // At least once to the outside: only what was in flight in the killed worker may go twice.
    expect(outsideDuplicates, `duplicates ${dupList.join(',')}; at the kill ${JSON.stringify(atKill)}`).toBeLessThanOrEqual(IN_FLIGHT);

    // Each account's stream: gapless seq, a verifying chain, and every event pushed to its webhook in order.
    for (const acct of [a, b]) {
      const seqs = await c.query<{ seq: number }>(`SELECT seq FROM events WHERE account_id = $1 ORDER BY seq`, [acct.accountId]);
      expect(seqs.rows.map((r) => r.seq)).toEqual(seqs.rows.map((_, k) => k + 1));
      const v = await rest(api(1), 'GET', '/events/verify', { key: acct.apiKey });
      expect(v.body.ok, JSON.stringify(v.body)).toBe(true);
      const events = (await allEvents(api(1) as never, acct.apiKey)).filter((e) => e.seq > hookFrom.get(acct.accountId)!);
      const at = `/${acct.accountId}`;
      await waitFor(`every event of ${acct.accountId} at its webhook`, () => deliveredEvents(receiver.at(at)).length >= events.length, 60_000).catch(
        async (err) => {
          const st = await c.query(`SELECT chain_seq, webhook_cursor, webhook_next_attempt_at, callback_webhook FROM accounts WHERE id = $1`, [acct.accountId]);
          const got = new Set(deliveredEvents(receiver.at(at)).map((e) => e.seq));
          const missing = events.filter((e) => !got.has(e.seq)).map((e) => e.seq);
          const log = await c.query(
            `SELECT seq, status, status_code, error, attempt FROM webhook_deliveries WHERE account_id = $1 AND seq = ANY($2::int[]) ORDER BY created_at`,
            [acct.accountId, missing],
          );
          const tried = receiver
            .at(at)
            .filter((r) => missing.includes(r.event.seq))
            .map((r) => `${r.event.seq}:${r.answered}`);
          const answers = [`missing ${missing.join(',')}`, `log ${JSON.stringify(log.rows)}`, `tried ${tried.join(' ')}`];
          throw new Error(
            `${(err as Error).message}: ${deliveredEvents(receiver.at(at)).length} of ${events.length}; ${JSON.stringify(st.rows[0])}; last answers ${answers.join(' ')}; ${procs
              .filter((p) => p.app === 'worker')
              .map((p) => p.out().slice(-1500))
              .join('\n')}`,
          );
        },
      );
      expect(deliveredEvents(receiver.at(at)).map((e) => e.id)).toEqual(events.map((e) => e.id));
      // In order: no event arrives before every earlier one has; after the kill the new drainer may replay
      // what the killed one sent but had not recorded (at least once), never skip ahead.
      let highest = hookFrom.get(acct.accountId)!;
      const aheadOfOrder: number[] = [];
      for (const r of receiver.at(at).filter((x) => x.answered === 200)) {
        if (r.event.seq > highest + 1) aheadOfOrder.push(r.event.seq);
        highest = Math.max(highest, r.event.seq);
      }
      expect(aheadOfOrder).toEqual([]);
      webhookReplays += receiver.at(at).filter((x) => x.answered === 200).length - events.length;
    }
    console.log(
      `scale-out: ${accepted.size} sends (${[...accepted].filter((i) => i % 2).length} to the outside MX) and ${smtpAccepted.size} inbound messages; ` +
        `${retries} client retries; killed at +0 s, restarted after ${((restartedAt - killedAt) / 1000).toFixed(1)} s, load stopped ${((loadStoppedAt - restartedAt) / 1000).toFixed(1)} s after the restart and every delivery was done ${doneAfterLoadS.toFixed(1)} s later; ` +
        `${outsideDuplicates} duplicate(s) at the outside MX; ${webhookReplays} webhook event(s) replayed`,
    );
  } finally {
    await c.end();
  }
}, 300_000);
