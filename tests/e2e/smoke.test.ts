import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rest, signupAccount, startTestServer, type TestServer } from '@boxes/testing';

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(() => t?.stop());

describe('smoke', () => {
  it('signs up and lists events', async () => {
    const a = await signupAccount(t);
    const r = await rest(t, 'GET', '/events', { key: a.apiKey });
    expect(r.status).toBe(200);
    expect(r.body.events.map((e: { type: string }) => e.type)).toEqual(['signup.completed', 'domain.ready', 'box.created', 'api_key.created']);
  });
});
