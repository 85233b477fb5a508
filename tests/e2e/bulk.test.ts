/**
 * Bulk send jobs over real HTTP, PostgreSQL, Redis and SMTP: refusals before anything is queued (validation with
 * the index and field named, credit with the top-up guidance, the cool-off floor), idempotent job creation, a job
 * that goes out batch by batch with cool-offs, the circuit breaker, cancel, and a worker restart in the middle of
 * a batch (nothing sent twice, nothing skipped).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { BoxesError, createBoxesClient } from '@boxes/sdk';
import { start as startWorker, type WorkerHandle } from '@boxes/worker';
import { haltFailedBatch, messagePrice } from '@boxes/core';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { events, MailSink, unique, waitFor } from './mail-send-helpers';
import { createJob, getJob, messagesTo, waitForJob } from './bulk-helpers';
import { sendRaw } from './mail-receive-helpers';

/** An abuse feedback report (RFC 5965) about a message the sink received, as a mailbox provider sends it. */
function complaint(opts: { to: string; original: Buffer; rcptTo: string; mailFrom: string }): string {
  const boundary = `arf_${unique()}`;
  return `From: <abuse-reports@remote.test>
Date: Mon, 23 Nov 2026 10:00:00 +0000
Subject: FW: complaint
To: ${opts.to}
Message-ID: <arf-${unique()}@remote.test>
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report; boundary="${boundary}"

--${boundary}
Content-Type: text/plain

This is an email abuse report.

--${boundary}
Content-Type: message/feedback-report

Feedback-Type: abuse
User-Agent: RemoteFBL/1.0
Version: 1
Original-Mail-From: <${opts.mailFrom}>
Original-Rcpt-To: <${opts.rcptTo}>

--${boundary}
Content-Type: message/rfc822

${opts.original.toString('latin1').replace(/\r\n/g, '\n')}
--${boundary}--
`.replace(/\r?\n/g, '\r\n');
}

let t: TestServer;
let sink: MailSink;
const extraWorkers: WorkerHandle[] = [];

beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  t = await startTestServer({
    worker: true,
    mail: true,
    resolver: sink.resolver(),
    env: { BULK_COOL_OFF_SECONDS: '1', BULK_MIN_COOL_OFF_SECONDS: '0', BULK_MAX_BATCH_SIZE: '5000', BULK_MAX_ACTIVE_JOBS: '100' },
  });
});
afterAll(async () => {
  for (const w of extraWorkers) await w.stop();
  await t?.stop();
  await sink?.close();
});

/** An account with `dollars` of credit besides its free messages. */
async function fundedAccount(dollars = 100): Promise<TestAccount> {
  const a = await signupAccount(t);
  await t.db.account.update({ where: { id: a.accountId }, data: { balanceMicros: BigInt(dollars) * 1_000_000n } });
  return a;
}

/** Runs the queued (delayed) batch job of a bulk job now and waits until the worker has handled it. */
async function runNextBatchNow(bulkId: string, batch: number): Promise<void> {
  const queued = await t.svc.jobs.bulk.getJob(`${bulkId}-${batch}`);
  expect(queued, 'the next batch is queued').toBeTruthy();
  if ((await queued!.getState()) === 'delayed') await queued!.promote();
  await waitFor(async () => (await queued!.getState()) === 'completed', `batch ${batch} of ${bulkId} to be handled`);
}

const jobsOf = (accountId: string) => t.db.bulkJob.count({ where: { accountId } });

describe('refused before anything is queued', () => {
  let a: TestAccount;
  beforeAll(async () => {
    a = await fundedAccount();
  });

  it.each([
    ['a bad address', 3, { to: 'not-an-address' }, 'messages.3.to'],
    ['a reserved header', 7, { to: 'x@remote.test', text: 'x', headers: { 'Message-ID': '<x@y>' } }, 'messages.7.headers.Message-ID'],
    ['no body', 0, { to: 'x@remote.test', subject: 'empty' }, 'messages.0.text'],
    ['a from outside the account domain', 5, { to: 'x@remote.test', text: 'x', from: 'someone@elsewhere.test' }, 'messages.5.from'],
    ['an idempotency_key on a message', 2, { to: 'x@remote.test', text: 'x', idempotency_key: 'k' }, 'messages.2'],
  ])('%s: 400 naming the index and field, no job', async (_what, index, bad, path) => {
    const messages = messagesTo(10, `refused-${unique()}`);
    messages[index] = bad as never;
    const r = await createJob(t, a.apiKey, { messages, batch_size: 5 });
    expect(r.status === 400 || r.status === 403, JSON.stringify(r.body)).toBe(true);
    expect(JSON.stringify(r.body.error)).toContain(path);
    expect(r.body.error.message).toContain(`messages.${index}`);
    expect(await jobsOf(a.accountId)).toBe(0);
  });

  it('more than 5,000 messages, a batch_size of 0, a cool-off below the floor: 400', async () => {
    const tooMany = await createJob(t, a.apiKey, { messages: messagesTo(5001, 'too-many') });
    expect(tooMany.status).toBe(400);
    expect(JSON.stringify(tooMany.body.error)).toContain('messages');
    const zero = await createJob(t, a.apiKey, { messages: messagesTo(2, 'zero'), batch_size: 0 });
    expect(zero.status).toBe(400);
    const unknown = await createJob(t, a.apiKey, { messages: messagesTo(2, 'unknown'), speed: 'fast' });
    expect(unknown.status).toBe(400);
    const laxer = await createJob(t, a.apiKey, { messages: messagesTo(2, 'laxer'), max_bounce_rate: 0.5 });
    expect(laxer.status).toBe(400);
    expect(laxer.body.error.message).toContain('max_bounce_rate');
    expect(await jobsOf(a.accountId)).toBe(0);
  });

  it('credit short for the whole job: 402 with the top-up guidance, nothing queued or held', async () => {
    const poor = await signupAccount(t); // 250 free messages, no credit
    const before = await t.db.account.findUniqueOrThrow({ where: { id: poor.accountId } });
    const r = await createJob(t, poor.apiKey, { messages: messagesTo(251, `poor-${unique()}`), batch_size: 100 });
    expect(r.status, JSON.stringify(r.body)).toBe(402);
    expect(r.body.error.code).toBe('payment_required');
    expect(r.body.error.top_up.mpp.url).toContain('/account/credit/topup/mpp');
    expect(r.body.error.message).toContain('bulk job');
    expect(await jobsOf(poor.accountId)).toBe(0);
    const after = await t.db.account.findUniqueOrThrow({ where: { id: poor.accountId } });
    expect({ held: after.heldMicros, heldFree: after.heldFreeMessages }).toEqual({ held: before.heldMicros, heldFree: before.heldFreeMessages });
    // 250 fit in the free allowance.
    const fits = await createJob(t, poor.apiKey, { messages: messagesTo(250, `fits-${unique()}`), batch_size: 250, cool_off_seconds: 0 });
    expect(fits.status, JSON.stringify(fits.body)).toBe(200);
    await waitForJob(t, poor.apiKey, fits.body.id, ['completed']);
  });

  it('the 50-recipient error of a single send points at the bulk endpoint', async () => {
    const to = Array.from({ length: 30 }, (_, i) => `many-${i}@remote.test`);
    const cc = Array.from({ length: 21 }, (_, i) => `many-cc-${i}@remote.test`);
    const r = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to, cc, text: 'x' } });
    expect(r.status).toBe(400);
    expect(r.body.error.message).toContain('POST /messages/send/bulk');
    expect(r.body.error.bulk.url).toBe(`${t.apiBase}/messages/send/bulk`);
  });
});

describe('idempotent job creation', () => {
  it('the same idempotency_key and request answer the same job; a different request is 409; one job, one bulk.queued', async () => {
    const a = await fundedAccount();
    const body = { messages: messagesTo(3, `idem-${unique()}`), batch_size: 3, cool_off_seconds: 0, idempotency_key: 'newsletter-1' };
    const first = await createJob(t, a.apiKey, body);
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(first.body.idempotent_replay).toBeUndefined();
    const again = await createJob(t, a.apiKey, body);
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ id: first.body.id, idempotent_replay: true });
    const other = await createJob(t, a.apiKey, { ...body, messages: messagesTo(4, 'idem-other') });
    expect(other.status).toBe(409);
    expect(other.body.error).toMatchObject({ code: 'idempotency_key_reused', bulk_job_id: first.body.id });
    await waitForJob(t, a.apiKey, first.body.id, ['completed']);
    expect(await jobsOf(a.accountId)).toBe(1);
    expect(await events(t, a.apiKey, 'bulk.queued')).toHaveLength(1);
    for (const m of body.messages) expect(sink.to(m.to as string)).toHaveLength(1);
  });
});

describe('a job in batches with cool-offs', () => {
  it('25 messages in batches of 10: every recipient once, events and counts right, the cool-off kept', async () => {
    const a = await fundedAccount();
    const prefix = `batches-${unique()}`;
    const messages = messagesTo(25, prefix);
    messages[4] = { ...messages[4]!, cc: [`${prefix}-cc@remote.test`] };
    const r = await createJob(t, a.apiKey, { messages, batch_size: 10, cool_off_seconds: 1 });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ status: 'queued', batch_size: 10, batches_total: 3, cool_off_seconds: 1, counts: { messages: 25 } });
    expect(r.body.id).toMatch(/^bulk_/);

    const job = await waitForJob(t, a.apiKey, r.body.id, ['completed']);
    expect(job.counts).toMatchObject({ messages: 25, recipients: 26, delivered: 26, bounced: 0, failed: 0, pending: 0, suppressed: 0 });
    expect(job.batches.map((b: any) => [b.index, b.messages, b.status])).toEqual([
      [0, 10, 'completed'],
      [1, 10, 'completed'],
      [2, 5, 'completed'],
    ]);
    expect(job.finished_at).toEqual(expect.any(String));
    for (const m of messages) expect(sink.to(m.to as string), m.to as string).toHaveLength(1);
    expect(sink.to(`${prefix}-cc@remote.test`)).toHaveLength(1);
    // Each batch starts no earlier than the cool-off after the previous one ended.
    for (let i = 1; i < 3; i++) {
      expect(Date.parse(job.batches[i].started_at) - Date.parse(job.batches[i - 1].completed_at)).toBeGreaterThanOrEqual(1000);
    }

    const bulkEvents = (await events(t, a.apiKey, 'bulk.queued,bulk.batch_completed,bulk.completed,bulk.halted')).filter(
      (e) => e.data.bulk_job_id === r.body.id,
    );
    expect(bulkEvents.map((e) => e.type)).toEqual(['bulk.queued', 'bulk.batch_completed', 'bulk.batch_completed', 'bulk.batch_completed', 'bulk.completed']);
    expect(bulkEvents[0]!.data).toMatchObject({ messages: 25, recipients: 26, batches: 3, batch_size: 10 });
    expect(bulkEvents.slice(1, 4).map((e) => [e.data.batch, e.data.counts.messages, e.data.counts.delivered])).toEqual([
      [0, 10, 11],
      [1, 10, 10],
      [2, 5, 5],
    ]);
    expect(bulkEvents[4]!.data.counts).toMatchObject({ delivered: 26, bounced: 0 });

    // The messages are ordinary sent messages, charged per recipient (25 free + 1 free: 26 of the 250).
    const sent = await rest(t, 'GET', '/messages?direction=sent&limit=50', { key: a.apiKey });
    expect(sent.body.messages).toHaveLength(25);
    expect(new Set(sent.body.messages.map((m: any) => m.status))).toEqual(new Set(['delivered']));
    // Each message's signed bytes are stored, as the flush that recorded its delivery wrote them.
    const stored = await t.db.message.findMany({ where: { accountId: a.accountId, direction: 'sent' }, select: { rawEnc: true } });
    expect(stored.filter((m) => m.rawEnc === null)).toHaveLength(0);
    expect(stored).toHaveLength(25);
    const acct = await t.db.account.findUniqueOrThrow({ where: { id: a.accountId } });
    expect({ free: acct.freeMessagesLeft, held: acct.heldMicros, heldFree: acct.heldFreeMessages }).toEqual({ free: 250 - 26, held: 0n, heldFree: 0 });
    const list = await rest(t, 'GET', '/messages/send/bulk', { key: a.apiKey });
    expect(list.body.jobs.map((j: any) => j.id)).toEqual([r.body.id]);
  });
});

describe('credit alerts', () => {
  it('a batch whose charges cross an alert threshold: one low_balance at the crossing, the balance and the chain right', async () => {
    const price = messagePrice(t.svc);
    const a = await signupAccount(t);
    await t.db.account.update({ where: { id: a.accountId }, data: { freeMessagesLeft: 0, balanceMicros: 1_000_000n } });
    // 99 cents: crossed by the charge that takes the balance below 990,000 micros, partway through the batch.
    const set = await rest(t, 'PUT', '/account/credit/alert-thresholds', { key: a.apiKey, body: { first_cents: 99, second_cents: null } });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    const crossing = Number((1_000_000n - 990_000n) / price) + 1;
    expect(crossing).toBeLessThan(10);

    const prefix = `alert-${unique()}`;
    const r = await createJob(t, a.apiKey, { messages: messagesTo(10, prefix), batch_size: 10 });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const job = await waitForJob(t, a.apiKey, r.body.id, ['completed']);
    expect(job.counts).toMatchObject({ messages: 10, recipients: 10, delivered: 10 });

    const alerts = await events(t, a.apiKey, 'low_balance');
    expect(alerts.map((e) => e.data)).toEqual([
      expect.objectContaining({ alert: 'first', threshold_cents: 99, credit_balance_cents: Number((1_000_000n - BigInt(crossing) * price) / 10_000n) }),
    ]);
    const acct = await t.db.account.findUniqueOrThrow({ where: { id: a.accountId } });
    expect({ balance: acct.balanceMicros, held: acct.heldMicros }).toEqual({ balance: 1_000_000n - 10n * price, held: 0n });
    // One ledger entry per recipient, each balance_after one price below the one before.
    const entries = await t.db.ledgerEntry.findMany({ where: { accountId: a.accountId, type: 'message_sent' }, orderBy: { balanceAfter: 'desc' } });
    expect(entries.map((e) => e.balanceAfter)).toEqual(Array.from({ length: 10 }, (_, i) => 1_000_000n - BigInt(i + 1) * price));
    expect((await rest(t, 'GET', '/events/verify', { key: a.apiKey })).body).toMatchObject({ ok: true });
  });
});

describe('the circuit breaker', () => {
  it('halts a job whose recipients bounce past 2%, says why, and sends no further batch', async () => {
    const a = await fundedAccount();
    const prefix = `breaker-${unique()}`;
    const messages = messagesTo(300, prefix);
    for (let i = 0; i < 10; i++) messages[i * 7] = { ...messages[i * 7]!, to: `reject-${prefix}-${i}@remote.test` };
    const r = await createJob(t, a.apiKey, { messages, batch_size: 100, cool_off_seconds: 0 });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const job = await waitForJob(t, a.apiKey, r.body.id, ['halted', 'completed']);
    expect(job.status).toBe('halted');
    expect(job.halted).toMatchObject({ reason: 'bounce_rate', bounced: 10, max_bounce_rate: 0.02 });
    expect(job.halted.message).toContain('bounced');
    expect(job.counts.bounced).toBe(10);
    expect(job.bounce_rate).toBeGreaterThan(0.02);
    expect(job.batches_completed).toBe(1);
    expect(job.batches.map((b: any) => b.status)).toEqual(['completed', 'skipped', 'skipped']);
    // Nothing of the later batches reached the MX.
    for (const m of messages.slice(100)) expect(sink.to(m.to as string)).toHaveLength(0);
    const halted = (await events(t, a.apiKey, 'bulk.halted')).filter((e) => e.data.bulk_job_id === r.body.id);
    expect(halted).toHaveLength(1);
    expect(halted[0]!.data).toMatchObject({ reason: 'bounce_rate', bounced: 10 });
    // The bounces took the shared path: suppression list and mail.bounced.
    expect((await rest(t, 'GET', `/suppression/${encodeURIComponent(`reject-${prefix}-0@remote.test`)}`, { key: a.apiKey })).body.suppressed).toBe(true);
    const acct = await t.db.account.findUniqueOrThrow({ where: { id: a.accountId } });
    expect({ held: acct.heldMicros, heldFree: acct.heldFreeMessages }).toEqual({ held: 0n, heldFree: 0 });
  });
});

describe('the circuit breaker within a batch', () => {
  it('halts a batch going out once 100 of its recipients were attempted and too many bounced: the rest is never sent', async () => {
    const a = await fundedAccount();
    const prefix = `breaker-mid-${unique()}`;
    const messages = messagesTo(1000, prefix);
    for (let i = 0; i < 30; i++) messages[i * 3] = { ...messages[i * 3]!, to: `reject-${prefix}-${i}@remote.test` };
    const r = await createJob(t, a.apiKey, { messages, batch_size: 1000, cool_off_seconds: 0 });
    expect(r.status).toBe(200);
    const job = await waitFor(async () => {
      const j = await getJob(t, a.apiKey, r.body.id);
      return j.status !== 'queued' && j.status !== 'sending' && j.counts.pending === 0 ? j : null;
    }, 'the job to stop');
    expect(job.status).toBe('halted');
    expect(job.halted.reason).toBe('bounce_rate');
    expect(job.batches.map((b: any) => b.status)).toEqual(['stopped']);
    const attempted = job.counts.delivered + job.counts.bounced;
    expect(attempted).toBeGreaterThanOrEqual(100);
    expect(attempted).toBeLessThan(1000);
    expect(job.counts.failed).toBe(1000 - attempted);
    const reached = new Set(sink.messages.flatMap((m) => m.rcpt).filter((x) => x.includes(prefix)));
    expect(reached.size).toBe(job.counts.delivered);
    const acct = await t.db.account.findUniqueOrThrow({ where: { id: a.accountId } });
    expect({ held: acct.heldMicros, heldFree: acct.heldFreeMessages }).toEqual({ held: 0n, heldFree: 0 });
  });
});

describe('the circuit breaker on complaints', () => {
  it('complaints reported during the cool-off (feedback reports through the MX) halt the job before its next batch', async () => {
    const a = await fundedAccount();
    const prefix = `complaints-${unique()}`;
    const messages = messagesTo(200, prefix);
    const r = await createJob(t, a.apiKey, { messages, batch_size: 100, cool_off_seconds: 4 });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const cooling = await waitForJob(t, a.apiKey, r.body.id, ['cooling_off', 'completed']);
    expect(cooling.status).toBe('cooling_off');
    // One complaint among 100 attempted recipients: 1%, above the 0.5% limit.
    const complainer = `${prefix}-7@remote.test`;
    const original = sink.to(complainer)[0]!;
    const report = complaint({ to: a.primaryAddress, original: original.raw, rcptTo: complainer, mailFrom: original.mailFrom });
    const sent = await sendRaw(t.smtpPort!, { from: '', to: [a.primaryAddress] }, report);
    expect(sent.accepted).toEqual([a.primaryAddress]);
    const job = await waitForJob(t, a.apiKey, r.body.id, ['halted', 'completed']);
    expect(job.status).toBe('halted');
    expect(job.halted).toMatchObject({ reason: 'complaint_rate', complaints: 1, max_complaint_rate: 0.005 });
    expect(job.counts.complaints).toBe(1);
    expect(job.batches.map((b: any) => b.status)).toEqual(['completed', 'skipped']);
    for (const m of messages.slice(100)) expect(sink.to(m.to as string)).toHaveLength(0);
    expect((await events(t, a.apiKey, 'bulk.halted')).filter((e) => e.data.bulk_job_id === r.body.id)).toHaveLength(1);
  });
});

describe('cancel', () => {
  it('stops a job between batches; again answers cancelled; a completed job is 409; another account gets 404', async () => {
    const a = await fundedAccount();
    const prefix = `cancel-${unique()}`;
    const messages = messagesTo(20, prefix);
    const r = await createJob(t, a.apiKey, { messages, batch_size: 10, cool_off_seconds: 3600 });
    expect(r.status).toBe(200);
    const cooling = await waitForJob(t, a.apiKey, r.body.id, ['cooling_off']);
    expect(Date.parse(cooling.next_batch_at) - Date.now()).toBeGreaterThan(3000 * 1000 - 60_000);

    const other = await signupAccount(t);
    expect((await rest(t, 'POST', `/messages/send/bulk/${r.body.id}/cancel`, { key: other.apiKey })).status).toBe(404);
    expect((await rest(t, 'GET', `/messages/send/bulk/${r.body.id}`, { key: other.apiKey })).status).toBe(404);

    const c = await rest(t, 'POST', `/messages/send/bulk/${r.body.id}/cancel`, { key: a.apiKey });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect(c.body).toMatchObject({ status: 'cancelled', batches_completed: 1, next_batch_at: null });
    expect(c.body.batches.map((b: any) => b.status)).toEqual(['completed', 'skipped']);
    const again = await rest(t, 'POST', `/messages/send/bulk/${r.body.id}/cancel`, { key: a.apiKey });
    expect(again.status).toBe(200);
    expect(again.body.status).toBe('cancelled');
    expect((await events(t, a.apiKey, 'bulk.cancelled')).filter((e) => e.data.bulk_job_id === r.body.id)).toHaveLength(1);
    // The queued batch, run now instead of in an hour, finds the job cancelled and sends nothing.
    await runNextBatchNow(r.body.id, 1);
    for (const m of messages.slice(10)) expect(sink.to(m.to as string)).toHaveLength(0);
    expect((await getJob(t, a.apiKey, r.body.id)).status).toBe('cancelled');

    const done = await createJob(t, a.apiKey, { messages: messagesTo(2, `${prefix}-done`), cool_off_seconds: 0 });
    await waitForJob(t, a.apiKey, done.body.id, ['completed']);
    const late = await rest(t, 'POST', `/messages/send/bulk/${done.body.id}/cancel`, { key: a.apiKey });
    expect(late.status).toBe(409);
  });

  it('stops a batch in flight: what was not handed over is never sent and its hold is released', async () => {
    const a = await fundedAccount();
    const prefix = `cancel-mid-${unique()}`;
    const messages = messagesTo(3000, prefix);
    const r = await createJob(t, a.apiKey, { messages, batch_size: 3000, cool_off_seconds: 0 });
    expect(r.status).toBe(200);
    await waitFor(() => sink.messages.filter((m) => m.rcpt[0]!.startsWith(`${prefix}-`)).length >= 50, 'the first messages of the batch');
    const c = await rest(t, 'POST', `/messages/send/bulk/${r.body.id}/cancel`, { key: a.apiKey });
    expect(c.status).toBe(200);
    const job = await waitFor(async () => {
      const j = await getJob(t, a.apiKey, r.body.id);
      return j.counts.pending === 0 ? j : null;
    }, 'the batch to stop');
    const seen = new Set(sink.messages.flatMap((m) => m.rcpt).filter((x) => x.startsWith(`${prefix}-`)));
    expect(job.counts.delivered).toBe(seen.size);
    expect(job.counts.delivered).toBeLessThan(3000);
    expect(job.counts.failed).toBe(3000 - job.counts.delivered);
    const acct = await t.db.account.findUniqueOrThrow({ where: { id: a.accountId } });
    expect({ held: acct.heldMicros, heldFree: acct.heldFreeMessages }).toEqual({ held: 0n, heldFree: 0 });
  });
});

describe('a batch that fails after every retry', () => {
  it('halts the job (batch_failed, bulk.halted) and releases what was not sent, instead of leaving it sending', async () => {
    const a = await fundedAccount();
    const prefix = `failed-${unique()}`;
    const messages = messagesTo(20, prefix);
    const r = await createJob(t, a.apiKey, { messages, batch_size: 10, cool_off_seconds: 3600 });
    expect(r.status).toBe(200);
    await waitForJob(t, a.apiKey, r.body.id, ['cooling_off']);
    const held = async () => {
      const x = await t.db.account.findUniqueOrThrow({ where: { id: a.accountId }, select: { heldMicros: true, heldFreeMessages: true } });
      return { micros: x.heldMicros, free: x.heldFreeMessages };
    };
    // What the worker does when BullMQ gives the batch up for good (its 'failed' event on the last attempt).
    expect(await haltFailedBatch(t.svc, { bulkJobId: r.body.id, batch: 1 }, 'connection reset by the relay')).toBe(true);
    expect(await haltFailedBatch(t.svc, { bulkJobId: r.body.id, batch: 1 }, 'again')).toBe(false);
    const job = await getJob(t, a.apiKey, r.body.id);
    expect(job).toMatchObject({ status: 'halted', next_batch_at: null, halted: { reason: 'batch_failed' } });
    expect(job.halted.message).toMatch(/Batch 2 failed after every retry: connection reset by the relay/);
    // The second batch never started: its messages were never made, nothing of it is held or charged.
    expect(job.counts).toMatchObject({ messages: 20, recipients: 10, delivered: 10, failed: 0 });
    expect(job.batches.map((b: any) => b.status)).toEqual(['completed', 'skipped']);
    const halted = (await events(t, a.apiKey, 'bulk.halted')).filter((e) => e.data.bulk_job_id === r.body.id);
    expect(halted).toHaveLength(1);
    expect(halted[0]!.data.reason).toBe('batch_failed');
    expect(await held()).toEqual({ micros: 0n, free: 0 });
    await runNextBatchNow(r.body.id, 1);
    for (const m of messages.slice(10)) expect(sink.to(m.to as string)).toHaveLength(0);
  });
});

describe('closing the account', () => {
  it('cancels its unfinished bulk jobs: no further batch goes out', async () => {
    const a = await fundedAccount();
    const prefix = `closing-${unique()}`;
    const messages = messagesTo(4, prefix);
    const r = await createJob(t, a.apiKey, { messages, batch_size: 2, cool_off_seconds: 3600 });
    await waitForJob(t, a.apiKey, r.body.id, ['cooling_off']);
    const closed = await rest(t, 'DELETE', '/account', { key: a.apiKey, body: { confirm_domain: a.domain } });
    expect(closed.status, JSON.stringify(closed.body)).toBe(200);
    const job = await t.db.bulkJob.findUniqueOrThrow({ where: { id: r.body.id } });
    expect(job.status).toBe('cancelled');
    await runNextBatchNow(r.body.id, 1);
    for (const m of messages.slice(2)) expect(sink.to(m.to as string)).toHaveLength(0);
  });
});

describe('the same jobs through the SDK (tRPC) and MCP', () => {
  it('the SDK creates, reads, lists and cancels; an MCP tool call creates and reads; refusals keep their codes', async () => {
    const a = await fundedAccount();
    const sdk = createBoxesClient({ baseUrl: t.url, apiKey: a.apiKey });
    const prefix = `sdk-${unique()}`;
    const job = await sdk.bulk.send.mutate({ messages: messagesTo(3, prefix), batch_size: 2, cool_off_seconds: 3600 });
    expect(job).toMatchObject({ status: 'queued', batches_total: 2, counts: { messages: 3 } });
    const cooling = await waitForJob(t, a.apiKey, job.id, ['cooling_off']);
    expect((await sdk.bulk.get.query({ id: job.id })).counts.delivered).toBe(cooling.counts.delivered);
    expect((await sdk.bulk.list.query({})).jobs.map((j) => j.id)).toEqual([job.id]);
    expect((await sdk.bulk.cancel.mutate({ id: job.id })).status).toBe('cancelled');
    const bad = await sdk.bulk.send.mutate({ messages: [{ to: 'x@remote.test', text: 'x' }, { to: 'nope' }] }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(BoxesError);
    expect((bad as BoxesError).status).toBe(400);
    expect((bad as BoxesError).message).toContain('messages.1.to');

    const mcp = new Client({ name: 'boxes-bulk-e2e', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${a.apiKey}` } } }));
    try {
      const created = await mcp.callTool({ name: 'bulk_send', arguments: { messages: messagesTo(2, `${prefix}-mcp`), cool_off_seconds: 0 } });
      expect(created.isError, JSON.stringify(created.content)).toBeFalsy();
      const id = (created.structuredContent as { id: string }).id;
      await waitForJob(t, a.apiKey, id, ['completed']);
      const read = await mcp.callTool({ name: 'bulk_get', arguments: { id } });
      expect(read.structuredContent).toMatchObject({ id, status: 'completed', counts: { delivered: 2 } });
    } finally {
      await mcp.close();
    }
    for (const m of messagesTo(2, `${prefix}-mcp`)) expect(sink.to(m.to as string)).toHaveLength(1);
  });
});

describe('a worker restart in the middle of a batch', () => {
  it('the new worker sends exactly what is left: every recipient once', async () => {
    const a = await fundedAccount();
    const prefix = `restart-${unique()}`;
    const messages = messagesTo(2000, prefix);
    const r = await createJob(t, a.apiKey, { messages, batch_size: 2000, cool_off_seconds: 0 });
    expect(r.status).toBe(200);
    const ours = () => sink.messages.filter((m) => m.rcpt[0]!.startsWith(`${prefix}-`)).length;
    await waitFor(() => ours() >= 100, 'the first messages of the batch');
    await t.runtime.worker!.stop();
    const atStop = ours();
    expect(atStop).toBeLessThan(2000);
    const stopped = await getJob(t, a.apiKey, r.body.id);
    expect(stopped.status).toBe('sending');
    expect(stopped.counts.delivered).toBe(atStop);

    const w = await startWorker(t.config, { svc: t.svc, log: t.runtime.log, resolver: sink.resolver(), publish: null });
    extraWorkers.push(w);
    const job = await waitForJob(t, a.apiKey, r.body.id, ['completed'], 60_000);
    expect(job.counts).toMatchObject({ delivered: 2000, pending: 0, failed: 0 });
    const counts = new Map<string, number>();
    for (const m of sink.messages) for (const rcpt of m.rcpt) if (rcpt.startsWith(`${prefix}-`)) counts.set(rcpt, (counts.get(rcpt) ?? 0) + 1);
    expect(counts.size).toBe(2000);
    expect([...counts.values()].filter((n) => n !== 1)).toEqual([]);
  });
});
