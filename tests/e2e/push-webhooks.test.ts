// Webhook push end to end: a real https
// receiver gets signed events (signup.completed with the api_key, mail.received through the MX), verified with
// the stripe and standardwebhooks libraries and by hand; retries with the attempt log; a receiver that is down
// gets everything in order when it comes back; secret rotation signs under both secrets; redirects are not
// followed.
import { createHmac } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appendEvent, EVENTS_CHANNEL } from '@boxes/core';
import { poolOf } from '@boxes/db';
import { Webhook } from 'standardwebhooks';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { verifyWebhook, WebhookVerificationError } from '@boxes/sdk';
import {
  allEvents,
  boxesSignatureMatches,
  deliveredEvents,
  deliveries,
  parseBoxesSignature,
  receiverCertificate,
  sendMailToMx,
  setCallback,
  signingSecret,
  sleep,
  startReceiver,
  verifyStandard,
  verifyStripe,
  waitFor,
  type Receiver,
} from './push-helpers';

let t: TestServer;
let receiver: Receiver;
/** A second receiver that goes down and comes back (test 3). */
let flappy: Receiver;
let pems: Awaited<ReturnType<typeof receiverCertificate>>;
/** Accounts signed up in parallel while the tests start (a signup generates a DKIM key). */
let pool: Promise<TestAccount>[] = [];
const take = () => pool.shift()!;

beforeAll(async () => {
  pems = await receiverCertificate();
  receiver = await startReceiver(pems);
  flappy = await startReceiver(pems);
  t = await startTestServer({
    worker: true,
    mail: true,
    push: true,
    env: { WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_CA_FILE: pems.caFile },
  });
  pool = Array.from({ length: 4 }, () => signupAccount(t));
  for (const p of pool) p.catch(() => undefined);
});
afterAll(async () => {
  await t?.stop();
  await receiver?.close();
  await flappy?.close();
});

describe('signed deliveries', () => {
  it('signup.completed (with the api_key, to the signup callback only) and mail.received verify with stripe, standardwebhooks and by hand; an old t is refused', async () => {
    const url = receiver.url('/signup');
    const intent = await rest(t, 'POST', '/signup/agentic', {
      body: { human_email: 'owner-wh@example.com', domain_intent: { mode: 'subdomain', slug_style: 'word_pair' }, agent_callback_webhook: url },
    });
    expect(intent.status, JSON.stringify(intent.body)).toBe(200);
    const done = await rest(t, 'POST', '/signup/agentic/confirm', { body: { intent_id: intent.body.intent_id } });
    expect(done.status, JSON.stringify(done.body)).toBe(200);
    const key: string = done.body.api_key;

    const signup = await waitFor('signup.completed at the callback', () => receiver.at('/signup').find((r) => r.event.type === 'signup.completed'));
    expect(signup.event.account_id).toBe(done.body.account_id);
    expect(signup.event.api_key).toBe(key);
    expect(signup.headers['content-type']).toMatch(/^application\/json/);

    // GET /account/webhook: the signing secret and the scheme.
    const cfg = await rest(t, 'GET', '/account/webhook', { key });
    expect(cfg.status).toBe(200);
    expect(cfg.body.agent_callback_webhook).toBe(url);
    expect(cfg.body.signing_secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(cfg.body.previous_secret_valid_until).toBeNull();
    expect(cfg.body.scheme).toMatchObject({ header: 'X-Boxes-Signature', tolerance_seconds: 300 });
    const secret: string = cfg.body.signing_secret;

    expect(verifyStripe(signup, secret).id).toBe(signup.event.id);
    expect(verifyStandard(signup, secret).id).toBe(signup.event.id);
    expect(boxesSignatureMatches(signup, secret)).toBe(true);
    expect(signup.headers['webhook-id']).toBe(signup.event.id);

    // The key reaches the signup callback only: the event as GET /events serves it has no key.
    const polled = (await allEvents(t, key)).find((e) => e.type === 'signup.completed')!;
    expect(polled.id).toBe(signup.event.id);
    expect(JSON.stringify(polled)).not.toContain(key);

    // mail.received: a message through the MX.
    const subject = `webhook mail ${Date.now()}`;
    await sendMailToMx(t.smtpPort!, done.body.primary_address, subject);
    const mail = await waitFor('mail.received at the callback', () =>
      receiver.at('/signup').find((r) => r.event.type === 'mail.received' && JSON.stringify(r.event.data).includes(subject)),
    );
    expect(verifyStripe(mail, secret).type).toBe('mail.received');
    expect((verifyStandard(mail, secret) as { type: string }).type).toBe('mail.received');
    expect(boxesSignatureMatches(mail, secret)).toBe(true);
    // The SDK's verifier accepts what the server signed, and returns the event.
    expect(verifyWebhook<{ type: string }>(mail.body, mail.headers['x-boxes-signature'] as string, secret).type).toBe('mail.received');
    expect(mail.body).not.toContain(key);
    for (const r of receiver.at('/signup').filter((x) => x.event.type !== 'signup.completed')) expect(r.body).not.toContain(key);

    // A tampered body or a wrong secret fails every verifier.
    const tampered = { ...mail, body: mail.body.replace(subject, `${subject}!`) };
    expect(() => verifyStripe(tampered, secret)).toThrow();
    expect(() => verifyStandard(tampered, secret)).toThrow();
    expect(boxesSignatureMatches(tampered, secret)).toBe(false);
    expect(() => verifyWebhook(tampered.body, tampered.headers['x-boxes-signature'] as string, secret)).toThrow(WebhookVerificationError);
    expect(() => verifyWebhook(mail.body, mail.headers['x-boxes-signature'] as string, secret, { now: Date.now() + 10 * 60_000 })).toThrow(/too old/);
    expect(() => verifyWebhook(mail.body, undefined, secret)).toThrow(/missing/);
    expect(() => verifyStripe(mail, `whsec_${Buffer.alloc(32, 7).toString('base64')}`)).toThrow();

    // Replays: the same delivery received 301 s after its t is refused (299 s is still fine)...
    const { t: ts } = parseBoxesSignature(mail.headers['x-boxes-signature'] as string);
    expect(Math.abs(ts - Date.now() / 1000)).toBeLessThan(300);
    expect(verifyStripe(mail, secret, (ts + 299) * 1000).id).toBe(mail.event.id);
    expect(() => verifyStripe(mail, secret, (ts + 301) * 1000)).toThrow(/tolerance/i);
    // ...and so is a correctly signed header whose t is 301 s old.
    const oldT = Math.floor(Date.now() / 1000) - 301;
    const oldHeader = `t=${oldT},v1=${createHmac('sha256', secret).update(`${oldT}.${mail.body}`).digest('hex')}`;
    expect(boxesSignatureMatches({ body: mail.body, headers: { 'x-boxes-signature': oldHeader } }, secret)).toBe(true);
    expect(() => verifyStripe({ body: mail.body, headers: { 'x-boxes-signature': oldHeader } }, secret)).toThrow(/tolerance/i);
    const oldStandard = new Webhook(secret).sign(mail.event.id, new Date(oldT * 1000), mail.body);
    expect(() =>
      verifyStandard(
        { body: mail.body, headers: { 'webhook-id': mail.event.id, 'webhook-timestamp': String(oldT), 'webhook-signature': oldStandard } },
        secret,
      ),
    ).toThrow(/too old/i);

    // A redelivery of signup.completed (outside the stream) no longer carries the key.
    const first = (await deliveries(t, key)).find((d) => d.event_type === 'signup.completed' && d.status === 'delivered');
    expect(first).toBeTruthy();
    const again = await rest(t, 'POST', `/account/webhook/deliveries/${first.id}/redeliver`, { key });
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    expect(again.body).toMatchObject({ status: 'delivered', redelivery: true, event_id: signup.event.id });
    const resent = receiver.at('/signup').filter((r) => r.event.id === signup.event.id);
    expect(resent).toHaveLength(2);
    expect(resent[1]!.event.api_key).toBeUndefined();
    expect(resent[1]!.body).not.toContain(key);
    expect(verifyStripe(resent[1]!, secret).id).toBe(signup.event.id);
  });
});

describe('retries and ordering', () => {
  it('500, 500, then 200: the event is accepted once, and the attempt log shows 500, 500, 200 with latency and next_retry_at', async () => {
    const a = await take();
    receiver.behave('/flaky', (n) => (n < 2 ? 500 : 200));
    await setCallback(t, a.apiKey, receiver.url('/flaky'));
    const box = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'after-flaky' } });
    expect(box.status).toBe(200);

    const got = await waitFor('box.created accepted', () => deliveredEvents(receiver.at('/flaky')).find((e) => e.type === 'box.created'));
    expect(got.data.box.local_part).toBe('after-flaky');
    const reqs = receiver.at('/flaky');
    const first = reqs[0]!.event;
    expect(first.type).toBe('account.callback_webhook_updated');
    expect(reqs.filter((r) => r.event.id === first.id).map((r) => r.answered)).toEqual([500, 500, 200]);
    expect(reqs.filter((r) => r.event.id === first.id).every((r) => r.headers['webhook-id'] === first.id)).toBe(true);
    // Each event id is accepted (2xx) exactly once.
    const accepted = new Map<string, number>();
    for (const r of reqs) if (r.answered === 200) accepted.set(r.event.id, (accepted.get(r.event.id) ?? 0) + 1);
    expect([...accepted.values()].every((n) => n === 1)).toBe(true);
    expect(accepted.has(got.id)).toBe(true);

    const log = await waitFor('the attempt log', async () => {
      const rows = (await deliveries(t, a.apiKey)).filter((d) => d.event_id === first.id);
      return rows.length === 3 && rows;
    });
    const rows = [...log].sort((x, y) => x.attempt - y.attempt);
    expect(rows.map((d) => d.attempt)).toEqual([1, 2, 3]);
    expect(rows.map((d) => d.status_code)).toEqual([500, 500, 200]);
    expect(rows.map((d) => d.status)).toEqual(['retrying', 'retrying', 'delivered']);
    for (const d of rows) {
      expect(d).toMatchObject({ event_type: 'account.callback_webhook_updated', url: receiver.url('/flaky'), redelivery: false, seq: first.seq });
      expect(Number.isInteger(d.latency_ms)).toBe(true);
      expect(d.latency_ms).toBeGreaterThanOrEqual(0);
    }
    for (const d of rows.slice(0, 2)) {
      expect(d.next_retry_at).toEqual(expect.any(String));
      expect(Number.isNaN(Date.parse(d.next_retry_at))).toBe(false);
    }
    expect(rows[2]!.next_retry_at).toBeNull();
    // The box.created delivery: one attempt, delivered.
    const boxRows = (await deliveries(t, a.apiKey)).filter((d) => d.event_id === got.id);
    expect(boxRows.map((d) => [d.attempt, d.status, d.status_code])).toEqual([[1, 'delivered', 200]]);
  });

  it('a receiver that is down while 20 events are appended gets all 20, in seq order, when it comes back', async () => {
    const a = await take();
    await setCallback(t, a.apiKey, flappy.url('/down'));
    const updated = await waitFor('the callback update delivered', () => deliveredEvents(flappy.at('/down'))[0]);
    expect(updated.type).toBe('account.callback_webhook_updated');

    await flappy.down();
    for (let i = 0; i < 20; i++) {
      const r = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: `down-${i}` } });
      expect(r.status).toBe(200);
    }
    // It was tried while down: refused connections are logged (no status code) and retried.
    const refused = await waitFor('a refused attempt', async () => (await deliveries(t, a.apiKey, '&status=retrying')).find((d) => d.status_code === null));
    expect(refused.error).toBeTruthy();
    expect(refused.next_retry_at).toEqual(expect.any(String));
    await flappy.up();

    const got = await waitFor(
      'all 20 box.created events',
      () => {
        const ev = deliveredEvents(flappy.at('/down')).filter((e) => e.type === 'box.created');
        return ev.length >= 20 && ev;
      },
      25_000,
    );
    const expected = (await allEvents(t, a.apiKey)).filter((e) => e.seq > updated.seq);
    expect(expected.filter((e) => e.type === 'box.created')).toHaveLength(20);
    const delivered = deliveredEvents(flappy.at('/down')).filter((e) => e.seq > updated.seq);
    // In order, none missing, nothing else.
    expect(delivered.map((e) => e.seq)).toEqual(expected.map((e) => e.seq));
    expect(delivered.map((e) => e.id)).toEqual(expected.map((e) => e.id));
    expect(got.map((e) => e.data.box.local_part)).toEqual(Array.from({ length: 20 }, (_, i) => `down-${i}`));
    // Every 2xx arrival of the account, duplicates included, is in non-decreasing seq order.
    const seqs = flappy
      .at('/down')
      .filter((r) => r.answered === 200)
      .map((r) => r.event.seq);
    expect(seqs).toEqual([...seqs].sort((x, y) => x - y));
  });

  it('appends on their own are announced by NOTIFY even while this process drains the account (SSE streams and IMAP sessions listen too)', async () => {
    const a = await signupAccount(t);
    await setCallback(t, a.apiKey, receiver.url('/announced'));
    await waitFor('the callback update delivered', () => deliveredEvents(receiver.at('/announced'))[0]);
    // The drainer lingers with the account's lock now. A listener of our own stands for another process's.
    const listener = new pg.Client({ connectionString: poolOf(t.db)!.options.connectionString });
    await listener.connect();
    let heard = 0;
    listener.on('notification', (m) => {
      if (m.channel === EVENTS_CHANNEL && m.payload === a.accountId) heard++;
    });
    await listener.query(`LISTEN ${EVENTS_CHANNEL}`);
    const append = (i: number) =>
      appendEvent({
        db: t.db,
        accountId: a.accountId,
        type: 'mail.delivered',
        data: { message_id: `msg_announced${i}`, recipient: 'r@example.com', route: 'mx', remote_mta: 'mx.example.com', response: '250 2.0.0 Ok' },
      });
    try {
      for (let i = 0; i < 5; i++) {
        await append(i);
        await sleep(20);
      }
      await waitFor('the webhook got them', () => deliveredEvents(receiver.at('/announced')).filter((e) => e.type === 'mail.delivered').length >= 5);
      // The last one, while the drainer certainly holds the account, is heard too.
      const before = heard;
      await append(5);
      await waitFor('the last append announced', () => heard > before);
    } finally {
      await listener.end();
    }
  });

  it('a new URL while the drainer still holds the account: the new URL gets only what follows the change, the old one its own, logged', async () => {
    const a = await signupAccount(t);
    const addBox = async (address: string) => expect((await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address } })).status).toBe(200);
    const boxesAt = (path: string) =>
      deliveredEvents(receiver.at(path))
        .filter((e) => e.type === 'box.created')
        .map((e) => e.data.box.local_part);
    await setCallback(t, a.apiKey, receiver.url('/move-a'));
    for (let i = 0; i < 3; i++) await addBox(`move-a-${i}`);
    await waitFor('the first URL caught up', () => boxesAt('/move-a').length >= 3);
    // The drainer lingers with the lock and its cursor in memory; the change moves the stored cursor to the head.
    await setCallback(t, a.apiKey, receiver.url('/move-b'));
    await addBox('move-b-0');
    await waitFor('the event after the change at the new URL', () => boxesAt('/move-b').length >= 1);
    await sleep(500);
    expect(boxesAt('/move-b')).toEqual(['move-b-0']);
    expect(boxesAt('/move-a')).toEqual(['move-a-0', 'move-a-1', 'move-a-2']);
    await waitFor(
      'both URLs logged',
      async () => {
        const log = (await deliveries(t, a.apiKey)).filter((d) => d.event_type === 'box.created' && d.status === 'delivered');
        return log.filter((d) => d.url.endsWith('/move-a')).length === 3 && log.filter((d) => d.url.endsWith('/move-b')).length === 1;
      },
      10_000,
    );
  });

  it('redirects are not followed: a 302 is logged as a retrying attempt with status 302 and the target sees nothing', async () => {
    const a = await take();
    receiver.behave('/redirect', () => ({ status: 302, headers: { location: receiver.url('/redirect-target') } }));
    await setCallback(t, a.apiKey, receiver.url('/redirect'));
    const row = await waitFor('a 302 attempt', async () => (await deliveries(t, a.apiKey)).find((d) => d.status_code === 302));
    expect(row.status).toBe('retrying');
    expect(row.error).toMatch(/redirect/i);
    expect(row.next_retry_at).toEqual(expect.any(String));
    expect(receiver.at('/redirect').length).toBeGreaterThanOrEqual(1);
    expect(receiver.at('/redirect-target')).toHaveLength(0);
    await setCallback(t, a.apiKey, null);
  });
});

describe('secret rotation', () => {
  it('for 24 h after a rotation every delivery is signed under the old and the new secret', async () => {
    const a = await take();
    await setCallback(t, a.apiKey, receiver.url('/rotate'));
    const before = await waitFor('a delivery before rotation', () => receiver.at('/rotate').find((r) => r.answered === 200));
    const oldSecret = await signingSecret(t, a.apiKey);
    expect(parseBoxesSignature(before.headers['x-boxes-signature'] as string).v1).toHaveLength(1);
    expect(String(before.headers['webhook-signature']).split(' ')).toHaveLength(1);
    expect(verifyStripe(before, oldSecret).id).toBe(before.event.id);

    const rotated = await rest(t, 'POST', '/account/webhook/secret/rotate', { key: a.apiKey });
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(200);
    const newSecret: string = rotated.body.signing_secret;
    expect(newSecret).toMatch(/^whsec_/);
    expect(newSecret).not.toBe(oldSecret);
    const until = Date.parse(rotated.body.previous_secret_valid_until);
    expect(Math.abs(until - (Date.now() + 24 * 3600_000))).toBeLessThan(5 * 60_000);

    const cfg = await rest(t, 'GET', '/account/webhook', { key: a.apiKey });
    expect(cfg.body.signing_secret).toBe(newSecret);
    expect(Date.parse(cfg.body.previous_secret_valid_until)).toBe(until);

    await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'after-rotation' } });
    const after = await waitFor('a delivery after rotation', () => receiver.at('/rotate').find((r) => r.event.type === 'box.created' && r.answered === 200));
    const rotatedEvent = receiver.at('/rotate').find((r) => r.event.type === 'webhook.secret_rotated');
    expect(rotatedEvent).toBeTruthy();
    for (const r of [after, rotatedEvent!]) {
      const sig = parseBoxesSignature(r.headers['x-boxes-signature'] as string);
      expect(sig.v1).toHaveLength(2);
      expect(String(r.headers['webhook-signature']).split(' ')).toHaveLength(2);
      expect(verifyStripe(r, oldSecret).id).toBe(r.event.id);
      expect(verifyStripe(r, newSecret).id).toBe(r.event.id);
      expect(verifyStandard(r, oldSecret).id).toBe(r.event.id);
      expect(verifyStandard(r, newSecret).id).toBe(r.event.id);
      expect(boxesSignatureMatches(r, oldSecret)).toBe(true);
      expect(boxesSignatureMatches(r, newSecret)).toBe(true);
      const other = `whsec_${Buffer.alloc(32, 9).toString('base64')}`;
      expect(() => verifyStripe(r, other)).toThrow();
      expect(() => verifyStandard(r, other)).toThrow();
    }
  });
});
