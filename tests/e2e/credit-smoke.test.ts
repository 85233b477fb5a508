// A quick end-to-end pass over the payments flow: wallet enrollment, an MPP challenge approved by the owner, and the credit landing.
import { afterAll, beforeAll, expect, test } from 'vitest';
import { createBoxesClient, topUpWithMpp } from '@boxes/sdk';
import { rest, signupAccount, type TestServer } from '@boxes/testing';
import { enrollWallet, linkIn, ownerSignIn, startOwnerInbox, startPaymentsServer, type OwnerInbox } from './owner-helpers';

let t: TestServer;
let inbox: OwnerInbox;
beforeAll(async () => {
  inbox = await startOwnerInbox();
  t = await startPaymentsServer(inbox);
});
afterAll(async () => {
  await t?.stop();
  await inbox?.close();
});

test('MPP: not enrolled -> 402; enrolled -> owner approves -> token -> credit', async () => {
  const a = await signupAccount(t, 'smoke@owner.test');
  const first = await rest(t, 'POST', '/account/credit/topup/mpp', { key: a.apiKey, body: { amount_cents: 500 } });
  expect(first.status, JSON.stringify(first.body)).toBe(402);
  expect(first.body.error.code).toBe('wallet_not_enrolled');
  await enrollWallet(t, inbox, 'smoke@owner.test');
  const ch = await rest(t, 'POST', '/account/credit/topup/mpp', { key: a.apiKey, body: { amount_cents: 500 } });
  expect(ch.status, JSON.stringify(ch.body)).toBe(200);
  expect(ch.body.spend_request.status).toBe('pending_approval');
  const mail = await inbox.waitFor('smoke@owner.test', /Approve \$5\.00/);
  const s = await ownerSignIn(t, linkIn(mail));
  expect(s.landing).toBe(`/owner/payments/${ch.body.challenge_id}`);
  const r = await s.post(s.landing, { action: 'approve' });
  expect(r.html).toContain('Approved');
  const done = await rest(t, 'GET', `/account/credit/topup/mpp/${ch.body.challenge_id}?wait_seconds=10`, { key: a.apiKey });
  expect(done.status, JSON.stringify(done.body)).toBe(200);
  expect(done.body.status).toBe('succeeded');
  expect(done.body.spend_request.shared_payment_token).toMatch(/^spt_/);
  const bal = await rest(t, 'GET', '/account/credit/balance', { key: a.apiKey });
  expect(bal.body.credit_balance_cents).toBe(500);
});

test('SDK: topUpWithMpp waits for the owner and returns the settled payment', async () => {
  const a = await signupAccount(t, 'smoke-sdk@owner.test');
  await enrollWallet(t, inbox, 'smoke-sdk@owner.test');
  const client = createBoxesClient({ baseUrl: t.url, apiKey: a.apiKey });
  const approve = async () => {
    const mail = await inbox.waitFor('smoke-sdk@owner.test', /Approve \$2\.50/);
    const s = await ownerSignIn(t, linkIn(mail));
    await s.post(s.landing, { action: 'approve' });
  };
  const [paid] = await Promise.all([topUpWithMpp(client, 250, { timeoutMs: 30_000 }), approve()]);
  expect(paid.status).toBe('succeeded');
  expect((await client.credit.balance.query()).credit_balance_cents).toBe(250);
});

test('an approved MPP payment completes even when its token job is lost: the next read or the billing sweep settles it', async () => {
  const a = await signupAccount(t, 'smoke-restart@owner.test');
  await enrollWallet(t, inbox, 'smoke-restart@owner.test');
  const ch = await rest(t, 'POST', '/account/credit/topup/mpp', { key: a.apiKey, body: { amount_cents: 300 } });
  expect(ch.status, JSON.stringify(ch.body)).toBe(200);
  const s = await ownerSignIn(t, linkIn(await inbox.waitFor('smoke-restart@owner.test', /Approve \$3\.00/)));
  // The delayed token job is removed, as if Redis had lost it with a worker that crashed.
  await t.svc.jobs.billing.pause();
  try {
    await s.post(s.landing, { action: 'approve' });
    for (const job of await t.svc.jobs.billing.getDelayed()) if (job.data.paymentId === ch.body.challenge_id) await job.remove();
    await new Promise((r) => setTimeout(r, 3_500));
    const row = await t.db.payment.findUniqueOrThrow({ where: { id: ch.body.challenge_id } });
    expect(row.status).toBe('approved');
    // The billing cycle's sweep finds the payment whose token is due and completes it, once.
    const cycle = await t.runtime.worker!.billing.cycle();
    expect(cycle.payments).toBeGreaterThanOrEqual(1);
  } finally {
    await t.svc.jobs.billing.resume();
  }
  const done = await rest(t, 'GET', `/account/credit/topup/mpp/${ch.body.challenge_id}`, { key: a.apiKey });
  expect(done.body.status).toBe('succeeded');
  expect((await rest(t, 'GET', '/account/credit/balance', { key: a.apiKey })).body.credit_balance_cents).toBe(300);
  expect(await t.db.ledgerEntry.count({ where: { paymentId: ch.body.challenge_id } })).toBe(1);
});

test('abuse limits: 10 payments waiting at once, then 429; one enrollment mail per address per 10 minutes; a cross-site Continue is refused', async () => {
  const a = await signupAccount(t, 'smoke-limits@owner.test');
  for (let i = 0; i < 10; i++) {
    const r = await rest(t, 'POST', '/account/credit/topup', { key: a.apiKey, body: { amount_cents: 100 + i } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  }
  const over = await rest(t, 'POST', '/account/credit/topup', { key: a.apiKey, body: { amount_cents: 150 } });
  expect(over.status).toBe(429);
  expect(over.body.error).toMatchObject({ code: 'rate_limited', pending_payments: 10 });

  const b = await signupAccount(t, 'smoke-enroll@owner.test');
  for (let i = 0; i < 3; i++) expect((await rest(t, 'POST', '/account/credit/topup/mpp', { key: b.apiKey, body: { amount_cents: 100 } })).status).toBe(402);
  await inbox.waitFor('smoke-enroll@owner.test', /Set up your wallet/);
  expect(await t.db.notice.count({ where: { to: 'smoke-enroll@owner.test', kind: 'wallet.enroll' } })).toBe(1);

  // A hostile page posting its own link's Continue form from the owner's browser (login CSRF) is refused, and
  // the link stays unused.
  const link = linkIn(await inbox.waitFor('smoke-limits@owner.test', /Approve \$1\.00/));
  const hostile = await fetch(link, { method: 'POST', headers: { origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' }, redirect: 'manual' });
  expect(hostile.status).toBe(403);
  expect((await ownerSignIn(t, link)).landing).toMatch(/^\/owner\/payments\/pi_/);
});
