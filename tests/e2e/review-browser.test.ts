// The owner's review page in a real browser (Debian's Chromium, driven by playwright-core), with JavaScript off as
// the pages need none: the emailed single-use link, Continue, the message as it will go (the html shown as its
// source, never rendered), Approve (the message reaches a local SMTP sink) and Deny (nothing leaves).
import { simpleParser } from 'mailparser';
import { afterAll, afterEach, beforeAll, expect, test } from 'vitest';
import type { Browser, BrowserContext, Locator, Page } from 'playwright-core';
import { staticResolver } from '@boxes/mail';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { launchChromium } from './browser-helpers';
import { MailSink, unique, waitFor } from './mail-send-helpers';
import { linkIn, OWNER_DOMAIN, startOwnerInbox, type OwnerInbox } from './owner-helpers';

let t: TestServer;
let sink: MailSink;
let inbox: OwnerInbox;
let browser: Browser;
beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  inbox = await startOwnerInbox();
  t = await startTestServer({ worker: true, resolver: staticResolver({ [OWNER_DOMAIN]: { host: '127.0.0.1', port: inbox.port } }, sink.resolver()) });
  browser = await launchChromium([]);
});
afterAll(async () => {
  await browser?.close();
  await t?.stop();
  await sink?.close();
  await inbox?.close();
});

const contexts: BrowserContext[] = [];
async function newPage(): Promise<Page> {
  const context = await browser.newContext({ javaScriptEnabled: false });
  contexts.push(context);
  return context.newPage();
}
afterEach(async () => {
  await Promise.all(contexts.splice(0).map((c) => c.close()));
});

async function submit(page: Page, button: Locator): Promise<number> {
  const [res] = await Promise.all([page.waitForResponse((r) => r.request().method() === 'POST' && r.request().isNavigationRequest()), button.click()]);
  await page.waitForLoadState('load');
  return res.status();
}

const detail = (page: Page, term: string) => page.locator('dl dt', { hasText: term }).first().locator('xpath=following-sibling::dd[1]').innerText();

/** An account whose primary box holds every send, and one held send; returns it and the owner's link. */
async function held(body: Record<string, unknown>): Promise<{ a: TestAccount; id: string; link: string }> {
  const email = `browser-${unique()}@${OWNER_DOMAIN}`;
  const a = await signupAccount(t, email);
  const box = (await rest(t, 'GET', '/boxes', { key: a.apiKey })).body.boxes[0];
  expect((await rest(t, 'PATCH', `/boxes/${box.id}`, { key: a.apiKey, body: { review: 'all' } })).status).toBe(200);
  const r = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body });
  expect(r.status, JSON.stringify(r.body)).toBe(202);
  const mail = await inbox.waitFor(email, /^Approve a message from /);
  return { a, id: r.body.id, link: linkIn(mail) };
}

async function openReview(page: Page, link: string, id: string): Promise<void> {
  expect((await page.goto(link))?.status()).toBe(200);
  expect(await page.getByRole('heading', { level: 1 }).innerText()).toBe('Continue to Boxes');
  await page.getByRole('button', { name: 'Continue' }).click();
  await page.waitForURL(new RegExp(`/owner/reviews/${id}$`));
}

test('the owner sees the message as it will go and approves it; it arrives as written', async () => {
  const to = `browser-ok-${unique()}@remote.test`;
  const html = '<h1 id="injected">Big offer</h1><script>document.title="pwned"</script><img src="https://tracker.example/p.png">';
  const { a, id, link } = await held({
    to,
    subject: 'Proposal for you',
    text: 'Dear someone,\nhere is the proposal.',
    html,
    attachments: [{ filename: 'proposal.pdf', content_type: 'application/pdf', content_b64: Buffer.from('%PDF-1.4 probe').toString('base64') }],
  });
  const page = await newPage();
  const requests: string[] = [];
  page.on('request', (r) => requests.push(r.url()));
  await openReview(page, link, id);
  expect(await page.getByRole('heading', { level: 1 }).innerText()).toBe('Send this message?');
  expect(await detail(page, 'From')).toBe(a.primaryAddress);
  expect(await detail(page, 'To')).toBe(`${to} (new)`);
  expect(await detail(page, 'Subject')).toBe('Proposal for you');
  expect(await detail(page, 'Status')).toBe('Waiting for your decision');
  expect(await page.locator('#text').innerText()).toBe('Dear someone,\nhere is the proposal.');
  // The html is its source text: nothing of it became an element, nothing was fetched.
  expect(await page.locator('#html').innerText()).toBe(html);
  expect(await page.locator('#injected').count()).toBe(0);
  expect(await page.locator('main img').count()).toBe(0);
  expect(requests.filter((u) => !u.startsWith(t.url))).toEqual([]);
  expect(await page.locator('#attachments').innerText()).toContain('proposal.pdf');
  expect(sink.to(to)).toEqual([]);

  expect(await submit(page, page.getByRole('button', { name: 'Approve and send' }))).toBe(200);
  expect(await page.getByRole('status').innerText()).toMatch(/^Approved\. The message was sent \(msg_/);
  expect(await detail(page, 'Status')).toBe('Approved: sent');
  expect(await page.getByRole('button', { name: 'Approve and send' }).count()).toBe(0);

  const got = await rest(t, 'GET', `/reviews/${id}`, { key: a.apiKey });
  expect(got.body.status).toBe('approved');
  const delivered = await waitFor(() => sink.to(to)[0], 'the approved message at the sink');
  const parsed = await simpleParser(delivered.raw);
  expect(parsed.subject).toBe('Proposal for you');
  expect(parsed.text).toContain('Dear someone,\nhere is the proposal.');
  expect(parsed.html).toContain('<h1 id="injected">Big offer</h1>');
  expect(parsed.attachments.map((x) => x.filename)).toEqual(['proposal.pdf']);
});

test('the owner denies: the page says nothing was sent, the agent sees denied, nothing leaves', async () => {
  const to = `browser-no-${unique()}@remote.test`;
  const { a, id, link } = await held({ to, subject: 'Do not send', text: 'deny this' });
  const page = await newPage();
  await openReview(page, link, id);
  expect(await submit(page, page.getByRole('button', { name: 'Deny' }))).toBe(200);
  expect(await page.getByRole('status').innerText()).toBe('You denied this message. Nothing was sent or charged.');
  expect(await detail(page, 'Status')).toBe('Denied: not sent');
  expect((await rest(t, 'GET', `/reviews/${id}`, { key: a.apiKey })).body).toMatchObject({ status: 'denied', message_id: null });
  // A later message from the same account reaches the sink; the denied one never did.
  await rest(t, 'PATCH', `/boxes/${(await rest(t, 'GET', '/boxes', { key: a.apiKey })).body.boxes[0].id}`, { key: a.apiKey, body: { review: 'none' } });
  const marker = `browser-marker-${unique()}@remote.test`;
  expect((await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: marker, text: 'marker' } })).status).toBe(200);
  await waitFor(() => sink.to(marker).length > 0, 'the marker');
  expect(sink.to(to)).toEqual([]);
});
