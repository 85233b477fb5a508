// Payments over HTTP: card top-ups (owner approval, saved-card mandates and their caps, the card-form path),
// MPP top-ups (approve, deny, expiry, declines, enrollment, payer lookup and payer email), funded signups and
// the owner links' guards. The owner's side is driven with plain form posts on the owner pages; the owner's
// mail arrives at a stand-in MX for owner.test.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { BoxesError, claimSignup, waitForClaim } from '@boxes/sdk';
import { AdjustableClock } from '@boxes/core';
import { mintKey, rest, signupAccount, waitFor, type TestServer } from '@boxes/testing';
import { CARDS, enrollWallet, linkIn, ownerSignIn, startOwnerInbox, startPaymentsServer, type OwnerInbox, type OwnerSession } from './owner-helpers';
import { allEvents, receiverCertificate, startReceiver, type Receiver } from './push-helpers';

const MIN = 60_000;
const DAY = 86_400_000;
const card = (number: string) => ({ number, exp: '12/34', cvc: '123' });

async function balance(t: TestServer, key: string): Promise<number> {
  const r = await rest(t, 'GET', '/account/credit/balance', { key });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.credit_balance_cents;
}

async function topup(t: TestServer, key: string, cents: number) {
  return rest(t, 'POST', '/account/credit/topup', { key, body: { amount_cents: cents } });
}

async function mpp(t: TestServer, key: string, cents: number) {
  return rest(t, 'POST', '/account/credit/topup/mpp', { key, body: { amount_cents: cents } });
}

/**
 * Posts a form with the session's real form token, taken from the owner home: a page with nothing to decide
 * (an expired payment, someone else's) has no form to take it from, and the guard under test is past it.
 */
async function postAsOwner(t: TestServer, s: OwnerSession, path: string, fields: Record<string, string>): Promise<{ status: number; html: string }> {
  const formToken = /name="form_token" value="([^"]+)"/.exec((await s.get('/owner')).html)?.[1];
  expect(formToken).toBeTruthy();
  const r = await fetch(`${t.url}${path}`, {
    method: 'POST',
    headers: { cookie: s.cookie, 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ form_token: formToken!, ...fields }).toString(),
    redirect: 'manual',
  });
  return { status: r.status, html: await r.text() };
}

/** The approval mail of a payment (subjects carry the amount; each test uses its own emails and amounts). */
async function approvalSession(t: TestServer, inbox: OwnerInbox, email: string, cents: number, paymentId: string): Promise<OwnerSession> {
  const mail = await inbox.waitFor(email, new RegExp(`^Approve \\$${(cents / 100).toFixed(2).replace('.', '\\.')} for `));
  const s = await ownerSignIn(t, linkIn(mail));
  // The link leads straight to the payment it was sent for.
  expect(s.landing).toBe(`/owner/payments/${paymentId}`);
  return s;
}

// ---------------------------------------------------------------------------------------------------------
// Server A: real time (no clock moves), a webhook receiver for funded signups.

describe('payments (real time)', () => {
  let t: TestServer;
  let inbox: OwnerInbox;
  let receiver: Receiver;

  beforeAll(async () => {
    const pems = await receiverCertificate();
    receiver = await startReceiver(pems);
    inbox = await startOwnerInbox();
    // Webhook retries scaled down, so a callback that never answers is given up within seconds.
    t = await startPaymentsServer(inbox, { env: { WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_CA_FILE: pems.caFile, WEBHOOK_RETRY_SCALE: '0.00001' } });
  });
  afterAll(async () => {
    await t?.stop();
    await inbox?.close();
    await receiver?.close();
  });

  test('card top-up without a mandate: the owner approves with a card; the credit lands once; admin scope needed', async () => {
    const email = 'card-approve@owner.test';
    const a = await signupAccount(t, email);
    const r = await topup(t, a.apiKey, 300);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.payment.status).toBe('requires_approval');
    expect(r.body.payment.kind).toBe('topup');
    expect(r.body.payment.amount_cents).toBe(300);
    expect(r.body.payment.paid_via).toBeNull();
    expect(r.body.client_secret).toMatch(/^pi_secret_/);
    expect(r.body.mandate.applied).toBe(false);
    expect(r.body.mandate.active).toBe(false);
    const id: string = r.body.payment.id;

    const s = await approvalSession(t, inbox, email, 300, id);
    // No saved card yet, so the page asks for one.
    const page = await s.get(s.landing);
    expect(page.status).toBe(200);
    expect(page.html).toContain('name="number"');
    const ap = await s.post(s.landing, { action: 'approve', ...card(CARDS.ok), mandate: 'none' });
    expect(ap.status, ap.html).toBe(200);
    expect(ap.html).toContain('Approved and paid');

    const st = await rest(t, 'GET', `/account/credit/topup/${id}`, { key: a.apiKey });
    expect(st.status, JSON.stringify(st.body)).toBe(200);
    expect(st.body.status).toBe('succeeded');
    expect(st.body.paid_via).toBe('owner');
    expect(await balance(t, a.apiKey)).toBe(300);

    // A second approval of the same payment is refused and pays nothing more.
    const again = await postAsOwner(t, s, s.landing, { action: 'approve' });
    expect(again.status).toBe(409);
    expect(await balance(t, a.apiKey)).toBe(300);

    const events = await allEvents(t, a.apiKey);
    const settled = events.filter((e) => e.type === 'credit.topup.succeeded');
    expect(settled).toHaveLength(1);
    expect(settled[0]!.data).toMatchObject({ payment_id: id, kind: 'topup', amount_cents: 300, status: 'succeeded', paid_via: 'owner' });

    const sendOnly = await mintKey(t, a.apiKey, ['send']);
    const denied = await topup(t, sendOnly.api_key, 300);
    expect(denied.status, JSON.stringify(denied.body)).toBe(403);
    expect(await balance(t, a.apiKey)).toBe(300);
  });

  test('mandate with a declined card: 402 card_declined (generic_decline), balance unchanged', async () => {
    const email = 'mandate-declined@owner.test';
    const a = await signupAccount(t, email);
    const wallet = await enrollWallet(t, inbox, email, CARDS.ok, 0);
    // The mandate serves accounts the owner has paid for before: one approved top-up first.
    const firstPayment = await topup(t, a.apiKey, 100);
    expect(firstPayment.body.payment.status).toBe('requires_approval');
    expect((await wallet.post(`/owner/payments/${firstPayment.body.payment.id}`, { action: 'approve' })).status).toBe(200);
    // Then the saved card is replaced by one the network declines, keeping the mandate.
    expect((await wallet.post('/owner/card', { action: 'save', ...card(CARDS.declined), mandate: '0' })).html).toContain('Card saved');
    const r = await topup(t, a.apiKey, 200);
    expect(r.status, JSON.stringify(r.body)).toBe(402);
    expect(r.body.error.code).toBe('card_declined');
    expect(r.body.error.decline_code).toBe('generic_decline');
    expect(r.body.error.payment.status).toBe('failed');
    expect(r.body.error.payment.paid_via).toBe('mandate');
    expect(await balance(t, a.apiKey)).toBe(100);
  });

  test('card-form path: the public page with the client_secret shows a card form and pays; a wrong secret pays nothing', async () => {
    const email = 'card-form@owner.test';
    const a = await signupAccount(t, email);
    const r = await topup(t, a.apiKey, 400);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const id: string = r.body.payment.id;
    const secret: string = r.body.client_secret;

    const pageRes = await fetch(`${t.url}/pay/${id}?client_secret=${encodeURIComponent(secret)}`);
    const html = await pageRes.text();
    expect(pageRes.status).toBe(200);
    expect(html).toContain('name="client_secret"');
    expect(html).toContain('name="number"');
    expect(html).toContain('Pay $4.00');
    // Without the secret the page only says the owner was asked.
    const plain = await (await fetch(`${t.url}/pay/${id}`)).text();
    expect(plain).not.toContain('name="number"');

    const pay = (clientSecret: string) =>
      fetch(`${t.url}/pay/${id}`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ client_secret: clientSecret, ...card(CARDS.ok) }).toString(),
      });
    const wrong = await pay(`pi_secret_${'x'.repeat(32)}`);
    expect(wrong.status).toBe(404);
    expect((await rest(t, 'GET', `/account/credit/topup/${id}`, { key: a.apiKey })).body.status).toBe('requires_approval');
    expect(await balance(t, a.apiKey)).toBe(0);

    const ok = await pay(secret);
    expect(ok.status).toBe(200);
    expect(await ok.text()).toContain('Paid. The credit has landed.');
    const st = await rest(t, 'GET', `/account/credit/topup/${id}`, { key: a.apiKey });
    expect(st.body.status).toBe('succeeded');
    expect(st.body.paid_via).toBe('owner');
    expect(await balance(t, a.apiKey)).toBe(400);
  });

  test("card-form path: paying with the client_secret leaves the owner's saved card and mandate alone", async () => {
    // The client_secret is in the agent's hands: a card entered on its form pays this payment only; it must
    // not replace the owner's card or drop their mandate.
    const email = 'card-form-wallet@owner.test';
    const a = await signupAccount(t, email);
    const owner = await enrollWallet(t, inbox, email, CARDS.ok, 0);
    const r = await topup(t, a.apiKey, 600); // above the $5 per-top-up cap: waits, with a client_secret
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.payment.status).toBe('requires_approval');
    const pay = await fetch(`${t.url}/pay/${r.body.payment.id}`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ client_secret: r.body.client_secret, ...card('5555555555554444') }).toString(),
    });
    expect(pay.status).toBe(200);
    expect(await balance(t, a.apiKey)).toBe(600);
    const cardPage = await owner.get('/owner/card');
    expect(cardPage.html).toContain('Saved card: <strong>visa •••• 4242</strong>');
    expect(cardPage.html).toContain('Automatic top-ups: up to $5.00 per top-up and $10.00 per 30 days ($0.00 used).');
    const within = await topup(t, a.apiKey, 200);
    expect(within.body.payment.status).toBe('succeeded');
    expect(within.body.mandate.applied).toBe(true);
    expect(await balance(t, a.apiKey)).toBe(800);
  });

  test('MPP approve: approved, then succeeded with a shared payment token about 3 s later; the credit lands once', async () => {
    const email = 'mpp-approve@owner.test';
    const a = await signupAccount(t, email);
    await enrollWallet(t, inbox, email, CARDS.ok);
    const ch = await mpp(t, a.apiKey, 700);
    expect(ch.status, JSON.stringify(ch.body)).toBe(200);
    expect(ch.body.status).toBe('pending_approval');
    expect(ch.body.spend_request.status).toBe('pending_approval');
    expect(ch.body.spend_request.shared_payment_token).toBeNull();
    expect(ch.body.payment.ttl_seconds).toBe(900);
    const id: string = ch.body.challenge_id;

    const s = await approvalSession(t, inbox, email, 700, id);
    const ap = await s.post(s.landing, { action: 'approve' });
    expect(ap.status, ap.html).toBe(200);
    expect(ap.html).toContain('Approved. The payment completes in a few seconds.');
    // Right after approval the token is not there yet.
    const mid = await rest(t, 'GET', `/account/credit/topup/mpp/${id}`, { key: a.apiKey });
    expect(mid.status, JSON.stringify(mid.body)).toBe(200);
    expect(mid.body.status).toBe('approved');
    expect(mid.body.spend_request.shared_payment_token).toBeNull();
    expect(await balance(t, a.apiKey)).toBe(0);

    const done = await rest(t, 'GET', `/account/credit/topup/mpp/${id}?wait_seconds=15`, { key: a.apiKey });
    expect(done.status, JSON.stringify(done.body)).toBe(200);
    expect(done.body.status).toBe('succeeded');
    expect(done.body.paid_via).toBe('wallet');
    expect(done.body.spend_request.status).toBe('approved');
    expect(done.body.spend_request.shared_payment_token).toMatch(/^spt_/);
    const delay = Date.parse(done.body.settled_at) - Date.parse(done.body.decided_at);
    expect(delay).toBeGreaterThanOrEqual(3000);
    expect(delay).toBeLessThan(10_000);

    // Reading the status again (each read refreshes the payment) lands nothing more.
    for (let i = 0; i < 3; i++) {
      const again = await rest(t, 'GET', `/account/credit/topup/mpp/${id}`, { key: a.apiKey });
      expect(again.body.spend_request.shared_payment_token).toBe(done.body.spend_request.shared_payment_token);
    }
    expect(await balance(t, a.apiKey)).toBe(700);
    const usage = await rest(t, 'GET', '/account/credit/usage', { key: a.apiKey });
    expect(usage.body.usage.find((u: any) => u.type === 'topup')).toMatchObject({ entries: 1, amount_micros: 7_000_000 });
    const events = (await allEvents(t, a.apiKey)).filter((e) => e.type === 'credit.topup.succeeded');
    expect(events.map((e) => e.data.payment_id)).toEqual([id]);
  });

  test('MPP deny: 200 denied, nothing charged', async () => {
    const email = 'mpp-deny@owner.test';
    const a = await signupAccount(t, email);
    await enrollWallet(t, inbox, email, CARDS.ok);
    const ch = await mpp(t, a.apiKey, 800);
    expect(ch.status, JSON.stringify(ch.body)).toBe(200);
    const id: string = ch.body.challenge_id;
    const s = await approvalSession(t, inbox, email, 800, id);
    const d = await s.post(s.landing, { action: 'deny' });
    expect(d.status).toBe(200);
    expect(d.html).toContain('You denied this payment');
    const st = await rest(t, 'GET', `/account/credit/topup/mpp/${id}?wait_seconds=5`, { key: a.apiKey });
    expect(st.status, JSON.stringify(st.body)).toBe(200);
    expect(st.body.status).toBe('denied');
    expect(st.body.spend_request.status).toBe('denied');
    expect(st.body.spend_request.shared_payment_token).toBeNull();
    expect(await balance(t, a.apiKey)).toBe(0);
  });

  test('MPP with a declined card in the wallet: 402 card_declined (insufficient_funds) after approval, no credit', async () => {
    const email = 'mpp-nsf@owner.test';
    const a = await signupAccount(t, email);
    await enrollWallet(t, inbox, email, CARDS.insufficientFunds);
    const ch = await mpp(t, a.apiKey, 900);
    expect(ch.status, JSON.stringify(ch.body)).toBe(200);
    const id: string = ch.body.challenge_id;
    const s = await approvalSession(t, inbox, email, 900, id);
    expect((await s.post(s.landing, { action: 'approve' })).status).toBe(200);
    const st = await rest(t, 'GET', `/account/credit/topup/mpp/${id}?wait_seconds=15`, { key: a.apiKey });
    expect(st.status, JSON.stringify(st.body)).toBe(402);
    expect(st.body.error.code).toBe('card_declined');
    expect(st.body.error.decline_code).toBe('insufficient_funds');
    expect(st.body.error.payment.status).toBe('failed');
    expect(await balance(t, a.apiKey)).toBe(0);
  });

  test('MPP with no wallet: 402 wallet_not_enrolled and the owner gets an enrollment mail', async () => {
    const email = 'mpp-noenroll@owner.test';
    const a = await signupAccount(t, email);
    const r = await mpp(t, a.apiKey, 500);
    expect(r.status, JSON.stringify(r.body)).toBe(402);
    expect(r.body.error.code).toBe('wallet_not_enrolled');
    expect(r.body.error.payer_email).toBeNull();
    expect(r.body.error.payer_email_default).toBe(email);
    const mail = await inbox.waitFor(email, /^Set up your wallet/);
    // The link leads to the card page.
    const s = await ownerSignIn(t, linkIn(mail));
    expect(s.landing).toBe('/owner/card');
    expect(await balance(t, a.apiKey)).toBe(0);
  });

  test('payer lookup failure: the challenge still comes back with payer_email null and completes after approval', async () => {
    const email = 'mpp-lookup@owner.test';
    const a = await signupAccount(t, email);
    await enrollWallet(t, inbox, email, CARDS.ok);
    const original = t.svc.payments.lookupPayer;
    t.svc.payments.lookupPayer = async () => {
      throw new Error('payer lookup unavailable');
    };
    let ch: Awaited<ReturnType<typeof mpp>>;
    try {
      ch = await mpp(t, a.apiKey, 600);
    } finally {
      t.svc.payments.lookupPayer = original;
    }
    expect(ch.status, JSON.stringify(ch.body)).toBe(200);
    expect(ch.body.preflight.payer_email).toBeNull();
    expect(ch.body.preflight.payer_email_default).toBe(email);
    const id: string = ch.body.challenge_id;
    const s = await approvalSession(t, inbox, email, 600, id);
    expect((await s.post(s.landing, { action: 'approve' })).status).toBe(200);
    const st = await rest(t, 'GET', `/account/credit/topup/mpp/${id}?wait_seconds=15`, { key: a.apiKey });
    expect(st.status, JSON.stringify(st.body)).toBe(200);
    expect(st.body.status).toBe('succeeded');
    expect(await balance(t, a.apiKey)).toBe(600);
  });

  test('payer email: default, set (admin only, validated, announced); MPP then asks the payer wallet', async () => {
    const email = 'payer-owner@owner.test';
    const payer = 'billing@owner.test';
    const a = await signupAccount(t, email);
    const g = await rest(t, 'GET', '/account/credit/payer-email', { key: a.apiKey });
    expect(g.status, JSON.stringify(g.body)).toBe(200);
    expect(g.body).toMatchObject({ payer_email: email, is_default: true, customer_exists: false });

    const sendOnly = await mintKey(t, a.apiKey, ['send']);
    expect((await rest(t, 'PUT', '/account/credit/payer-email', { key: sendOnly.api_key, body: { email: payer } })).status).toBe(403);
    expect((await rest(t, 'PUT', '/account/credit/payer-email', { key: a.apiKey, body: { email: 'not-an-email' } })).status).toBe(400);
    // Neither refused call changed anything.
    expect((await rest(t, 'GET', '/account/credit/payer-email', { key: a.apiKey })).body.is_default).toBe(true);

    const p = await rest(t, 'PUT', '/account/credit/payer-email', { key: a.apiKey, body: { email: payer } });
    expect(p.status, JSON.stringify(p.body)).toBe(200);
    expect(p.body).toMatchObject({ payer_email: payer, is_default: false, customer_exists: true });
    expect((await rest(t, 'GET', '/account/credit/payer-email', { key: a.apiKey })).body).toMatchObject({ payer_email: payer, is_default: false });
    const ev = (await allEvents(t, a.apiKey)).filter((e) => e.type === 'account.credit.payer_email_updated');
    expect(ev).toHaveLength(1);
    expect(ev[0]!.data).toMatchObject({ payer_email: payer, previous_payer_email: null, customer_created: true });

    // The payer's wallet is not the owner's: even with the owner's wallet enrolled, the payer's is empty.
    await enrollWallet(t, inbox, email, CARDS.ok);
    const first = await mpp(t, a.apiKey, 1100);
    expect(first.status, JSON.stringify(first.body)).toBe(402);
    expect(first.body.error.code).toBe('wallet_not_enrolled');
    expect(first.body.error.payer_email).toBe(payer);
    // The payer enrolls through the enrollment link mailed to them with the 402.
    const enroll = await inbox.waitFor(payer, /^Set up your wallet/);
    const ps = await ownerSignIn(t, linkIn(enroll));
    expect(ps.landing).toBe('/owner/card');
    const saved = await ps.post('/owner/card', { action: 'save', ...card(CARDS.ok), mandate: 'none' });
    expect(saved.html).toContain('Card saved');

    const ch = await mpp(t, a.apiKey, 1200);
    expect(ch.status, JSON.stringify(ch.body)).toBe(200);
    expect(ch.body.preflight.payer_email).toBe(payer);
    expect(ch.body.preflight.payer_email_default).toBe(email);
    expect(ch.body.spend_request.payer_email).toBe(payer);
    const id: string = ch.body.challenge_id;
    const s = await approvalSession(t, inbox, payer, 1200, id);
    expect((await s.post(s.landing, { action: 'approve' })).status).toBe(200);
    const st = await rest(t, 'GET', `/account/credit/topup/mpp/${id}?wait_seconds=15`, { key: a.apiKey });
    expect(st.status, JSON.stringify(st.body)).toBe(200);
    expect(st.body.status).toBe('succeeded');
    expect(await balance(t, a.apiKey)).toBe(1200);
    // The approval went to the payer only, not to the owner.
    expect((await inbox.all()).filter((m) => m.to.includes(email) && /^Approve \$12\.00/.test(m.subject))).toHaveLength(0);
  });

  test("MPP charged to the payer's wallet: the account's human (owner_email) may deny it but not approve it", async () => {
    // human_email and payer_email are both the agent's word: the human signed in for the account must not be
    // able to spend the wallet of whoever the agent named as payer.
    const human = 'mpp-human@owner.test';
    const payer = 'mpp-victim@owner.test';
    await signupAccount(t, payer);
    await enrollWallet(t, inbox, payer, CARDS.ok);
    const a = await signupAccount(t, human);
    expect((await rest(t, 'PUT', '/account/credit/payer-email', { key: a.apiKey, body: { email: payer } })).status).toBe(200);
    const ch = await mpp(t, a.apiKey, 1500);
    expect(ch.status, JSON.stringify(ch.body)).toBe(200);
    const id: string = ch.body.challenge_id;
    // The public JSON status does not give the payer's address away.
    const pub = (await (await fetch(`${t.url}/pay/${id}`, { headers: { accept: 'application/json' } })).json()) as any;
    expect(pub.spend_request.payer_email).not.toBe(payer);

    const hs = await enrollWallet(t, inbox, human, CARDS.ok); // the human has a session (and a wallet of their own)
    const page = await hs.get(`/owner/payments/${id}`);
    expect(page.status).toBe(200);
    expect(page.html).not.toContain('value="approve"');
    const ap = await hs.post(`/owner/payments/${id}`, { action: 'approve' });
    expect(ap.status, ap.html).toBe(403);
    const withCard = await hs.post(`/owner/payments/${id}`, { action: 'approve', ...card(CARDS.ok), mandate: '2' });
    expect(withCard.status, withCard.html).toBe(403);
    const st = await rest(t, 'GET', `/account/credit/topup/mpp/${id}?wait_seconds=4`, { key: a.apiKey });
    expect(st.body.status).toBe('pending_approval');
    expect(await balance(t, a.apiKey)).toBe(0);

    // The payer still decides; the human may say no to their own agent.
    const ps = await approvalSession(t, inbox, payer, 1500, id);
    expect((await ps.get(ps.landing)).html).toContain('value="approve"');
    const d = await hs.post(`/owner/payments/${id}`, { action: 'deny' });
    expect(d.status, d.html).toBe(200);
    expect((await rest(t, 'GET', `/account/credit/topup/mpp/${id}`, { key: a.apiKey })).body.status).toBe('denied');
    expect(await balance(t, a.apiKey)).toBe(0);
  });

  test('owner pages and the pay page: unreadable ids and bodies are 4xx, not 500', async () => {
    const multipart = { 'content-type': 'multipart/form-data; boundary=zz' };
    for (const [method, path, body, headers] of [
      ['GET', '/pay/%00', undefined, {}],
      ['POST', '/pay/pi_x%00', 'client_secret=a&number=4242424242424242&exp=12/34&cvc=123', { 'content-type': 'application/x-www-form-urlencoded' }],
      ['POST', '/pay/pi_x', '--zz\r\nbad', multipart],
      ['POST', '/owner/link', '--zz\r\nbad', multipart],
      ['POST', '/owner/link', 'email=a%00b%40owner.test', { 'content-type': 'application/x-www-form-urlencoded' }],
    ] as const) {
      const r = await fetch(`${t.url}${path}`, { method, body, headers, redirect: 'manual' });
      expect(r.status, `${method} ${path}`).toBeGreaterThanOrEqual(200);
      expect(r.status, `${method} ${path}`).toBeLessThan(500);
    }
  });

  test('funded signup with a callback, min 100; the owner pays and the account arrives with its credit', async () => {
    const email = 'funded@owner.test';
    const hook = receiver.url('/funded');
    const body = { human_email: email, domain_intent: { mode: 'subdomain' } };
    const tooSmall = await rest(t, 'POST', '/signup/agentic', { body: { ...body, initial_credit_cents: 99, agent_callback_webhook: hook } });
    expect(tooSmall.status, JSON.stringify(tooSmall.body)).toBe(400);

    const r = await rest(t, 'POST', '/signup/agentic', { body: { ...body, initial_credit_cents: 500, agent_callback_webhook: hook } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.status).toBe('pending_payment');
    expect(r.body.next_step).toEqual({
      method: 'POST',
      url: `${t.apiBase}/signup/agentic/claim`,
      body: { intent_id: r.body.intent_id, claim_secret: r.body.claim_secret },
    });
    const lpi = r.body.local_payment_intent;
    expect(lpi.id).toMatch(/^pi_/);
    expect(lpi.status).toBe('requires_approval');
    expect(lpi.kind).toBe('signup');
    expect(lpi.amount_cents).toBe(500);
    expect(lpi.client_secret).toMatch(/^pi_secret_/);

    const confirm = await rest(t, 'POST', '/signup/agentic/confirm', { body: { intent_id: r.body.intent_id } });
    expect(confirm.status, JSON.stringify(confirm.body)).toBe(409);
    expect(confirm.body.error.code).toBe('funded_signup');

    const mail = await inbox.waitFor(email, new RegExp(`^Approve \\$5\\.00 for agent@${r.body.full_domain.replace(/\./g, '\\.')}`));
    const s = await ownerSignIn(t, linkIn(mail));
    expect(s.landing).toBe(`/owner/payments/${lpi.id}`);
    const ap = await s.post(s.landing, { action: 'approve', ...card(CARDS.ok), mandate: 'none' });
    expect(ap.status, ap.html).toBe(200);
    expect(ap.html).toContain('Approved and paid');

    const completed = await waitFor('signup.completed at the callback', () => receiver.at('/funded').find((x) => x.event.type === 'signup.completed'), 15_000);
    expect(completed.event.data.primary_address).toBe(`agent@${r.body.full_domain}`);
    const key = completed.event.api_key!;
    expect(key).toMatch(/^bxs_live_/);
    expect(await balance(t, key)).toBe(500);
    const usage = await rest(t, 'GET', '/account/credit/usage', { key });
    expect(usage.body.usage.find((u: any) => u.type === 'signup_credit')).toMatchObject({ entries: 1, amount_micros: 5_000_000 });
    // Confirming after the payment still provisions nothing more.
    const late = await rest(t, 'POST', '/signup/agentic/confirm', { body: { intent_id: r.body.intent_id } });
    expect(late.status).toBe(409);
    // The callback took the key: the claim does not hand it out a second time.
    await waitFor(
      'the delivered key to be dropped',
      async () => ((await t.db.signupIntent.findUniqueOrThrow({ where: { id: r.body.intent_id } })).apiKeyEnc === null ? true : null),
      15_000,
    );
    const claim = await rest(t, 'POST', '/signup/agentic/claim', { body: { intent_id: r.body.intent_id, claim_secret: r.body.claim_secret } });
    expect(claim.status, JSON.stringify(claim.body)).toBe(409);
    expect(claim.body.error).toMatchObject({ code: 'intent_already_confirmed', primary_address: `agent@${r.body.full_domain}` });
    expect(JSON.stringify(claim.body)).not.toContain('bxs_live_');
  });

  test('funded signup without a callback: the claim poll answers pending, then the api_key exactly once after payment (REST and the SDK)', async () => {
    const email = 'funded-poll@owner.test';
    const r = await rest(t, 'POST', '/signup/agentic', { body: { human_email: email, domain_intent: { mode: 'subdomain' }, initial_credit_cents: 600 } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.status).toBe('pending_payment');
    const secret: string = r.body.claim_secret;
    expect(secret).toMatch(/^bxs_claim_[A-Za-z0-9_-]{43}$/);
    expect(r.body.next_step).toEqual({ method: 'POST', url: `${t.apiBase}/signup/agentic/claim`, body: { intent_id: r.body.intent_id, claim_secret: secret } });
    // Only its hash is stored.
    const row = await t.db.signupIntent.findUniqueOrThrow({ where: { id: r.body.intent_id } });
    expect(JSON.stringify(row)).not.toContain(secret);

    // Before payment: pending, with when to ask again; the same over the SDK (tRPC).
    const pending = await rest(t, 'POST', '/signup/agentic/claim', { body: r.body.next_step.body });
    expect(pending.status, JSON.stringify(pending.body)).toBe(200);
    expect(pending.body).toMatchObject({
      intent_id: r.body.intent_id,
      status: 'pending_payment',
      retry_after_seconds: 5,
      account: null,
      payment: { id: r.body.local_payment_intent.id, status: 'requires_approval' },
    });
    expect((await claimSignup(t.url, { intent_id: r.body.intent_id, claim_secret: secret })).status).toBe('pending_payment');

    // A wrong secret, an unknown intent and a signup without a claim all look the same: 404.
    const wrong = await rest(t, 'POST', '/signup/agentic/claim', { body: { intent_id: r.body.intent_id, claim_secret: `${secret.slice(0, -1)}x` } });
    expect([wrong.status, wrong.body.error.code]).toEqual([404, 'not_found']);
    const unknown = await rest(t, 'POST', '/signup/agentic/claim', { body: { intent_id: 'int_00000000000000000000', claim_secret: secret } });
    expect([unknown.status, unknown.body.error.code]).toEqual([404, 'not_found']);
    const free = await rest(t, 'POST', '/signup/agentic', { body: { human_email: email, domain_intent: { mode: 'subdomain' } } });
    expect(free.body.claim_secret).toBeUndefined();
    const noClaim = await rest(t, 'POST', '/signup/agentic/claim', { body: { intent_id: free.body.intent_id, claim_secret: secret } });
    expect(noClaim.status).toBe(404);
    const sdkWrong = await claimSignup(t.url, { intent_id: r.body.intent_id, claim_secret: 'bxs_claim_nope' }).catch((e: unknown) => e);
    expect(sdkWrong).toBeInstanceOf(BoxesError);
    expect((sdkWrong as BoxesError).code).toBe('not_found');

    // The SDK polls while the owner pays.
    const waiting = waitForClaim(t.url, { intent_id: r.body.intent_id, claim_secret: secret }, { timeoutMs: 30_000 });
    const s = await approvalSession(t, inbox, email, 600, r.body.local_payment_intent.id);
    const ap = await s.post(s.landing, { action: 'approve', ...card(CARDS.ok), mandate: 'none' });
    expect(ap.html).toContain('Approved and paid');
    const done = await waiting;
    expect(done).toMatchObject({ status: 'completed', payment: null, retry_after_seconds: null });
    expect(done.account).toMatchObject({
      primary_address: `agent@${r.body.full_domain}`,
      account_status: 'active',
      domain: r.body.full_domain,
      domain_status: 'active',
    });
    const key = done.account!.api_key;
    expect(key).toMatch(/^bxs_live_/);
    expect(await balance(t, key)).toBe(600);
    expect((await rest(t, 'GET', '/account/keys', { key })).body.keys.map((k: { id: string }) => k.id)).toContain(done.account!.key_id);

    // Exactly once: the next claim is 409 and carries no key; nothing sealed is left behind.
    const again = await rest(t, 'POST', '/signup/agentic/claim', { body: { intent_id: r.body.intent_id, claim_secret: secret } });
    expect(again.status, JSON.stringify(again.body)).toBe(409);
    expect(again.body.error.code).toBe('intent_already_confirmed');
    expect(JSON.stringify(again.body)).not.toContain('bxs_live_');
    expect((await t.db.signupIntent.findUniqueOrThrow({ where: { id: r.body.intent_id } })).apiKeyEnc).toBeNull();
  });

  test('funded signup: while the callback POST carrying the key is in flight the claim waits; a failed POST leaves the key to the claim, and the key goes out once', async () => {
    const email = 'funded-slow-hook@owner.test';
    receiver.behave('/slow-funded', (n) => (n === 0 ? 'hang' : 200));
    const r = await rest(t, 'POST', '/signup/agentic', {
      body: { human_email: email, domain_intent: { mode: 'subdomain' }, initial_credit_cents: 600, agent_callback_webhook: receiver.url('/slow-funded') },
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const s = await approvalSession(t, inbox, email, 600, r.body.local_payment_intent.id);
    expect((await s.post(s.landing, { action: 'approve', ...card(CARDS.ok), mandate: 'none' })).html).toContain('Approved and paid');
    const first = await waitFor(
      'signup.completed on its way to the callback',
      () => receiver.at('/slow-funded').find((x) => x.event.type === 'signup.completed'),
      15_000,
    );
    expect(first.event.api_key).toMatch(/^bxs_live_/);
    const ask = () => rest(t, 'POST', '/signup/agentic/claim', { body: { intent_id: r.body.intent_id, claim_secret: r.body.claim_secret } });
    // The POST hangs: the claim neither hands the key out a second time nor says it is gone.
    const during = await ask();
    expect(during.status, JSON.stringify(during.body)).toBe(200);
    expect(during.body).toMatchObject({ status: 'delivering_to_callback', account: null, retry_after_seconds: 5 });
    expect(JSON.stringify(during.body)).not.toContain('bxs_live_');
    // The POST fails: the key is the claim's, once; the callback's retry carries no key.
    receiver.release(500);
    const claimed = await waitFor(
      'the claim to hand out the key',
      async () => {
        const c = await ask();
        return c.body.status === 'completed' ? c : null;
      },
      15_000,
    );
    expect(claimed.body.account.api_key).toBe(first.event.api_key);
    expect((await ask()).status).toBe(409);
    const retried = await waitFor(
      'the retried signup.completed',
      () => receiver.at('/slow-funded').filter((x) => x.event.type === 'signup.completed' && x.answered === 200)[0],
      15_000,
    );
    expect(retried.event.api_key).toBeUndefined();
  });

  test('funded signup whose callback never answers: once the delivery is given up, the claim still hands out the key', async () => {
    const email = 'funded-dead-hook@owner.test';
    receiver.behave('/dead-funded', () => 500);
    const r = await rest(t, 'POST', '/signup/agentic', {
      body: { human_email: email, domain_intent: { mode: 'subdomain' }, initial_credit_cents: 700, agent_callback_webhook: receiver.url('/dead-funded') },
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const s = await approvalSession(t, inbox, email, 700, r.body.local_payment_intent.id);
    expect((await s.post(s.landing, { action: 'approve', ...card(CARDS.ok), mandate: 'none' })).html).toContain('Approved and paid');
    await waitFor(
      'signup.completed given up at the callback',
      () => t.db.webhookDelivery.findFirst({ where: { eventType: 'signup.completed', status: 'failed', url: receiver.url('/dead-funded') } }),
      30_000,
    );
    const claim = await rest(t, 'POST', '/signup/agentic/claim', { body: { intent_id: r.body.intent_id, claim_secret: r.body.claim_secret } });
    expect(claim.status, JSON.stringify(claim.body)).toBe(200);
    expect(claim.body.status).toBe('completed');
    expect(await balance(t, claim.body.account.api_key)).toBe(700);
  });

  test('funded signup without a callback, denied by the owner: the claim says payment_denied and hands out nothing', async () => {
    const email = 'funded-deny@owner.test';
    const r = await rest(t, 'POST', '/signup/agentic', { body: { human_email: email, domain_intent: { mode: 'subdomain' }, initial_credit_cents: 800 } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const s = await approvalSession(t, inbox, email, 800, r.body.local_payment_intent.id);
    expect((await s.post(s.landing, { action: 'deny' })).status).toBe(200);
    const claim = await rest(t, 'POST', '/signup/agentic/claim', { body: { intent_id: r.body.intent_id, claim_secret: r.body.claim_secret } });
    expect(claim.status, JSON.stringify(claim.body)).toBe(200);
    expect(claim.body).toMatchObject({ status: 'payment_denied', retry_after_seconds: null, account: null, payment: { status: 'denied' } });
  });

  test('owner links are single-use; a session sees only its own payments; forms need the form token', async () => {
    const a = await signupAccount(t, 'links-a@owner.test');
    const b = await signupAccount(t, 'links-b@owner.test');
    const pa = await topup(t, a.apiKey, 1300);
    const pb = await topup(t, b.apiKey, 1400);
    expect(pa.status).toBe(200);
    expect(pb.status).toBe(200);
    const mail = await inbox.waitFor('links-a@owner.test', /^Approve \$13\.00/);
    const link = linkIn(mail);
    const s = await ownerSignIn(t, link);
    const second = await fetch(link, { method: 'POST', redirect: 'manual' });
    expect(second.status).toBe(410);
    expect(second.headers.get('set-cookie')).toBeNull();

    const other = await s.get(`/owner/payments/${pb.body.payment.id}`);
    expect(other.status).toBe(404);
    // Nor can it decide it.
    const otherPost = await postAsOwner(t, s, `/owner/payments/${pb.body.payment.id}`, { action: 'deny' });
    expect(otherPost.status).toBe(404);
    expect((await rest(t, 'GET', `/account/credit/topup/${pb.body.payment.id}`, { key: b.apiKey })).body.status).toBe('requires_approval');

    const forged = await fetch(`${t.url}${s.landing}`, {
      method: 'POST',
      headers: { cookie: s.cookie, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ form_token: 'wrong', action: 'approve', ...card(CARDS.ok) }).toString(),
      redirect: 'manual',
    });
    expect(forged.status).toBe(403);
    const missing = await fetch(`${t.url}${s.landing}`, {
      method: 'POST',
      headers: { cookie: s.cookie, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ action: 'approve', ...card(CARDS.ok) }).toString(),
      redirect: 'manual',
    });
    expect(missing.status).toBe(403);
    expect((await rest(t, 'GET', `/account/credit/topup/${pa.body.payment.id}`, { key: a.apiKey })).body.status).toBe('requires_approval');
    expect(await balance(t, a.apiKey)).toBe(0);
  });
});

// ---------------------------------------------------------------------------------------------------------
// Server B: an adjustable clock, for the mandate's 30-day window and the MPP challenge's TTL.

describe('payments (moving clock)', () => {
  let t: TestServer;
  let inbox: OwnerInbox;
  const clock = new AdjustableClock();

  beforeAll(async () => {
    inbox = await startOwnerInbox();
    t = await startPaymentsServer(inbox, { clock });
  });
  afterAll(async () => {
    await t?.stop();
    await inbox?.close();
  });

  test('mandate caps: per top-up and per 30 days; raising the tier; the 30-day window moves with the clock', async () => {
    const email = 'mandate@owner.test';
    const a = await signupAccount(t, email);
    const wallet = await enrollWallet(t, inbox, email, CARDS.ok, 0);

    const settles = async (cents: number, used: number) => {
      const r = await topup(t, a.apiKey, cents);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.payment.status).toBe('succeeded');
      expect(r.body.payment.paid_via).toBe('mandate');
      expect(r.body.client_secret).toBeNull();
      expect(r.body.mandate.applied).toBe(true);
      expect(r.body.mandate.used_30d_cents).toBe(used);
      return r;
    };
    const waits = async (cents: number, reason: RegExp) => {
      const r = await topup(t, a.apiKey, cents);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.payment.status).toBe('requires_approval');
      expect(r.body.payment.paid_via).toBeNull();
      expect(r.body.client_secret).toMatch(/^pi_secret_/);
      expect(r.body.mandate.applied).toBe(false);
      expect(r.body.mandate.reason).toMatch(reason);
      return r;
    };

    // Until the owner has paid for this account once, the mandate does not serve it (and hides the card).
    const untrusted = await waits(100, /paid for before/);
    expect(untrusted.body.mandate).toMatchObject({ active: false, card: null });
    expect((await wallet.post(`/owner/payments/${untrusted.body.payment.id}`, { action: 'approve' })).html).toContain('Approved and paid');
    expect(await balance(t, a.apiKey)).toBe(100);

    const first = await settles(500, 500);
    expect(first.body.mandate).toMatchObject({ active: true, per_topup_cents: 500, per_30d_cents: 1000 });
    await settles(500, 1000);
    expect(await balance(t, a.apiKey)).toBe(1100);
    await waits(100, /30-day cap of \$10\.00 \(\$10\.00 used\)/);
    await waits(600, /per-top-up cap of \$5\.00/);
    expect(await balance(t, a.apiKey)).toBe(1100);

    // Tier 1: $10 per top-up, $25 per 30 days; $10 used so far.
    const raised = await wallet.post('/owner/card', { action: 'mandate', mandate: '1' });
    expect(raised.html).toContain('Limits saved.');
    expect(raised.html).toContain('up to $10.00 per top-up and $25.00 per 30 days ($10.00 used)');
    const big = await settles(1000, 2000);
    expect(big.body.mandate).toMatchObject({ per_topup_cents: 1000, per_30d_cents: 2500 });
    expect(await balance(t, a.apiKey)).toBe(2100);

    // Back to tier 0, then 31 days later: the earlier top-ups left the window, and the caps apply afresh.
    expect((await wallet.post('/owner/card', { action: 'mandate', mandate: '0' })).html).toContain('Limits saved.');
    await waits(100, /30-day cap of \$10\.00 \(\$20\.00 used\)/);
    clock.advance(31 * DAY);
    await settles(500, 500);
    await settles(500, 1000);
    await waits(200, /30-day cap of \$10\.00 \(\$10\.00 used\)/);
  });

  test('MPP expiry: 402 mpp_challenge_expired after 15 minutes; the owner can no longer approve it', async () => {
    const email = 'mpp-expire@owner.test';
    const a = await signupAccount(t, email);
    await enrollWallet(t, inbox, email, CARDS.ok);
    const ch = await mpp(t, a.apiKey, 300);
    expect(ch.status, JSON.stringify(ch.body)).toBe(200);
    const id: string = ch.body.challenge_id;
    // Signed in before the lapse: the emailed link itself expires with the challenge.
    const s = await approvalSession(t, inbox, email, 300, id);

    clock.advance(15 * MIN + 1000);
    const st = await rest(t, 'GET', `/account/credit/topup/mpp/${id}`, { key: a.apiKey });
    expect(st.status, JSON.stringify(st.body)).toBe(402);
    expect(st.body.error.code).toBe('mpp_challenge_expired');
    expect(st.body.error.payment.status).toBe('expired');

    const page = await s.get(s.landing);
    expect(page.status).toBe(200);
    expect(page.html).toContain('<dd id="status">Expired</dd>');
    expect(page.html).not.toContain('value="approve"');
    const ap = await postAsOwner(t, s, s.landing, { action: 'approve' });
    expect(ap.status).toBe(409);
    expect(ap.html).toContain('This payment is expired');
    expect(await balance(t, a.apiKey)).toBe(0);
  });

  test('MPP: approval does not reset the TTL; a token due after expiry means expired, no credit', async () => {
    const email = 'mpp-late@owner.test';
    const a = await signupAccount(t, email);
    await enrollWallet(t, inbox, email, CARDS.ok);
    const ch = await mpp(t, a.apiKey, 400);
    expect(ch.status, JSON.stringify(ch.body)).toBe(200);
    const id: string = ch.body.challenge_id;
    const s = await approvalSession(t, inbox, email, 400, id);

    // Approve at 14 min 58 s: the token would attach 3 s later, past the 15-minute mark.
    clock.advance(14 * MIN + 58_000);
    const ap = await s.post(s.landing, { action: 'approve' });
    expect(ap.status, ap.html).toBe(200);
    expect(ap.html).toContain('Approved. The payment completes in a few seconds.');
    const mid = await rest(t, 'GET', `/account/credit/topup/mpp/${id}`, { key: a.apiKey });
    expect(mid.body.status).toBe('approved');
    expect(mid.body.expires_at).toBe(ch.body.payment.expires_at);

    clock.advance(5_000);
    const st = await rest(t, 'GET', `/account/credit/topup/mpp/${id}`, { key: a.apiKey });
    expect(st.status, JSON.stringify(st.body)).toBe(402);
    expect(st.body.error.code).toBe('mpp_challenge_expired');
    expect(st.body.error.payment.spend_request.shared_payment_token).toBeNull();
    expect(await balance(t, a.apiKey)).toBe(0);
  });
});
