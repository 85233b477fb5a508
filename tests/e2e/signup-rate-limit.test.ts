// The two signup calls need no key, so one client address may start only SIGNUP_RATE_LIMIT_PER_HOUR signups an
// hour (429 rate_limited with retry_after_seconds); the proxy's X-Forwarded-For counts only with TRUST_PROXY.
import { afterEach, expect, test } from 'vitest';
import { createBoxesClient, BoxesError } from '@boxes/sdk';
import { rest, startTestServer, type TestServer } from '@boxes/testing';

let t: TestServer | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const start = (headers: Record<string, string> = {}) =>
  rest(t!, 'POST', '/signup/agentic', { body: { human_email: 'limit@example.com', domain_intent: { mode: 'subdomain', slug_style: 'word_pair' } }, headers });

test('a fourth signup within the hour from one address is 429; a forged X-Forwarded-For does not reset it', async () => {
  t = await startTestServer({ env: { SIGNUP_RATE_LIMIT_PER_HOUR: '3' } });
  for (let i = 0; i < 3; i++) expect((await start({ 'x-forwarded-for': `203.0.113.${i}` })).status).toBe(200);
  const over = await start({ 'x-forwarded-for': '203.0.113.99' });
  expect(over.status, JSON.stringify(over.body)).toBe(429);
  expect(over.body.error.code).toBe('rate_limited');
  expect(over.body.error.retry_after_seconds).toBeGreaterThan(0);
  expect(over.body.error.retry_after_seconds).toBeLessThanOrEqual(3600);
  expect(over.headers.get('retry-after')).toBe(String(over.body.error.retry_after_seconds));
  // Signup needs no key: no per-key RateLimit fields.
  expect(over.headers.get('ratelimit')).toBeNull();
  // The same limit over tRPC (the SDK).
  const sdk = createBoxesClient({ baseUrl: t.url });
  const err = await sdk.signup.create
    .mutate({ human_email: 'limit@example.com', domain_intent: { mode: 'subdomain', slug_style: 'word_pair' } })
    .catch((e: unknown) => e);
  expect(err).toBeInstanceOf(BoxesError);
  expect((err as BoxesError).status).toBe(429);
  expect(await t.db.signupIntent.count()).toBe(3);
});

test('behind a trusted proxy each forwarded client has its own count', async () => {
  t = await startTestServer({ env: { SIGNUP_RATE_LIMIT_PER_HOUR: '1', TRUST_PROXY: 'true' } });
  expect((await start({ 'x-forwarded-for': '203.0.113.1' })).status).toBe(200);
  expect((await start({ 'x-forwarded-for': '203.0.113.1, 10.0.0.1' })).status).toBe(429);
  expect((await start({ 'x-forwarded-for': '203.0.113.2' })).status).toBe(200);
});
