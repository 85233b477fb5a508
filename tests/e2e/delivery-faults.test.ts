/**
 * Deliveries across the faults of their own dependencies, against a real SMTP sink that counts what it accepts:
 * PostgreSQL going away right after the remote MX answered 250 (the acceptance is recorded when it is back, the
 * message is not sent again), for a single send and for a batch of a bulk job.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { ensureDatabase, migrate } from '@boxes/db';
import { rest, signupAccount, startPrivatePostgres, startTestServer, waitFor, type PrivatePostgres, type TestAccount, type TestServer } from '@boxes/testing';
import { MailSink, unique } from './mail-send-helpers';
import { createJob, messagesTo, waitForJob } from './bulk-helpers';

let pgs: PrivatePostgres;
let sink: MailSink;
let t: TestServer;
let a: TestAccount;
let dbUrl: string;

beforeAll(async () => {
  pgs = await startPrivatePostgres();
  dbUrl = pgs.urlFor('boxes');
  await ensureDatabase(dbUrl);
  await migrate(dbUrl);
  sink = new MailSink();
  await sink.start();
  t = await startTestServer({ databaseUrl: dbUrl, worker: true, resolver: sink.resolver(), env: { BULK_MIN_COOL_OFF_SECONDS: '0' } });
  a = await signupAccount(t);
}, 120_000);

afterAll(async () => {
  await pgs?.start().catch(() => undefined);
  await t?.stop();
  await sink?.close();
  await pgs?.destroy();
}, 60_000);

async function deliveryStatus(messageId: string): Promise<string | null> {
  const c = new pg.Client({ connectionString: dbUrl });
  await c.connect();
  try {
    const r = await c.query<{ status: string }>(`SELECT status FROM deliveries WHERE message_id = $1`, [messageId]);
    return r.rows[0]?.status ?? null;
  } finally {
    await c.end();
  }
}

describe('PostgreSQL going away just after the remote 250', () => {
  it('records the acceptance once the database is back and sends the message exactly once', async () => {
    const to = `outage-${unique()}@remote.test`;
    let stopped = false;
    sink.beforeAccept = async (rcpt) => {
      if (stopped || !rcpt.includes(to)) return;
      stopped = true;
      // The worker's SMTP transaction is past DATA; the 250 reaches it only once the database is gone.
      await pgs.stop('fast');
    };
    const r = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to, subject: 'accepted during an outage', text: 'once' } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    await waitFor('the sink to accept the message', () => stopped && sink.to(to).length >= 1, 30_000);
    // The worker holds a 250 it cannot record; it keeps trying while the database is away.
    await new Promise((res) => setTimeout(res, 4000));
    await pgs.start();
    await waitFor('the delivery to be recorded', async () => (await deliveryStatus(r.body.message_id).catch(() => null)) === 'delivered', 60_000);
    // Time for a wrongly retried job to have sent it again.
    await new Promise((res) => setTimeout(res, 3000));
    expect(sink.to(to)).toHaveLength(1);
    const m = await rest(t, 'GET', `/messages/${r.body.message_id}`, { key: a.apiKey });
    expect(m.body.deliveries[0]).toMatchObject({ status: 'delivered' });
  }, 120_000);
});

describe('PostgreSQL going away during a bulk batch', () => {
  it('records the batch once the database is back: every recipient exactly once', async () => {
    const prefix = `bulk-outage-${unique()}`;
    const messages = messagesTo(6, prefix);
    const trigger = `${prefix}-3@remote.test`;
    let stopped = false;
    sink.beforeAccept = async (rcpt) => {
      if (stopped || !rcpt.includes(trigger)) return;
      stopped = true;
      await pgs.stop('fast');
    };
    const r = await createJob(t, a.apiKey, { messages, batch_size: 6, cool_off_seconds: 0 });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    await waitFor('the sink to accept the trigger', () => stopped && sink.to(trigger).length >= 1, 30_000);
    await new Promise((res) => setTimeout(res, 4000));
    await pgs.start();
    sink.beforeAccept = null;
    await waitForJob(t, a.apiKey, r.body.id, ['completed'], 60_000);
    await new Promise((res) => setTimeout(res, 3000));
    const counts = messages.map((m) => sink.to(m.to as string).length);
    expect(counts).toEqual(messages.map(() => 1));
  }, 120_000);
});
