/**
 * What happens after POST /messages/send accepts a message, over real SMTP: a remote MX that answers 4xx and
 * later accepts (retried, delivered once), one that answers 550 (bounce, suppression list, later sends not
 * attempted nor charged, unblock), mail between two accounts of this instance (never leaves the machine),
 * a box-restricted key, and the looping-single-sends warning.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { start as startWorker } from '@boxes/worker';
import { mintKey, rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { events, getMessage, MailSink, send, unique, waitFor, waitSettled } from './mail-send-helpers';
import { exec, k, sql } from '@boxes/db';

let t: TestServer;
let sink: MailSink;

beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  t = await startTestServer({ worker: true, resolver: sink.resolver() });
});
afterAll(async () => {
  await t?.stop();
  await sink?.close();
});

const credit = (accountId: string) =>
  t.db.account.findUniqueOrThrow({
    where: { id: accountId },
    select: { balanceMicros: true, heldMicros: true, freeMessagesLeft: true, heldFreeMessages: true },
  });

describe('a remote MX that answers 4xx, then accepts', () => {
  let a: TestAccount;
  beforeAll(async () => {
    a = await signupAccount(t);
  });

  it.each([
    ['DATA', 'tempfail-data'],
    ['RCPT', 'tempfail-rcpt'],
  ])('451 to the first two %s attempts: retried, delivered exactly once, one mail.delivered', async (_stage, prefix) => {
    const to = `${prefix}-${unique()}@remote.test`;
    const r = await send(t, a.apiKey, { to, subject: `retry ${prefix}`, text: 'eventually' });
    expect(r.status, JSON.stringify(r.body)).toBe(200);

    const m = await waitSettled(t, a.apiKey, r.body.message_id);
    expect(m.status).toBe('delivered');
    expect(m.deliveries).toHaveLength(1);
    expect(m.deliveries[0]).toMatchObject({ recipient: to, status: 'delivered', last_error: null });
    expect(m.deliveries[0].delivered_at).toEqual(expect.any(String));

    expect(sink.to(to)).toHaveLength(1);
    expect(sink.rcptFor(to).map((x) => x.code)).toEqual(prefix === 'tempfail-rcpt' ? [451, 451, 250] : [250, 250, 250]);

    const delivered = (await events(t, a.apiKey, 'mail.delivered')).filter((e) => e.data.message_id === r.body.message_id);
    expect(delivered).toHaveLength(1);
    expect(delivered[0]!.data).toMatchObject({ recipient: to, route: 'remote' });
    const bad = (await events(t, a.apiKey, 'mail.bounced,mail.failed')).filter((e) => e.data.message_id === r.body.message_id);
    expect(bad).toEqual([]);
    // Last, so that a wrong count fails only this: three attempts were made (451, 451, accepted).
    expect(m.deliveries[0].attempts, 'attempts of the delivered delivery').toBe(3);
  });
});

describe('a remote MX that answers 550 to RCPT', () => {
  let a: TestAccount;
  const to = `reject-${unique()}@remote.test`;
  const encoded = encodeURIComponent(to);
  let firstMessageId: string;

  beforeAll(async () => {
    a = await signupAccount(t);
  });

  it('bounces: mail.bounced, the hold is released, and the address is on the suppression list', async () => {
    const before = await credit(a.accountId);
    const r = await send(t, a.apiKey, { to, subject: 'will bounce', text: 'x' });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    firstMessageId = r.body.message_id;

    const m = await waitSettled(t, a.apiKey, firstMessageId);
    expect(m.status).toBe('bounced');
    expect(m.deliveries[0]).toMatchObject({ recipient: to, status: 'bounced' });
    expect(m.deliveries[0].last_error).toContain('5.1.1');
    expect(sink.rcptFor(to)).toEqual([{ address: to, code: 550 }]);
    expect(sink.to(to)).toHaveLength(0);

    const bounced = await waitFor(async () => (await events(t, a.apiKey, 'mail.bounced')).find((e) => e.data.message_id === firstMessageId), 'mail.bounced');
    expect(bounced.data).toMatchObject({ recipient: to, code: 550 });
    expect(await credit(a.accountId)).toEqual(before);

    const list = await rest(t, 'GET', '/suppression', { key: a.apiKey });
    expect(list.status, JSON.stringify(list.body)).toBe(200);
    expect(list.body.suppressions).toEqual([expect.objectContaining({ address: to, reason: 'bounce', message_id: firstMessageId })]);
    const one = await rest(t, 'GET', `/suppression/${encoded}`, { key: a.apiKey });
    expect(one.status, JSON.stringify(one.body)).toBe(200);
    expect(one.body).toMatchObject({ address: to, suppressed: true, entry: { address: to, reason: 'bounce' } });
    // Last, so that a wrong count fails only this: one attempt was made (answered 550).
    expect(m.deliveries[0].attempts, 'attempts of the bounced delivery').toBe(1);
  });

  it('a later send to it answers with the address in suppressed: not attempted, not charged', async () => {
    const before = await credit(a.accountId);
    const ledgerBefore = await t.db.ledgerEntry.count({ where: { accountId: a.accountId } });

    const r = await send(t, a.apiKey, { to: to.toUpperCase(), subject: 'again', text: 'x' });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ status: 'suppressed', recipients: [], suppressed: [to] });
    expect(r.body.billing).toMatchObject({ messages: 0, paid_messages: 0, free_messages_used: 0, reserved_usd: '0' });
    expect(await t.db.delivery.count({ where: { messageId: r.body.message_id } })).toBe(0);
    expect((await getMessage(t, a.apiKey, r.body.message_id)).status).toBe('suppressed');

    // Mixed: the suppressed address is dropped, the other one is delivered and charged.
    const other = `ok-${unique()}@remote.test`;
    const mixed = await send(t, a.apiKey, { to: [to, other], subject: 'mixed', text: 'x' });
    expect(mixed.status, JSON.stringify(mixed.body)).toBe(200);
    expect(mixed.body).toMatchObject({ status: 'queued', recipients: [other], suppressed: [to] });
    expect(mixed.body.billing.messages).toBe(1);
    const settled = await waitSettled(t, a.apiKey, mixed.body.message_id);
    expect(settled.deliveries).toEqual([expect.objectContaining({ recipient: other, status: 'delivered' })]);

    // Still only the RCPT of the first (bounced) send.
    expect(sink.rcptFor(to)).toHaveLength(1);
    const after = await credit(a.accountId);
    expect(after.freeMessagesLeft).toBe(before.freeMessagesLeft - 1); // only `other`
    expect(after.heldFreeMessages).toBe(0);
    expect(await t.db.ledgerEntry.count({ where: { accountId: a.accountId } })).toBe(ledgerBefore + 1);
  });

  it('POST /suppression/{address}/unblock removes it and sends to it are attempted again', async () => {
    const r = await rest(t, 'POST', `/suppression/${encoded}/unblock`, { key: a.apiKey });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toEqual({ address: to, removed: true });

    const one = await rest(t, 'GET', `/suppression/${encoded}`, { key: a.apiKey });
    expect(one.body).toEqual({ address: to, suppressed: false, entry: null });
    const list = await rest(t, 'GET', '/suppression', { key: a.apiKey });
    expect(list.body.suppressions).toEqual([]);

    const again = await rest(t, 'POST', `/suppression/${encoded}/unblock`, { key: a.apiKey });
    expect(again.status, JSON.stringify(again.body)).toBe(404);

    const s = await send(t, a.apiKey, { to, subject: 'after unblock', text: 'x' });
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    expect(s.body).toMatchObject({ status: 'queued', recipients: [to], suppressed: [] });
    await waitSettled(t, a.apiKey, s.body.message_id);
    expect(sink.rcptFor(to)).toHaveLength(2);
  });
});

describe('mail between accounts of this instance', () => {
  let a: TestAccount;
  let b: TestAccount;
  beforeAll(async () => {
    [a, b] = await Promise.all([signupAccount(t), signupAccount(t)]);
  });

  it('agent A mails agent B: B gets mail.received and the message, and nothing leaves the machine', async () => {
    const connectionsBefore = sink.connections;
    const messagesBefore = sink.messages.length;
    const subject = `hello B ${unique()}`;
    const r = await send(t, a.apiKey, { to: b.primaryAddress, subject, text: 'from A to B', context: { thread: 7 } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);

    const ev = await waitFor(async () => (await events(t, b.apiKey, 'mail.received')).find((e) => e.data.message.subject === subject), 'mail.received at B');
    expect(ev.data.message).toMatchObject({ from: a.primaryAddress, to_box: b.primaryAddress, via: 'local' });

    const list = await rest(t, 'GET', '/messages?direction=received&include=body', { key: b.apiKey });
    expect(list.status, JSON.stringify(list.body)).toBe(200);
    const got = list.body.messages.find((m: { subject: string }) => m.subject === subject);
    expect(got).toMatchObject({ direction: 'received', from: a.primaryAddress, to: [b.primaryAddress], rfc_message_id: r.body.rfc_message_id });
    expect(got.body.text.trim()).toBe(`from A to B\n\n--\nSent by an AI agent with Boxes: ${t.config.siteUrl}`);
    // A's context stays with A: B's copy is not a reply to anything of B's.
    expect(got.context).toBeNull();

    const m = await waitSettled(t, a.apiKey, r.body.message_id);
    expect(m.deliveries).toEqual([expect.objectContaining({ recipient: b.primaryAddress, status: 'delivered' })]);
    const delivered = (await events(t, a.apiKey, 'mail.delivered')).filter((e) => e.data.message_id === r.body.message_id);
    expect(delivered).toHaveLength(1);
    expect(delivered[0]!.data.route).toBe('local');

    expect(sink.rcptFor(b.primaryAddress)).toEqual([]);
    expect(sink.messages.length).toBe(messagesBefore);
    expect(sink.connections).toBe(connectionsBefore);
  });

  it('a send to a box that does not exist on a hosted domain bounces without any SMTP connection', async () => {
    const connectionsBefore = sink.connections;
    const nobody = `nobody-${unique()}@${b.domain}`;
    const r = await send(t, a.apiKey, { to: nobody, subject: 'no such box', text: 'x' });
    expect(r.status, JSON.stringify(r.body)).toBe(200);

    const bounced = await waitFor(async () => (await events(t, a.apiKey, 'mail.bounced')).find((e) => e.data.message_id === r.body.message_id), 'mail.bounced');
    expect(bounced.data).toMatchObject({ recipient: nobody, code: 550 });
    const m = await waitSettled(t, a.apiKey, r.body.message_id);
    expect(m.status).toBe('bounced');
    expect(sink.rcptFor(nobody)).toEqual([]);
    expect(sink.connections).toBe(connectionsBefore);
    // B never heard of it.
    expect((await events(t, b.apiKey, 'mail.received')).filter((e) => e.data.message.to_box === nobody)).toEqual([]);
  });
});

describe('who may send, and how often', () => {
  it('a box-restricted key sends only from its boxes (403 box_restricted_key otherwise)', async () => {
    const a = await signupAccount(t);
    const box = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: `sales-${unique()}` } });
    expect(box.status, JSON.stringify(box.body)).toBe(200);
    const key = await mintKey(t, a.apiKey, ['send', 'receive'], { allowed_boxes: [box.body.address] });
    const before = await t.db.message.count({ where: { accountId: a.accountId } });

    for (const from of [undefined, a.primaryAddress, `Agent <${a.primaryAddress}>`]) {
      const r = await send(t, key.api_key, { ...(from ? { from } : {}), to: `restricted-${unique()}@remote.test`, subject: 'no', text: 'x' });
      expect(r.status, JSON.stringify(r.body)).toBe(403);
      expect(r.body.error.code).toBe('box_restricted_key');
    }
    expect(await t.db.message.count({ where: { accountId: a.accountId } })).toBe(before);

    const to = `restricted-${unique()}@remote.test`;
    const ok = await send(t, key.api_key, { from: box.body.address, to, subject: 'yes', text: 'x' });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    expect(ok.body.from).toBe(box.body.address);
    await waitFor(() => sink.to(to).length === 1, 'delivery from the allowed box');
  });

  it('more than 20 single-recipient sends to different addresses within a minute: a looping_single_sends warning and one send.loop_detected event', async () => {
    const a = await signupAccount(t);
    const loopSend = (i: number) => send(t, a.apiKey, { to: `loop-${i}-${unique()}@remote.test`, subject: `loop ${i}`, text: 'x' });
    const started = Date.now();
    // Twenty in parallel (none of them can be over the threshold, whatever the order), then three more.
    const first = await Promise.all(Array.from({ length: 20 }, (_, i) => loopSend(i)));
    const later = [];
    for (let i = 20; i < 23; i++) later.push(await loopSend(i));
    const straddled = Math.floor(started / 60_000) !== Math.floor(Date.now() / 60_000);
    for (const r of [...first, ...later]) expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(first.filter((r) => r.body.warning).map((r) => r.body.warning)).toEqual([]);
    const why = straddled
      ? 'these sends (all within a few seconds) straddled a clock-minute boundary: packages/core/src/messages/loop.ts counts per fixed clock minute, not over the last minute'
      : '';
    for (const { body: r } of later) {
      expect(r.warning, why).toEqual({ code: 'looping_single_sends', message: expect.stringContaining('bulk') });
    }
    const loop = await events(t, a.apiKey, 'send.loop_detected');
    expect(loop).toHaveLength(1);
    expect(loop[0]!.data.distinct_recipients_last_minute).toBe(21);
  });
});

describe('a worker that stopped between the remote 250 and recording it', () => {
  it('the next run records the delivery from the committed 250 and sends nothing again', async () => {
    // A server without a worker: the send's delivery waits in the queue.
    const s = await startTestServer({ worker: false });
    try {
      const a = await signupAccount(s);
      const to = `once-${unique()}@remote.test`;
      const r = await send(s, a.apiKey, { to, subject: 'accepted before the crash', text: 'x' });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      // What the crashed run left: the 250 committed on its own, the outcome not recorded.
      const n = await exec(
        s.db,
        k
          .updateTable('deliveries')
          .set({ accepted_at: sql<Date>`now()`, accepted_response: sql.lit('250 2.0.0 Ok: queued as ABC'), remote_mta: sql.lit('mx.remote.test') })
          .where('message_id', '=', r.body.message_id),
      );
      expect(n).toBe(1);
      const w = await startWorker(s.config, { svc: s.svc, log: s.runtime.log, publish: null, resolver: sink.resolver() });
      try {
        const m = await waitSettled(s, a.apiKey, r.body.message_id);
        expect(m.status).toBe('delivered');
        expect(m.deliveries[0]).toMatchObject({ recipient: to, status: 'delivered' });
        const delivered = (await events(s, a.apiKey, 'mail.delivered')).filter((e) => e.data.message_id === r.body.message_id);
        expect(delivered).toHaveLength(1);
        expect(delivered[0]!.data).toMatchObject({ remote_mta: 'mx.remote.test', response: '250 2.0.0 Ok: queued as ABC' });
        expect(sink.rcptFor(to)).toEqual([]);
      } finally {
        await w.stop();
      }
    } finally {
      await s.stop();
    }
  });
});
