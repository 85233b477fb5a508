/**
 * Auto-forwarding, end to end over real SMTP and HTTP: mail comes into the MX from outside, copies leave for a
 * stand-in MX. Confirmation by the mailed link before anything is forwarded (and decline), matching by sender
 * and subject, the copy's shape (a message from the box with the original attached unchanged), billing as a
 * sent message (and a skip without credit), a loop between two boxes that stops after one copy, and a bounce
 * that stops the forward.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { runForward } from '@boxes/core';
import { parseMessage } from '@boxes/mail';
import { createBoxesClient } from '@boxes/sdk';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { events, MailSink, waitFor } from './mail-send-helpers';
import { rawMessage, sendRaw } from './mail-receive-helpers';

let t: TestServer;
let sink: MailSink;

beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  t = await startTestServer({ worker: true, mail: true, resolver: sink.resolver() });
});
afterAll(async () => {
  await t?.stop();
  await sink?.close();
});

const uniq = () => randomUUID().slice(0, 8);
const LINK = /(https?:\/\/\S+\/forwards\/confirm\/[A-Za-z0-9_-]+)/;

/** Mail from outside into the MX. */
async function mailIn(to: string, subject: string, from = 'alice@outside.test') {
  const id = `<${uniq()}@outside.test>`;
  const r = await sendRaw(t.smtpPort!, { from, to: [to] }, rawMessage({ From: from, To: to, Subject: subject, 'Message-ID': id }, `body of ${subject}`));
  expect(r.accepted).toEqual([to]);
  return id;
}

/** The confirmation link as the target's mailbox (the stand-in MX) received it. */
async function linkAtSink(target: string): Promise<string> {
  const m = await waitFor(() => sink.to(target).find((x) => x.raw.toString().includes('Forward mail from')), `confirmation mail to ${target}`);
  const parsed = await parseMessage(m.raw);
  return LINK.exec(parsed.text ?? '')![1]!;
}

async function answer(link: string, value: 'confirm' | 'decline') {
  const r = await fetch(link, { method: 'POST', body: new URLSearchParams({ answer: value }) });
  return { status: r.status, html: await r.text() };
}

async function box(a: TestAccount, local: string) {
  const r = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: local } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body as { id: string; address: string };
}

describe('confirm, match, forward, bill', () => {
  let a: TestAccount;
  let support: { id: string; address: string };
  const person = `person-${uniq()}@remote.test`;
  let forwardId: string;
  let link: string;

  beforeAll(async () => {
    a = await signupAccount(t, 'fwd-owner@example.com');
    support = await box(a, 'support');
  });

  it('creating a forward mails the target a link and forwards nothing until it is confirmed', async () => {
    const r = await rest(t, 'POST', `/boxes/${support.id}/forwards`, { key: a.apiKey, body: { to: person, subject_contains: 'Invoice' } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({
      box_id: support.id,
      box: support.address,
      to: person,
      status: 'pending_confirmation',
      match: { from_contains: null, subject_contains: 'invoice' },
    });
    forwardId = r.body.id;
    link = await linkAtSink(person);
    expect(link.startsWith(t.url)).toBe(true);

    await mailIn(support.address, 'Invoice 1 before confirming');
    await waitFor(async () => (await events(t, a.apiKey, 'mail.received')).find((e) => e.data.message.subject === 'Invoice 1 before confirming'), 'stored');
    expect(await t.db.forwardRun.count({ where: { forwardId } })).toBe(0);
    expect((await events(t, a.apiKey, 'box.forward.created')).map((e) => e.data.id)).toEqual([forwardId]);

    const again = await rest(t, 'POST', `/boxes/${support.id}/forwards`, { key: a.apiKey, body: { to: person.toUpperCase() } });
    expect(again.status).toBe(409);
    expect(again.body.error.code).toBe('forward_exists');
  });

  it('the link shows a page (GET changes nothing); Confirm makes it active', async () => {
    const page = await fetch(link);
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain(support.address);
    expect(html).toContain('Confirm');
    expect((await rest(t, 'GET', `/boxes/${support.id}/forwards`, { key: a.apiKey })).body.forwards[0].status).toBe('pending_confirmation');

    const done = await answer(link, 'confirm');
    expect(done.status).toBe(200);
    expect(done.html).toContain('Forwarding confirmed');
    const sdk = createBoxesClient({ baseUrl: t.url, apiKey: a.apiKey });
    const list = await sdk.forwards.list.query({ id: support.id });
    expect(list.forwards).toEqual([expect.objectContaining({ id: forwardId, status: 'active', confirmed_at: expect.any(String) })]);
    expect((await events(t, a.apiKey, 'box.forward.confirmed')).map((e) => e.data.id)).toEqual([forwardId]);
    expect((await answer(link, 'confirm')).status).toBe(200);
    expect((await fetch(`${t.url}/forwards/confirm/not-a-token`)).status).toBe(404);
  });

  it('matching mail is forwarded as a new message from the box with the original attached; other mail is not', async () => {
    const originalId = await mailIn(support.address, 'Invoice 42 for November');
    await mailIn(support.address, 'hello there');
    const copy = await waitFor(() => sink.to(person).find((m) => m.raw.toString().includes('Fwd: Invoice 42')), 'the forwarded copy');
    const parsed = await parseMessage(copy.raw);
    expect(parsed.from).toBe(support.address);
    expect(parsed.subject).toBe('Fwd: Invoice 42 for November');
    expect(parsed.headers['x-boxes-forwarded-by']).toBe(support.address);
    expect(parsed.headers['dkim-signature']).toContain(`d=${support.address.split('@')[1]}`);
    expect(copy.mailFrom).toMatch(/^bounces\+dlv_/);
    const attached = parsed.attachments.find((x) => x.contentType === 'message/rfc822');
    expect(attached, JSON.stringify(parsed.attachments.map((x) => x.contentType))).toBeDefined();
    const inner = attached!.content.toString();
    expect(inner).toContain(`Message-ID: ${originalId}`);
    expect(inner).toContain('body of Invoice 42 for November');

    // Only the matching one: a forward run for it, none for "hello there".
    const runs = await t.db.forwardRun.findMany({ where: { forwardId } });
    expect(runs).toEqual([expect.objectContaining({ status: 'sent' })]);
    expect(sink.to(person).filter((m) => m.raw.toString().includes('Fwd:'))).toHaveLength(1);

    // Charged as a sent message: mail.sent, a delivery, and its message_sent ledger entry once delivered.
    const copyId = runs[0]!.sentMessageId!;
    const sent = await waitFor(async () => (await events(t, a.apiKey, 'mail.sent')).find((e) => e.data.message_id === copyId), 'mail.sent of the copy');
    expect(sent.data).toMatchObject({ from: support.address, to: [person] });
    const entry = await waitFor(() => t.db.ledgerEntry.findFirst({ where: { messageId: copyId, type: 'message_sent' } }), 'the ledger entry of the copy');
    expect(entry.freeMessages + Number(-entry.amountMicros)).toBeGreaterThan(0);
    const listed = await rest(t, 'GET', '/messages?direction=sent', { key: a.apiKey });
    expect(listed.body.messages.map((m: { id: string }) => m.id)).toContain(copyId);
  });

  it('a forward job that runs again (a worker that died after sending) replays: no second copy', async () => {
    const runs = await t.db.forwardRun.findMany({ where: { forwardId, status: 'sent' } });
    const run = runs[0]!;
    const copies = () => sink.to(person).filter((m) => m.raw.toString().includes('Fwd: Invoice 42')).length;
    expect(await runForward(t.svc, run.id)).toBe('done');
    // As if the send committed but the run was never marked: the send's idempotency key replays it.
    await t.db.forwardRun.update({ where: { id: run.id }, data: { status: 'pending' } });
    expect(await runForward(t.svc, run.id)).toBe('sent');
    expect(await t.db.forwardRun.findUniqueOrThrow({ where: { id: run.id } })).toMatchObject({ status: 'sent', sentMessageId: run.sentMessageId });
    expect(await t.db.message.count({ where: { accountId: a.accountId, subject: 'Fwd: Invoice 42 for November' } })).toBe(1);
    expect(copies()).toBe(1);
  });

  it('over MCP: the same forwards as a tool', async () => {
    const client = new Client({ name: 'boxes-e2e', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${a.apiKey}` } } }));
    try {
      const r = await client.callTool({ name: 'forwards_list', arguments: { id: support.id } });
      expect(r.isError, JSON.stringify(r.content)).toBeFalsy();
      expect((r.structuredContent as { forwards: { id: string; status: string }[] }).forwards).toEqual([
        expect.objectContaining({ id: forwardId, status: 'active' }),
      ]);
    } finally {
      await client.close();
    }
  });

  it('sender matching, and a forward removed forwards nothing more', async () => {
    const boss = `boss-${uniq()}@remote.test`;
    const f = await rest(t, 'POST', `/boxes/${support.id}/forwards`, { key: a.apiKey, body: { to: boss, from_contains: '@vip.test' } });
    expect(f.status).toBe(200);
    expect((await answer(await linkAtSink(boss), 'confirm')).status).toBe(200);
    await mailIn(support.address, 'from a vip', 'ceo@vip.test');
    await mailIn(support.address, 'from anyone', 'someone@outside.test');
    await waitFor(() => sink.to(boss).find((m) => m.raw.toString().includes('Fwd: from a vip')), 'vip copy');
    const runs = await t.db.forwardRun.findMany({ where: { forwardId: f.body.id } });
    expect(runs).toHaveLength(1);

    const del = await rest(t, 'DELETE', `/boxes/${support.id}/forwards/${f.body.id}`, { key: a.apiKey });
    expect(del.status, JSON.stringify(del.body)).toBe(200);
    expect((await rest(t, 'DELETE', `/boxes/${support.id}/forwards/${f.body.id}`, { key: a.apiKey })).status).toBe(404);
    await mailIn(support.address, 'vip again', 'ceo@vip.test');
    await waitFor(async () => (await events(t, a.apiKey, 'mail.received')).find((e) => e.data.message.subject === 'vip again'), 'stored');
    expect(await t.db.forwardRun.count({ where: { forwardId: f.body.id } })).toBe(0);
  });

  it('Decline stops a forward before anything is sent', async () => {
    const stranger = `stranger-${uniq()}@remote.test`;
    const f = await rest(t, 'POST', `/boxes/${support.id}/forwards`, { key: a.apiKey, body: { to: stranger } });
    const declined = await answer(await linkAtSink(stranger), 'decline');
    expect(declined.html).toContain('Declined');
    const list = await rest(t, 'GET', `/boxes/${support.id}/forwards`, { key: a.apiKey });
    expect(list.body.forwards.find((x: { id: string }) => x.id === f.body.id)).toMatchObject({ status: 'stopped', stop_reason: 'declined' });
    await mailIn(support.address, 'Invoice 43');
    await waitFor(() => sink.to(person).find((m) => m.raw.toString().includes('Fwd: Invoice 43')), 'copy for the active forward');
    expect(sink.to(stranger).filter((m) => m.raw.toString().includes('Fwd:'))).toHaveLength(0);
  });

  it('without credit the copy is not sent: the run is skipped with payment_required', async () => {
    await t.db.account.update({ where: { id: a.accountId }, data: { freeMessagesLeft: 0 } });
    await mailIn(support.address, 'Invoice 44 without credit');
    const skipped = await waitFor(async () => (await events(t, a.apiKey, 'box.forward.skipped')).find((e) => e.data.reason === 'payment_required'), 'the skip');
    expect(skipped.data).toMatchObject({ id: forwardId, to: person });
    expect(sink.to(person).filter((m) => m.raw.toString().includes('Invoice 44'))).toHaveLength(0);
    await t.db.account.update({ where: { id: a.accountId }, data: { freeMessagesLeft: 100 } });
  });
});

describe('loops and bounces', () => {
  it('two boxes forwarding to each other: one copy, then the loop stops', async () => {
    const [a, b] = await Promise.all([signupAccount(t, 'loop-a@example.com'), signupAccount(t, 'loop-b@example.com')]);
    const boxA = await box(a, 'ping');
    const boxB = await box(b, 'pong');
    // Both match the test's subject only, so the confirmation mails themselves are not forwarded.
    const fa = await rest(t, 'POST', `/boxes/${boxA.id}/forwards`, { key: a.apiKey, body: { to: boxB.address, subject_contains: 'round' } });
    const fb = await rest(t, 'POST', `/boxes/${boxB.id}/forwards`, { key: b.apiKey, body: { to: boxA.address, subject_contains: 'round' } });
    expect([fa.status, fb.status]).toEqual([200, 200]);
    // Each confirmation link arrives in the other box (local delivery): read it there and confirm.
    for (const [owner, target] of [
      [b, boxB],
      [a, boxA],
    ] as const) {
      const m = await waitFor(async () => {
        const r = await rest(t, 'GET', `/messages?direction=received&include=body&box=${encodeURIComponent(target.address)}`, { key: owner.apiKey });
        return (r.body.messages as { subject: string; body?: { text?: string }; text?: string }[]).find((x) => x.subject.startsWith('Forward mail from'));
      }, `confirmation in ${target.address}`);
      const link = LINK.exec(JSON.stringify(m).replace(/\\n/g, '\n'))![1]!;
      expect((await answer(link, 'confirm')).status).toBe(200);
    }

    await mailIn(boxA.address, 'round and round');
    const loop = await waitFor(async () => (await events(t, b.apiKey, 'box.forward.skipped')).find((e) => e.data.reason === 'loop'), 'the loop stop at B');
    expect(loop.data).toMatchObject({ id: fb.body.id, to: boxA.address });
    // A forwarded once; B forwarded nothing; A received only the original.
    expect(await t.db.forwardRun.findMany({ where: { forwardId: fa.body.id } })).toEqual([expect.objectContaining({ status: 'sent' })]);
    expect(await t.db.forwardRun.findMany({ where: { forwardId: fb.body.id } })).toEqual([expect.objectContaining({ status: 'skipped', reason: 'loop' })]);
    const receivedA = (await events(t, a.apiKey, 'mail.received')).filter((e) => String(e.data.message.subject).includes('round and round'));
    expect(receivedA).toHaveLength(1);
  });

  it('a bounced copy stops the forward for good', async () => {
    const a = await signupAccount(t, 'bounce-owner@example.com');
    const inbox = await box(a, 'inbox');
    const gone = `reject-${uniq()}@remote.test`;
    const f = await rest(t, 'POST', `/boxes/${inbox.id}/forwards`, { key: a.apiKey, body: { to: gone } });
    expect(f.status).toBe(200);
    // The stand-in MX refuses this address, so the confirmation mail itself did not arrive: take the link from the
    // service's outbox, as the target would have read it.
    const notice = await waitFor(() => t.db.notice.findFirst({ where: { to: gone, kind: 'forward_confirmation' } }), 'the confirmation notice');
    expect((await answer(LINK.exec(notice.text)![1]!, 'confirm')).status).toBe(200);

    await mailIn(inbox.address, 'first');
    const stopped = await waitFor(async () => (await events(t, a.apiKey, 'box.forward.stopped')).find((e) => e.data.id === f.body.id), 'the stop');
    expect(stopped.data).toMatchObject({ reason: 'bounced', to: gone });
    expect(stopped.data.response).toContain('5.1.1');
    const list = await rest(t, 'GET', `/boxes/${inbox.id}/forwards`, { key: a.apiKey });
    expect(list.body.forwards[0]).toMatchObject({ status: 'stopped', stop_reason: 'bounced' });

    await mailIn(inbox.address, 'second');
    await waitFor(async () => (await events(t, a.apiKey, 'mail.received')).find((e) => e.data.message.subject === 'second'), 'stored');
    expect(await t.db.forwardRun.count({ where: { forwardId: f.body.id } })).toBe(1);
    expect((await t.db.box.findUniqueOrThrow({ where: { id: inbox.id } })).forwarding).toBe(false);
  });
});

describe('validation', () => {
  it('bad targets and unknown boxes', async () => {
    const a = await signupAccount(t, 'fwd-validation@example.com');
    const boxes = await rest(t, 'GET', '/boxes', { key: a.apiKey });
    const primary = boxes.body.boxes[0];
    for (const body of [{ to: 'not an address' }, { to: primary.address }, { to: 'x@remote.test', unknown: 1 }, {}]) {
      const r = await rest(t, 'POST', `/boxes/${primary.id}/forwards`, { key: a.apiKey, body });
      expect(r.status, JSON.stringify(r.body)).toBe(400);
      expect(r.body.error.code).toBe('validation_error');
    }
    expect((await rest(t, 'POST', '/boxes/box_00000000000000000000/forwards', { key: a.apiKey, body: { to: 'x@remote.test' } })).status).toBe(404);
  });

  it('at most 10 forwards per box, and 20 confirmation mails per account a day (deleting does not reset it)', async () => {
    const a = await signupAccount(t, 'fwd-limits@example.com');
    const [one, two, three] = [await box(a, 'one'), await box(a, 'two'), await box(a, 'three')];
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) {
      const r = await rest(t, 'POST', `/boxes/${one.id}/forwards`, { key: a.apiKey, body: { to: `p${i}@limits.invalid` } });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      ids.push(r.body.id);
    }
    const eleventh = await rest(t, 'POST', `/boxes/${one.id}/forwards`, { key: a.apiKey, body: { to: 'p10@limits.invalid' } });
    expect(eleventh.status).toBe(400);
    for (const id of ids) expect((await rest(t, 'DELETE', `/boxes/${one.id}/forwards/${id}`, { key: a.apiKey })).status).toBe(200);
    for (let i = 0; i < 10; i++)
      expect((await rest(t, 'POST', `/boxes/${two.id}/forwards`, { key: a.apiKey, body: { to: `q${i}@limits.invalid` } })).status).toBe(200);
    const over = await rest(t, 'POST', `/boxes/${three.id}/forwards`, { key: a.apiKey, body: { to: 'r@limits.invalid' } });
    expect(over.status).toBe(429);
    expect(over.body.error).toMatchObject({ code: 'rate_limited', limit: 20 });
  });
});
