/**
 * A bulk job at its cap: 5,000 messages in batches of 1,000, sent over real SMTP to a stand-in MX. Every
 * recipient gets its message exactly once, the batches go out one after another with the cool-off between them,
 * and the events, counts, message rows and the ledger agree.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { rows as run, sql, tbl } from '@boxes/db';
import { rest, signupAccount, startTestServer, type TestServer } from '@boxes/testing';
import { events, MailSink } from './mail-send-helpers';
import { createJob, messagesTo, waitForJob } from './bulk-helpers';

let t: TestServer;
let sink: MailSink;

beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  t = await startTestServer({ worker: true, resolver: sink.resolver(), env: { BULK_COOL_OFF_SECONDS: '1', BULK_MIN_COOL_OFF_SECONDS: '1' } });
});
afterAll(async () => {
  await t?.stop();
  await sink?.close();
});

it('5,000 messages in batches of 1,000 reach the MX exactly once each, with cool-offs, events and counts right', async () => {
  const a = await signupAccount(t);
  await t.db.account.update({ where: { id: a.accountId }, data: { balanceMicros: 100_000_000n } });
  const messages = messagesTo(5000, 'volume');
  const r = await createJob(t, a.apiKey, { messages, batch_size: 1000, idempotency_key: 'volume-1' });
  expect(r.status, JSON.stringify(r.body).slice(0, 500)).toBe(200);
  expect(r.body).toMatchObject({ status: 'queued', batches_total: 5, cool_off_seconds: 1, counts: { messages: 5000 } });

  const job = await waitForJob(t, a.apiKey, r.body.id, ['completed', 'halted', 'cancelled'], 100_000);
  expect(job.status).toBe('completed');
  expect(job.counts).toEqual({
    messages: 5000,
    recipients: 5000,
    pending: 0,
    delivered: 5000,
    deferred: 0,
    bounced: 0,
    failed: 0,
    suppressed: 0,
    complaints: 0,
  });
  expect(job.batches.map((b: any) => [b.messages, b.status])).toEqual(Array.from({ length: 5 }, () => [1000, 'completed']));

  // Exactly once per recipient.
  const seen = new Map<string, number>();
  for (const m of sink.messages) for (const rcpt of m.rcpt) seen.set(rcpt, (seen.get(rcpt) ?? 0) + 1);
  expect(seen.size).toBe(5000);
  expect([...seen.entries()].filter(([, n]) => n !== 1)).toEqual([]);
  for (const m of messages) expect(seen.has(m.to as string)).toBe(true);

  // Batch by batch: each started after the previous one ended plus the cool-off, and in the order of the request.
  for (let i = 1; i < 5; i++) {
    expect(Date.parse(job.batches[i].started_at) - Date.parse(job.batches[i - 1].completed_at)).toBeGreaterThanOrEqual(1000);
  }
  const order = sink.messages.map((m) => Number(/^volume-(\d+)@/.exec(m.rcpt[0]!)![1]));
  for (let i = 1; i < 5; i++) {
    const firstOfBatch = order.findIndex((n) => Math.floor(n / 1000) === i);
    expect(order.slice(0, firstOfBatch).filter((n) => Math.floor(n / 1000) >= i)).toEqual([]);
    expect(order.slice(firstOfBatch).filter((n) => Math.floor(n / 1000) < i)).toEqual([]);
  }

  const all = (await events(t, a.apiKey, 'bulk.queued,bulk.batch_completed,bulk.completed,bulk.halted')).filter((e) => e.data.bulk_job_id === r.body.id);
  expect(all.map((e) => e.type)).toEqual(['bulk.queued', ...Array.from({ length: 5 }, () => 'bulk.batch_completed'), 'bulk.completed']);
  expect(all.slice(1, 6).map((e) => [e.data.batch, e.data.counts.delivered, e.data.totals.delivered])).toEqual(
    Array.from({ length: 5 }, (_, i) => [i, 1000, (i + 1) * 1000]),
  );
  expect(all[6]!.data.counts).toMatchObject({ delivered: 5000, bounced: 0 });

  // Every message is a sent message with its raw bytes kept; the ledger charged 5,000 (250 free).
  const m = tbl('messages');
  const [rows] = await run(
    t.db,
    sql<{ delivered: bigint; raw: bigint }>`
    SELECT count(*) FILTER (WHERE ${m.status} = 'delivered') AS delivered, count(${m.raw_enc}) AS raw FROM ${m.$}
    WHERE ${m.account_id} = ${a.accountId} AND ${m.direction} = 'sent'`,
  );
  expect({ delivered: Number(rows!.delivered), raw: Number(rows!.raw) }).toEqual({ delivered: 5000, raw: 5000 });
  const l = tbl('ledger_entries');
  const [ledger] = await run(
    t.db,
    sql<{ entries: bigint; free: bigint; micros: bigint }>`
    SELECT count(*) AS entries, sum(${l.free_messages}) AS free, sum(${l.amount_micros}) AS micros FROM ${l.$}
    WHERE ${l.account_id} = ${a.accountId} AND ${l.type} = 'message_sent'`,
  );
  expect({ entries: Number(ledger!.entries), free: Number(ledger!.free), micros: Number(ledger!.micros) }).toEqual({
    entries: 5000,
    free: 250,
    micros: -4750 * 1600,
  });
  const acct = await t.db.account.findUniqueOrThrow({ where: { id: a.accountId } });
  expect({ held: acct.heldMicros, heldFree: acct.heldFreeMessages, balance: acct.balanceMicros }).toEqual({
    held: 0n,
    heldFree: 0,
    balance: 100_000_000n - 4750n * 1600n,
  });

  // The same request again: the same job, nothing more sent.
  const again = await createJob(t, a.apiKey, { messages, batch_size: 1000, idempotency_key: 'volume-1' });
  expect(again.body).toMatchObject({ id: r.body.id, idempotent_replay: true, status: 'completed' });
  const list = await rest(t, 'GET', '/messages/send/bulk?status=completed', { key: a.apiKey });
  expect(list.body.jobs).toHaveLength(1);
  expect(sink.messages.length).toBe(5000);
}, 150_000);
