/**
 * Guardrails over real HTTP, SMTP, the SDK and MCP: pausing the account or a box (by an admin key and by the
 * owner on the owner pages; only the owner lifts the owner's pause), what a pause refuses (single sends, replies,
 * bulk jobs, SMTP submission) and what it does not (inbound mail), scheduled sends held through a pause; send
 * caps per box and per key counted in Redis (429 cap_exceeded naming the cap, Retry-After to the end of the
 * window, cap.reached and the owner's email once per window, a bulk job refused as a whole); keys that expire.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AdjustableClock } from '@boxes/core';
import { BoxesError, createBoxesClient } from '@boxes/sdk';
import { mintKey, rest, signupAccount, waitFor, type JsonResponse, type TestAccount, type TestServer } from '@boxes/testing';
import { linkIn, ownerSignIn, startOwnerInbox, startPaymentsServer, type OwnerInbox } from './owner-helpers';
import { rawMessage, sendRaw } from './mail-receive-helpers';
import { events, send, unique } from './mail-send-helpers';
import { getJob, waitForJob } from './bulk-helpers';

let t: TestServer;
let inbox: OwnerInbox;
const clock = new AdjustableClock();

beforeAll(async () => {
  inbox = await startOwnerInbox();
  t = await startPaymentsServer(inbox, { clock, mail: true, env: { MAIL_AUTH_DELAY_MS: '0', BULK_MIN_COOL_OFF_SECONDS: '0' } });
});
afterAll(async () => {
  await t?.stop();
  await inbox?.close();
});

const remote = () => `r-${unique()}@remote.invalid`;

function expectError(r: JsonResponse, status: number, code: string) {
  expect(r.status, JSON.stringify(r.body)).toBe(status);
  expect(r.body.error.code, JSON.stringify(r.body)).toBe(code);
}

/** Moves the service clock to just past the start of the next minute, so a test has most of a minute window. */
function startOfNextMinute(): void {
  const now = clock.now().getTime();
  clock.advance(60_000 - (now % 60_000) + 200);
}

/** The owner signed in (a link asked for on /owner, then Continue); pause() presses a Pause or Resume button of the home page. */
async function owner(human: string) {
  await fetch(`${t.url}/owner/link`, { method: 'POST', body: new URLSearchParams({ email: human }) });
  const mail = await inbox.waitFor(human, /sign-in link/);
  const s = await ownerSignIn(t, linkIn(mail));
  return {
    ...s,
    async pause(fields: { target: 'account' | 'box'; id: string; action: 'pause' | 'resume' }) {
      const home = await s.get('/owner');
      const formToken = /name="form_token" value="([^"]+)"/.exec(home.html)?.[1] ?? '';
      const r = await fetch(`${t.url}/owner/pause`, {
        method: 'POST',
        headers: { cookie: s.cookie, 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ form_token: formToken, ...fields }).toString(),
        redirect: 'manual',
      });
      return r.status;
    },
  };
}

describe('pause by an admin key', () => {
  let a: TestAccount;
  let billing: { id: string; address: string };
  beforeAll(async () => {
    a = await signupAccount(t, `pause-${unique()}@owner.test`);
    billing = (await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'billing' } })).body;
  });

  it('a send-only key cannot pause or resume; an admin key pauses the account and every send path is refused with 403 account_paused', async () => {
    const sendOnly = await mintKey(t, a.apiKey, ['send']);
    expectError(await rest(t, 'POST', '/account/pause', { key: sendOnly.api_key }), 403, 'insufficient_scope');
    const first = await send(t, a.apiKey, { to: remote(), text: 'before the pause' });
    expect(first.status).toBe(200);

    const admin = await mintKey(t, a.apiKey, ['admin']);
    const paused = await rest(t, 'POST', '/account/pause', { key: admin.api_key });
    expect(paused.status, JSON.stringify(paused.body)).toBe(200);
    expect(paused.body).toMatchObject({ paused: true, paused_by: 'key', paused_by_key_id: admin.id });
    // Idempotent: a second pause changes nothing and appends nothing.
    expect((await rest(t, 'POST', '/account/pause', { key: a.apiKey })).body).toMatchObject({ paused: true, paused_by_key_id: admin.id });
    expect(await events(t, a.apiKey, 'account.paused')).toHaveLength(1);

    const refused = await send(t, a.apiKey, { to: remote(), text: 'during the pause' });
    expectError(refused, 403, 'account_paused');
    expect(refused.body.error.message).toMatch(/paused .*POST \/account\/resume/);
    expectError(await rest(t, 'POST', `/messages/${first.body.message_id}/reply`, { key: a.apiKey, body: { text: 'a reply' } }), 403, 'account_paused');
    expectError(await rest(t, 'POST', '/messages/send/bulk', { key: a.apiKey, body: { messages: [{ to: remote(), text: 'bulk' }] } }), 403, 'account_paused');
    expectError(
      await send(t, sendOnly.api_key, { to: remote(), text: 'scheduled', send_at: new Date(Date.now() + 3_600_000).toISOString() }),
      403,
      'account_paused',
    );
    expect(await t.db.message.count({ where: { accountId: a.accountId, direction: 'sent' } })).toBe(1);
    expect((await rest(t, 'GET', '/account/pause', { key: sendOnly.api_key })).body.account).toMatchObject({ paused: true, paused_by: 'key' });

    // Another admin key (here the owner key) resumes what a key paused.
    const resumed = await rest(t, 'POST', '/account/resume', { key: a.apiKey });
    expect(resumed.body).toMatchObject({ paused: false, paused_by: null });
    expect((await events(t, a.apiKey, 'account.resumed'))[0]!.data).toMatchObject({ resumed_by: 'key', by_key_id: a.keyId, released_scheduled: 0 });
    expect((await send(t, a.apiKey, { to: remote(), text: 'after the pause' })).status).toBe(200);
  });

  it('a paused box refuses sends from it (403 box_paused) while the other boxes send; a box-restricted admin key pauses only its own boxes', async () => {
    const restricted = await mintKey(t, a.apiKey, ['admin', 'send'], { allowed_boxes: ['billing'] });
    const primary = (await rest(t, 'GET', '/boxes', { key: a.apiKey })).body.boxes.find((b: { is_primary: boolean }) => b.is_primary);
    expectError(await rest(t, 'POST', `/boxes/${primary.id}/pause`, { key: restricted.api_key }), 404, 'not_found');
    const paused = await rest(t, 'POST', `/boxes/${billing.id}/pause`, { key: restricted.api_key });
    expect(paused.body).toMatchObject({ box_id: billing.id, address: billing.address, paused: true, paused_by: 'key' });
    expectError(await send(t, a.apiKey, { from: billing.address, to: remote(), text: 'x' }), 403, 'box_paused');
    expect((await send(t, a.apiKey, { to: remote(), text: 'from the primary box' })).status).toBe(200);
    const overview = await rest(t, 'GET', '/account/pause', { key: a.apiKey });
    expect(overview.body.account.paused).toBe(false);
    expect(overview.body.boxes.find((b: { box_id: string }) => b.box_id === billing.id)).toMatchObject({ paused: true });
    const ev = (await events(t, a.apiKey, 'box.paused'))[0]!;
    expect(ev.data).toMatchObject({ box_id: billing.id, paused_by: 'key', by_key_id: restricted.id });

    expect((await rest(t, 'POST', `/boxes/${billing.id}/resume`, { key: restricted.api_key })).body.paused).toBe(false);
    expect((await events(t, a.apiKey, 'box.resumed'))[0]!.data).toMatchObject({ box_id: billing.id, resumed_by: 'key' });
    expect((await send(t, a.apiKey, { from: billing.address, to: remote(), text: 'x' })).status).toBe(200);
  });

  it('pause comes before caps: a paused box over its cap answers 403, not 429', async () => {
    const box = (await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: `order-${unique()}`, caps: { per_day: 1 } } })).body;
    expect((await send(t, a.apiKey, { from: box.address, to: remote(), text: 'one' })).status).toBe(200);
    expectError(await send(t, a.apiKey, { from: box.address, to: remote(), text: 'two' }), 429, 'cap_exceeded');
    await rest(t, 'POST', `/boxes/${box.id}/pause`, { key: a.apiKey });
    expectError(await send(t, a.apiKey, { from: box.address, to: remote(), text: 'three' }), 403, 'box_paused');
  });

  it('an auto-forward of a paused box is not sent: its run is skipped with reason box_paused', async () => {
    const target = `forward-${unique()}@owner.test`;
    const f = await rest(t, 'POST', `/boxes/${billing.id}/forwards`, { key: a.apiKey, body: { to: target } });
    expect(f.status, JSON.stringify(f.body)).toBe(200);
    const confirmation = await inbox.waitFor(target, /./);
    const link = /(https?:\/\/\S+\/forwards\/confirm\/[A-Za-z0-9_-]+)/.exec(confirmation.text)![1]!;
    expect((await fetch(link, { method: 'POST', body: new URLSearchParams({ answer: 'confirm' }) })).status).toBe(200);
    await rest(t, 'POST', `/boxes/${billing.id}/pause`, { key: a.apiKey });
    const subject = `forward me ${unique()}`;
    await sendRaw(
      t.smtpPort!,
      { from: 'someone@outside.test', to: [billing.address] },
      rawMessage({ From: 'someone@outside.test', To: billing.address, Subject: subject }, 'hi'),
    );
    const skipped = await waitFor('box.forward.skipped', async () => (await events(t, a.apiKey, 'box.forward.skipped')).find((e) => e.data.id === f.body.id));
    expect(skipped.data).toMatchObject({ reason: 'box_paused', box_id: billing.id });
    expect((await inbox.all()).filter((m) => m.to.includes(target))).toHaveLength(1);
    await rest(t, 'POST', `/boxes/${billing.id}/resume`, { key: a.apiKey });
    await rest(t, 'DELETE', `/boxes/${billing.id}/forwards/${f.body.id}`, { key: a.apiKey });
  });

  it('inbound mail is received and announced while the account is paused', async () => {
    await rest(t, 'POST', '/account/pause', { key: a.apiKey });
    const subject = `while paused ${unique()}`;
    const r = await sendRaw(
      t.smtpPort!,
      { from: 'someone@outside.test', to: [billing.address] },
      rawMessage({ From: 'someone@outside.test', To: billing.address, Subject: subject }, 'hello'),
    );
    expect(r.accepted).toEqual([billing.address]);
    await waitFor('mail.received', async () => (await events(t, a.apiKey, 'mail.received')).find((e) => e.data.message.subject === subject));
    await rest(t, 'POST', '/account/resume', { key: a.apiKey });
  });
});

describe('pause by the owner', () => {
  it('only the owner lifts a pause set on the owner pages: every API key (the owner key too) gets 403 paused_by_owner', async () => {
    const human = `owner-${unique()}@owner.test`;
    const a = await signupAccount(t, human);
    const s = await owner(human);
    const home = await s.get('/owner');
    expect(home.html).toContain(a.primaryAddress);
    expect(await s.pause({ target: 'account', id: a.accountId, action: 'pause' })).toBe(303);
    const state = await rest(t, 'GET', '/account/pause', { key: a.apiKey });
    expect(state.body.account).toMatchObject({ paused: true, paused_by: 'owner', paused_by_key_id: null });
    expectError(await send(t, a.apiKey, { to: remote(), text: 'x' }), 403, 'account_paused');
    expectError(await rest(t, 'POST', '/account/resume', { key: a.apiKey }), 403, 'paused_by_owner');
    // A key pausing again does not take the owner's pause over.
    await rest(t, 'POST', '/account/pause', { key: a.apiKey });
    expectError(await rest(t, 'POST', '/account/resume', { key: a.apiKey }), 403, 'paused_by_owner');
    expect((await events(t, a.apiKey, 'account.paused')).map((e) => e.data)).toEqual([{ paused_by: 'owner', by_key_id: null }]);

    // Another owner's box is not found, this owner's is paused and resumed.
    const other = await signupAccount(t, `other-${unique()}@owner.test`);
    const otherBox = (await rest(t, 'GET', '/boxes', { key: other.apiKey })).body.boxes[0];
    expect(await s.pause({ target: 'box', id: otherBox.id, action: 'pause' })).toBe(404);
    expect((await rest(t, 'GET', '/account/pause', { key: other.apiKey })).body.boxes[0].paused).toBe(false);

    expect(await s.pause({ target: 'account', id: a.accountId, action: 'resume' })).toBe(303);
    expect((await events(t, a.apiKey, 'account.resumed'))[0]!.data).toMatchObject({ resumed_by: 'owner', by_key_id: null });
    expect((await send(t, a.apiKey, { to: remote(), text: 'x' })).status).toBe(200);
  });

  it('a scheduled send due during a pause waits, and goes when the account is resumed', async () => {
    const a = await signupAccount(t, `sched-${unique()}@owner.test`);
    const to = `later-${unique()}@remote.invalid`;
    const r = await send(t, a.apiKey, { to, text: 'later', send_at: new Date(Date.now() + 1500).toISOString() });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    await rest(t, 'POST', '/account/pause', { key: a.apiKey });
    // The delayed job runs when due and finds the account paused: the message stays scheduled.
    await new Promise((res) => setTimeout(res, 4000));
    expect((await t.db.message.findUniqueOrThrow({ where: { id: r.body.message_id } })).status).toBe('scheduled');
    expect(await events(t, a.apiKey, 'mail.sent')).toHaveLength(0);

    const resumed = await rest(t, 'POST', '/account/resume', { key: a.apiKey });
    expect(resumed.status).toBe(200);
    expect((await events(t, a.apiKey, 'account.resumed'))[0]!.data.released_scheduled).toBe(1);
    await waitFor('the held message to go', async () => (await t.db.message.findUniqueOrThrow({ where: { id: r.body.message_id } })).status !== 'scheduled');
    await waitFor('mail.sent', async () => (await events(t, a.apiKey, 'mail.sent')).find((e) => e.data.message_id === r.body.message_id));
  });
});

describe('bulk jobs and a pause', () => {
  it('the next batch of a running job waits out the pause (the batch in flight finished) and goes on resume', async () => {
    const a = await signupAccount(t, `bulk-${unique()}@owner.test`);
    const messages = [0, 1, 2].map((i) => ({ to: a.primaryAddress, subject: `bulk ${i}`, text: 'to myself' }));
    const r = await rest(t, 'POST', '/messages/send/bulk', { key: a.apiKey, body: { messages, batch_size: 1, cool_off_seconds: 2 } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    await waitFor('the first batch', async () => (await getJob(t, a.apiKey, r.body.id)).batches[0]?.status === 'completed');
    await rest(t, 'POST', '/account/pause', { key: a.apiKey });
    await new Promise((res) => setTimeout(res, 4000));
    const held = await getJob(t, a.apiKey, r.body.id);
    expect(held.status).toBe('cooling_off');
    expect(held.batches.map((b: { status: string }) => b.status)).toEqual(['completed', 'pending', 'pending']);
    expect(await t.db.message.count({ where: { accountId: a.accountId, direction: 'sent' } })).toBe(1);

    const resumedAt = Date.now();
    await rest(t, 'POST', '/account/resume', { key: a.apiKey });
    const done = await waitForJob(t, a.apiKey, r.body.id, ['completed'], 15_000);
    expect(done.counts).toMatchObject({ messages: 3 });
    // Woken at resume, not at the held batch's next look (15 s later).
    expect(Date.parse(done.batches[1].started_at) - resumedAt).toBeLessThan(5000);
  });
});

describe('send caps', () => {
  it('a box cap per minute: 429 cap_exceeded naming box.per_minute, Retry-After to the end of the minute, cap.reached and one owner email per window', async () => {
    const human = `caps-${unique()}@owner.test`;
    const a = await signupAccount(t, human);
    const box = (await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'capped', caps: { per_minute: 2, per_hour: 100 } } })).body;
    startOfNextMinute();
    for (let i = 0; i < 2; i++) expect((await send(t, a.apiKey, { from: box.address, to: remote(), text: `m${i}` })).status).toBe(200);
    const before = clock.now().getTime();
    const over = await send(t, a.apiKey, { from: box.address, to: remote(), text: 'one too many' });
    const after = clock.now().getTime();
    expectError(over, 429, 'cap_exceeded');
    const end = (Math.floor(before / 60_000) + 1) * 60_000;
    expect(over.body.error).toMatchObject({
      cap: 'box.per_minute',
      limit: 2,
      used: 2,
      window_seconds: 60,
      box_id: box.id,
      resets_at: new Date(end).toISOString(),
    });
    const retry = Number(over.headers.get('retry-after'));
    expect(retry).toBe(over.body.error.retry_after_seconds);
    expect(retry).toBeGreaterThanOrEqual(Math.ceil((end - after) / 1000));
    expect(retry).toBeLessThanOrEqual(Math.ceil((end - before) / 1000));
    expect(retry).toBeGreaterThan(50);
    // Refused sends take nothing; a second refusal in the window announces nothing more.
    expectError(await send(t, a.apiKey, { from: box.address, to: remote(), text: 'again' }), 429, 'cap_exceeded');
    const caps = await rest(t, 'GET', `/boxes/${box.id}/caps`, { key: a.apiKey });
    expect(caps.body.caps).toEqual({ per_minute: 2, per_hour: 100, per_day: null, new_recipients_per_day: null });
    expect(caps.body.usage).toEqual([
      { cap: 'per_minute', limit: 2, used: 2, remaining: 0, window_seconds: 60, resets_at: new Date(end).toISOString() },
      expect.objectContaining({ cap: 'per_hour', limit: 100, used: 2, remaining: 98, window_seconds: 3600 }),
    ]);
    const reached = await events(t, a.apiKey, 'cap.reached');
    expect(reached.map((e) => e.data)).toEqual([
      { cap: 'box.per_minute', box_id: box.id, key_id: null, limit: 2, window_seconds: 60, resets_at: new Date(end).toISOString() },
    ]);
    const mail = await inbox.waitFor(human, /send cap box\.per_minute/);
    expect(mail.text).toContain('/owner/l/');
    expect(mail.text).toContain('Pause');
    expect(await t.db.message.count({ where: { accountId: a.accountId, boxId: box.id } })).toBe(2);

    // The next window: sends go again, and a new trip is announced again.
    startOfNextMinute();
    expect((await send(t, a.apiKey, { from: box.address, to: remote(), text: 'next minute' })).status).toBe(200);
    expect((await send(t, a.apiKey, { from: box.address, to: remote(), text: 'next minute 2' })).status).toBe(200);
    expectError(await send(t, a.apiKey, { from: box.address, to: remote(), text: 'over again' }), 429, 'cap_exceeded');
    expect(await events(t, a.apiKey, 'cap.reached')).toHaveLength(2);
    await waitFor('the second owner email', async () => (await inbox.all()).filter((m) => m.to.includes(human) && /send cap/.test(m.subject)).length === 2);
  });

  it('per hour set with PUT: Retry-After runs to the end of the hour; {} removes every cap', async () => {
    const a = await signupAccount(t, `hour-${unique()}@owner.test`);
    const primary = (await rest(t, 'GET', '/boxes', { key: a.apiKey })).body.boxes[0];
    const set = await rest(t, 'PUT', `/boxes/${primary.id}/caps`, { key: a.apiKey, body: { caps: { per_hour: 1 } } });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    expect(set.body.caps).toEqual({ per_minute: null, per_hour: 1, per_day: null, new_recipients_per_day: null });
    expect((await send(t, a.apiKey, { to: remote(), text: 'one' })).status).toBe(200);
    const now = clock.now().getTime();
    const over = await send(t, a.apiKey, { to: remote(), text: 'two' });
    expectError(over, 429, 'cap_exceeded');
    expect(over.body.error.cap).toBe('box.per_hour');
    const end = (Math.floor(now / 3_600_000) + 1) * 3_600_000;
    expect(Math.abs(Number(over.headers.get('retry-after')) - Math.ceil((end - now) / 1000))).toBeLessThanOrEqual(1);
    expect((await rest(t, 'PUT', `/boxes/${primary.id}/caps`, { key: a.apiKey, body: { caps: {} } })).body).toMatchObject({ usage: [] });
    expect((await send(t, a.apiKey, { to: remote(), text: 'uncapped' })).status).toBe(200);
    expectError(await rest(t, 'PUT', `/boxes/${primary.id}/caps`, { key: a.apiKey, body: { caps: { per_hour: 0 } } }), 400, 'validation_error');
  });

  it('a send refused after the caps were taken (402: no credit) gives its count back', async () => {
    const a = await signupAccount(t, `refund-${unique()}@owner.test`);
    const primary = (await rest(t, 'GET', '/boxes', { key: a.apiKey })).body.boxes[0];
    await rest(t, 'PUT', `/boxes/${primary.id}/caps`, { key: a.apiKey, body: { caps: { per_day: 5, new_recipients_per_day: 5 } } });
    await t.db.account.update({ where: { id: a.accountId }, data: { freeMessagesLeft: 0 } });
    expectError(await send(t, a.apiKey, { to: [remote(), remote()], text: 'no credit' }), 402, 'payment_required');
    expect((await rest(t, 'GET', `/boxes/${primary.id}/caps`, { key: a.apiKey })).body.usage.map((u: { used: number }) => u.used)).toEqual([0, 0]);
  });

  it('new recipients per day: an existing correspondent never counts, and a new one counts once that day', async () => {
    const a = await signupAccount(t, `known-${unique()}@owner.test`);
    const box = (await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'desk' } })).body;
    const known = remote();
    // Written to before the cap is set: a known correspondent from then on.
    expect((await send(t, a.apiKey, { from: box.address, to: known, text: 'before' })).status).toBe(200);
    await rest(t, 'PUT', `/boxes/${box.id}/caps`, { key: a.apiKey, body: { caps: { new_recipients_per_day: 1 } } });
    for (let i = 0; i < 3; i++) expect((await send(t, a.apiKey, { from: box.address, to: known, text: `again ${i}` })).status).toBe(200);
    const stranger = remote();
    expect((await send(t, a.apiKey, { from: box.address, to: [known, stranger], text: 'one new' })).status).toBe(200);
    expectError(await send(t, a.apiKey, { from: box.address, to: remote(), text: 'a second new one' }), 429, 'cap_exceeded');
    expect((await send(t, a.apiKey, { from: box.address, to: known, text: 'still fine' })).status).toBe(200);
  });

  it('distinct recipients per day: an address already mailed today does not count again', async () => {
    const a = await signupAccount(t, `recip-${unique()}@owner.test`);
    const box = (await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'outreach', caps: { new_recipients_per_day: 2 } } })).body;
    const [x, y, z] = [remote(), remote(), remote()];
    expect((await send(t, a.apiKey, { from: box.address, to: x, text: '1' })).status).toBe(200);
    expect((await send(t, a.apiKey, { from: box.address, to: [x, y], text: '2' })).status).toBe(200);
    expect((await send(t, a.apiKey, { from: box.address, to: y.toUpperCase(), text: '3' })).status).toBe(200);
    const over = await send(t, a.apiKey, { from: box.address, to: [x, z], text: '4' });
    expectError(over, 429, 'cap_exceeded');
    expect(over.body.error).toMatchObject({ cap: 'box.new_recipients_per_day', limit: 2, used: 2, window_seconds: 86400 });
    const day = (Math.floor(clock.now().getTime() / 86_400_000) + 1) * 86_400_000;
    expect(over.body.error.resets_at).toBe(new Date(day).toISOString());
    expect((await rest(t, 'GET', `/boxes/${box.id}/caps`, { key: a.apiKey })).body.usage).toEqual([
      { cap: 'new_recipients_per_day', limit: 2, used: 2, remaining: 0, window_seconds: 86400, resets_at: new Date(day).toISOString() },
    ]);
  });

  it('key caps count every send of the key; listing keys shows them; a bulk job that would go over is refused as a whole', async () => {
    const a = await signupAccount(t, `keycap-${unique()}@owner.test`);
    const k = await mintKey(t, a.apiKey, ['send'], { caps: { per_day: 3 } });
    const listed = (await rest(t, 'GET', '/account/keys', { key: a.apiKey })).body.keys.find((x: { id: string }) => x.id === k.id);
    expect(listed).toMatchObject({ caps: { per_day: 3, per_minute: null }, expires_at: null });
    const bulk = (n: number) =>
      rest(t, 'POST', '/messages/send/bulk', { key: k.api_key, body: { messages: Array.from({ length: n }, (_, i) => ({ to: remote(), text: `b${i}` })) } });
    const tooBig = await bulk(4);
    expectError(tooBig, 429, 'cap_exceeded');
    expect(tooBig.body.error).toMatchObject({ cap: 'key.per_day', key_id: k.id, limit: 3, used: 0 });
    expect(await t.db.bulkJob.count({ where: { accountId: a.accountId } })).toBe(0);
    expect((await bulk(2)).status).toBe(200);
    expect((await send(t, k.api_key, { to: remote(), text: 'third' })).status).toBe(200);
    const over = await send(t, k.api_key, { to: remote(), text: 'fourth' });
    expectError(over, 429, 'cap_exceeded');
    expect(over.body.error.cap).toBe('key.per_day');
    // The owner key has no caps of its own.
    expect((await send(t, a.apiKey, { to: remote(), text: 'owner key' })).status).toBe(200);
    const caps = await rest(t, 'GET', `/account/keys/${k.id}/caps`, { key: a.apiKey });
    expect(caps.body).toMatchObject({ key_id: k.id, box_id: null, usage: [expect.objectContaining({ cap: 'per_day', used: 3, remaining: 0 })] });
    expect((await events(t, a.apiKey, 'cap.reached')).map((e) => e.data.cap)).toEqual(['key.per_day']);
  });
});

describe('expiring keys', () => {
  it('an expired key gets 401 key_expired on REST and MCP; a key cannot mint one that outlives it; listing shows expires_at', async () => {
    const a = await signupAccount(t, `exp-${unique()}@owner.test`);
    const at = new Date(clock.now().getTime() + 3_600_000).toISOString();
    const k = await mintKey(t, a.apiKey, ['admin', 'send'], { expires_at: at });
    expect(k).toMatchObject({ expires_at: at });
    expect((await rest(t, 'GET', '/account/keys', { key: a.apiKey })).body.keys.find((x: { id: string }) => x.id === k.id).expires_at).toBe(at);
    expect((await events(t, a.apiKey, 'api_key.created')).find((e) => e.data.key_id === k.id)!.data.expires_at).toBe(at);

    expectError(await rest(t, 'POST', '/account/keys', { key: k.api_key, body: { label: 'forever', scopes: ['send'] } }), 400, 'key_outlives_parent');
    const later = new Date(Date.parse(at) + 1000).toISOString();
    const outlives = await rest(t, 'POST', '/account/keys', { key: k.api_key, body: { label: 'later', scopes: ['send'], expires_at: later } });
    expectError(outlives, 400, 'key_outlives_parent');
    expect(outlives.body.error.parent_expires_at).toBe(at);
    const child = await rest(t, 'POST', '/account/keys', { key: k.api_key, body: { label: 'sooner', scopes: ['send'], expires_at: at } });
    expect(child.status, JSON.stringify(child.body)).toBe(200);
    expectError(
      await rest(t, 'POST', '/account/keys', { key: a.apiKey, body: { label: 'past', scopes: ['send'], expires_at: '2020-01-01T00:00:00Z' } }),
      400,
      'validation_error',
    );
    expectError(
      await rest(t, 'POST', '/account/keys', { key: a.apiKey, body: { label: 'no zone', scopes: ['send'], expires_at: '2099-01-01T00:00:00' } }),
      400,
      'validation_error',
    );
    expect((await send(t, k.api_key, { to: remote(), text: 'before expiry' })).status).toBe(200);

    clock.advance(3_600_000 + 1000);
    const expired = await rest(t, 'GET', '/account', { key: k.api_key });
    expectError(expired, 401, 'key_expired');
    expect(expired.body.error.expired_at).toBe(at);
    expectError(await send(t, child.body.api_key, { to: remote(), text: 'x' }), 401, 'key_expired');
    const mcp = await fetch(`${t.url}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${k.api_key}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(mcp.status).toBe(401);
    expect(((await mcp.json()) as { error: { code: string } }).error.code).toBe('key_expired');
    // The key that never expires goes on.
    expect((await rest(t, 'GET', '/account', { key: a.apiKey })).status).toBe(200);
  });
});

describe('SMTP submission, the SDK and MCP', () => {
  it('SMTP submission is refused while the box is paused (550 with the reason) and over a cap (451), and accepted after resume', async () => {
    const a = await signupAccount(t, `smtp-${unique()}@owner.test`);
    const box = (await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'mailer' } })).body;
    const password = (await rest(t, 'POST', '/account/app-passwords', { key: a.apiKey, body: { label: 'laptop' } })).body.password;
    const submit = async () => {
      const c = nodemailer.createTransport({
        host: '127.0.0.1',
        port: t.submissionPort!,
        secure: true,
        tls: { rejectUnauthorized: false },
        auth: { user: box.address, pass: password },
      });
      try {
        return { ok: await c.sendMail({ from: box.address, to: remote(), subject: 'via smtp', text: 'hello' }) };
      } catch (err) {
        return { err: err as { responseCode?: number; response?: string } };
      } finally {
        c.close();
      }
    };
    await rest(t, 'POST', `/boxes/${box.id}/pause`, { key: a.apiKey });
    const paused = await submit();
    expect(paused.err?.responseCode).toBe(550);
    expect(paused.err?.response).toMatch(/5\.7\.1 The box mailer@\S+ is paused/);
    await rest(t, 'POST', `/boxes/${box.id}/resume`, { key: a.apiKey });
    await rest(t, 'PUT', `/boxes/${box.id}/caps`, { key: a.apiKey, body: { caps: { per_day: 1 } } });
    expect((await submit()).ok?.response).toMatch(/^250 /);
    const capped = await submit();
    expect(capped.err?.responseCode).toBe(451);
    expect(capped.err?.response).toMatch(/4\.7\.1 The send cap box\.per_day/);
  });

  it('the SDK pauses, reads caps and sees BoxesError account_paused; MCP has one tool per procedure', async () => {
    const a = await signupAccount(t, `sdk-${unique()}@owner.test`);
    const client = createBoxesClient({ baseUrl: t.url, apiKey: a.apiKey });
    expect(await client.guard.pauseAccount.mutate()).toMatchObject({ paused: true, paused_by: 'key' });
    const err = await client.messages.send.mutate({ to: remote(), text: 'x' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BoxesError);
    expect((err as BoxesError).code).toBe('account_paused');
    expect((err as BoxesError).status).toBe(403);
    expect((await client.guard.resumeAccount.mutate()).paused).toBe(false);
    const box = (await client.boxes.list.query()).boxes[0]!;
    await client.guard.setBoxCaps.mutate({ id: box.id, caps: { per_minute: 5 } });
    expect((await client.guard.boxCaps.query({ id: box.id })).caps.per_minute).toBe(5);
    expect((await client.guard.pauseState.query()).account.paused).toBe(false);

    const mcp = new Client({ name: 'boxes-test', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${a.apiKey}` } } }));
    try {
      const names = (await mcp.listTools()).tools.map((x) => x.name);
      expect(names).toEqual(
        expect.arrayContaining([
          'guard_pauseState',
          'guard_pauseAccount',
          'guard_resumeAccount',
          'guard_pauseBox',
          'guard_resumeBox',
          'guard_boxCaps',
          'guard_setBoxCaps',
          'guard_keyCaps',
        ]),
      );
      const paused = await mcp.callTool({ name: 'guard_pauseBox', arguments: { id: box.id } });
      expect(paused.isError, JSON.stringify(paused)).toBeFalsy();
      expect(paused.structuredContent).toMatchObject({ box_id: box.id, paused: true });
      const refused = await mcp.callTool({ name: 'messages_send', arguments: { to: remote(), text: 'x' } });
      expect(refused.isError).toBe(true);
      expect(JSON.parse((refused.content as { text: string }[])[0]!.text).error.code).toBe('box_paused');
      const caps = await mcp.callTool({ name: 'guard_boxCaps', arguments: { id: box.id } });
      expect((caps.structuredContent as { caps: { per_minute: number } }).caps.per_minute).toBe(5);
      expect((await mcp.callTool({ name: 'guard_resumeBox', arguments: { id: box.id } })).structuredContent).toMatchObject({ paused: false });
    } finally {
      await mcp.close();
    }
  });
});
