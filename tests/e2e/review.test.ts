// Owner review of sends over real HTTP: the policy of a box and of a key (none, new_recipients, all; the stricter
// applies), a held send answered 202 with a review and stored as nothing else, the owner's email and page
// (approve, deny; credit short at approval), expiry by the worker's sweep, withdrawal, replies and scheduled
// sends, bulk refusals, idempotency; an approved message arrives at a local SMTP sink exactly as written, a
// denied, expired or withdrawn one never leaves. Then the same through the SDK and MCP.
import { simpleParser } from 'mailparser';
import nodemailer from 'nodemailer';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { staticResolver } from '@boxes/mail';
import { createBoxesClient, isHeldForReview, sentMessage, waitForReview, type Review } from '@boxes/sdk';
import { mintKey, rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { MailSink, unique, waitFor } from './mail-send-helpers';
import { linkIn, OWNER_DOMAIN, ownerSignIn, startOwnerInbox, type OwnerInbox, type OwnerSession } from './owner-helpers';

const HOUR = 3_600_000;
let t: TestServer;
let sink: MailSink;
let inbox: OwnerInbox;

beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  inbox = await startOwnerInbox();
  t = await startTestServer({
    worker: true,
    mail: true,
    env: { WORKER_SWEEP_INTERVAL_MS: '200', MAIL_AUTH_DELAY_MS: '0' },
    // The owner's mail goes to their inbox; every other outside domain to the sink.
    resolver: staticResolver({ [OWNER_DOMAIN]: { host: '127.0.0.1', port: inbox.port } }, sink.resolver()),
  });
});
afterAll(async () => {
  await t?.stop();
  await sink?.close();
  await inbox?.close();
});

const owner = () => `owner-${unique()}@${OWNER_DOMAIN}`;

async function account(): Promise<TestAccount & { owner: string }> {
  const email = owner();
  return { ...(await signupAccount(t, email)), owner: email };
}

async function setBoxReview(a: TestAccount, review: string, boxId?: string): Promise<void> {
  const id = boxId ?? (await rest(t, 'GET', '/boxes', { key: a.apiKey })).body.boxes[0].id;
  const r = await rest(t, 'PATCH', `/boxes/${id}`, { key: a.apiKey, body: { review } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  expect(r.body.review).toBe(review);
}

/** The owner's review mail for this review (its subject names the sender), and a session from its link. */
async function ownerOpens(a: { owner: string; primaryAddress: string }, reviewId: string): Promise<OwnerSession> {
  const mail = await inbox.waitFor(a.owner, /^Approve a message from /);
  const s = await ownerSignIn(t, linkIn(mail));
  expect(s.landing).toBe(`/owner/reviews/${reviewId}`);
  return s;
}

async function eventTypes(a: TestAccount, prefix: string): Promise<string[]> {
  const r = await rest(t, 'GET', `/events?limit=500`, { key: a.apiKey });
  return (r.body.events as { type: string }[]).map((e) => e.type).filter((x) => x.startsWith(prefix));
}

const formToken = (html: string): string => /name="form_token" value="([^"]+)"/.exec(html)?.[1] ?? '';

/** Posts an owner form with a token read earlier (a page left open while things changed). */
async function postForm(s: OwnerSession, path: string, token: string, fields: Record<string, string>) {
  const r = await fetch(`${t.url}${path}`, {
    method: 'POST',
    headers: { cookie: s.cookie, 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ form_token: token, ...fields }).toString(),
  });
  return { status: r.status, html: await r.text() };
}

/** Mail that reached the sink for this address (it must never, for a send that was not approved). */
const arrived = (address: string) => sink.to(address);

/** A message to `marker` sent after the fact and seen at the sink: the worker had every chance to send the rest. */
async function drain(a: TestAccount): Promise<void> {
  const marker = `marker-${unique()}@remote.test`;
  await setBoxReviewIfNeeded(a);
  const r = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: marker, text: 'marker' } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  await waitFor(() => arrived(marker).length > 0, 'the marker message');
}
async function setBoxReviewIfNeeded(a: TestAccount) {
  const boxes = (await rest(t, 'GET', '/boxes', { key: a.apiKey })).body.boxes as { id: string; review: string; is_primary: boolean }[];
  const primary = boxes.find((b) => b.is_primary)!;
  if (primary.review !== 'none') await setBoxReview(a, 'none', primary.id);
}

describe('policy none (the default)', () => {
  it('boxes and keys show review none, and a send goes at once (200)', async () => {
    const a = await account();
    const boxes = await rest(t, 'GET', '/boxes', { key: a.apiKey });
    expect(boxes.body.boxes[0].review).toBe('none');
    const keys = await rest(t, 'GET', '/account/keys', { key: a.apiKey });
    expect(keys.body.keys[0].review).toBe('none');
    const to = `none-${unique()}@remote.test`;
    const r = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to, subject: 'no review', text: 'plain' } });
    expect(r.status).toBe(200);
    expect(r.body.status).toBe('queued');
    await waitFor(() => arrived(to).length === 1, 'the message at the sink');
    expect((await rest(t, 'GET', '/reviews', { key: a.apiKey })).body.reviews).toEqual([]);
  });

  it('review is validated on PATCH /boxes/{id}, POST /boxes and POST /account/keys', async () => {
    const a = await account();
    const id = (await rest(t, 'GET', '/boxes', { key: a.apiKey })).body.boxes[0].id;
    expect((await rest(t, 'PATCH', `/boxes/${id}`, { key: a.apiKey, body: { review: 'sometimes' } })).status).toBe(400);
    const box = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'careful', review: 'all' } });
    expect(box.body.review).toBe('all');
    const key = await mintKey(t, a.apiKey, ['send'], { review: 'new_recipients' });
    const listed = (await rest(t, 'GET', '/account/keys', { key: a.apiKey })).body.keys.find((k: { id: string }) => k.id === key.id);
    expect(listed.review).toBe('new_recipients');
    expect((await rest(t, 'POST', '/account/keys', { key: a.apiKey, body: { label: 'x', scopes: ['send'], review: 'maybe' } })).status).toBe(400);
  });
});

describe('new_recipients', () => {
  it('holds a send to a new address (202), the owner approves it on the page, and it arrives exactly as written', async () => {
    const a = await account();
    await setBoxReview(a, 'new_recipients');
    const to = `new-${unique()}@remote.test`;
    const cc = `cc-${unique()}@remote.test`;
    const html = '<p>Hello <b>there</b><script>alert(1)</script><img src="https://tracker.example/x.png"></p>';
    const body = {
      to,
      cc: [cc],
      subject: 'First contact',
      text: 'Hello, this is the agent.',
      html,
      attachments: [{ filename: 'quote.txt', content_type: 'text/plain', content_b64: Buffer.from('the quote').toString('base64') }],
      context: { deal: 7 },
    };
    const before = (await rest(t, 'GET', '/account/credit/balance', { key: a.apiKey })).body;
    const r = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body });
    expect(r.status, JSON.stringify(r.body)).toBe(202);
    expect(r.body).toMatchObject({ status: 'pending', reason: 'new_recipients', from: a.primaryAddress, to: [to], cc: [cc], subject: 'First contact' });
    expect(r.body.new_recipients.sort()).toEqual([to, cc].sort());
    expect(r.body.id).toMatch(/^rev_[0-9a-z]{20}$/);
    expect(new Date(r.body.expires_at).getTime() - Date.now()).toBeGreaterThan(71 * HOUR);
    expect(new Date(r.body.expires_at).getTime() - Date.now()).toBeLessThanOrEqual(72 * HOUR);
    const id: string = r.body.id;

    // Nothing stored as a message, nothing reserved, nothing sent.
    expect((await rest(t, 'GET', '/messages', { key: a.apiKey })).body.messages).toEqual([]);
    expect((await rest(t, 'GET', '/account/credit/balance', { key: a.apiKey })).body).toEqual(before);
    const stored = await t.db.sendReview.findUniqueOrThrow({ where: { id } });
    expect(stored.requestEnc).not.toContain('Hello');
    expect(stored.requestEnc).not.toContain(Buffer.from('the quote').toString('base64'));
    expect((await rest(t, 'GET', '/reviews?status=pending', { key: a.apiKey })).body.reviews.map((x: Review) => x.id)).toEqual([id]);
    expect(await eventTypes(a, 'review.')).toEqual(['review.requested']);

    // The owner's mail names the recipients; the page shows the message as it will go, the html as text.
    const mail = await inbox.waitFor(a.owner, /^Approve a message from /);
    expect(mail.text).toContain(to);
    expect(mail.text).toContain('First contact');
    const s = await ownerOpens(a, id);
    const page = await s.get(`/owner/reviews/${id}`);
    expect(page.status).toBe(200);
    expect(page.html).toContain('Hello, this is the agent.');
    expect(page.html).toContain('quote.txt');
    expect(page.html).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
    expect(page.html).not.toContain('<script>');
    expect(page.html).not.toContain('<img');
    expect(page.html).toContain(`${to} <strong>(new)</strong>`);
    expect(arrived(to)).toEqual([]);

    const approved = await s.post(`/owner/reviews/${id}`, { action: 'approve' });
    expect(approved.status).toBe(200);
    expect(approved.html).toMatch(/Approved\. The message was sent \(msg_/);
    const got = await rest(t, 'GET', `/reviews/${id}`, { key: a.apiKey });
    expect(got.body).toMatchObject({ status: 'approved', last_error: null });
    expect(got.body.message_id).toMatch(/^msg_/);
    expect(await eventTypes(a, 'review.')).toEqual(['review.requested', 'review.approved']);

    const delivered = await waitFor(() => (arrived(to).length ? arrived(to)[0] : null), 'the approved message at the sink');
    // One delivery per recipient: the cc got its own copy.
    expect(delivered.rcpt).toEqual([to]);
    await waitFor(() => arrived(cc).length === 1, 'the copy to cc');
    const parsed = await simpleParser(delivered.raw);
    expect(parsed.subject).toBe('First contact');
    expect(parsed.text).toContain('Hello, this is the agent.');
    expect(parsed.html).toContain('<b>there</b>');
    expect(parsed.attachments.map((x) => [x.filename, x.content.toString()])).toEqual([['quote.txt', 'the quote']]);
    expect(parsed.messageId).toBe(`<${got.body.message_id}@${a.domain}>`);
    const message = await rest(t, 'GET', `/messages/${got.body.message_id}`, { key: a.apiKey });
    expect(message.body.context).toEqual({ deal: 7 });

    // The box has written to them now: the next send goes at once; the approval link is spent.
    const again = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to, text: 'second' } });
    expect(again.status).toBe(200);
    expect((await fetch(linkIn(mail), { method: 'POST', redirect: 'manual' })).status).toBe(410);
    // Deciding twice is refused.
    const twice = await postForm(s, `/owner/reviews/${id}`, formToken((await s.get('/owner')).html), { action: 'deny' });
    expect(twice.status).toBe(409);
  });

  it('a reply to a correspondent (and a send to someone who wrote first) is not held; a send to someone new is', async () => {
    const a = await account();
    const b = await account();
    await setBoxReview(a, 'new_recipients');
    // b writes to a first (local delivery): a has heard from b.
    const first = await rest(t, 'POST', '/messages/send', { key: b.apiKey, body: { to: a.primaryAddress, subject: 'Question', text: 'Hi a' } });
    expect(first.status).toBe(200);
    const received = await waitFor(async () => {
      const list = await rest(t, 'GET', '/messages', { key: a.apiKey });
      return list.body.messages.find((m: { direction: string }) => m.direction === 'received');
    }, 'the message at a');
    const reply = await rest(t, 'POST', `/messages/${received.id}/reply`, { key: a.apiKey, body: { text: 'Hi b' } });
    expect(reply.status, JSON.stringify(reply.body)).toBe(200);
    expect(reply.body.status).toBe('queued');
    const direct = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: b.primaryAddress, text: 'again' } });
    expect(direct.status).toBe(200);
    // Reply-all to b and someone new: held, and only the new address is named.
    const stranger = `stranger-${unique()}@remote.test`;
    const mixed = await rest(t, 'POST', `/messages/${received.id}/reply`, { key: a.apiKey, body: { text: 'adding someone', cc: stranger } });
    expect(mixed.status).toBe(202);
    expect(mixed.body.new_recipients).toEqual([stranger]);
    expect(mixed.body.subject).toBe('Re: Question');
  });

  it('a key policy holds sends from a box without one; the stricter policy wins', async () => {
    const a = await account();
    const strict = await mintKey(t, a.apiKey, ['send'], { review: 'all' });
    const known = `known-${unique()}@remote.test`;
    expect((await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: known, text: 'hi' } })).status).toBe(200);
    const held = await rest(t, 'POST', '/messages/send', { key: strict.api_key, body: { to: known, text: 'hi again' } });
    expect(held.status).toBe(202);
    expect(held.body).toMatchObject({ reason: 'all', new_recipients: [] });
    const lenient = await mintKey(t, a.apiKey, ['send'], { review: 'none' });
    await setBoxReview(a, 'all');
    expect((await rest(t, 'POST', '/messages/send', { key: lenient.api_key, body: { to: known, text: 'box says all' } })).status).toBe(202);
  });

  it('a draft sent through a box that holds every send answers 202 with the review, and the draft is gone', async () => {
    const a = await account();
    await setBoxReview(a, 'all');
    const to = `draft-${unique()}@remote.test`;
    const draft = await rest(t, 'POST', '/drafts', { key: a.apiKey, body: { to, subject: 'Drafted', text: 'held draft' } });
    expect(draft.status, JSON.stringify(draft.body)).toBe(200);
    const held = await rest(t, 'POST', `/drafts/${draft.body.id}/send`, { key: a.apiKey });
    expect(held.status, JSON.stringify(held.body)).toBe(202);
    expect(held.body).toMatchObject({ status: 'pending', reason: 'all', subject: 'Drafted' });
    expect((await rest(t, 'GET', `/drafts/${draft.body.id}`, { key: a.apiKey })).status).toBe(404);
    // A send that is not held stays 200: the status follows the answer, not the route.
    await setBoxReview(a, 'none');
    const plain = await rest(t, 'POST', '/drafts', { key: a.apiKey, body: { to, subject: 'Not held', text: 'plain draft' } });
    expect((await rest(t, 'POST', `/drafts/${plain.body.id}/send`, { key: a.apiKey })).status).toBe(200);
  });
});

describe('deny, expire, withdraw: nothing leaves', () => {
  it('denied: the owner denies on the page, nothing is sent or charged', async () => {
    const a = await account();
    await setBoxReview(a, 'all');
    const to = `denied-${unique()}@remote.test`;
    const r = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to, subject: 'Please no', text: 'deny me' } });
    expect(r.status).toBe(202);
    const s = await ownerOpens(a, r.body.id);
    const denied = await s.post(`/owner/reviews/${r.body.id}`, { action: 'deny' });
    expect(denied.html).toContain('You denied this message. Nothing was sent or charged.');
    expect((await rest(t, 'GET', `/reviews/${r.body.id}`, { key: a.apiKey })).body).toMatchObject({ status: 'denied', message_id: null });
    expect(await eventTypes(a, 'review.')).toEqual(['review.requested', 'review.denied']);
    await drain(a);
    expect(arrived(to)).toEqual([]);
    expect(await t.db.message.count({ where: { accountId: a.accountId, toAddresses: { has: to } } })).toBe(0);
    // Withdrawing a decided review is a conflict.
    expect((await rest(t, 'POST', `/reviews/${r.body.id}/withdraw`, { key: a.apiKey })).status).toBe(409);
  });

  it('expired: the worker sweep expires it once REVIEW_TTL_HOURS passed; the owner can no longer approve', async () => {
    const a = await account();
    await setBoxReview(a, 'all');
    const to = `expired-${unique()}@remote.test`;
    const r = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to, text: 'too late' } });
    expect(r.status).toBe(202);
    const s = await ownerOpens(a, r.body.id);
    const token = formToken((await s.get(`/owner/reviews/${r.body.id}`)).html);
    // Its 72 hours passed (the row's deadline moved back; the owner's session is an hour long, so the clock stays).
    await t.db.sendReview.update({ where: { id: r.body.id }, data: { expiresAt: new Date(Date.now() - 1000) } });
    // The sweep (every 200 ms here), not a read, records it.
    await waitFor(async () => (await t.db.sendReview.findUniqueOrThrow({ where: { id: r.body.id } })).status === 'expired', 'the sweep');
    expect(await eventTypes(a, 'review.')).toEqual(['review.requested', 'review.expired']);
    const page = await s.get(`/owner/reviews/${r.body.id}`);
    expect(page.html).toContain('Expired: not sent');
    expect(page.html).not.toContain('value="approve"');
    // The page offers nothing now; a form left open from before is refused.
    expect((await postForm(s, `/owner/reviews/${r.body.id}`, token, { action: 'approve' })).status).toBe(409);
    expect((await rest(t, 'GET', `/reviews?status=expired`, { key: a.apiKey })).body.reviews.map((x: Review) => x.id)).toEqual([r.body.id]);
    await drain(a);
    expect(arrived(to)).toEqual([]);
  });

  it('withdrawn: the agent takes it back; the owner page says so and offers nothing', async () => {
    const a = await account();
    await setBoxReview(a, 'all');
    const to = `withdrawn-${unique()}@remote.test`;
    const r = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to, text: 'never mind' } });
    const w = await rest(t, 'POST', `/reviews/${r.body.id}/withdraw`, { key: a.apiKey });
    expect(w.status).toBe(200);
    expect(w.body).toMatchObject({ id: r.body.id, status: 'withdrawn' });
    expect((await rest(t, 'POST', `/reviews/${r.body.id}/withdraw`, { key: a.apiKey })).status).toBe(409);
    expect(await eventTypes(a, 'review.')).toEqual(['review.requested', 'review.withdrawn']);
    const s = await ownerOpens(a, r.body.id);
    const page = await s.get(`/owner/reviews/${r.body.id}`);
    expect(page.html).toContain('Withdrawn by the agent: not sent');
    expect(page.html).not.toContain('value="approve"');
    const token = formToken((await s.get('/owner')).html);
    expect((await postForm(s, `/owner/reviews/${r.body.id}`, token, { action: 'approve' })).status).toBe(409);
    await drain(a);
    expect(arrived(to)).toEqual([]);
    // A receive-only key cannot list reviews; another account cannot see it.
    const receiveOnly = await mintKey(t, a.apiKey, ['receive']);
    expect((await rest(t, 'GET', '/reviews', { key: receiveOnly.api_key })).status).toBe(403);
    const other = await account();
    expect((await rest(t, 'GET', `/reviews/${r.body.id}`, { key: other.apiKey })).status).toBe(404);
  });
});

describe('credit, scheduling, idempotency, bulk', () => {
  it('credit short at approval: nothing is sent, the review stays pending with last_error; approved again once topped up', async () => {
    const a = await account();
    await setBoxReview(a, 'all');
    const to = `broke-${unique()}@remote.test`;
    const r = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to, subject: 'Costly', text: 'needs credit' } });
    expect(r.status).toBe(202);
    const credit = await t.db.account.findUniqueOrThrow({ where: { id: a.accountId }, select: { freeMessagesLeft: true, balanceMicros: true } });
    await t.db.account.update({ where: { id: a.accountId }, data: { freeMessagesLeft: 0, balanceMicros: 0n } });
    const s = await ownerOpens(a, r.body.id);
    const refused = await s.post(`/owner/reviews/${r.body.id}`, { action: 'approve' });
    expect(refused.status).toBe(402);
    expect(refused.html).toContain('Not sent: the account&#39;s credit is too low for this message');
    const pending = await rest(t, 'GET', `/reviews/${r.body.id}`, { key: a.apiKey });
    expect(pending.body).toMatchObject({ status: 'pending', message_id: null, last_error: { code: 'payment_required' } });
    await t.db.account.update({ where: { id: a.accountId }, data: credit });
    const ok = await s.post(`/owner/reviews/${r.body.id}`, { action: 'approve' });
    expect(ok.status).toBe(200);
    expect((await rest(t, 'GET', `/reviews/${r.body.id}`, { key: a.apiKey })).body).toMatchObject({ status: 'approved', last_error: null });
    await waitFor(() => arrived(to).length === 1, 'the message at the sink');
  });

  it('a scheduled send is held too; approved before its time it stays scheduled', async () => {
    const a = await account();
    await setBoxReview(a, 'all');
    const sendAt = new Date(Date.now() + 2 * HOUR).toISOString();
    const r = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: `later-${unique()}@remote.test`, text: 'later', send_at: sendAt } });
    expect(r.status).toBe(202);
    expect(r.body.send_at).toBe(sendAt);
    const s = await ownerOpens(a, r.body.id);
    await s.post(`/owner/reviews/${r.body.id}`, { action: 'approve' });
    const got = await rest(t, 'GET', `/reviews/${r.body.id}`, { key: a.apiKey });
    const m = await rest(t, 'GET', `/messages/${got.body.message_id}`, { key: a.apiKey });
    expect(m.body.status).toBe('scheduled');
    expect((await rest(t, 'POST', `/messages/${got.body.message_id}/cancel`, { key: a.apiKey })).status).toBe(200);
  });

  it('the same idempotency_key answers the same review; a different message under it is refused', async () => {
    const a = await account();
    await setBoxReview(a, 'all');
    const body = { to: `idem-${unique()}@remote.test`, text: 'once', idempotency_key: `k-${unique()}` };
    const one = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body });
    const two = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body });
    expect(two.status).toBe(202);
    expect(two.body).toMatchObject({ id: one.body.id, idempotent_replay: true });
    const other = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { ...body, text: 'different' } });
    expect(other.status).toBe(409);
    expect(other.body.error.code).toBe('idempotency_key_reused');
    expect((await rest(t, 'GET', '/reviews', { key: a.apiKey })).body.reviews).toHaveLength(1);
  });

  it('bulk: refused under all, and under new_recipients when a message names someone new; allowed to known recipients', async () => {
    const a = await account();
    const known = `bulk-known-${unique()}@remote.test`;
    expect((await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: known, text: 'hi' } })).status).toBe(200);
    await setBoxReview(a, 'all');
    const all = await rest(t, 'POST', '/messages/send/bulk', { key: a.apiKey, body: { messages: [{ to: known, text: 'news' }] } });
    expect(all.status).toBe(403);
    expect(all.body.error).toMatchObject({ code: 'review_required', review: 'all' });
    await setBoxReview(a, 'new_recipients');
    const fresh = `bulk-new-${unique()}@remote.test`;
    const mixed = await rest(t, 'POST', '/messages/send/bulk', {
      key: a.apiKey,
      body: {
        messages: [
          { to: known, text: 'news' },
          { to: fresh, text: 'news' },
        ],
      },
    });
    expect(mixed.status).toBe(403);
    expect(mixed.body.error).toMatchObject({ code: 'review_required', review: 'new_recipients', new_recipients: [fresh], new_recipients_count: 1 });
    const ok = await rest(t, 'POST', '/messages/send/bulk', { key: a.apiKey, body: { messages: [{ to: known, text: 'news' }] } });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
  });

  it('lowering a box policy is recorded and mailed to the owner', async () => {
    const a = await account();
    await setBoxReview(a, 'all');
    await setBoxReview(a, 'none');
    const mail = await inbox.waitFor(a.owner, /^Owner review of .* was lowered to none/);
    expect(mail.text).toContain('from all to none');
    const e = await rest(t, 'GET', '/events?type=box.review_updated', { key: a.apiKey });
    expect(e.body.events.map((x: { data: { review: string; previous: string } }) => [x.data.previous, x.data.review])).toEqual([
      ['none', 'all'],
      ['all', 'none'],
    ]);
  });
});

describe('mail clients', () => {
  it('SMTP submission from a box under review: accepted as held (250 names the review), sent once approved', async () => {
    const a = await account();
    await setBoxReview(a, 'new_recipients');
    const password = (await rest(t, 'POST', '/account/app-passwords', { key: a.apiKey, body: { label: 'laptop' } })).body.password as string;
    const to = `smtp-${unique()}@remote.test`;
    const transport = nodemailer.createTransport({
      host: '127.0.0.1',
      port: t.submissionPort!,
      secure: true,
      tls: { rejectUnauthorized: false },
      auth: { user: a.primaryAddress, pass: password },
    });
    try {
      const info = await transport.sendMail({ from: a.primaryAddress, to, subject: 'From Thunderbird', text: 'typed by a person' });
      expect(info.response).toMatch(/^250 2\.0\.0 Ok: held for the owner's review as (rev_[0-9a-z]{20}), not sent until approved$/);
      const id = /(rev_[0-9a-z]{20})/.exec(info.response)![1]!;
      expect((await rest(t, 'GET', `/reviews/${id}`, { key: a.apiKey })).body).toMatchObject({ status: 'pending', to: [to], subject: 'From Thunderbird' });
      const s = await ownerOpens(a, id);
      expect((await s.post(`/owner/reviews/${id}`, { action: 'approve' })).status).toBe(200);
      const got = await waitFor(() => arrived(to)[0], 'the approved submission at the sink');
      expect((await simpleParser(got.raw)).subject).toBe('From Thunderbird');
    } finally {
      transport.close();
    }
  });
});

describe('the SDK and MCP', () => {
  it('SDK: a held send is a typed Review; reviews.list, get, withdraw and waitForReview', async () => {
    const a = await account();
    await setBoxReview(a, 'new_recipients');
    const client = createBoxesClient({ baseUrl: t.url, apiKey: a.apiKey });
    const out = await client.messages.send.mutate({ to: `sdk-${unique()}@remote.test`, subject: 'via sdk', text: 'typed' });
    expect(isHeldForReview(out)).toBe(true);
    if (!isHeldForReview(out)) throw new Error('not held');
    expectTypeOf(out.expires_at).toEqualTypeOf<string>();
    expectTypeOf(out.status).toEqualTypeOf<'pending' | 'approved' | 'denied' | 'expired' | 'withdrawn'>();
    expect(() => sentMessage(out)).toThrow(/held for the owner's review/);
    const listed = await client.reviews.list.query({ status: 'pending' });
    expect(listed.reviews.map((r) => r.id)).toEqual([out.id]);
    expect((await client.reviews.get.query({ id: out.id })).status).toBe('pending');
    const withdrawn = await client.reviews.withdraw.mutate({ id: out.id });
    expect(withdrawn.status).toBe('withdrawn');
    expect((await waitForReview(client, out.id, { timeoutMs: 1000 })).status).toBe('withdrawn');
    await expect(client.reviews.withdraw.mutate({ id: out.id })).rejects.toMatchObject({ code: 'conflict', status: 409 });
    const b = await account();
    const bClient = createBoxesClient({ baseUrl: t.url, apiKey: b.apiKey });
    const sent = sentMessage(await bClient.messages.send.mutate({ to: `sdk-b-${unique()}@remote.test`, text: 'no review' }));
    expect(sent.status).toBe('queued');
  });

  it('MCP: messages_send returns the review, and the reviews_* tools list, read and withdraw it', async () => {
    const a = await account();
    await setBoxReview(a, 'all');
    const client = new Client({ name: 'boxes-review-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${a.apiKey}` } } }));
    try {
      const tools = (await client.listTools()).tools.map((x) => x.name);
      expect(tools).toEqual(expect.arrayContaining(['reviews_list', 'reviews_get', 'reviews_withdraw', 'boxes_update']));
      const sent = await client.callTool({ name: 'messages_send', arguments: { to: `mcp-${unique()}@remote.test`, subject: 'via mcp', text: 'hello' } });
      expect(sent.isError).toBeFalsy();
      const review = sent.structuredContent as { id: string; status: string };
      expect(review.status).toBe('pending');
      expect(review.id).toMatch(/^rev_/);
      const listed = await client.callTool({ name: 'reviews_list', arguments: { status: 'pending' } });
      expect((listed.structuredContent as { reviews: { id: string }[] }).reviews.map((r) => r.id)).toEqual([review.id]);
      const got = await client.callTool({ name: 'reviews_get', arguments: { id: review.id } });
      expect((got.structuredContent as { status: string }).status).toBe('pending');
      const w = await client.callTool({ name: 'reviews_withdraw', arguments: { id: review.id } });
      expect((w.structuredContent as { status: string }).status).toBe('withdrawn');
    } finally {
      await client.close();
    }
  });
});
