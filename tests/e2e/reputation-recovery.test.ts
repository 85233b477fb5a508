/**
 * reputation.recovered: a warned account recovers when enough mail is delivered to bring its rates back under
 * the limits, and when its bounces age out of the 7-day window (read on the service clock, which the test moves
 * forward), with no new bounce or complaint to prompt it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AdjustableClock } from '@boxes/core';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { events, MailSink, send, unique, waitFor, waitSettled } from './mail-send-helpers';

const clock = new AdjustableClock();
let t: TestServer;
let sink: MailSink;

beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  t = await startTestServer({ worker: true, resolver: sink.resolver(), clock });
});
afterAll(async () => {
  await t?.stop();
  await sink?.close();
});

/** One bounce in one send: a bounce rate of 100%, over 3%. */
async function warned(): Promise<TestAccount> {
  const a = await signupAccount(t);
  const r = await send(t, a.apiKey, { to: `reject-${unique()}@remote.test`, subject: 'bounces', text: 'x' });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  await waitFor(async () => (await events(t, a.apiKey, 'reputation.warning')).length === 1, 'reputation.warning');
  return a;
}

const stateOf = async (a: TestAccount) => (await rest(t, 'GET', '/account/reputation', { key: a.apiKey })).body.state;

describe('reputation.recovered', () => {
  it('fires once deliveries bring the bounce rate back under 3%', async () => {
    const a = await warned();
    // 40 delivered recipients: 1 bounce in 41 is 2.4%.
    const to = Array.from({ length: 40 }, (_, i) => `ok-${i}-${unique()}@remote.test`);
    const r = await send(t, a.apiKey, { to, subject: 'fine', text: 'y' });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    await waitSettled(t, a.apiKey, r.body.message_id, 30_000);
    const recovered = await waitFor(async () => (await events(t, a.apiKey, 'reputation.recovered'))[0], 'reputation.recovered', 10_000);
    expect(recovered.data).toMatchObject({ sent: 41, bounced: 1, state: 'ok' });
    expect(await stateOf(a)).toBe('ok');
  });

  it('fires when the bounces leave the 7-day window on the service clock, without new mail', async () => {
    const a = await warned();
    expect(await stateOf(a)).toBe('bounce_rate_high');
    clock.advance(6 * 86_400_000);
    await t.runtime.worker!.billing.cycle();
    expect(await events(t, a.apiKey, 'reputation.recovered')).toEqual([]);
    clock.advance(2 * 86_400_000);
    expect(await stateOf(a)).toBe('ok');
    await t.runtime.worker!.billing.cycle();
    const recovered = await events(t, a.apiKey, 'reputation.recovered');
    expect(recovered).toHaveLength(1);
    expect(recovered[0]!.data).toMatchObject({ sent: 0, bounced: 0, state: 'ok' });
  });
});
