// Callback URLs may reach only the public internet (and https only). On a server with the
// default configuration (no WEBHOOK_ALLOW_PRIVATE): loopback, private, link-local, carrier-grade NAT,
// unspecified and IPv6 local addresses are refused however they are spelled, at PUT /account/callback-webhook
// and at signup, with a 400 naming the field (and at POST and PATCH /webhook-endpoints, naming url); nothing
// connects to them; and a name that resolves to a private address is refused again at connect time.
import { promises as dns } from 'node:dns';
import os from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postWebhook, refusedRange, webhookHttpDeps } from '@boxes/core';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { sleep, startCountingListener } from './push-helpers';

let t: TestServer;
let account: TestAccount;
let listener: Awaited<ReturnType<typeof startCountingListener>>;

beforeAll(async () => {
  listener = await startCountingListener();
  // The worker runs: were a refused URL stored, it would try to deliver to it.
  t = await startTestServer({ worker: true });
  account = await signupAccount(t);
});
afterAll(async () => {
  await t?.stop();
  await listener?.close();
});

const REFUSED = [
  'http://agent.example.com/hook',
  'https://127.0.0.1/',
  'https://localhost/',
  'https://10.0.0.1/',
  'https://172.16.5.4/',
  'https://192.168.1.1/',
  'https://169.254.169.254/',
  'https://100.64.0.1/',
  'https://0.0.0.0/',
  'https://[::1]/',
  'https://[::ffff:127.0.0.1]/',
  'https://[fe80::1]/',
  'https://[fc00::1]/',
  'https://2130706433/',
  'https://0x7f000001/',
  'https://0177.0.0.1/',
  'https://127.1/',
  'https://LOCALHOST/',
  'https://api.localhost/',
];

function expectFieldError(r: { status: number; body: any }, url: string) {
  expect(r.status, `${url}: ${JSON.stringify(r.body)}`).toBe(400);
  expect(r.body.error.code, url).toBe('validation_error');
  expect(r.body.error.message, url).toMatch(/agent_callback_webhook/);
  expect(r.body.error.fields?.[0]?.path, url).toBe('agent_callback_webhook');
}

describe('refused callback URLs', () => {
  it.each(REFUSED)('%s: PUT /account/callback-webhook and signup answer 400 naming agent_callback_webhook', async (url) => {
    const put = await rest(t, 'PUT', '/account/callback-webhook', { key: account.apiKey, body: { agent_callback_webhook: url } });
    expectFieldError(put, url);
    const signup = await rest(t, 'POST', '/signup/agentic', {
      body: { human_email: 'guard@example.com', domain_intent: { mode: 'subdomain', slug_style: 'word_pair' }, agent_callback_webhook: url },
    });
    expectFieldError(signup, url);
  });

  it.each(REFUSED)('%s: POST and PATCH /webhook-endpoints answer 400 naming url', async (url) => {
    const post = await rest(t, 'POST', '/webhook-endpoints', { key: account.apiKey, body: { url } });
    expect(post.status, `${url}: ${JSON.stringify(post.body)}`).toBe(400);
    expect(post.body.error.code, url).toBe('validation_error');
    expect(post.body.error.fields?.[0]?.path, url).toBe('url');
  });

  it('a refused URL is never stored on a webhook endpoint, and a public one cannot be changed into one', async () => {
    const url = `https://127.0.0.1:${listener.port}/hook`;
    expect((await rest(t, 'POST', '/webhook-endpoints', { key: account.apiKey, body: { url } })).status).toBe(400);
    const ok = await rest(t, 'POST', '/webhook-endpoints', { key: account.apiKey, body: { url: 'https://agent.example.com/guard' } });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    const patch = await rest(t, 'PATCH', `/webhook-endpoints/${ok.body.id}`, { key: account.apiKey, body: { url } });
    expect({ status: patch.status, field: patch.body.error?.fields?.[0]?.path }).toEqual({ status: 400, field: 'url' });
    expect((await rest(t, 'GET', `/webhook-endpoints/${ok.body.id}`, { key: account.apiKey })).body.url).toBe('https://agent.example.com/guard');
    await rest(t, 'DELETE', `/webhook-endpoints/${ok.body.id}`, { key: account.apiKey });
    expect(listener.connections()).toBe(0);
  });

  it('a refused loopback URL is never stored and never connected to', async () => {
    const url = `https://127.0.0.1:${listener.port}/hook`;
    expectFieldError(await rest(t, 'PUT', '/account/callback-webhook', { key: account.apiKey, body: { agent_callback_webhook: url } }), url);
    expectFieldError(
      await rest(t, 'POST', '/signup/agentic', {
        body: { human_email: 'guard2@example.com', domain_intent: { mode: 'subdomain' }, agent_callback_webhook: url },
      }),
      url,
    );
    expect((await rest(t, 'GET', '/account/callback-webhook', { key: account.apiKey })).body).toEqual({ agent_callback_webhook: null });
    // Events keep coming; the worker has nothing to deliver them to.
    for (let i = 0; i < 3; i++) expect((await rest(t, 'POST', '/boxes', { key: account.apiKey, body: { address: `guard-${i}` } })).status).toBe(200);
    t.runtime.worker!.push.kick(account.accountId);
    await sleep(500);
    expect(listener.connections()).toBe(0);
  });

  it('a host name that resolves to a non-public address is refused when set', async (ctx) => {
    const name = os.hostname();
    const addresses = await dns.lookup(name, { all: true }).catch(() => []);
    const loopbackOnly = addresses.length > 0 && addresses.every((a) => refusedRange(a.address) !== null);
    if (!loopbackOnly) ctx.skip(); // this machine's name does not resolve to a private address
    const put = await rest(t, 'PUT', '/account/callback-webhook', { key: account.apiKey, body: { agent_callback_webhook: `https://${name}/hook` } });
    expectFieldError(put, name);
    expect(put.body.error.message).toMatch(/resolves to/);
  });
});

describe('the connect-time check', () => {
  it('postWebhook refuses a name that resolves to loopback and never connects', async () => {
    const deps = webhookHttpDeps(t.config);
    expect(t.config.webhook.allowPrivate).toBe(false);
    for (const host of ['localhost', os.hostname()]) {
      const r = await postWebhook(`https://${host}:${listener.port}/hook`, {}, '{}', deps);
      expect(r.ok, host).toBe(false);
      expect(r.status, host).toBeNull();
      expect(r.error, host).toMatch(/refused/);
    }
    expect(listener.connections()).toBe(0);
  });

  it('postWebhook refuses a literal private address too (a URL stored under an earlier configuration)', async () => {
    // A short timeout only bounds this test should a connection be made; the check itself needs none.
    const deps = { ...webhookHttpDeps(t.config), timeoutMs: 2000 };
    for (const host of ['127.0.0.1', '[::ffff:127.0.0.1]']) {
      const r = await postWebhook(`https://${host}:${listener.port}/hook`, {}, '{}', deps);
      expect(r.ok, host).toBe(false);
      expect(r.status, host).toBeNull();
      expect(r.error, host).toMatch(/refused/);
    }
    expect(listener.connections()).toBe(0);
  });
});
