// The owner's Pause buttons in a real browser (Debian's Chromium, driven by playwright-core): the owner asks for a
// sign-in link on /owner, opens it from the email, presses Continue, and on the home page pauses a box and then
// the whole account with one click each, with JavaScript off (plain HTML forms). The agent's key is refused
// meanwhile and cannot lift the owner's pause; Resume in the browser gives sending back.
import { afterAll, beforeAll, expect, test } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { launchChromium } from './browser-helpers';
import { rest, signupAccount, type TestAccount, type TestServer } from '@boxes/testing';
import { linkIn, startOwnerInbox, startPaymentsServer, type OwnerInbox } from './owner-helpers';

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

const send = (a: TestAccount, body: Record<string, unknown>) =>
  rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: `someone-${Date.now()}@remote.invalid`, text: 'hello', ...body } });

/** Presses a button of a form and waits for the page the POST (and its 303) leads to. */
async function press(page: Page, name: string): Promise<void> {
  await Promise.all([page.waitForURL(/\/owner\?(paused|resumed)=1$/), page.getByRole('button', { name, exact: true }).click()]);
}

test('the owner pauses a box and the account with one click each; only the owner resumes', async () => {
  const human = 'pauser@owner.test';
  const a = await signupAccount(t, human);
  const billing = (await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'billing' } })).body;
  const page = await (await browser.newContext({ javaScriptEnabled: false })).newPage();

  // Sign in: ask for a link on /owner, open it from the email, Continue.
  await page.goto(`${t.url}/owner`);
  await page.getByLabel('Your email').fill(human);
  await Promise.all([page.waitForLoadState('load'), page.getByRole('button', { name: 'Email me a link' }).click()]);
  const link = linkIn(await inbox.waitFor(human, /sign-in link/));
  await page.goto(link);
  await Promise.all([page.waitForURL(/\/owner$/), page.getByRole('button', { name: 'Continue' }).click()]);
  expect(await page.getByRole('heading', { name: 'Your agents' }).isVisible()).toBe(true);

  // One click pauses the billing box: its sends are refused, the primary box still sends.
  await press(page, `Pause ${billing.address}`);
  expect(await page.getByRole('status').innerText()).toContain('Paused');
  expect(await page.locator(`li[data-box="${billing.id}"]`).innerText()).toMatch(/paused\s+since .* by you/);
  const boxRefused = await send(a, { from: billing.address });
  expect(boxRefused.status).toBe(403);
  expect(boxRefused.body.error.code).toBe('box_paused');
  expect((await send(a, {})).status).toBe(200);

  // One click pauses the account: every send is refused, and the agent's owner key cannot resume it.
  await press(page, `Pause the account ${a.primaryAddress}`);
  const refused = await send(a, {});
  expect(refused.status).toBe(403);
  expect(refused.body.error.code).toBe('account_paused');
  expect(refused.body.error.paused_by).toBe('owner');
  const resume = await rest(t, 'POST', '/account/resume', { key: a.apiKey });
  expect(resume.status).toBe(403);
  expect(resume.body.error.code).toBe('paused_by_owner');
  expect((await rest(t, 'POST', `/boxes/${billing.id}/resume`, { key: a.apiKey })).body.error.code).toBe('paused_by_owner');

  // Resume in the browser: sending is back, for the account and then the box.
  await press(page, `Resume the account ${a.primaryAddress}`);
  expect((await send(a, {})).status).toBe(200);
  expect((await send(a, { from: billing.address })).body.error.code).toBe('box_paused');
  await press(page, `Resume ${billing.address}`);
  expect((await send(a, { from: billing.address })).status).toBe(200);
  expect(await page.locator(`li[data-account="${a.accountId}"]`).innerText()).not.toContain('paused');

  const types = (await rest(t, 'GET', '/events?type=account.paused,account.resumed,box.paused,box.resumed', { key: a.apiKey })).body.events.map(
    (e: { type: string; data: { paused_by?: string; resumed_by?: string } }) => `${e.type}:${e.data.paused_by ?? e.data.resumed_by}`,
  );
  expect(types).toEqual(['box.paused:owner', 'account.paused:owner', 'account.resumed:owner', 'box.resumed:owner']);
});
