/**
 * Metering and balance (docs/guide/credit.md): the free allowance and the per-message price, inbound
 * mail while the balance is negative, low-balance thresholds, recurring debits run by the worker's repeatable
 * billing job (DNS hosting, storage, DNS overage) with billing.deficit / billing.recovered, attachments, the
 * trailer and its surcharge, and GET /account/credit/usage checked against the ledger in SQL.
 *
 * Credit is given either by a real payment (enrollWallet + MPP approval, the deficit case) or by posting a
 * 'topup' ledger entry through postEntries, the same code path a payment lands its credit with.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { simpleParser } from 'mailparser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AdjustableClock, postEntries, LEDGER_TYPES, type LedgerType, type Posting } from '@boxes/core';
import { rest, signupAccount, startTestServer, waitFor, type ApiEvent, type TestAccount, type TestServer } from '@boxes/testing';
import { MailSink, send, waitSettled } from './mail-send-helpers';
import { rawMessage, sendRaw, smtpClient } from './mail-receive-helpers';
import { enrollWallet, linkIn, ownerSignIn, startOwnerInbox, startPaymentsServer, type OwnerInbox } from './owner-helpers';
import { exec, k, rows, sql } from '@boxes/db';

const DAY_MS = 86_400_000;
const tag = () => randomBytes(5).toString('hex');

let t: TestServer; // worker + MX, outbound mail to the sink
let intro: TestServer; // PRICE_INTRODUCTORY=true
let tb: TestServer; // payments + BILLING_CYCLE_MS=500 + adjustable clock
let sink: MailSink;
let inbox: OwnerInbox;
const clock = new AdjustableClock();

beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  inbox = await startOwnerInbox();
  [t, intro, tb] = await Promise.all([
    startTestServer({ worker: true, mail: true, resolver: sink.resolver() }),
    startTestServer({ worker: true, resolver: sink.resolver(), env: { PRICE_INTRODUCTORY: 'true' } }),
    startPaymentsServer(inbox, { env: { BILLING_CYCLE_MS: '500' }, clock }),
  ]);
});
afterAll(async () => {
  await Promise.all([t?.stop(), intro?.stop(), tb?.stop()]);
  await sink?.close();
  await inbox?.close();
});

// ---------------------------------------------------------------------------------------------------------
// Helpers

/** Lands credit with a topup ledger entry (the posting a payment makes). */
async function topUp(s: TestServer, accountId: string, micros: bigint): Promise<void> {
  await s.db.$transaction((tx) => postEntries(s.svc, tx, accountId, [{ type: 'topup', amountMicros: micros, idempotencyKey: `test-topup:${randomUUID()}` }]));
}

/** The free allowance is exercised in full by the first test; elsewhere it is set aside so charges are paid. */
async function useUpFreeMessages(s: TestServer, accountId: string): Promise<void> {
  await s.db.account.update({ where: { id: accountId }, data: { freeMessagesLeft: 0 } });
}

async function balance(s: TestServer, key: string): Promise<any> {
  const r = await rest(s, 'GET', '/account/credit/balance', { key });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body;
}

async function eventsOf(s: TestServer, key: string, type: string): Promise<ApiEvent[]> {
  const r = await rest(s, 'GET', `/events?limit=500&type=${encodeURIComponent(type)}`, { key });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.events;
}

const entries = (s: TestServer, accountId: string, type?: LedgerType) =>
  s.db.ledgerEntry.findMany({ where: { accountId, ...(type ? { type } : {}) }, orderBy: [{ createdAt: 'asc' }, { id: 'asc' }] });

const account = (s: TestServer, accountId: string) => s.db.account.findUniqueOrThrow({ where: { id: accountId } });

function expectPaymentRequired(s: TestServer, r: { status: number; body: any }): void {
  expect(r.status, JSON.stringify(r.body)).toBe(402);
  expect(r.body.error.code).toBe('payment_required');
  expect(r.body.error.top_up.mpp.url).toBe(`${s.apiBase}/account/credit/topup/mpp`);
  expect(r.body.error.top_up.mpp.url).toMatch(/\/account\/credit\/topup\/mpp$/);
  expect(r.body.error.top_up.human_approval).toMatch(/owner approves/);
}

/** Sends one message to each group of recipients (at most 50 per message), all at once; waits for delivery. */
async function sendAndSettle(s: TestServer, key: string, groups: string[][], extra: Record<string, unknown> = {}): Promise<any[]> {
  const results = await Promise.all(groups.map((to, i) => send(s, key, { to, subject: `batch ${i}`, text: 'metered', ...extra })));
  for (const r of results) expect(r.status, JSON.stringify(r.body)).toBe(200);
  await Promise.all(results.map((r) => waitSettled(s, key, r.body.message_id, 30_000)));
  return results.map((r) => r.body);
}

const recipients = (n: number, prefix: string) => Array.from({ length: n }, (_, i) => `${prefix}-${i}@remote.test`);

/** BullMQ cycle jobs of the billing queue that finished after t0 (the repeatable job, not a manual cycle()). */
async function cyclesSince(t0: number): Promise<number> {
  const jobs = await tb.svc.jobs.billing.getJobs(['completed'], 0, 200);
  return jobs.filter((j) => j.name === 'cycle' && (j.finishedOn ?? 0) > t0).length;
}

async function waitForCycles(n: number): Promise<void> {
  const t0 = Date.now();
  await waitFor(`${n} billing cycles`, async () => (await cyclesSince(t0)) >= n, 15_000);
}

const monthKey = (d: Date) => `${d.getUTCFullYear()}-${String(d.getUTCMonth() + 1).padStart(2, '0')}`;

function monthsBetween(start: Date, end: Date): string[] {
  const out: string[] = [];
  for (
    let d = new Date(Date.UTC(start.getUTCFullYear(), start.getUTCMonth(), 1));
    d <= end;
    d = new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1))
  ) {
    out.push(monthKey(d));
  }
  return out;
}

async function signupDelegated(s: TestServer, human: string): Promise<TestAccount & { domainId: string }> {
  const name = `deleg-${tag()}.example`;
  const intent = await rest(s, 'POST', '/signup/agentic', { body: { human_email: human, domain_intent: { mode: 'byo_delegated', byo_domain: name } } });
  expect(intent.status, JSON.stringify(intent.body)).toBe(200);
  const done = await rest(s, 'POST', '/signup/agentic/confirm', { body: { intent_id: intent.body.intent_id } });
  expect(done.status, JSON.stringify(done.body)).toBe(200);
  expect(done.body).toMatchObject({ domain: name, primary_address: `agent@${name}`, domain_status: 'pending_delegation' });
  // Hosting is billed from the day the delegation is proven (tests/e2e/domains-*.test.ts prove it over DNS);
  // here, where billing is the subject, the domain is marked live as the verifier would at signup time.
  const pending = await s.db.domain.findFirstOrThrow({ where: { name } });
  const domain = await s.db.domain.update({ where: { id: pending.id }, data: { status: 'active', liveName: name, verifiedAt: pending.createdAt } });
  await exec(
    s.db,
    k
      .updateTable('boxes')
      .set((eb) => ({ live_address: eb.ref('address') }))
      .where('domain_id', '=', domain.id),
  );
  return {
    accountId: done.body.account_id,
    apiKey: done.body.api_key,
    keyId: done.body.key_id,
    primaryAddress: done.body.primary_address,
    domain: name,
    domainId: domain.id,
  };
}

/** The text part of what the sink received for a recipient. */
async function sinkText(to: string): Promise<string> {
  const m = await waitFor(`mail to ${to} at the sink`, () => sink.to(to)[0]);
  return (await simpleParser(m.raw)).text ?? '';
}

// ---------------------------------------------------------------------------------------------------------

describe('messages: the free allowance, then credit', () => {
  it('250 free sends, then 1,600 micro-dollars per recipient from credit, then 402 with top-up guidance', async () => {
    const a = await signupAccount(t);
    const p = `free-${tag()}`;
    expect(await balance(t, a.apiKey)).toMatchObject({
      credit_balance_cents: 0,
      free_messages_left: 250,
      free_messages_total: 250,
      emails_covered: 250,
      price_per_message_usd: '0.0016',
      balance_state: 'ok',
      sending_blocked: false,
    });

    // 5 messages x 50 recipients: each recipient is one message of the allowance.
    const left: number[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await send(t, a.apiKey, { to: recipients(50, `${p}-${i}`), subject: `free ${i}`, text: 'x' });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.billing).toMatchObject({ messages: 50, free_messages_used: 50, paid_messages: 0, reserved_usd: '0' });
      left.push(r.body.billing.free_messages_left);
    }
    expect(left).toEqual([200, 150, 100, 50, 0]);
    expect((await balance(t, a.apiKey)).free_messages_left).toBe(0);

    // The 251st message without credit: refused, nothing reserved.
    const broke = await send(t, a.apiKey, { to: `${p}-251@remote.test`, subject: 'no credit', text: 'x' });
    expectPaymentRequired(t, broke);
    expect(broke.body.error.message).toMatch(/Not enough credit/);

    const sent = (await t.db.message.findMany({ where: { accountId: a.accountId, direction: 'sent' }, select: { id: true } })).map((m) => m.id);
    expect(sent).toHaveLength(5);
    await Promise.all(sent.map((id) => waitSettled(t, a.apiKey, id, 30_000)));
    const free = await entries(t, a.accountId, 'message_sent');
    expect(free).toHaveLength(250);
    expect(free.every((e) => e.amountMicros === 0n && e.freeMessages === 1)).toBe(true);
    expect(await account(t, a.accountId)).toMatchObject({ freeMessagesLeft: 0, heldFreeMessages: 0, balanceMicros: 0n, heldMicros: 0n });

    // $0.01 covers exactly 6 messages (6 x 1,600 = 9,600; 400 left over).
    await topUp(t, a.accountId, 10_000n);
    expect(await balance(t, a.apiKey)).toMatchObject({ credit_balance_cents: 1, credit_balance_usd: '0.01', emails_covered: 6, free_messages_left: 0 });
    const [one] = await sendAndSettle(t, a.apiKey, [[`${p}-paid-0@remote.test`]]);
    expect(one.billing).toMatchObject({ messages: 1, free_messages_used: 0, paid_messages: 1, reserved_usd: '0.0016', price_per_message_usd: '0.0016' });
    const [five] = await sendAndSettle(t, a.apiKey, [recipients(5, `${p}-paid-more`)]);
    expect(five.billing).toMatchObject({ messages: 5, paid_messages: 5, reserved_usd: '0.008' });

    const paid = (await entries(t, a.accountId, 'message_sent')).filter((e) => e.freeMessages === 0);
    expect(paid.map((e) => e.amountMicros)).toEqual(Array(6).fill(-1_600n));
    expect(await account(t, a.accountId)).toMatchObject({ balanceMicros: 400n, heldMicros: 0n });
    expect(await balance(t, a.apiKey)).toMatchObject({ credit_balance_cents: 0, credit_balance_usd: '0.0004', held_usd: '0', emails_covered: 0 });

    // 400 micro-dollars spendable: less than one message.
    const refused = await send(t, a.apiKey, { to: `${p}-paid-7@remote.test`, subject: 'one too many', text: 'x' });
    expectPaymentRequired(t, refused);
    expect(refused.body.error).toMatchObject({ required_usd: '0.0016', available_usd: '0.0004' });
    expect(sink.to(`${p}-paid-7@remote.test`)).toEqual([]);
    expect(sink.messages.filter((m) => m.rcpt.some((x) => x.startsWith(`${p}-`)))).toHaveLength(256);
  });

  it('PRICE_INTRODUCTORY=true: 400 micro-dollars per message', async () => {
    const a = await signupAccount(intro);
    await useUpFreeMessages(intro, a.accountId);
    await topUp(intro, a.accountId, 10_000n);
    expect(await balance(intro, a.apiKey)).toMatchObject({ price_per_message_usd: '0.0004', emails_covered: 25 });
    const [m] = await sendAndSettle(intro, a.apiKey, [[`intro-${tag()}@remote.test`]]);
    expect(m.billing).toMatchObject({ paid_messages: 1, price_per_message_usd: '0.0004', reserved_usd: '0.0004' });
    expect((await entries(intro, a.accountId, 'message_sent')).map((e) => e.amountMicros)).toEqual([-400n]);
    expect((await account(intro, a.accountId)).balanceMicros).toBe(9_600n);
  });
});

describe('a negative balance', () => {
  it('inbound mail still arrives and is charged; reads work; sends get 402 naming the negative balance', async () => {
    const a = await signupAccount(t);
    await useUpFreeMessages(t, a.accountId);
    const subjects = [`inbound one ${tag()}`, `inbound two ${tag()}`];
    for (const subject of subjects) {
      const r = await sendRaw(
        t.smtpPort!,
        { from: 'alice@outside.test', to: [a.primaryAddress] },
        rawMessage({ From: 'alice@outside.test', To: a.primaryAddress, Subject: subject }, 'hello'),
      );
      expect(r.accepted).toEqual([a.primaryAddress]);
    }

    // (The deficit notice to agent@ arrives as mail too; it is checked below.)
    const received = await waitFor('both inbound messages', async () => {
      const ev = (await eventsOf(t, a.apiKey, 'mail.received')).filter((e) => subjects.includes(e.data.message.subject));
      return ev.length === 2 && ev;
    });
    expect(received.map((e) => e.data.message.subject)).toEqual(subjects);
    const list = await rest(t, 'GET', '/messages?direction=received&limit=200', { key: a.apiKey });
    expect(list.status).toBe(200);
    expect(list.body.messages.map((m: any) => m.subject)).toEqual(expect.arrayContaining(subjects));

    // Each charged at the message price, the second while already below zero.
    const charges = await entries(t, a.accountId, 'message_received');
    expect(charges.map((e) => [e.amountMicros, e.balanceAfter])).toEqual([
      [-1_600n, -1_600n],
      [-1_600n, -3_200n],
    ]);
    const deficit = await eventsOf(t, a.apiKey, 'billing.deficit');
    expect(deficit).toHaveLength(1);
    expect(deficit[0]!.data).toMatchObject({
      credit_balance_cents: -1,
      credit_balance_usd: '-0.0016',
      cause: 'message_received',
      sending_blocked: true,
      inbound_continues: true,
    });
    expect(await balance(t, a.apiKey)).toMatchObject({
      credit_balance_cents: -1,
      credit_balance_usd: '-0.0032',
      balance_state: 'critical',
      low_balance: true,
      deficit: true,
      sending_blocked: true,
      emails_covered: 0,
    });

    const r = await send(t, a.apiKey, { to: `negative-${tag()}@remote.test`, subject: 'blocked', text: 'x' });
    expectPaymentRequired(t, r);
    expect(r.body.error.message).toMatch(/balance is negative/);
    expect(r.body.error.credit_balance_cents).toBe(-1);

    // The deficit notice to agent@ is the service's own mail: stored, not charged.
    await waitFor('the deficit notice in the agent box', async () => {
      const l = await rest(t, 'GET', '/messages?direction=received&limit=200', { key: a.apiKey });
      return l.body.messages.some((m: any) => /negative balance/.test(m.subject ?? ''));
    });
    expect(await entries(t, a.accountId, 'message_received')).toHaveLength(2);
    expect((await account(t, a.accountId)).balanceMicros).toBe(-3_200n);
  });
});

describe('low-balance thresholds', () => {
  it('validation: second above first, unknown fields', async () => {
    const a = await signupAccount(t);
    const above = await rest(t, 'PUT', '/account/credit/alert-thresholds', { key: a.apiKey, body: { first_cents: 20, second_cents: 50 } });
    expect(above.status, JSON.stringify(above.body)).toBe(400);
    expect(above.body.error.code).toBe('validation_error');
    const unknown = await rest(t, 'PUT', '/account/credit/alert-thresholds', { key: a.apiKey, body: { first_cents: 50, second_cents: 20, third_cents: 5 } });
    expect(unknown.status, JSON.stringify(unknown.body)).toBe(400);
    expect(unknown.body.error.code).toBe('validation_error');
    expect(await account(t, a.accountId)).toMatchObject({ alertFirstMicros: null, alertSecondMicros: null });
  });

  it('one low_balance per crossing: first at 50 cents, second at 20; re-armed by a top-up', async () => {
    const a = await signupAccount(t);
    await useUpFreeMessages(t, a.accountId);
    await topUp(t, a.accountId, 600_000n);
    const set = await rest(t, 'PUT', '/account/credit/alert-thresholds', { key: a.apiKey, body: { first_cents: 50, second_cents: 20 } });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    expect(set.body).toEqual({ first_cents: 50, second_cents: 20, balance_state: 'ok', credit_balance_cents: 60 });
    expect(await balance(t, a.apiKey)).toMatchObject({ alert_thresholds: { first_cents: 50, second_cents: 20 }, balance_state: 'ok', low_balance: false });

    const p = `thr-${tag()}`;
    const alerts = async () => (await eventsOf(t, a.apiKey, 'low_balance')).map((e) => e.data);
    const state = async () => {
      const b = await balance(t, a.apiKey);
      return [b.credit_balance_cents, b.balance_state, b.low_balance];
    };

    // 600,000 -> 440,000: the 63rd recipient takes it from 500,800 to 499,200.
    await sendAndSettle(t, a.apiKey, [recipients(50, `${p}-a`), recipients(50, `${p}-b`)]);
    expect(await alerts()).toEqual([
      {
        alert: 'first',
        threshold_cents: 50,
        credit_balance_cents: 49,
        balance_state: 'low',
        cause: 'message_sent',
        top_up: `${t.apiBase}/account/credit/topup/mpp`,
      },
    ]);
    expect(await state()).toEqual([44, 'low', true]);

    // 440,000 -> 200,000: still above 20 cents (not below it), nothing more.
    await sendAndSettle(t, a.apiKey, [recipients(50, `${p}-c`), recipients(50, `${p}-d`), recipients(50, `${p}-e`)]);
    expect(await alerts()).toHaveLength(1);
    expect(await state()).toEqual([20, 'low', true]);

    // One more message: 198,400, below 20 cents.
    await sendAndSettle(t, a.apiKey, [[`${p}-f@remote.test`]]);
    const after = await alerts();
    expect(after).toHaveLength(2);
    expect(after[1]).toMatchObject({ alert: 'second', threshold_cents: 20, credit_balance_cents: 19, balance_state: 'critical' });
    expect(await state()).toEqual([19, 'critical', true]);

    // A top-up back above 50 cents (598,400) re-arms the first; crossing it again alerts again, once.
    await topUp(t, a.accountId, 400_000n);
    expect(await state()).toEqual([59, 'ok', false]);
    expect(await alerts()).toHaveLength(2);
    await sendAndSettle(t, a.apiKey, [recipients(50, `${p}-g`), recipients(50, `${p}-h`)]);
    const last = await alerts();
    expect(last.map((d) => d.alert)).toEqual(['first', 'second', 'first']);
    expect(last[2]).toMatchObject({ credit_balance_cents: 49, balance_state: 'low' });
    expect(await state()).toEqual([43, 'low', true]);
    expect((await account(t, a.accountId)).balanceMicros).toBe(438_400n);
  });
});

describe('attachments', () => {
  it('sent: 1,600 for the message plus ceil(bytes x 1,200 / 10^6) for the attachments; free recipients pay neither', async () => {
    const a = await signupAccount(t);
    const content = randomBytes(2_000_000).toString('base64');
    const attachment = { filename: 'data.bin', content_type: 'application/octet-stream', content_b64: content };

    // While the allowance lasts, attachments ride along for free.
    const [freeSend] = await sendAndSettle(t, a.apiKey, [[`att-free-${tag()}@remote.test`]], { attachments: [attachment] });
    expect(freeSend.billing).toMatchObject({ free_messages_used: 1, reserved_usd: '0' });
    expect((await entries(t, a.accountId)).map((e) => [e.type, e.amountMicros])).toEqual([['message_sent', 0n]]);

    await useUpFreeMessages(t, a.accountId);
    await topUp(t, a.accountId, 100_000n);
    const [paid] = await sendAndSettle(t, a.apiKey, [[`att-paid-${tag()}@remote.test`]], { attachments: [attachment] });
    expect(paid.billing).toMatchObject({ paid_messages: 1, reserved_usd: '0.004' });
    const rows = await t.db.ledgerEntry.findMany({ where: { messageId: paid.message_id }, orderBy: { type: 'asc' } });
    expect(rows.map((e) => [e.type, e.amountMicros])).toEqual([
      ['attachments', -2_400n],
      ['message_sent', -1_600n],
    ]);
    expect(await account(t, a.accountId)).toMatchObject({ balanceMicros: 96_000n, heldMicros: 0n });
  });

  it('received: message_received plus attachments when not free; free when the allowance covers it', async () => {
    const paying = await signupAccount(t);
    const freeOne = await signupAccount(t);
    await useUpFreeMessages(t, paying.accountId);
    const blob = randomBytes(1_000_000);
    for (const a of [paying, freeOne]) {
      const client = smtpClient(t.smtpPort!);
      await client.sendMail({
        envelope: { from: 'bob@outside.test', to: [a.primaryAddress] },
        from: 'bob@outside.test',
        to: a.primaryAddress,
        subject: 'with a file',
        text: 'see attached',
        attachments: [{ filename: 'blob.bin', content: blob, contentType: 'application/octet-stream' }],
      });
      client.close();
    }
    const charged = await waitFor('the received charges', async () => {
      const e = await entries(t, paying.accountId);
      return e.length === 2 && e;
    });
    expect(charged.map((e) => [e.type, e.amountMicros, e.quantity]).sort()).toEqual([
      ['attachments', -1_200n, 1_000_000n],
      ['message_received', -1_600n, null],
    ]);
    expect((await account(t, paying.accountId)).balanceMicros).toBe(-2_800n);
    const free = await waitFor('the free charge', async () => {
      const e = await entries(t, freeOne.accountId);
      return e.length > 0 && e;
    });
    expect(free.map((e) => [e.type, e.amountMicros, e.freeMessages])).toEqual([['message_received', 0n, 1]]);
  });
});

describe('the trailer', () => {
  it('on by default; opting out costs 1,000 per paid message until 5 USD is paid; the buyout pays the rest', async () => {
    const a = await signupAccount(t);
    await useUpFreeMessages(t, a.accountId); // a free message is free of the surcharge too
    await topUp(t, a.accountId, 10_000n);
    const trailer = `--\nSent by an AI agent with Boxes: ${t.svc.config.siteUrl}`;
    const to1 = `trailer-on-${tag()}@remote.test`;
    const [m1] = await sendAndSettle(t, a.apiKey, [[to1]], { text: 'first message' });
    expect((await sinkText(to1)).trimEnd().endsWith(`first message\n\n${trailer}`)).toBe(true);
    expect((await t.db.ledgerEntry.findMany({ where: { messageId: m1.message_id } })).map((e) => [e.type, e.amountMicros])).toEqual([
      ['message_sent', -1_600n],
    ]);
    expect((await balance(t, a.apiKey)).trailer).toMatchObject({ enabled: true, status: 'on', surcharge_per_message_usd: '0' });

    const out = await rest(t, 'POST', '/account/trailer', { key: a.apiKey });
    expect(out.status, JSON.stringify(out.body)).toBe(200);
    expect(out.body).toMatchObject({ enabled: false, status: 'surcharge', surcharge_per_message_usd: '0.001', surcharge_remaining_usd: '5' });
    // 8,400 left: three messages at 2,600 each.
    expect((await balance(t, a.apiKey)).emails_covered).toBe(3);

    const to2 = `trailer-off-${tag()}@remote.test`;
    const [m2] = await sendAndSettle(t, a.apiKey, [[to2]], { text: 'second message' });
    expect(m2.billing.reserved_usd).toBe('0.0026');
    const text2 = await sinkText(to2);
    expect(text2.trimEnd().endsWith('second message')).toBe(true);
    expect(text2).not.toContain('Sent by an AI agent');
    const rows = await t.db.ledgerEntry.findMany({ where: { messageId: m2.message_id }, orderBy: { type: 'asc' } });
    expect(rows.map((e) => [e.type, e.amountMicros])).toEqual([
      ['message_sent', -1_600n],
      ['trailer_surcharge', -1_000n],
    ]);
    const b = await balance(t, a.apiKey);
    expect(b.trailer).toEqual({
      enabled: false,
      status: 'surcharge',
      surcharge_per_message_usd: '0.001',
      surcharge_paid_usd: '0.001',
      surcharge_remaining_usd: '4.999',
    });
    expect(b.credit_balance_usd).toBe('0.0058');

    // 5,800 micro-dollars cannot buy out 4,999,000.
    const poor = await rest(t, 'POST', '/account/trailer/buyout', { key: a.apiKey });
    expectPaymentRequired(t, poor);
    expect(poor.body.error.required_usd).toBe('4.999');
    expect(await entries(t, a.accountId, 'trailer_buyout')).toEqual([]);

    await topUp(t, a.accountId, 5_000_000n);
    const bought = await rest(t, 'POST', '/account/trailer/buyout', { key: a.apiKey });
    expect(bought.status, JSON.stringify(bought.body)).toBe(200);
    expect(bought.body).toMatchObject({ status: 'paid_off', charged_usd: '4.999', surcharge_remaining_usd: '0', surcharge_per_message_usd: '0' });
    expect((await entries(t, a.accountId, 'trailer_buyout')).map((e) => e.amountMicros)).toEqual([-4_999_000n]);
    expect((await account(t, a.accountId)).balanceMicros).toBe(6_800n);

    // Paid off: no trailer, no surcharge.
    const to3 = `trailer-paid-${tag()}@remote.test`;
    const [m3] = await sendAndSettle(t, a.apiKey, [[to3]], { text: 'third message' });
    expect(m3.billing.reserved_usd).toBe('0.0016');
    expect(await sinkText(to3)).not.toContain('Sent by an AI agent');
    expect(await entries(t, a.accountId, 'trailer_surcharge')).toHaveLength(1);
    expect((await account(t, a.accountId)).balanceMicros).toBe(5_200n);
    expect((await rest(t, 'GET', '/account/trailer', { key: a.apiKey })).body.status).toBe('paid_off');
  });
});

describe('storage', () => {
  it('mail older than 10 days is charged per GB-day, once per day', async () => {
    const a = await signupAccount(t);
    const [big] = await sendAndSettle(t, a.apiKey, [[`store-${tag()}@remote.test`]], {
      attachments: [{ filename: 'x.bin', content_type: 'application/octet-stream', content_b64: randomBytes(1_500_000).toString('base64') }],
    });
    const client = smtpClient(t.smtpPort!);
    await client.sendMail({
      envelope: { from: 'carol@outside.test', to: [a.primaryAddress] },
      from: 'carol@outside.test',
      to: a.primaryAddress,
      subject: 'stored',
      text: 'keep me',
      attachments: [{ filename: 'y.bin', content: randomBytes(1_000_000) }],
    });
    client.close();
    const inbound = await waitFor('the inbound message', () => t.db.message.findFirst({ where: { accountId: a.accountId, direction: 'received' } }));
    // A recent message, not old enough to be charged; an old one whose body was deleted, not counted.
    await sendAndSettle(t, a.apiKey, [[`store-new-${tag()}@remote.test`]]);
    const [gone] = await sendAndSettle(t, a.apiKey, [[`store-gone-${tag()}@remote.test`]], {
      attachments: [{ filename: 'z.bin', content_type: 'application/octet-stream', content_b64: randomBytes(800_000).toString('base64') }],
    });
    expect((await rest(t, 'DELETE', `/messages/${gone.message_id}`, { key: a.apiKey })).status).toBe(200);

    // Twelve days ago: the account and the old messages.
    const old = [big.message_id as string, inbound.id];
    await exec(
      t.db,
      k
        .updateTable('messages')
        .set((eb) => ({ recorded_at: sql<Date>`${eb.ref('recorded_at')} - interval '12 days'` }))
        .where('id', '=', sql<string>`ANY(${[...old, gone.message_id]})`),
    );
    await exec(
      t.db,
      k
        .updateTable('accounts')
        .set((eb) => ({ created_at: sql<Date>`${eb.ref('created_at')} - interval '12 days'` }))
        .where('id', '=', a.accountId),
    );
    const sizes = await t.db.message.findMany({ where: { id: { in: old } }, select: { sizeBytes: true } });
    const bytes = BigInt(sizes.reduce((n, m) => n + m.sizeBytes, 0));
    expect(bytes).toBeGreaterThan(3_000_000n);
    const perDay = -((bytes * 33_300n + 999_999_999n) / 1_000_000_000n);

    await t.runtime.worker!.billing.cycle();
    // The mail is 10 days old at the end of the day before yesterday: that day and yesterday are charged.
    const today = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate());
    const days = [today - 2 * DAY_MS, today - DAY_MS].map((d) => new Date(d).toISOString().slice(0, 10));
    const storage = (await entries(t, a.accountId, 'storage')).sort((x, y) => (x.idempotencyKey! < y.idempotencyKey! ? -1 : 1));
    expect(storage.map((e) => [e.idempotencyKey, e.amountMicros, e.quantity])).toEqual(days.map((d) => [`storage:${a.accountId}:${d}`, perDay, bytes]));
    expect((await account(t, a.accountId)).storageBilledThrough?.toISOString().slice(0, 10)).toBe(days[1]);

    await t.runtime.worker!.billing.cycle();
    expect(await entries(t, a.accountId, 'storage')).toHaveLength(2);
    expect((await account(t, a.accountId)).balanceMicros).toBe(2n * perDay);
  });
});

describe('usage', () => {
  it('GET /account/credit/usage equals the ledger over 1,000 random postings and real sends', async () => {
    const a = await signupAccount(t);
    await sendAndSettle(t, a.apiKey, [[`usage-a-${tag()}@remote.test`], [`usage-b-${tag()}@remote.test`, `usage-c-${tag()}@remote.test`]]);

    // mulberry32: reproducible.
    let seed = 0x5eed_b0e5;
    const rand = () => {
      seed = (seed + 0x6d2b79f5) | 0;
      let x = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
      return ((x ^ (x >>> 14)) >>> 0) / 4_294_967_296;
    };
    const credits: LedgerType[] = ['topup', 'signup_credit'];
    await topUp(t, a.accountId, 100_000_000n); // stays positive, so the real sends at the end are accepted
    for (let batch = 0; batch < 20; batch++) {
      const postings: Posting[] = Array.from({ length: 50 }, () => {
        const type = LEDGER_TYPES[Math.floor(rand() * LEDGER_TYPES.length)]!;
        const micros = BigInt(1 + Math.floor(rand() * 100_000));
        return { type, amountMicros: credits.includes(type) ? micros : -micros };
      });
      await t.db.$transaction((tx) => postEntries(t.svc, tx, a.accountId, postings));
    }
    await sendAndSettle(t, a.apiKey, [[`usage-d-${tag()}@remote.test`]]);
    expect(await t.db.ledgerEntry.count({ where: { accountId: a.accountId } })).toBe(1 + 1_000 + 4);

    const sqlRows = (since: Date | null, before: Date | null) =>
      rows(
        t.db,
        k
          .selectFrom('ledger_entries')
          .select((eb) => [
            'type',
            sql<bigint>`COUNT(*)::bigint`.as('n'),
            sql<bigint>`SUM(${eb.ref('amount_micros')})::bigint`.as('sum'),
            sql<bigint>`SUM(${eb.ref('free_messages')})::bigint`.as('free'),
          ])
          .where('account_id', '=', a.accountId)
          .where((eb) => sql<boolean>`(${since}::timestamptz IS NULL OR ${eb.ref('created_at')} >= ${since}::timestamptz)`)
          .where((eb) => sql<boolean>`(${before}::timestamptz IS NULL OR ${eb.ref('created_at')} < ${before}::timestamptz)`)
          .groupBy('type')
          .orderBy('type'),
      );
    const check = async (since: Date | null, before: Date | null) => {
      const qs = new URLSearchParams({ ...(since ? { since: since.toISOString() } : {}), ...(before ? { before: before.toISOString() } : {}) }).toString();
      const r = await rest(t, 'GET', `/account/credit/usage${qs ? `?${qs}` : ''}`, { key: a.apiKey });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      const rows = await sqlRows(since, before);
      const api = [...r.body.usage].sort((x: any, y: any) => (x.type < y.type ? -1 : 1));
      expect(api.map((u: any) => [u.type, u.entries, u.amount_micros, u.free_messages])).toEqual(
        rows.map((x) => [x.type, Number(x.n), Number(x.sum), Number(x.free)]),
      );
      const charges = rows.filter((x) => x.sum < 0n).reduce((n, x) => n + x.sum, 0n);
      const creditSum = rows.filter((x) => x.sum > 0n).reduce((n, x) => n + x.sum, 0n);
      expect(r.body.totals).toMatchObject({ charges_micros: Number(charges), credits_micros: Number(creditSum), net_micros: Number(charges + creditSum) });
      return { body: r.body, rows };
    };

    const all = await check(null, null);
    expect(all.rows.map((x) => x.type).sort()).toEqual([...LEDGER_TYPES].sort());
    expect(all.body.totals.net_micros).toBe(Number((await account(t, a.accountId)).balanceMicros));
    expect(all.body.usage.find((u: any) => u.type === 'message_sent').free_messages).toBe(4);

    // Windows cut at entries' own timestamps (a batch shares its transaction's time).
    const times = [...new Set((await entries(t, a.accountId)).map((e) => e.createdAt.getTime()))].sort((x, y) => x - y);
    expect(times.length).toBeGreaterThan(10);
    const cut1 = new Date(times[Math.floor(times.length / 3)]!);
    const cut2 = new Date(times[Math.floor((2 * times.length) / 3)]!);
    const mid = await check(cut1, cut2);
    expect(mid.rows.reduce((n, x) => n + Number(x.n), 0)).toBeGreaterThan(0);
    expect(mid.rows.reduce((n, x) => n + Number(x.n), 0)).toBeLessThan(1_005);
    await check(cut1, null);
    await check(null, cut2);

    for (const q of [
      'since=garbage',
      `before=${encodeURIComponent('2026-13-45')}`,
      `since=${cut2.toISOString()}&before=${cut1.toISOString()}`,
      // A valid JavaScript date the database cannot store: 400, not 500.
      `since=${encodeURIComponent('-271821-04-20T00:00:00Z')}`,
    ]) {
      const bad = await rest(t, 'GET', `/account/credit/usage?${q}`, { key: a.apiKey });
      expect(bad.status, `${q}: ${JSON.stringify(bad.body)}`).toBe(400);
      expect(bad.body.error.code).toBe('validation_error');
    }
  });
});

describe('recurring debits (the repeatable billing job, BILLING_CYCLE_MS=500)', () => {
  it('DNS hosting takes $0.50 to -$0.50: billing.deficit once, notices, sends blocked; each month charged once; a wallet top-up recovers', async () => {
    const human = `deficit-${tag()}@owner.test`;
    // The job runs every 500 ms; held back until the account has its 50 cents, so the first debit meets them.
    const q = tb.svc.jobs.billing;
    await q.pause();
    let a: Awaited<ReturnType<typeof signupDelegated>>;
    try {
      await waitFor('no billing job running', async () => (await q.getActiveCount()) === 0);
      a = await signupDelegated(tb, human);
      await topUp(tb, a.accountId, 500_000n);
    } finally {
      await q.resume();
    }

    const month = monthKey(clock.now());
    const deficit = await waitFor('billing.deficit', async () => (await eventsOf(tb, a.apiKey, 'billing.deficit'))[0], 15_000);
    expect(deficit.data).toMatchObject({
      credit_balance_cents: -50,
      credit_balance_usd: '-0.5',
      cause: 'domain_hosting',
      sending_blocked: true,
      inbound_continues: true,
      top_up: { mpp: `${tb.apiBase}/account/credit/topup/mpp` },
    });

    // The notice to agent@<domain> is stored in the account, free; the owner's copy goes out by SMTP.
    const subject = `Boxes: ${a.primaryAddress} has a negative balance; sending is paused`;
    const notice = await waitFor('the deficit notice in the agent box', async () => {
      const l = await rest(tb, 'GET', '/messages?direction=received&limit=200', { key: a.apiKey });
      return l.body.messages.find((m: any) => m.subject === subject);
    });
    expect(notice.to).toEqual([a.primaryAddress]);
    const owner = await inbox.waitFor(human, /negative balance/);
    expect(owner.subject).toBe(subject);
    expect(owner.text).toContain('-0.5 USD');
    expect(owner.text).toContain(`${tb.apiBase}/account/credit/topup/mpp`);

    expect(await balance(tb, a.apiKey)).toMatchObject({
      credit_balance_cents: -50,
      balance_state: 'critical',
      deficit: true,
      sending_blocked: true,
      emails_covered: 0,
    });
    const blocked = await send(tb, a.apiKey, { to: `friend-${tag()}@owner.test`, subject: 'blocked', text: 'x' });
    expectPaymentRequired(tb, blocked);
    expect(blocked.body.error.message).toMatch(/balance is negative/);

    // Many runs, one charge for the month.
    await waitForCycles(4);
    const hosting = await entries(tb, a.accountId, 'domain_hosting');
    expect(hosting.map((e) => [e.idempotencyKey, e.amountMicros])).toEqual([[`domain_hosting:${a.domainId}:${month}`, -1_000_000n]]);
    expect(await entries(tb, a.accountId, 'message_received')).toEqual([]);
    expect((await account(tb, a.accountId)).balanceMicros).toBe(-500_000n);

    // A month later: the next month is charged, once; no second deficit event while still negative.
    clock.advance(32 * DAY_MS);
    const domain = await tb.db.domain.findUniqueOrThrow({ where: { id: a.domainId } });
    const months = monthsBetween(domain.createdAt, clock.now());
    expect(months.length).toBeGreaterThanOrEqual(2);
    await waitFor('the next month charged', async () => (await entries(tb, a.accountId, 'domain_hosting')).length === months.length);
    await waitForCycles(4);
    const all = await entries(tb, a.accountId, 'domain_hosting');
    expect(all.map((e) => e.idempotencyKey)).toEqual(months.map((m) => `domain_hosting:${a.domainId}:${m}`));
    expect(all.every((e) => e.amountMicros === -1_000_000n)).toBe(true);
    expect(await eventsOf(tb, a.apiKey, 'billing.deficit')).toHaveLength(1);

    // The owner pays through the wallet (MPP): back above zero.
    await enrollWallet(tb, inbox, human);
    const ch = await rest(tb, 'POST', '/account/credit/topup/mpp', { key: a.apiKey, body: { amount_cents: 100 * (months.length + 1) } });
    expect(ch.status, JSON.stringify(ch.body)).toBe(200);
    const approve = await inbox.waitFor(human, /Approve \$/);
    const s = await ownerSignIn(tb, linkIn(approve));
    expect((await s.post(s.landing, { action: 'approve' })).html).toContain('Approved');
    const done = await rest(tb, 'GET', `/account/credit/topup/mpp/${ch.body.challenge_id}?wait_seconds=15`, { key: a.apiKey });
    expect(done.status, JSON.stringify(done.body)).toBe(200);
    expect(done.body.status).toBe('succeeded');

    const recovered = await waitFor('billing.recovered', async () => (await eventsOf(tb, a.apiKey, 'billing.recovered'))[0]);
    const [landed] = await tb.db.ledgerEntry.findMany({ where: { accountId: a.accountId, type: 'topup', paymentId: ch.body.challenge_id } });
    expect(landed!.amountMicros).toBe(BigInt(months.length + 1) * 1_000_000n);
    expect(landed!.balanceAfter).toBeGreaterThanOrEqual(0n);
    expect(recovered.data).toEqual({ credit_balance_cents: Number(landed!.balanceAfter / 10_000n), sending_blocked: false, cause: 'topup' });
    // The balance is the sum of the ledger (storage of the aged notice included).
    const sum = (await entries(tb, a.accountId)).reduce((n, e) => n + e.amountMicros, 0n);
    expect((await account(tb, a.accountId)).balanceMicros).toBe(sum);
    const after = await balance(tb, a.apiKey);
    expect(after).toMatchObject({ deficit: false, sending_blocked: false, balance_state: 'ok' });
    expect((await account(tb, a.accountId)).deficitSince).toBeNull();

    const friend = `friend-${tag()}@owner.test`;
    const ok = await send(tb, a.apiKey, { to: friend, subject: 'sending again', text: 'back' });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    await inbox.waitFor(friend, /sending again/);
    expect(await eventsOf(tb, a.apiKey, 'billing.deficit')).toHaveLength(1);
    expect(await eventsOf(tb, a.apiKey, 'billing.recovered')).toHaveLength(1);
  });

  it('DNS queries beyond 1,000,000 in an ended month: 0.40 USD per million, charged once', async () => {
    const a = await signupDelegated(tb, `dns-${tag()}@owner.test`);
    const now = clock.now();
    const lastMonth = monthKey(new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - 1, 1)));
    const twoAgo = monthKey(new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - 2, 1)));
    await tb.db.dnsQueryCount.createMany({
      data: [
        { domainId: a.domainId, month: lastMonth, queries: 3_500_000n },
        { domainId: a.domainId, month: twoAgo, queries: 900_000n }, // within the included queries
        { domainId: a.domainId, month: monthKey(now), queries: 5_000_000n }, // not ended yet
      ],
    });
    await waitFor('the dns_overage entry', async () => (await entries(tb, a.accountId, 'dns_overage')).length > 0);
    await waitForCycles(4);
    const overage = await entries(tb, a.accountId, 'dns_overage');
    expect(overage.map((e) => [e.idempotencyKey, e.amountMicros, e.quantity])).toEqual([[`dns_overage:${a.domainId}:${lastMonth}`, -1_000_000n, 3_500_000n]]);
  });
});
