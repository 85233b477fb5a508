/**
 * Single send and bulk send plan every message alike (messages/plan.ts). Each case of the table goes once through
 * POST /messages/send and once as the one message of a bulk job, from two accounts set up the same way (the same
 * box signature, send-side block and allow entries, suppressed addresses, a second box with a key restricted to
 * it, a message to reply to; a second pair of accounts with a dedicated sending IP), and must end the same:
 * refused with the same code and fields, or accepted with the same recipients delivered over real SMTP, the same
 * number suppressed, the same thread (a reply joins the replied-to message's thread) and the same message at the
 * MX (headers, display names, configuration set, signature, trailer, inline attachment). Then: what a bulk job
 * does with a message a single send would refuse (the whole job is refused, naming the message's index).
 */
import { simpleParser } from 'mailparser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintKey, rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { createJob, messagesTo, waitForJob } from './bulk-helpers';
import { getMessage, MailSink, send, waitFor, waitSettled } from './mail-send-helpers';

let t: TestServer;
let sink: MailSink;

beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  t = await startTestServer({ worker: true, resolver: sink.resolver(), env: { BULK_COOL_OFF_SECONDS: '0', BULK_MIN_COOL_OFF_SECONDS: '0' } });
});
afterAll(async () => {
  await t?.stop();
  await sink?.close();
});

type Path = 'single' | 'bulk';

/** An account as the cases see it: its owner key, a key restricted to its second box, the message to reply to. */
interface Sender {
  account: TestAccount;
  restrictedKey: string;
  news: string;
  parent: { rfcMessageId: string; threadId: string };
}

interface World {
  plain: Sender;
  /** An account with a (simulated) dedicated sending IP: its sends carry its configuration set. */
  dedicated: Sender;
}

const SIGNATURE = 'Ada Lovelace\nAnalytical Engines Ltd';

async function ok(r: Promise<{ status: number; body: any }>, what: string) {
  const res = await r;
  expect(res.status, `${what}: ${JSON.stringify(res.body)}`).toBe(200);
  return res.body;
}

async function makeSender(dedicated: boolean): Promise<Sender> {
  const account = await signupAccount(t);
  const key = account.apiKey;
  const primary = (await ok(rest(t, 'GET', '/boxes', { key }), 'boxes')).boxes[0] as { id: string };
  await ok(rest(t, 'PUT', `/boxes/${primary.id}/signature`, { key, body: { signature: SIGNATURE } }), 'signature');
  const news = await ok(rest(t, 'POST', '/boxes', { key, body: { address: 'news' } }), 'box');
  const restricted = await mintKey(t, key, ['send', 'receive'], { allowed_boxes: ['news'] });
  for (const entry of [
    { list: 'block', value: 'blocked.example', direction: 'send' },
    { list: 'block', value: 'walled.example', direction: 'both' },
    { list: 'allow', value: 'friend@walled.example', direction: 'send' },
    { list: 'block', value: 'inbound-only.example', direction: 'receive' },
    { list: 'block', value: 'other-box.example', direction: 'send', box: news.id },
  ]) {
    await ok(rest(t, 'POST', '/lists', { key, body: entry }), 'list entry');
  }
  await t.db.suppression.createMany({
    data: ['gone@remote.test', 'gone-too@remote.test'].map((address) => ({ accountId: account.accountId, address, reason: 'bounce' })),
  });
  if (dedicated) await ok(rest(t, 'POST', '/account/sending-ip', { key, body: { mode: 'simulated' } }), 'sending ip');
  const parent = await ok(send(t, key, { to: 'parent@remote.test', subject: 'the question', text: 'shall we?' }), 'parent');
  await waitSettled(t, key, parent.message_id);
  return { account, restrictedKey: restricted.api_key, news: news.address, parent: { rfcMessageId: parent.rfc_message_id, threadId: parent.thread_id } };
}

const worlds = {} as Record<Path, World>;

beforeAll(async () => {
  for (const path of ['single', 'bulk'] as const) worlds[path] = { plain: await makeSender(false), dedicated: await makeSender(true) };
});

interface Case {
  name: string;
  sender?: keyof World;
  /** The key that sends: the owner key, or the one restricted to the box news@. */
  key?: 'owner' | 'restricted';
  body: (s: Sender) => Record<string, unknown>;
  /** What both paths must show (the rest of each outcome must only be equal between them). */
  expect: Record<string, unknown>;
}

const PIXEL = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64');

const cases: Case[] = [
  {
    name: 'a plain message',
    body: () => ({ to: 'plain@remote.test', subject: 'hello', text: 'Hi there' }),
    expect: { status: 200, message: { delivered: ['plain@remote.test'], thread: 'own' } },
  },
  {
    name: 'a recipient on a send-side block list (a blocked domain among good recipients)',
    body: () => ({ to: ['fine@remote.test', 'ceo@blocked.example'], subject: 'leak', text: 'x' }),
    expect: { status: 403, code: 'recipient_blocked', blocked: ['ceo@blocked.example'] },
  },
  {
    name: 'a block entry for both directions, in cc',
    body: () => ({ to: 'fine@remote.test', cc: 'someone@walled.example', text: 'x' }),
    expect: { status: 403, code: 'recipient_blocked', blocked: ['someone@walled.example'] },
  },
  {
    name: 'the allow entry that names the address beats the block of its domain; receive-only entries do not stop a send',
    body: () => ({ to: 'friend@walled.example', bcc: 'x@inbound-only.example', text: 'x' }),
    expect: { status: 200, message: { delivered: ['friend@walled.example', 'x@inbound-only.example'] } },
  },
  {
    name: "another box's block entry does not apply to this box",
    body: () => ({ to: 'y@other-box.example', text: 'x' }),
    expect: { status: 200, message: { delivered: ['y@other-box.example'] } },
  },
  {
    name: "the box's own block entry applies to a send from it",
    key: 'restricted',
    body: (s) => ({ from: s.news, to: 'y@other-box.example', text: 'x' }),
    expect: { status: 403, code: 'recipient_blocked' },
  },
  {
    name: 'a suppressed recipient is skipped, the others delivered',
    body: () => ({ to: ['gone@remote.test', 'stays@remote.test'], subject: 'partly', text: 'x' }),
    expect: { status: 200, message: { delivered: ['stays@remote.test'], suppressed: 1 } },
  },
  {
    name: 'every recipient suppressed: nothing delivered, status suppressed',
    body: () => ({ to: 'gone@remote.test', cc: 'GONE-too@remote.test', text: 'x' }),
    expect: { status: 200, message: { status: 'suppressed', delivered: [], suppressed: 2 } },
  },
  {
    name: 'duplicate recipients across to, cc and bcc are delivered once each; bcc is not shown',
    body: () => ({ to: 'Dup One <dup@remote.test>', cc: ['DUP@remote.test', 'dup2@remote.test'], bcc: ['dup2@remote.test', 'dup3@remote.test'], text: 'x' }),
    expect: {
      status: 200,
      message: { delivered: ['dup2@remote.test', 'dup3@remote.test', 'dup@remote.test'], bcc: ['dup2@remote.test', 'dup3@remote.test'] },
      mx: { headers: { bcc: null } },
    },
  },
  {
    name: 'a reply (In-Reply-To and References) joins the thread of the message it answers',
    body: (s) => ({
      to: 'parent@remote.test',
      subject: 'Re: the question',
      text: 'yes',
      headers: { 'In-Reply-To': s.parent.rfcMessageId, References: s.parent.rfcMessageId },
    }),
    expect: { status: 200, message: { thread: 'parent', in_reply_to: '<parent>' }, mx: { headers: { 'in-reply-to': '<parent>', references: '<parent>' } } },
  },
  {
    name: 'a reply whose headers are spelt in lower case, References only, threads the same',
    body: (s) => ({ to: 'parent@remote.test', text: 'and also', headers: { references: `<unknown@elsewhere.test> ${s.parent.rfcMessageId}` } }),
    expect: { status: 200, message: { thread: 'parent' } },
  },
  {
    name: 'In-Reply-To a message the account does not have starts a thread',
    body: () => ({ to: 'parent@remote.test', text: 'x', headers: { 'In-Reply-To': '<nobody@elsewhere.test>' } }),
    expect: { status: 200, message: { thread: 'own' } },
  },
  {
    name: 'a reserved header is refused',
    body: () => ({ to: 'x@remote.test', text: 'x', headers: { 'X-Boxes-Configuration-Set': 'mine' } }),
    expect: { status: 400, code: 'validation_error', fields: ['headers.X-Boxes-Configuration-Set'] },
  },
  {
    name: 'custom headers and reply_to are carried',
    body: () => ({
      to: 'custom@remote.test',
      text: 'x',
      headers: { 'X-Campaign': 'november' },
      reply_to: ['Help Desk <help@remote.test>', 'second@remote.test'],
    }),
    expect: { status: 200, mx: { headers: { 'x-campaign': 'november', 'reply-to': 'Help Desk <help@remote.test>, second@remote.test' } } },
  },
  {
    name: 'a from with a display name',
    body: (s) => ({ from: `Billing Team <${s.account.primaryAddress.toUpperCase()}>`, to: 'named@remote.test', subject: 'invoice', text: 'x' }),
    expect: { status: 200, mx: { headers: { from: 'Billing Team <agent@<domain>>' } } },
  },
  {
    name: 'an account with a dedicated sending IP: its configuration set is on the message',
    sender: 'dedicated',
    body: () => ({ to: 'dedicated@remote.test', text: 'x' }),
    expect: { status: 200, mx: { headers: { 'x-boxes-configuration-set': 'dedicated-<account>' } } },
  },
  {
    name: 'an account without one: no configuration set',
    body: () => ({ to: 'shared@remote.test', text: 'x' }),
    expect: { status: 200, mx: { headers: { 'x-boxes-configuration-set': null } } },
  },
  {
    name: 'an inline image (content_id) with html, the signature and the trailer in both bodies',
    body: () => ({
      to: 'inline@remote.test',
      subject: 'logo',
      text: 'see the logo',
      html: '<p>see <img src="cid:logo"></p>',
      attachments: [{ filename: 'logo.png', content_type: 'image/png', content_id: 'logo', content_b64: PIXEL.toString('base64') }],
    }),
    expect: { status: 200, mx: { attachments: [{ filename: 'logo.png', contentType: 'image/png', cid: 'logo', size: PIXEL.length }] } },
  },
  {
    name: 'content_id without html is refused',
    body: () => ({
      to: 'x@remote.test',
      text: 'x',
      attachments: [{ filename: 'a.png', content_type: 'image/png', content_id: 'a', content_b64: PIXEL.toString('base64') }],
    }),
    expect: { status: 400, code: 'validation_error', fields: ['html'] },
  },
  {
    name: 'attachment content that decodes to nothing is refused',
    body: () => ({ to: 'x@remote.test', text: 'x', attachments: [{ filename: 'a.bin', content_type: 'application/octet-stream', content_b64: '==' }] }),
    expect: { status: 400, code: 'validation_error', fields: ['attachments.0.content_b64'] },
  },
  {
    name: 'a bad address in cc',
    body: () => ({ to: 'x@remote.test', cc: ['y@remote.test', 'not an address'], text: 'x' }),
    expect: { status: 400, code: 'validation_error', fields: ['cc.1'] },
  },
  { name: 'no body', body: () => ({ to: 'x@remote.test', subject: 'empty' }), expect: { status: 400, code: 'validation_error', fields: ['text'] } },
  {
    name: 'more than 50 recipients',
    body: () => ({
      to: Array.from({ length: 30 }, (_, i) => `many-${i}@remote.test`),
      cc: Array.from({ length: 21 }, (_, i) => `many-cc-${i}@remote.test`),
      text: 'x',
    }),
    expect: { status: 400, code: 'validation_error', fields: ['to'] },
  },
  {
    name: 'context over 16 KB',
    body: () => ({ to: 'x@remote.test', text: 'x', context: { blob: 'x'.repeat(17_000) } }),
    expect: { status: 400, code: 'validation_error', fields: ['context'] },
  },
  {
    name: 'a from outside the account domain',
    body: () => ({ from: 'someone@elsewhere.test', to: 'x@remote.test', text: 'x' }),
    expect: { status: 403, code: 'from_domain_mismatch' },
  },
  {
    name: 'a from on the account domain that is not a box',
    body: (s) => ({ from: `nobody@${s.account.domain}`, to: 'x@remote.test', text: 'x' }),
    expect: { status: 400, code: 'validation_error', fields: ['from'] },
  },
  {
    name: 'a box-restricted key sending from another box',
    key: 'restricted',
    body: () => ({ to: 'x@remote.test', text: 'x' }),
    expect: { status: 403, code: 'box_restricted_key' },
  },
  {
    name: 'a box-restricted key sending from its box (no signature there)',
    key: 'restricted',
    body: (s) => ({ from: s.news, to: 'news-reader@remote.test', text: 'news' }),
    expect: { status: 200, message: { delivered: ['news-reader@remote.test'] }, mx: { headers: { from: 'news@<domain>' } } },
  },
];

/** What a case came to, with the account's own names replaced, so two accounts' outcomes compare. */
interface Outcome {
  status: number;
  code?: string;
  fields?: string[];
  blocked?: string[];
  message?: Record<string, unknown>;
  mx?: Record<string, unknown>;
}

function normalizer(s: Sender) {
  return (v: string) => v.split(s.parent.rfcMessageId).join('<parent>').split(s.account.domain).join('<domain>').split(s.account.accountId).join('<account>');
}

const SHOWN_HEADERS = ['from', 'to', 'cc', 'bcc', 'reply-to', 'subject', 'in-reply-to', 'references', 'x-boxes-configuration-set', 'x-campaign'];

/** The accepted message as stored and as the MX got it (every SMTP transaction with its Message-ID). */
async function accepted(s: Sender, key: string, messageId: string, suppressed: number): Promise<Pick<Outcome, 'message' | 'mx'>> {
  const norm = normalizer(s);
  let m = await getMessage(t, key, messageId);
  if (m.deliveries.length) m = await waitSettled(t, key, messageId);
  const delivered = m.deliveries
    .filter((d: { status: string }) => d.status === 'delivered')
    .map((d: { recipient: string }) => d.recipient)
    .sort();
  const message = {
    status: m.status,
    thread: m.thread_id === s.parent.threadId ? 'parent' : 'own',
    delivered,
    suppressed,
    to: m.to,
    cc: m.cc,
    bcc: m.bcc,
    in_reply_to: m.in_reply_to === null ? null : norm(m.in_reply_to),
    subject: m.subject,
  };
  if (!delivered.length) return { message, mx: { seen: [] } };
  const seen = await waitFor(() => {
    const got = sink.messages.filter((x) => x.raw.includes(`Message-ID: ${m.rfc_message_id}`));
    return new Set(got.flatMap((x) => x.rcpt)).size >= delivered.length ? got : null;
  }, `${m.rfc_message_id} at the MX`);
  const parsed = await simpleParser(seen[0]!.raw);
  const headers = Object.fromEntries(
    SHOWN_HEADERS.map((name) => {
      const line = parsed.headerLines.find((l) => l.key === name)?.line;
      return [
        name,
        line === undefined
          ? null
          : norm(
              line
                .slice(line.indexOf(':') + 1)
                .replace(/\r?\n[ \t]+/g, ' ')
                .trim(),
            ),
      ];
    }),
  );
  return {
    message,
    mx: {
      seen: [...new Set(seen.flatMap((x) => x.rcpt))].sort(),
      headers,
      text: parsed.text === undefined ? null : norm(parsed.text),
      html: typeof parsed.html === 'string' ? norm(parsed.html) : null,
      attachments: parsed.attachments.map((a) => ({ filename: a.filename, contentType: a.contentType, cid: a.cid ?? null, size: a.size })),
    },
  };
}

function refused(body: any, prefix = ''): Outcome {
  const e = body.error;
  return {
    status: 0,
    code: e.code,
    ...(e.fields ? { fields: e.fields.map((f: { path: string }) => f.path.slice(prefix.length)) } : {}),
    ...(e.blocked ? { blocked: e.blocked } : {}),
  };
}

async function runSingle(c: Case): Promise<Outcome> {
  const s = worlds.single[c.sender ?? 'plain'];
  const key = c.key === 'restricted' ? s.restrictedKey : s.account.apiKey;
  const r = await send(t, key, c.body(s));
  if (r.status !== 200) return { ...refused(r.body), status: r.status };
  return { status: 200, ...(await accepted(s, key, r.body.message_id, r.body.suppressed.length)) };
}

async function runBulk(c: Case): Promise<Outcome> {
  const s = worlds.bulk[c.sender ?? 'plain'];
  const key = c.key === 'restricted' ? s.restrictedKey : s.account.apiKey;
  const r = await createJob(t, key, { messages: [c.body(s)], batch_size: 1, cool_off_seconds: 0 });
  if (r.status !== 200) {
    // A refused job names the message: its index, and its field paths under messages.<index>.
    expect(r.body.error.index, JSON.stringify(r.body.error)).toBe(0);
    expect(r.body.error.message).toMatch(/^messages\.0[.:]/);
    return { ...refused(r.body, 'messages.0.'), status: r.status };
  }
  await waitForJob(t, key, r.body.id, ['completed']);
  const item = await t.db.bulkJobItem.findFirstOrThrow({ where: { jobId: r.body.id, index: 0 } });
  return { status: 200, ...(await accepted(s, key, item.messageId, item.suppressed)) };
}

describe('the same message through POST /messages/send and through a bulk job', () => {
  it.each(cases.map((c) => [c.name, c] as const))('%s', async (_name, c) => {
    const single = await runSingle(c);
    const bulk = await runBulk(c);
    expect(single).toMatchObject(c.expect);
    expect(bulk).toEqual(single);
  });

  it('both bodies end with the box signature, then the trailer (checked once here, compared in every case above)', async () => {
    const s = worlds.single.plain;
    const r = await send(t, s.account.apiKey, { to: 'sig@remote.test', text: 'Body', html: '<p>Body</p>' });
    const { mx } = await accepted(s, s.account.apiKey, r.body.message_id, 0);
    expect(mx!.text).toBe(`Body\n\n${SIGNATURE}\n\n--\nSent by an AI agent with Boxes: ${t.config.siteUrl}`);
    expect(mx!.html).toContain('<p>Body</p><br><br>Ada Lovelace<br>Analytical Engines Ltd<p style="color:#666;font-size:12px">Sent by an AI agent with <a');
  });
});

describe('a bulk job with a message a single send would refuse', () => {
  it('is refused as a whole with the code of the single send, naming the index: nothing queued, nothing held, nothing sent', async () => {
    const s = worlds.bulk.plain;
    const before = await t.db.account.findUniqueOrThrow({ where: { id: s.account.accountId } });
    const jobs = await t.db.bulkJob.count({ where: { accountId: s.account.accountId } });
    const messages = messagesTo(6, 'whole-job');
    messages[4] = { to: ['fine@remote.test', 'cfo@blocked.example'], subject: 'leak', text: 'x' };
    const r = await createJob(t, s.account.apiKey, { messages, batch_size: 2, cool_off_seconds: 0 });
    expect(r.status, JSON.stringify(r.body)).toBe(403);
    expect(r.body.error).toMatchObject({ code: 'recipient_blocked', index: 4, blocked: ['cfo@blocked.example'] });
    expect(r.body.error.message).toMatch(/^messages\.4: Sending to cfo@blocked\.example is refused/);

    messages[4] = { to: 'x@remote.test', text: 'x', headers: { Date: 'yesterday' } };
    const reserved = await createJob(t, s.account.apiKey, { messages, batch_size: 2, cool_off_seconds: 0 });
    expect(reserved.status).toBe(400);
    expect(reserved.body.error).toMatchObject({ code: 'validation_error', index: 4, fields: [{ path: 'messages.4.headers.Date' }] });
    expect(reserved.body.error.message).toMatch(/^messages\.4\.headers\.Date: Date is reserved/);

    expect(await t.db.bulkJob.count({ where: { accountId: s.account.accountId } })).toBe(jobs);
    const after = await t.db.account.findUniqueOrThrow({ where: { id: s.account.accountId } });
    expect({ held: after.heldMicros, free: after.heldFreeMessages }).toEqual({ held: before.heldMicros, free: before.heldFreeMessages });
    expect(sink.messages.filter((m) => m.rcpt.some((x) => x.startsWith('whole-job-')))).toEqual([]);
  });

  it('the same job without that message goes out, replies threaded and the configuration set carried', async () => {
    const s = worlds.bulk.dedicated;
    const messages = [...messagesTo(3, 'mixed-job'), { to: 'parent@remote.test', text: 'following up', headers: { 'In-Reply-To': s.parent.rfcMessageId } }];
    const r = await createJob(t, s.account.apiKey, { messages, batch_size: 2, cool_off_seconds: 0 });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    await waitForJob(t, s.account.apiKey, r.body.id, ['completed']);
    const items = await t.db.bulkJobItem.findMany({ where: { jobId: r.body.id }, orderBy: { index: 'asc' } });
    const stored = await t.db.message.findMany({ where: { id: { in: items.map((i) => i.messageId) } } });
    const threadOf = (id: string) => stored.find((m) => m.id === id)!.threadId;
    expect(threadOf(items[3]!.messageId)).toBe(s.parent.threadId);
    // Every other message starts its own thread.
    expect(new Set(items.slice(0, 3).map((i) => threadOf(i.messageId))).size).toBe(3);
    expect(items.slice(0, 3).map((i) => threadOf(i.messageId))).not.toContain(s.parent.threadId);
    for (const i of items) {
      const rfc = stored.find((m) => m.id === i.messageId)!.rfcMessageId;
      expect(rfc).toBe(i.rfcMessageId);
      const seen = await waitFor(() => sink.messages.find((m) => m.raw.includes(`Message-ID: ${rfc}`)) ?? null, `${rfc} at the MX`);
      expect(seen.raw.toString()).toMatch(new RegExp(`^X-Boxes-Configuration-Set: dedicated-${s.account.accountId}\\r?$`, 'm'));
    }
  });
});
