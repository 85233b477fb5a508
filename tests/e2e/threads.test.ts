/**
 * Conversations: thread_id on every message, GET /threads and GET /threads/{id}, and POST /messages/{id}/reply
 * (reply and reply-all), across two accounts of this instance (local delivery) and an outside client that
 * writes through the MX and reads what reaches the stand-in remote MX. The reply headers are checked by
 * parsing the delivered raw message.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import nodemailer from 'nodemailer';
import { simpleParser, type AddressObject } from 'mailparser';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createBoxesClient, sentMessage } from '@boxes/sdk';
import { receiveMessage } from '@boxes/core';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { MailSink, events, getMessage, send, unique, waitFor } from './mail-send-helpers';
import { crlf, sendRaw } from './mail-receive-helpers';
import { k, rows, sql, tbl } from '@boxes/db';

let t: TestServer;
let sink: MailSink;
let a: TestAccount;
let b: TestAccount;

beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  t = await startTestServer({ worker: true, mail: true, resolver: sink.resolver(), env: { MAIL_AUTH_DELAY_MS: '0' } });
  [a, b] = await Promise.all([signupAccount(t, 'threads-a@example.com'), signupAccount(t, 'threads-b@example.com')]);
});
afterAll(async () => {
  await t?.stop();
  await sink?.close();
});

/** The received copy of a message (by its Message-ID) in an account, once mail.received announced it. */
async function receivedIn(account: TestAccount, rfcMessageId: string): Promise<any> {
  const ev = await waitFor(
    async () => (await events(t, account.apiKey, 'mail.received')).find((e) => e.data.message.rfc_message_id === rfcMessageId),
    `${rfcMessageId} to reach ${account.primaryAddress}`,
  );
  return getMessage(t, account.apiKey, ev.data.message.id);
}

const addrs = (v: AddressObject | AddressObject[] | undefined) =>
  (Array.isArray(v) ? v : v ? [v] : []).flatMap((x) => x.value.map((e) => e.address?.toLowerCase()));

describe('threads between two accounts of this instance', () => {
  it('replies both ways join one thread on each side; the context echo keeps working; GET /threads and GET /threads/{id}', async () => {
    const first = await send(t, a.apiKey, { to: b.primaryAddress, subject: 'Quarterly numbers', text: 'Can you send the numbers?', context: { ticket: 77 } });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(first.body.thread_id).toMatch(/^thr_[0-9a-z]{20}$/);
    const threadA = first.body.thread_id as string;

    // B's copy starts a thread of B's (B never saw this conversation); B's context stays null.
    const atB = await receivedIn(b, first.body.rfc_message_id);
    expect(atB.thread_id).toMatch(/^thr_/);
    expect(atB.thread_id).not.toBe(threadA);
    expect(atB.context).toBeNull();
    const threadB = atB.thread_id as string;

    // B replies: the reply joins B's thread; A's copy joins A's thread and carries A's context.
    const r1 = await rest(t, 'POST', `/messages/${atB.id}/reply`, { key: b.apiKey, body: { text: 'Here they are.' } });
    expect(r1.status, JSON.stringify(r1.body)).toBe(200);
    expect(r1.body.thread_id).toBe(threadB);
    expect(r1.body.recipients).toEqual([a.primaryAddress]);
    const r1AtA = await receivedIn(a, r1.body.rfc_message_id);
    expect(r1AtA.thread_id).toBe(threadA);
    expect(r1AtA.subject).toBe('Re: Quarterly numbers');
    expect(r1AtA.in_reply_to).toBe(first.body.rfc_message_id);
    expect(r1AtA.context).toEqual({ ticket: 77 });
    const received = (await events(t, a.apiKey, 'mail.received')).find((e) => e.data.message.id === r1AtA.id)!;
    expect(received.data.message.thread_id).toBe(threadA);
    expect(received.data.context).toEqual({ ticket: 77 });

    // A answers B's reply: no "Re: Re:"; it carries the context on; B's copy joins B's thread.
    const r2 = await rest(t, 'POST', `/messages/${r1AtA.id}/reply`, { key: a.apiKey, body: { text: 'Thanks!', quote: true } });
    expect(r2.status, JSON.stringify(r2.body)).toBe(200);
    expect(r2.body.thread_id).toBe(threadA);
    const sentR2 = await getMessage(t, a.apiKey, r2.body.message_id);
    expect(sentR2.subject).toBe('Re: Quarterly numbers');
    expect(sentR2.context).toEqual({ ticket: 77 });
    expect(sentR2.body.text).toContain('Thanks!');
    expect(sentR2.body.text).toContain('> Here they are.');
    const r2AtB = await receivedIn(b, r2.body.rfc_message_id);
    expect(r2AtB.thread_id).toBe(threadB);

    // A second, unrelated conversation is a thread of its own and becomes the newest.
    const other = await send(t, a.apiKey, { to: `other-${unique()}@remote.test`, subject: 'Unrelated', text: 'x' });
    expect(other.body.thread_id).not.toBe(threadA);

    const listA = await rest(t, 'GET', '/threads', { key: a.apiKey });
    expect(listA.status, JSON.stringify(listA.body)).toBe(200);
    expect(listA.body.threads.map((x: any) => x.id).slice(0, 2)).toEqual([other.body.thread_id, threadA]);
    const ta = listA.body.threads.find((x: any) => x.id === threadA);
    expect(ta).toMatchObject({ subject: 'Quarterly numbers', message_count: 3, sent_count: 2, received_count: 1, last_message_id: r2.body.message_id });
    expect(ta.participants).toEqual([a.primaryAddress, b.primaryAddress].sort());

    const one = await rest(t, 'GET', `/threads/${threadA}?include=body`, { key: a.apiKey });
    expect(one.status, JSON.stringify(one.body)).toBe(200);
    expect(one.body.messages.map((m: any) => m.id)).toEqual([first.body.message_id, r1AtA.id, r2.body.message_id]);
    expect(one.body.messages.map((m: any) => m.direction)).toEqual(['sent', 'received', 'sent']);
    expect(one.body.messages[1].body.text).toContain('Here they are.');
    // The same message fields as GET /messages/{id} (the retention due date included).
    const alone = await getMessage(t, a.apiKey, r1AtA.id);
    for (const f of ['thread_id', 'subject', 'from', 'to', 'context', 'body_reclaim_due_at_utc', 'recorded_at'] as const)
      expect(one.body.messages[1][f], f).toEqual(alone[f]);
    expect(alone.body_reclaim_due_at_utc).not.toBeNull();
    expect(one.body.next_cursor).toBeNull();

    // Paging: one message at a time, in order, nothing repeated.
    const paged: string[] = [];
    let cursor: string | null = null;
    do {
      const page: any = await rest(t, 'GET', `/threads/${threadA}?limit=1${cursor ? `&cursor=${cursor}` : ''}`, { key: a.apiKey });
      paged.push(...page.body.messages.map((m: any) => m.id));
      cursor = page.body.next_cursor;
    } while (cursor);
    expect(paged).toEqual(one.body.messages.map((m: any) => m.id));
    const firstPage = await rest(t, 'GET', '/threads?limit=1', { key: a.apiKey });
    expect(firstPage.body.threads).toHaveLength(1);
    const secondPage = await rest(t, 'GET', `/threads?limit=1&cursor=${firstPage.body.next_cursor}`, { key: a.apiKey });
    expect(secondPage.body.threads[0].id).toBe(threadA);

    const oneB = await rest(t, 'GET', `/threads/${threadB}`, { key: b.apiKey });
    expect(oneB.body.messages.map((m: any) => m.id)).toEqual([atB.id, r1.body.message_id, r2AtB.id]);

    // Another account's thread is not found, as is one that does not exist; a bad cursor is a 400.
    expect((await rest(t, 'GET', `/threads/${threadA}`, { key: b.apiKey })).status).toBe(404);
    expect((await rest(t, 'GET', '/threads/thr_00000000000000000000', { key: a.apiKey })).status).toBe(404);
    expect((await rest(t, 'GET', '/threads?cursor=nonsense', { key: a.apiKey })).body.error.code).toBe('invalid_cursor');
    expect((await rest(t, 'POST', `/messages/${r1AtA.id}/reply`, { key: b.apiKey, body: { text: 'x' } })).status).toBe(404);
  });

  it('mail between two boxes of one account is one thread; one message for two boxes is one thread', async () => {
    const desk = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: `desk-${unique()}` } });
    const s = await send(t, a.apiKey, { from: desk.body.address, to: a.primaryAddress, subject: 'Internal', text: 'x' });
    const copy = await receivedIn(a, s.body.rfc_message_id);
    expect(copy.thread_id).toBe(s.body.thread_id);
    const mid = `<both-${unique()}@remote.test>`;
    await sendRaw(
      t.smtpPort!,
      { from: 'gina@remote.test', to: [a.primaryAddress, desk.body.address] },
      crlf([`From: gina@remote.test`, `To: ${a.primaryAddress}, ${desk.body.address}`, 'Subject: Both', `Message-ID: ${mid}`, '', 'x', ''].join('\n')),
    );
    await waitFor(async () => (await events(t, a.apiKey, 'mail.received')).filter((e) => e.data.message.rfc_message_id === mid).length === 2, 'both copies');
    const copies = (await events(t, a.apiKey, 'mail.received')).filter((e) => e.data.message.rfc_message_id === mid);
    expect(copies[0]!.data.message.thread_id).toBe(copies[1]!.data.message.thread_id);
    const thread = await rest(t, 'GET', `/threads/${copies[0]!.data.message.thread_id}`, { key: a.apiKey });
    expect(thread.body).toMatchObject({ message_count: 2, received_count: 2 });
    expect(thread.body.box_ids).toHaveLength(2);
  });

  it('the box filter and a box-restricted key see only the threads of their boxes', async () => {
    const box = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: `sales-${unique()}` } });
    const s = await send(t, a.apiKey, { from: box.body.address, to: `lead-${unique()}@remote.test`, subject: 'Offer', text: 'x' });
    const byBox = await rest(t, 'GET', `/threads?box=${encodeURIComponent(box.body.address)}`, { key: a.apiKey });
    expect(byBox.body.threads.map((x: any) => x.id)).toEqual([s.body.thread_id]);
    const key = await rest(t, 'POST', '/account/keys', {
      key: a.apiKey,
      body: { label: 'sales', scopes: ['receive', 'send'], allowed_boxes: [box.body.address] },
    });
    const seen = await rest(t, 'GET', '/threads', { key: key.body.api_key });
    expect(seen.body.threads.map((x: any) => x.id)).toEqual([s.body.thread_id]);
    const all = await rest(t, 'GET', '/threads?limit=200', { key: a.apiKey });
    const hidden = all.body.threads.find((x: any) => x.id !== s.body.thread_id).id;
    expect((await rest(t, 'GET', `/threads/${hidden}`, { key: key.body.api_key })).status).toBe(404);
  });
});

describe('GET /threads paging over many messages', () => {
  it('pages, at any limit, in the order and with the figures of one aggregate over every message (ties in time included), with and without a box filter', async () => {
    const acct = await signupAccount(t, `paging-${unique()}@example.com`);
    const second = (await rest(t, 'POST', '/boxes', { key: acct.apiKey, body: { address: `second-${unique()}` } })).body;
    const primary = await t.db.box.findFirstOrThrow({ where: { accountId: acct.accountId, isPrimary: true } });
    await receiveMessage(t.svc, {
      raw: Buffer.from(crlf(`From: seed@outside.test\nTo: ${primary.address}\nSubject: seed\nMessage-ID: <seed-${unique()}@outside.test>\n\nhello\n`)),
      recipients: [{ kind: 'box', box: primary }],
      mailFrom: 'seed@outside.test',
      via: 'smtp',
    });
    // 1,500 more messages cloned from it: 310 threads, 7 messages to a timestamp (ties), spread over both boxes.
    const cols = (
      await t.db.$queryRaw<{ column_name: string }[]>`
      SELECT column_name FROM information_schema.columns WHERE table_name = 'messages' AND table_schema = current_schema()`
    ).map((c) => c.column_name);
    const set: Record<string, string> = {
      id: `'msg_paging' || g`,
      thread_id: `'thr_' || lpad(((g * 7919) % 310)::text, 20, '0')`,
      recorded_at: `m.recorded_at - ((g / 7) || ' seconds')::interval`,
      box_id: `CASE WHEN g % 3 = 0 THEN '${second.id}' ELSE m.box_id END`,
      direction: `CASE WHEN g % 5 = 0 THEN 'sent' ELSE m.direction END`,
      idempotency_key: 'NULL',
      rfc_message_id: `'<paging-' || g || '@outside.test>'`,
    };
    await t.db.$executeRawUnsafe(
      `INSERT INTO messages (${cols.map((c) => `"${c}"`).join(', ')}) SELECT ${cols.map((c) => set[c] ?? `m."${c}"`).join(', ')}
       FROM messages m, generate_series(1, 1500) g WHERE m.account_id = '${acct.accountId}'`,
    );
    for (const box of [null, second.id as string]) {
      const m = tbl('messages');
      const reference = await rows(
        t.db,
        k
          .selectFrom('messages')
          .select([
            'thread_id',
            sql<Date>`max(${m.recorded_at})`.as('last'),
            sql<number>`count(*)::int`.as('n'),
            sql<number>`(count(*) FILTER (WHERE ${m.direction} = 'sent'))::int`.as('sent'),
          ])
          .where('account_id', '=', acct.accountId)
          .where(sql<boolean>`(${box}::text IS NULL OR ${m.box_id} = ${box})`)
          .groupBy('thread_id')
          .orderBy(sql`max(${m.recorded_at})`, 'desc')
          .orderBy('thread_id', 'desc'),
      );
      expect(reference.length).toBeGreaterThan(box ? 200 : 300);
      for (const limit of [1, 7, 50, 100]) {
        const seen: any[] = [];
        let cursor: string | null = null;
        do {
          const q: string = `/threads?limit=${limit}${box ? `&box=${box}` : ''}${cursor ? `&cursor=${cursor}` : ''}`;
          const r = await rest(t, 'GET', q, { key: acct.apiKey });
          expect(r.status, JSON.stringify(r.body)).toBe(200);
          expect(r.body.threads.length).toBeLessThanOrEqual(limit);
          seen.push(...r.body.threads);
          cursor = r.body.next_cursor;
        } while (cursor && seen.length <= reference.length);
        expect(
          seen.map((x) => x.id),
          `limit ${limit}, box ${box}`,
        ).toEqual(reference.map((x) => x.thread_id));
        expect(seen.map((x) => [x.last_activity_at, x.message_count, x.sent_count])).toEqual(reference.map((x) => [x.last.toISOString(), x.n, x.sent]));
      }
    }
    // About 730 pages (620 of them at limit 1): 10 s on a quiet 2-core machine, twice that or more beside a busy file.
  }, 120_000);
});

describe('threads and replies with an outside client', () => {
  it('reply goes to Reply-To with correct headers; reply-all copies To and Cc without the box; the outside answer joins the thread', async () => {
    const outsider = `carol-${unique()}@remote.test`;
    const replyTo = `carol-desk-${unique()}@remote.test`;
    const colleague = `dave-${unique()}@remote.test`;
    const root = `<root-${unique()}@remote.test>`;
    const mid = `<mid-${unique()}@remote.test>`;
    const raw = crlf(
      [
        `From: Carol <${outsider}>`,
        `Reply-To: Carol's desk <${replyTo}>`,
        `To: ${a.primaryAddress}, Dave <${colleague}>`,
        `Cc: ${outsider}`,
        'Subject: RE: Contract draft',
        `Message-ID: ${mid}`,
        `In-Reply-To: ${root}`,
        `References: ${root}`,
        'Date: Mon, 23 Nov 2026 09:00:00 +0000',
        '',
        'Please review.',
        'Second line.',
        '',
      ].join('\n'),
    );
    const accepted = await sendRaw(t.smtpPort!, { from: outsider, to: [a.primaryAddress] }, raw);
    expect(accepted.accepted).toEqual([a.primaryAddress]);
    const inbound = await receivedIn(a, mid);
    expect(inbound.thread_id).toMatch(/^thr_/);

    const reply = await rest(t, 'POST', `/messages/${inbound.id}/reply`, { key: a.apiKey, body: { text: 'Looks good.', quote: true } });
    expect(reply.status, JSON.stringify(reply.body)).toBe(200);
    expect(reply.body.thread_id).toBe(inbound.thread_id);
    expect(reply.body.recipients).toEqual([replyTo]);
    const got = await waitFor(() => sink.to(replyTo)[0], 'the reply at the remote MX');
    const parsed = await simpleParser(got.raw);
    expect(addrs(parsed.to)).toEqual([replyTo]);
    expect(parsed.cc).toBeUndefined();
    expect(addrs(parsed.from)).toEqual([a.primaryAddress]);
    expect(parsed.subject).toBe('RE: Contract draft');
    expect(parsed.inReplyTo).toBe(mid);
    expect(parsed.references).toEqual([root, mid]);
    expect(parsed.text).toContain('Looks good.');
    expect(parsed.text).toContain('> Please review.');
    expect(parsed.text).toContain('> Second line.');

    const all = await rest(t, 'POST', `/messages/${inbound.id}/reply`, { key: a.apiKey, body: { text: 'Copying everyone.', reply_all: true } });
    expect(all.status, JSON.stringify(all.body)).toBe(200);
    expect(all.body.recipients.sort()).toEqual([replyTo, colleague, outsider].sort());
    const gotAll = await waitFor(() => sink.to(colleague)[0], 'the reply-all at the remote MX');
    const parsedAll = await simpleParser(gotAll.raw);
    expect(addrs(parsedAll.to)).toEqual([replyTo]);
    expect(addrs(parsedAll.cc).sort()).toEqual([colleague, outsider].sort());
    expect(addrs(parsedAll.cc)).not.toContain(a.primaryAddress);
    expect(parsedAll.inReplyTo).toBe(mid);
    expect(parsedAll.text).not.toContain('> Please review.');

    // Carol answers our reply from her own client: the answer joins the same thread.
    const answerId = `<answer-${unique()}@remote.test>`;
    await sendRaw(
      t.smtpPort!,
      { from: outsider, to: [a.primaryAddress] },
      crlf(
        [
          `From: ${outsider}`,
          `To: ${a.primaryAddress}`,
          'Subject: Re: Contract draft',
          `Message-ID: ${answerId}`,
          `In-Reply-To: ${reply.body.rfc_message_id}`,
          `References: ${root} ${mid} ${reply.body.rfc_message_id}`,
          '',
          'Signed.',
          '',
        ].join('\n'),
      ),
    );
    const answer = await receivedIn(a, answerId);
    expect(answer.thread_id).toBe(inbound.thread_id);
    const thread = await rest(t, 'GET', `/threads/${inbound.thread_id}`, { key: a.apiKey });
    expect(thread.body.messages.map((m: any) => m.id)).toEqual([inbound.id, reply.body.message_id, all.body.message_id, answer.id]);
    expect(thread.body.subject).toBe('RE: Contract draft');
    expect(thread.body.participants).toEqual([a.primaryAddress, colleague, outsider, replyTo].sort());
    const listed = await rest(t, 'GET', '/threads', { key: a.apiKey });
    expect(listed.body.threads[0].id).toBe(inbound.thread_id);
  });

  it('a mail client answering through SMTP submission joins the thread too', async () => {
    const outsider = `frank-${unique()}@remote.test`;
    const mid = `<q-${unique()}@remote.test>`;
    await sendRaw(
      t.smtpPort!,
      { from: outsider, to: [a.primaryAddress] },
      crlf([`From: ${outsider}`, `To: ${a.primaryAddress}`, 'Subject: Question', `Message-ID: ${mid}`, '', 'Any news?', ''].join('\n')),
    );
    const inbound = await receivedIn(a, mid);
    const password = (await rest(t, 'POST', '/account/app-passwords', { key: a.apiKey, body: { label: 'laptop' } })).body.password as string;
    const mailer = nodemailer.createTransport({
      host: '127.0.0.1',
      port: t.submissionPort!,
      secure: true,
      tls: { rejectUnauthorized: false },
      auth: { user: a.primaryAddress, pass: password },
    });
    try {
      await mailer.sendMail({ from: a.primaryAddress, to: outsider, subject: 'Re: Question', text: 'Soon.', headers: { 'in-reply-to': mid, references: mid } });
    } finally {
      mailer.close();
    }
    const got = await waitFor(() => sink.to(outsider)[0], 'the client reply at the remote MX');
    const parsed = await simpleParser(got.raw);
    expect(parsed.inReplyTo).toBe(mid);
    const thread = await waitFor(async () => {
      const r = await rest(t, 'GET', `/threads/${inbound.thread_id}`, { key: a.apiKey });
      return r.body.message_count === 2 ? r.body : null;
    }, 'the submitted reply in the thread');
    expect(thread.messages.map((m: any) => m.direction)).toEqual(['received', 'sent']);
    expect(thread.messages[1].in_reply_to).toBe(mid);
  });

  it('a reply sets In-Reply-To and References itself and keeps the send rules', async () => {
    const s = await send(t, a.apiKey, { to: `eve-${unique()}@remote.test`, subject: 'Re: already', text: 'x' });
    const bad = await rest(t, 'POST', `/messages/${s.body.message_id}/reply`, { key: a.apiKey, body: { text: 'y', headers: { References: '<x@y>' } } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('validation_error');
    const unknown = await rest(t, 'POST', `/messages/${s.body.message_id}/reply`, { key: a.apiKey, body: { text: 'y', nonsense: 1 } });
    expect(unknown.status).toBe(400);
    // A follow-up to our own sent message goes to its recipients, subject not stacked.
    const follow = await rest(t, 'POST', `/messages/${s.body.message_id}/reply`, {
      key: a.apiKey,
      body: { text: 'Following up', idempotency_key: `f-${s.body.message_id}` },
    });
    expect(follow.status, JSON.stringify(follow.body)).toBe(200);
    expect(follow.body.thread_id).toBe(s.body.thread_id);
    const m = await getMessage(t, a.apiKey, follow.body.message_id);
    expect(m.subject).toBe('Re: already');
    expect(m.to).toEqual(s.body.recipients);
    const again = await rest(t, 'POST', `/messages/${s.body.message_id}/reply`, {
      key: a.apiKey,
      body: { text: 'Following up', idempotency_key: `f-${s.body.message_id}` },
    });
    expect(again.body).toMatchObject({ message_id: follow.body.message_id, idempotent_replay: true });
  });
});

describe('the same through the SDK and MCP', () => {
  it('SDK: messages.reply, threads.list, threads.get; MCP: the threads_list, threads_get and messages_reply tools', async () => {
    const client = createBoxesClient({ baseUrl: t.url, apiKey: a.apiKey });
    const first = sentMessage(await client.messages.send.mutate({ to: b.primaryAddress, subject: 'Via SDK', text: 'one' }));
    const atB = await receivedIn(b, first.rfc_message_id);
    const bClient = createBoxesClient({ baseUrl: t.url, apiKey: b.apiKey });
    const reply = sentMessage(await bClient.messages.reply.mutate({ id: atB.id, text: 'two', quote: true }));
    expect(reply.thread_id).toBe(atB.thread_id);
    const back = await receivedIn(a, reply.rfc_message_id);
    const listed = await client.threads.list.query({ limit: 5 });
    expect(listed.threads[0]!.id).toBe(first.thread_id);
    const one = await client.threads.get.query({ id: first.thread_id });
    expect(one.messages.map((m) => m.id)).toEqual([first.message_id, back.id]);

    const mcp = new Client({ name: 'threads-e2e', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${a.apiKey}` } } }));
    try {
      const tools = (await mcp.listTools()).tools.map((x) => x.name);
      expect(tools).toEqual(expect.arrayContaining(['threads_list', 'threads_get', 'messages_reply', 'messages_cancel']));
      const got = await mcp.callTool({ name: 'threads_get', arguments: { id: first.thread_id } });
      expect(got.isError, JSON.stringify(got.content)).toBeFalsy();
      expect((got.structuredContent as any).messages.map((m: any) => m.id)).toEqual([first.message_id, back.id]);
      const answered = await mcp.callTool({ name: 'messages_reply', arguments: { id: back.id, text: 'three' } });
      expect(answered.isError, JSON.stringify(answered.content)).toBeFalsy();
      expect((answered.structuredContent as any).thread_id).toBe(first.thread_id);
      const list = await mcp.callTool({ name: 'threads_list', arguments: { limit: 1 } });
      expect((list.structuredContent as any).threads[0]).toMatchObject({ id: first.thread_id, message_count: 3 });
    } finally {
      await mcp.close();
    }
  });
});
