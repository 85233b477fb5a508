// GET /docs in a real browser (Debian's Chromium, driven by playwright-core): the Swagger UI renders the API
// reference from the server's own /openapi.json and its own assets, and the page makes no request off the host
// that served it. scripts/start-services.sh installs chromium.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { launchChromium } from './browser-helpers';
import { startTestServer, type TestServer } from '@boxes/testing';

// A host name that is not localhost: Swagger UI treats loopback OpenAPI URLs specially, and a deployed /docs is
// served under a real name. Chromium resolves it to the test server and every other name to nothing, so no
// request can leave the machine even if the page tries one.
const DOCS_HOST = 'docs.boxes.test';

let t: TestServer;
let browser: Browser;
beforeAll(async () => {
  t = await startTestServer();
  browser = await launchChromium([DOCS_HOST]);
});
afterAll(async () => {
  await browser?.close();
  await t?.stop();
});

/**
 * Opens /docs at base, waits for Swagger UI to list every tag (collapsed), opens the messages tag, waits for the
 * send operation, and returns what the page did.
 */
async function openDocs(base: string): Promise<{ page: Page; requests: string[]; errors: string[] }> {
  const page = await browser.newPage();
  const requests: string[] = [];
  const errors: string[] = [];
  page.on('request', (r) => requests.push(r.url()));
  page.on('pageerror', (e) => errors.push(e.message));
  const res = await page.goto(`${base}/docs`, { waitUntil: 'load' });
  expect(res?.status()).toBe(200);
  // Every tag is listed, down to the last ones of the document.
  for (const tag of ['signup', 'messages', 'drafts', 'reviews', 'guardrails']) {
    await page.locator(`h3.opblock-tag[data-tag="${tag}"]`).waitFor({ state: 'visible', timeout: 15_000 });
  }
  await page.locator('h3.opblock-tag[data-tag="messages"]').click();
  await page.locator('.opblock-summary-path[data-path="/messages/send"]').first().waitFor({ state: 'visible', timeout: 15_000 });
  // Let everything the rendered page asks for go out (the validator badge, images) before looking.
  await page.waitForLoadState('networkidle');
  return { page, requests, errors };
}

/** Requests that went anywhere but the origin (data: and blob: URLs stay in the page). */
function offHost(requests: string[], origin: string): string[] {
  return requests.filter((u) => !u.startsWith('data:') && !u.startsWith('blob:') && new URL(u).origin !== origin);
}

it('renders the API reference with the send endpoint, from local assets only', async () => {
  const { page, requests, errors } = await openDocs(t.url);
  expect(await page.title()).toBe('Boxes API reference');
  expect(await page.locator('.info .title').first().textContent()).toContain('Boxes API');

  const send = page
    .locator('.opblock-post')
    .filter({ has: page.locator('.opblock-summary-path[data-path="/messages/send"]') })
    .first();
  expect(await send.locator('.opblock-summary-method').textContent()).toBe('POST');
  // Every tag of the OpenAPI document is on the page, and the opened messages tag lists each of its operations.
  const spec = (await (await fetch(`${t.url}/openapi.json`)).json()) as { paths: Record<string, Record<string, { tags?: string[] }>> };
  const ops = Object.values(spec.paths).flatMap((item) =>
    Object.entries(item)
      .filter(([m]) => ['get', 'post', 'put', 'delete', 'patch'].includes(m))
      .map(([, op]) => op),
  );
  const tags = [...new Set(ops.flatMap((op) => op.tags ?? []))].sort();
  expect((await page.locator('h3.opblock-tag').evaluateAll((els) => els.map((e) => e.getAttribute('data-tag')))).sort()).toEqual(tags);
  const messages = page.locator('.opblock-tag-section').filter({ has: page.locator('h3.opblock-tag[data-tag="messages"]') });
  expect(await messages.locator('.opblock').count()).toBe(ops.filter((op) => op.tags?.includes('messages')).length);
  // Expanded, the send operation shows its request body fields.
  await send.locator('.opblock-summary').click();
  await send.locator('.opblock-body').waitFor({ state: 'visible' });
  await send.getByText('Schema', { exact: true }).first().click();
  const body = await send.locator('.opblock-body').innerText();
  for (const field of ['to', 'subject', 'idempotency_key', 'context']) expect(body).toContain(field);

  expect(errors).toEqual([]);
  expect(requests).toContain(`${t.url}/openapi.json`);
  expect(requests).toContain(`${t.url}/docs/assets/swagger-ui-bundle.js`);
  expect(offHost(requests, t.url)).toEqual([]);
  for (const u of requests.filter((x) => x.startsWith('http'))) expect(new URL(u).hostname).toBe('127.0.0.1');
  await page.close();
});

it('makes no request off the host under a public host name either (no validator badge, no CDN)', async () => {
  const origin = `http://${DOCS_HOST}:${t.server.port}`;
  const { page, requests, errors } = await openDocs(origin);
  expect(errors).toEqual([]);
  expect(requests).toContain(`${origin}/openapi.json`);
  expect(offHost(requests, origin)).toEqual([]);
  await page.close();
});
