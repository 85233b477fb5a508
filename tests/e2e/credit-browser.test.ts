// The owner's payment pages in a real browser (Debian's Chromium, driven by playwright-core): the emailed
// single-use link, Continue, and the approval page, for a card top-up (card typed on the page) and for MPP
// wallet payments approved and denied; then what the agent sees over the API. The pages are plain HTML
// forms, so the card flow runs with JavaScript switched off. scripts/start-services.sh installs chromium.
import { afterAll, afterEach, beforeAll, expect, test } from 'vitest';
import type { Browser, BrowserContext, Locator, Page } from 'playwright-core';
import { launchChromium } from './browser-helpers';
import { rest, signupAccount, type TestServer } from '@boxes/testing';
import { CARDS, enrollWallet, linkIn, startOwnerInbox, startPaymentsServer, type OwnerInbox } from './owner-helpers';

let t: TestServer;
let inbox: OwnerInbox;
let browser: Browser;
beforeAll(async () => {
  inbox = await startOwnerInbox();
  t = await startPaymentsServer(inbox);
  browser = await launchChromium([]);
});
afterAll(async () => {
  await browser?.close();
  await t?.stop();
  await inbox?.close();
});

// A fresh context per test: no owner cookie carries over from one flow to the next.
const contexts: BrowserContext[] = [];
async function newPage(opts: { javaScriptEnabled?: boolean } = {}): Promise<Page> {
  const context = await browser.newContext(opts);
  contexts.push(context);
  return context.newPage();
}
afterEach(async () => {
  await Promise.all(contexts.splice(0).map((c) => c.close()));
});

/** Clicks a submit button and returns the response to the form's POST (the pages answer POSTs in place). */
async function submit(page: Page, button: Locator): Promise<number> {
  const [res] = await Promise.all([page.waitForResponse((r) => r.request().method() === 'POST' && r.request().isNavigationRequest()), button.click()]);
  await page.waitForLoadState('load');
  return res.status();
}

/** Opens an emailed link as the owner would: the link page, then Continue; returns on the page it led to. */
async function openAndContinue(page: Page, link: string): Promise<void> {
  const res = await page.goto(link);
  expect(res?.status()).toBe(200);
  expect(await page.getByRole('heading', { level: 1 }).innerText()).toBe('Continue to Boxes');
  // Continue spends the link, sets the session cookie and redirects (303) to the payment page.
  await page.getByRole('button', { name: 'Continue' }).click();
  await page.waitForURL(/\/owner\/payments\/[A-Za-z0-9_]+$/);
}

/** The text of the <dd> after the <dt> named `term` in the payment's description. */
const detail = (page: Page, term: string) => page.locator('dl dt', { hasText: term }).locator('xpath=following-sibling::dd[1]').innerText();

test('card top-up: the owner opens the link, types a card and approves, with JavaScript off', async () => {
  const email = 'card@owner.test';
  const a = await signupAccount(t, email);
  const topup = await rest(t, 'POST', '/account/credit/topup', { key: a.apiKey, body: { amount_cents: 700 } });
  expect(topup.status, JSON.stringify(topup.body)).toBe(200);
  // No saved card, so no mandate: the owner has to approve.
  expect(topup.body.payment.status).toBe('requires_approval');
  expect(topup.body.mandate.applied).toBe(false);
  const id: string = topup.body.payment.id;

  const mail = await inbox.waitFor(email, /Approve \$7\.00/);
  // The pages promise to need no scripts; an owner with JavaScript off must be able to pay.
  const page = await newPage({ javaScriptEnabled: false });
  await openAndContinue(page, linkIn(mail));
  expect(new URL(page.url()).pathname).toBe(`/owner/payments/${id}`);

  // What the owner is asked to approve: the amount, for which account, and the two choices.
  expect(await page.getByRole('heading', { level: 1 }).innerText()).toBe('Approve $7.00?');
  expect(await detail(page, 'Amount')).toBe('$7.00');
  expect(await detail(page, 'Account')).toBe(a.primaryAddress);
  expect(await detail(page, 'What')).toBe('Credit top-up');
  expect(await page.getByRole('button', { name: 'Approve $7.00' }).isVisible()).toBe(true);
  expect(await page.getByRole('button', { name: 'Deny' }).isVisible()).toBe(true);

  // Accessibility basics: the language is declared, there is one main heading, and every control a person
  // fills in has a <label> pointing at it (so getByLabel finds it by the label's words).
  expect(await page.locator('html').getAttribute('lang')).toBe('en');
  expect(await page.locator('h1').count()).toBe(1);
  expect(await page.locator('script').count()).toBe(0);
  const controls = page.locator('input:not([type=hidden]), select, textarea');
  expect(await controls.count()).toBe(4);
  for (const control of await controls.all()) {
    const cid = await control.getAttribute('id');
    expect(cid, 'a control without an id cannot have a label[for]').toBeTruthy();
    const label = page.locator(`label[for="${cid}"]`);
    expect(await label.count(), `label for #${cid}`).toBe(1);
    expect(await page.getByLabel((await label.innerText()).trim(), { exact: true }).getAttribute('id')).toBe(cid);
  }
  expect(await page.getByRole('group', { name: 'Pay with a card' }).isVisible()).toBe(true);

  await page.getByLabel('Card number').fill(CARDS.ok);
  await page.getByLabel('Expiry (MM/YY)').fill('12/34');
  await page.getByLabel('Security code').fill('123');
  // Leave the mandate at its default: this payment only, no automatic top-ups.
  expect(await page.getByLabel('Also allow automatic top-ups with this card').inputValue()).toBe('none');
  expect(await submit(page, page.getByRole('button', { name: 'Approve $7.00' }))).toBe(200);

  expect(await page.getByRole('status').innerText()).toBe('Approved and paid. The credit has landed.');
  expect(await detail(page, 'Status')).toBe('Paid; the credit has landed');
  // Decided: nothing left to approve or deny.
  expect(await page.getByRole('button').count()).toBe(0);

  const bal = await rest(t, 'GET', '/account/credit/balance', { key: a.apiKey });
  expect(bal.body.credit_balance_cents).toBe(700);
  const after = await rest(t, 'GET', `/account/credit/topup/${id}`, { key: a.apiKey });
  expect(after.status, JSON.stringify(after.body)).toBe(200);
  expect(after.body.status).toBe('succeeded');
  expect(after.body.paid_via).toBe('owner');
});

test('card top-up: a declined card leaves the card form on the page, and another card pays right there', async () => {
  const email = 'declined@owner.test';
  const a = await signupAccount(t, email);
  const topup = await rest(t, 'POST', '/account/credit/topup', { key: a.apiKey, body: { amount_cents: 900 } });
  expect(topup.status, JSON.stringify(topup.body)).toBe(200);
  const id: string = topup.body.payment.id;
  const page = await newPage({ javaScriptEnabled: false });
  await openAndContinue(page, linkIn(await inbox.waitFor(email, /Approve \$9\.00/)));

  await page.getByLabel('Card number').fill(CARDS.declined);
  await page.getByLabel('Expiry (MM/YY)').fill('12/34');
  await page.getByLabel('Security code').fill('123');
  expect(await submit(page, page.getByRole('button', { name: 'Approve $9.00' }))).toBe(402);
  expect(await page.getByRole('alert').innerText()).toContain('Try another card');
  expect(await detail(page, 'Card')).toMatch(/^declined \(/);
  // The page that says "try another card" has the form for it (the declined card is not offered again).
  expect(await page.getByRole('group', { name: 'Pay with another card' }).isVisible()).toBe(true);
  expect(await page.getByText(/was declined\.$/).isVisible()).toBe(true);
  expect(await page.getByText(/^Pay with your saved card/).count()).toBe(0);
  expect(await page.getByLabel('Card number').inputValue()).toBe('');

  await page.getByLabel('Card number').fill(CARDS.ok);
  await page.getByLabel('Expiry (MM/YY)').fill('12/34');
  await page.getByLabel('Security code').fill('123');
  expect(await submit(page, page.getByRole('button', { name: 'Approve $9.00' }))).toBe(200);
  expect(await page.getByRole('status').innerText()).toBe('Approved and paid. The credit has landed.');
  expect(await detail(page, 'Status')).toBe('Paid; the credit has landed');
  expect((await rest(t, 'GET', '/account/credit/balance', { key: a.apiKey })).body.credit_balance_cents).toBe(900);
  expect((await rest(t, 'GET', `/account/credit/topup/${id}`, { key: a.apiKey })).body.status).toBe('succeeded');
});

/** An account whose owner's wallet has a card, and an MPP challenge for `cents` waiting on the owner. */
async function mppChallenge(email: string, cents: number) {
  const a = await signupAccount(t, email);
  await enrollWallet(t, inbox, email);
  const ch = await rest(t, 'POST', '/account/credit/topup/mpp', { key: a.apiKey, body: { amount_cents: cents } });
  expect(ch.status, JSON.stringify(ch.body)).toBe(200);
  expect(ch.body.spend_request.status).toBe('pending_approval');
  // enrollWallet's sign-in mail went to the same address; the approval mail is the one naming the amount.
  const mail = await inbox.waitFor(email, new RegExp(`^Approve \\$${(cents / 100).toFixed(2).replace('.', '\\.')} `));
  return { a, id: ch.body.challenge_id as string, link: linkIn(mail) };
}

test('MPP: the owner denies in the browser; the agent sees denied and no credit', async () => {
  const { a, id, link } = await mppChallenge('deny@owner.test', 500);
  const page = await newPage();
  await openAndContinue(page, link);
  expect(new URL(page.url()).pathname).toBe(`/owner/payments/${id}`);
  expect(await page.getByRole('heading', { level: 1 }).innerText()).toBe('Approve $5.00?');
  expect(await detail(page, 'Amount')).toBe('$5.00');
  expect(await detail(page, 'Account')).toBe(a.primaryAddress);
  // The wallet's saved card pays: the page asks for no card.
  expect(await page.getByText(/Your wallet pays with .* 4242/).isVisible()).toBe(true);
  expect(await page.getByLabel('Card number').count()).toBe(0);

  expect(await submit(page, page.getByRole('button', { name: 'Deny' }))).toBe(200);
  expect(await page.getByRole('status').innerText()).toBe('You denied this payment. Nothing was charged.');
  expect(await detail(page, 'Status')).toBe('Denied');

  const done = await rest(t, 'GET', `/account/credit/topup/mpp/${id}?wait_seconds=5`, { key: a.apiKey });
  expect(done.status, JSON.stringify(done.body)).toBe(200);
  expect(done.body.status).toBe('denied');
  expect(done.body.spend_request.status).toBe('denied');
  expect(done.body.spend_request.shared_payment_token).toBeNull();
  const bal = await rest(t, 'GET', '/account/credit/balance', { key: a.apiKey });
  expect(bal.body.credit_balance_cents).toBe(0);
});

test('MPP: the owner approves in the browser; the token attaches and the credit lands', async () => {
  const { a, id, link } = await mppChallenge('approve@owner.test', 500);
  const page = await newPage();
  await openAndContinue(page, link);
  expect(await page.getByLabel('Card number').count()).toBe(0);

  expect(await submit(page, page.getByRole('button', { name: 'Approve $5.00' }))).toBe(200);
  // Approval only schedules the wallet's token; the payment completes a moment later.
  expect(await page.getByRole('status').innerText()).toBe('Approved. The payment completes in a few seconds.');

  const done = await rest(t, 'GET', `/account/credit/topup/mpp/${id}?wait_seconds=15`, { key: a.apiKey });
  expect(done.status, JSON.stringify(done.body)).toBe(200);
  expect(done.body.status).toBe('succeeded');
  expect(done.body.spend_request.shared_payment_token).toMatch(/^spt_/);
  const bal = await rest(t, 'GET', '/account/credit/balance', { key: a.apiKey });
  expect(bal.body.credit_balance_cents).toBe(500);

  // The owner's page, opened again (a GET, with the session), shows the payment as paid.
  await page.goto(`${t.url}/owner/payments/${id}`);
  expect(await detail(page, 'Status')).toBe('Paid; the credit has landed');
  expect(await page.getByRole('heading', { level: 1 }).innerText()).toBe('Payment');
});

test('a link works once: opened again after Continue, it says it was used (410)', async () => {
  const email = 'once@owner.test';
  const a = await signupAccount(t, email);
  const topup = await rest(t, 'POST', '/account/credit/topup', { key: a.apiKey, body: { amount_cents: 300 } });
  expect(topup.body.payment.status).toBe('requires_approval');
  const link = linkIn(await inbox.waitFor(email, /Approve \$3\.00/));

  const page = await newPage();
  await openAndContinue(page, link);
  // The same browser (it holds the session cookie) and a fresh one both get the used-link page.
  for (const p of [page, await newPage()]) {
    const res = await p.goto(link);
    expect(res?.status()).toBe(410);
    expect(await p.getByRole('heading', { level: 1 }).innerText()).toBe('Link not valid');
    expect(await p.getByRole('alert').innerText()).toContain('already used');
    expect(await p.getByRole('button', { name: 'Continue' }).count()).toBe(0);
  }
  // Spending the link did not decide anything.
  const status = await rest(t, 'GET', `/account/credit/topup/${topup.body.payment.id}`, { key: a.apiKey });
  expect(status.body.status).toBe('requires_approval');
});
