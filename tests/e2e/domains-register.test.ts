/**
 * Mode register: a domain registered through the registrar (the built-in local registrar, simulated) at signup.
 * Taken, reserved and unsupported names are 409 with real suggestions; otherwise the owner approves a wallet
 * spend request for the first year plus the initial credit, and only then is the domain registered, its zone
 * served and the account provisioned (signup.completed with the key at the callback). Denied or expired:
 * nothing registered, nothing charged. The billing cycle renews the year and charges name service monthly.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { AdjustableClock } from '@boxes/core';
import { rest, waitFor, type TestServer } from '@boxes/testing';
import { CARDS, linkIn, ownerSignIn, startOwnerInbox, startPaymentsServer, type OwnerInbox } from './owner-helpers';
import { receiverCertificate, startReceiver, type Receiver } from './push-helpers';
import { dig, rdata } from './dns-helpers';

const card = (number: string) => ({ number, exp: '12/34', cvc: '123' });
const DAY_MS = 24 * 3600_000;

let t: TestServer;
let inbox: OwnerInbox;
let receiver: Receiver;
const clock = new AdjustableClock();

beforeAll(async () => {
  const pems = await receiverCertificate();
  receiver = await startReceiver(pems);
  inbox = await startOwnerInbox();
  t = await startPaymentsServer(inbox, { clock, env: { WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_CA_FILE: pems.caFile } });
});
afterAll(async () => {
  await t?.stop();
  await inbox?.close();
  await receiver?.close();
});

let n = 0;
const freshName = (tld = 'xyz') => `agent-${Date.now().toString(36)}${n++}.${tld}`;

async function startRegister(name: string, email: string, extra: Record<string, unknown> = {}) {
  return rest(t, 'POST', '/signup/agentic', {
    body: { human_email: email, domain_intent: { mode: 'register', register_domain: name }, agent_callback_webhook: receiver.url(`/${email}`), ...extra },
  });
}

describe('POST /signup/agentic with mode register', () => {
  test('taken, reserved and unsupported names are 409 domain_taken with available suggestions; without a callback the answer carries a claim', async () => {
    for (const [name, reason] of [
      ['google.com', /already registered/],
      ['example.com', /reserved/],
      ['my-agent.test', /reserved/],
      ['my-agent.museum', /not offered/],
    ] as const) {
      const r = await startRegister(name, 'taken@owner.test');
      expect(r.status, JSON.stringify(r.body)).toBe(409);
      expect(r.body.error.code).toBe('domain_taken');
      expect(r.body.error.message).toMatch(reason);
      expect(r.body.error.message).toContain('simulated');
      expect(r.body.error.suggestions.length).toBeGreaterThan(0);
      // Each suggestion really is available: it can be started.
      const s = r.body.error.suggestions[0];
      expect(s).toMatchObject({ mode: 'register', price_cents_per_year: expect.any(Number) });
      const tryIt = await startRegister(s.domain, 'suggested@owner.test');
      expect(tryIt.status, JSON.stringify(tryIt.body)).toBe(200);
    }
    // Without a callback the registration is claimed instead: the answer carries the claim_secret and the claim call.
    const noHook = await rest(t, 'POST', '/signup/agentic', {
      body: { human_email: 'x@owner.test', domain_intent: { mode: 'register', register_domain: freshName() } },
    });
    expect(noHook.status, JSON.stringify(noHook.body)).toBe(200);
    expect(noHook.body.claim_secret).toMatch(/^bxs_claim_/);
    expect(noHook.body.next_step).toMatchObject({ url: `${t.apiBase}/signup/agentic/claim`, body: { claim_secret: noHook.body.claim_secret } });
    const bad = await startRegister('not a domain', 'x@owner.test');
    expect(bad.status).toBe(400);
  });

  test('approved in the wallet: registered, zone served, account provisioned with the credit less the first year', async () => {
    const email = 'register-ok@owner.test';
    const name = freshName('xyz');
    const r = await startRegister(name, email, { initial_credit_cents: 500 });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ status: 'pending_payment', full_domain: name, mode: 'register', next_step: { url: `${t.apiBase}/signup/agentic/claim` } });
    expect(r.body.registration).toMatchObject({ domain: name, price_cents_per_year: 600, years: 1 });
    expect(r.body.registration.registrar).toContain('simulated');
    expect(r.body.local_payment_intent).toMatchObject({ kind: 'signup', status: 'requires_approval', amount_cents: 1100 });
    expect(r.body.local_wallet_spend_request).toMatchObject({
      id: expect.stringMatching(/^spr_/),
      status: 'pending_approval',
      amount_cents: 1100,
      payer_email: email,
    });
    // Nothing is registered before the owner approves.
    expect(await t.db.simulatedRegistryName.count({ where: { name } })).toBe(0);
    const confirm = await rest(t, 'POST', '/signup/agentic/confirm', { body: { intent_id: r.body.intent_id } });
    expect(confirm.body.error.code).toBe('funded_signup');

    const mail = await inbox.waitFor(email, /^Approve \$11\.00 for /);
    const s = await ownerSignIn(t, linkIn(mail));
    expect(s.landing).toBe(`/owner/payments/${r.body.local_payment_intent.id}`);
    const ap = await s.post(s.landing, { action: 'approve', ...card(CARDS.ok), mandate: 'none' });
    expect(ap.html).toContain('Approved and paid');

    const completed = await waitFor(
      'signup.completed at the callback',
      () => receiver.at(`/${email}`).find((x) => x.event.type === 'signup.completed'),
      15_000,
    );
    const key = completed.event.api_key!;
    expect(completed.event.data).toMatchObject({ primary_address: `agent@${name}`, mode: 'register' });
    const domains = (await rest(t, 'GET', '/account/domain', { key })).body.domains;
    expect(domains[0]).toMatchObject({ name, mode: 'register', status: 'active' });
    const types = (await rest(t, 'GET', '/events?limit=50', { key })).body.events.map((e: any) => e.type);
    expect(types).toEqual(expect.arrayContaining(['signup.completed', 'domain.ready', 'domain.registered']));
    // 11.00 landed, the year (6.00) taken from it.
    const usage = (await rest(t, 'GET', '/account/credit/usage', { key })).body.usage;
    expect(usage.find((u: any) => u.type === 'signup_credit').amount_micros).toBe(11_000_000);
    expect(usage.find((u: any) => u.type === 'domain_registration').amount_micros).toBe(-6_000_000);
    expect((await rest(t, 'GET', '/account/credit/balance', { key })).body.credit_balance_cents).toBe(500);
    // The registry has it, for a year, and the zone is served with the mail records.
    const reg = await t.db.simulatedRegistryName.findUniqueOrThrow({ where: { name } });
    expect(reg.holder).toBe(email);
    const zone = await t.db.dnsZone.findUniqueOrThrow({ where: { name }, include: { records: true } });
    expect(zone.kind).toBe('registered');
    expect(zone.records.map((x) => x.type).sort()).toEqual(['MX', 'NS', 'NS', 'TXT', 'TXT', 'TXT']);
    // ... and answered by the instance's DNS.
    const mx = await dig(t.dnsPort!, name, 'MX');
    expect(mx.flags).toContain('aa');
    expect(rdata(mx.answer)).toEqual([`10 ${t.config.mailHost}.`]);
    expect(rdata((await dig(t.dnsPort!, name, 'NS')).answer)).toEqual(t.config.nameservers.map((x) => `${x}.`).sort());
    // Mail flows at once: a send from the new domain is accepted.
    const sent = await rest(t, 'POST', '/messages/send', { key, body: { to: `agent@${name}`, subject: 'hello me', text: 'registered' } });
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    // The name is now taken, here and at the registrar.
    const again = await startRegister(name, 'late@owner.test');
    expect(again.status).toBe(409);
  });

  test('without a callback: once the owner approves, the claim answers with the registered account and its key, once', async () => {
    const email = 'register-claim@owner.test';
    const name = freshName('xyz');
    const r = await rest(t, 'POST', '/signup/agentic', { body: { human_email: email, domain_intent: { mode: 'register', register_domain: name } } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const claim = () => rest(t, 'POST', '/signup/agentic/claim', { body: r.body.next_step.body });
    expect((await claim()).body).toMatchObject({ status: 'pending_payment', payment: { status: 'requires_approval' } });
    const mail = await inbox.waitFor(email, /^Approve \$6\.00 for /);
    const s = await ownerSignIn(t, linkIn(mail));
    expect((await s.post(s.landing, { action: 'approve', ...card(CARDS.ok), mandate: 'none' })).html).toContain('Approved and paid');
    const done = await claim();
    expect(done.status, JSON.stringify(done.body)).toBe(200);
    expect(done.body).toMatchObject({
      status: 'completed',
      full_domain: name,
      account: { primary_address: `agent@${name}`, domain: name, domain_status: 'active' },
    });
    const key = done.body.account.api_key;
    expect((await rest(t, 'GET', '/account/domain', { key })).body.domains[0]).toMatchObject({ name, mode: 'register', status: 'active' });
    expect((await claim()).status).toBe(409);
  });

  test('denied or expired: nothing registered, nothing charged, no account', async () => {
    const email = 'register-deny@owner.test';
    const denied = freshName('com');
    const r = await startRegister(denied, email);
    expect(r.body.local_wallet_spend_request.amount_cents).toBe(1200);
    const mail = await inbox.waitFor(email, /^Approve \$12\.00 for /);
    const s = await ownerSignIn(t, linkIn(mail));
    const d = await s.post(s.landing, { action: 'deny' });
    expect(d.status, d.html).toBe(200);
    expect(await t.db.payment.findUniqueOrThrow({ where: { id: r.body.local_payment_intent.id } })).toMatchObject({ status: 'denied', settledAt: null });

    const expired = freshName('org');
    const r2 = await startRegister(expired, 'register-expire@owner.test');
    expect(r2.status).toBe(200);
    clock.advance(DAY_MS + 60_000);
    await t.runtime.worker!.billing.cycle();
    expect((await t.db.payment.findUniqueOrThrow({ where: { id: r2.body.local_payment_intent.id } })).status).toBe('expired');

    for (const name of [denied, expired]) {
      expect(await t.db.simulatedRegistryName.count({ where: { name } })).toBe(0);
      expect(await t.db.domain.count({ where: { name } })).toBe(0);
      expect(await t.db.ledgerEntry.count({ where: { description: { contains: name } } })).toBe(0);
    }
  });

  test('the billing cycle: name service each month and the renewal when the year ends, once each', async () => {
    const email = 'register-renew@owner.test';
    const name = freshName('net');
    const r = await startRegister(name, email, { initial_credit_cents: 100 });
    const mail = await inbox.waitFor(email, /^Approve \$15\.00 for /);
    const s = await ownerSignIn(t, linkIn(mail));
    expect((await s.post(s.landing, { action: 'approve', ...card(CARDS.ok), mandate: 'none' })).html).toContain('Approved and paid');
    const completed = await waitFor('signup.completed', () => receiver.at(`/${email}`).find((x) => x.event.type === 'signup.completed'), 15_000);
    const key = completed.event.api_key!;
    const accountId = completed.event.data.account_id as string;
    await t.runtime.worker!.billing.cycle();
    const maintenance = async () => t.db.ledgerEntry.count({ where: { accountId, type: 'domain_maintenance' } });
    expect(await maintenance()).toBe(1);
    expect(await t.db.ledgerEntry.count({ where: { accountId, type: 'domain_renewal' } })).toBe(0);

    // A year and a day later: renewed once (at $14.00, the .net price), whatever the balance (it goes negative).
    clock.advance(366 * DAY_MS);
    await t.runtime.worker!.billing.cycle();
    await t.runtime.worker!.billing.cycle();
    const renewals = await t.db.ledgerEntry.findMany({ where: { accountId, type: 'domain_renewal' } });
    expect(renewals.map((e) => e.amountMicros)).toEqual([-14_000_000n]);
    expect(await maintenance()).toBeGreaterThanOrEqual(12);
    const reg = await t.db.domainRegistration.findFirstOrThrow({ where: { name } });
    expect(reg.expiresAt.getTime()).toBeGreaterThan(clock.now().getTime() + 300 * DAY_MS);
    expect((await t.db.simulatedRegistryName.findUniqueOrThrow({ where: { name } })).expiresAt).toEqual(reg.expiresAt);
    const bal = (await rest(t, 'GET', '/account/credit/balance', { key })).body;
    expect(bal.credit_balance_cents).toBeLessThan(0);
    expect((await rest(t, 'GET', '/events?type=billing.deficit', { key })).body.events).toHaveLength(1);
  });
});
