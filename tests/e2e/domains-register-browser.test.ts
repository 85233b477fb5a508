// Mode register in a real browser (Debian's Chromium through playwright-core): the owner opens the emailed
// link, sees what the payment is for (the registration with the simulated local registrar) and approves with a
// card, JavaScript off; the account then arrives at the callback with its domain registered and live.
import { afterAll, beforeAll, expect, test } from 'vitest';
import type { Browser } from 'playwright-core';
import { rest, waitFor, type TestServer } from '@boxes/testing';
import { launchChromium } from './browser-helpers';
import { CARDS, linkIn, startOwnerInbox, startPaymentsServer, type OwnerInbox } from './owner-helpers';
import { receiverCertificate, startReceiver, type Receiver } from './push-helpers';

let t: TestServer;
let inbox: OwnerInbox;
let receiver: Receiver;
let browser: Browser;

beforeAll(async () => {
  const pems = await receiverCertificate();
  receiver = await startReceiver(pems);
  inbox = await startOwnerInbox();
  t = await startPaymentsServer(inbox, { env: { WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_CA_FILE: pems.caFile } });
  browser = await launchChromium([]);
});
afterAll(async () => {
  await browser?.close();
  await t?.stop();
  await inbox?.close();
  await receiver?.close();
});

test('the owner approves a registration in the browser; the domain is registered and the account provisioned', async () => {
  const email = 'register-browser@owner.test';
  const name = `browser-${Date.now().toString(36)}.com`;
  const r = await rest(t, 'POST', '/signup/agentic', {
    body: {
      human_email: email,
      domain_intent: { mode: 'register', register_domain: name },
      agent_callback_webhook: receiver.url('/register'),
      initial_credit_cents: 300,
    },
  });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  const id: string = r.body.local_payment_intent.id;
  const mail = await inbox.waitFor(email, /^Approve \$15\.00 for /);

  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  expect((await page.goto(linkIn(mail)))?.status()).toBe(200);
  await page.getByRole('button', { name: 'Continue' }).click();
  await page.waitForURL(new RegExp(`/owner/payments/${id}$`));
  const detail = (term: string) => page.locator('dl dt', { hasText: term }).locator('xpath=following-sibling::dd[1]').innerText();
  expect(await page.getByRole('heading', { level: 1 }).innerText()).toBe('Approve $15.00?');
  expect(await detail('What')).toMatch(/Registration of the domain for one year \(with the simulated local registrar\)/);
  expect(await detail('Account')).toContain(`agent@${name}`);
  await page.getByLabel('Card number').fill(CARDS.ok);
  await page.getByLabel('Expiry (MM/YY)').fill('12/34');
  await page.getByLabel('Security code').fill('123');
  await Promise.all([page.waitForResponse((x) => x.request().method() === 'POST'), page.getByRole('button', { name: 'Approve $15.00' }).click()]);
  await page.waitForLoadState('load');
  expect(await page.getByRole('status').innerText()).toMatch(/Approved and paid/);
  await context.close();

  const completed = await waitFor('signup.completed', () => receiver.at('/register').find((x) => x.event.type === 'signup.completed'), 15_000);
  const key = completed.event.api_key!;
  const account = (await rest(t, 'GET', '/account', { key })).body;
  expect(account).toMatchObject({ primary_address: `agent@${name}`, domain: { name, mode: 'register', status: 'active' } });
  // $15.00 paid: the .com year ($12.00) and $3.00 of credit.
  expect(account.credit_balance_cents).toBe(300);
  expect(await t.db.simulatedRegistryName.count({ where: { name } })).toBe(1);
});
