// Closing an account under close protection, with the owner approving in a real browser (Debian's Chromium
// driven by playwright-core): the emailed link, Continue, the close page, "Close the account"; then the keys are
// dead and the export link shown on the page downloads the archive.
import { afterAll, beforeAll, expect, test } from 'vitest';
import type { Browser } from 'playwright-core';
import { launchChromium } from './browser-helpers';
import { rest, signupAccount, waitFor, type TestServer } from '@boxes/testing';
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

test('the owner approves closing a protected account in the browser', async () => {
  const email = 'browser-close@owner.test';
  const a = await signupAccount(t, email);
  expect((await rest(t, 'POST', '/account/close-protection', { key: a.apiKey, body: { enabled: true } })).body.enabled).toBe(true);
  const del = await rest(t, 'DELETE', '/account', { key: a.apiKey, body: { confirm_domain: a.domain } });
  expect(del.body.status).toBe('pending_owner_approval');
  expect((await rest(t, 'GET', '/account', { key: a.apiKey })).status).toBe(200);

  const mail = await inbox.waitFor(email, /Approve closing your Boxes account/);
  expect(mail.text).toContain(a.domain);
  const context = await browser.newContext({ javaScriptEnabled: false });
  try {
    const page = await context.newPage();
    expect((await page.goto(linkIn(mail)))?.status()).toBe(200);
    expect(await page.getByRole('heading', { level: 1 }).innerText()).toBe('Continue to Boxes');
    await page.getByRole('button', { name: 'Continue' }).click();
    await page.waitForURL(new RegExp(`/owner/close/${del.body.close_request.id}$`));
    expect(await page.getByRole('heading', { level: 1 }).innerText()).toBe(`Close ${a.domain}?`);
    expect(await page.locator('#status').innerText()).toBe('Waiting for your decision');
    await Promise.all([page.waitForResponse((r) => r.request().method() === 'POST'), page.getByRole('button', { name: 'Close the account' }).click()]);
    await page.waitForLoadState('load');
    expect(await page.locator('#status').innerText()).toBe('Approved: the account is closing');
    expect(await page.getByRole('status').innerText()).toMatch(/The account is closing\. Every key is revoked\./);
    const href = await page.locator('#export-link').getAttribute('href');
    expect(href).toMatch(new RegExp(`^${t.url}/exports/[\\w-]+$`));

    // The keys died when the owner approved.
    expect((await rest(t, 'GET', '/account', { key: a.apiKey })).status).toBe(401);
    const closing = await t.db.event.findFirstOrThrow({ where: { accountId: a.accountId, type: 'account.closing' } });
    expect(closing.data).toMatchObject({ approved_by_owner: true, close_request_id: del.body.close_request.id });
    // The link on the page downloads the archive once it is built, as the mailed one does.
    const ready = await inbox.waitFor(email, /data export .* is ready/, 30_000);
    expect(ready.text).toContain(href!);
    const res = await waitFor('the archive', async () => {
      const r = await fetch(href!);
      return r.status === 200 ? r : null;
    });
    expect(res.headers.get('content-type')).toBe('application/x-tar');
    // Decided: the page no longer offers to close.
    await page.goto(page.url());
    expect(await page.getByRole('button', { name: 'Close the account' }).count()).toBe(0);
  } finally {
    await context.close();
  }
});
