// A webhook endpoint that never answers 2xx: after the last attempt the delivery is marked failed and a
// webhook.delivery_failed event is appended; the stream moves on; POST /account/webhook/deliveries/{id}/redeliver
// re-sends the failed event once the receiver works again, recorded as a redelivery. The retry schedule is
// scaled down (WEBHOOK_RETRY_SCALE=0.00001) so the whole schedule takes a few seconds.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { rest, signupAccount, startTestServer, type TestServer } from '@boxes/testing';
import {
  allEvents,
  boxesSignatureMatches,
  deliveredEvents,
  deliveries,
  receiverCertificate,
  setCallback,
  signingSecret,
  startReceiver,
  verifyStandard,
  verifyStripe,
  waitFor,
  type Receiver,
} from './push-helpers';

/** The retry schedule's attempts (packages/jobs WEBHOOK_MAX_ATTEMPTS). */
const WEBHOOK_MAX_ATTEMPTS = 16;

let t: TestServer;
let receiver: Receiver;

beforeAll(async () => {
  const pems = await receiverCertificate();
  receiver = await startReceiver(pems);
  t = await startTestServer({
    worker: true,
    env: { WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_CA_FILE: pems.caFile, WEBHOOK_RETRY_SCALE: '0.00001' },
  });
});
afterAll(async () => {
  await t?.stop();
  await receiver?.close();
});

it('a receiver answering 500 exhausts the attempts: failed, webhook.delivery_failed, the stream moves on, and redeliver re-sends it', async () => {
  const a = await signupAccount(t);
  let healthy = false;
  receiver.behave('/dead', () => (healthy ? 200 : 500));
  await setCallback(t, a.apiKey, receiver.url('/dead'));

  const failedEvent = await waitFor(
    'webhook.delivery_failed',
    async () => (await allEvents(t, a.apiKey)).find((e) => e.type === 'webhook.delivery_failed'),
    25_000,
  );
  const first = receiver.at('/dead')[0]!.event;
  expect(first.type).toBe('account.callback_webhook_updated');

  // The attempt log of the given-up event: 1..n, retrying until the last, which is failed; every one a 500.
  const rows = (await deliveries(t, a.apiKey)).filter((d) => d.event_id === first.id).sort((x, y) => x.attempt - y.attempt);
  const n = rows.length;
  expect(n).toBeGreaterThan(1);
  expect(n).toBeLessThanOrEqual(WEBHOOK_MAX_ATTEMPTS);
  expect(rows.map((d) => d.attempt)).toEqual(Array.from({ length: n }, (_, i) => i + 1));
  expect(rows.every((d) => d.status_code === 500)).toBe(true);
  expect(rows.slice(0, -1).every((d) => d.status === 'retrying' && d.next_retry_at !== null)).toBe(true);
  expect(rows.at(-1)).toMatchObject({ status: 'failed', next_retry_at: null, redelivery: false });
  // The receiver saw exactly those attempts of that event.
  expect(receiver.at('/dead').filter((r) => r.event.id === first.id)).toHaveLength(n);

  expect(failedEvent.seq).toBe(first.seq + 1);
  expect(failedEvent.data).toMatchObject({
    event_id: first.id,
    seq: first.seq,
    event_type: 'account.callback_webhook_updated',
    attempts: n,
    last_status: 500,
    url: receiver.url('/dead'),
  });

  // The failure event is pushed too and given up in turn, without a failure event of its own.
  await waitFor('the failure event given up', async () => (await deliveries(t, a.apiKey, '&status=failed')).find((d) => d.event_id === failedEvent.id), 25_000);
  expect((await allEvents(t, a.apiKey)).filter((e) => e.type === 'webhook.delivery_failed')).toHaveLength(1);

  // The receiver works again: redeliver the failed event.
  healthy = true;
  const failedRow = rows.at(-1)!;
  const redelivered = await rest(t, 'POST', `/account/webhook/deliveries/${failedRow.id}/redeliver`, { key: a.apiKey });
  expect(redelivered.status, JSON.stringify(redelivered.body)).toBe(200);
  expect(redelivered.body).toMatchObject({ event_id: first.id, status: 'delivered', status_code: 200, redelivery: true, attempt: 1 });
  const resent = receiver.at('/dead').filter((r) => r.event.id === first.id && r.answered === 200);
  expect(resent).toHaveLength(1);
  const secret = await signingSecret(t, a.apiKey);
  expect(verifyStripe(resent[0]!, secret).id).toBe(first.id);
  expect(verifyStandard(resent[0]!, secret).id).toBe(first.id);
  expect(boxesSignatureMatches(resent[0]!, secret)).toBe(true);
  const logged = (await deliveries(t, a.apiKey)).find((d) => d.id === redelivered.body.id);
  expect(logged).toMatchObject({ redelivery: true, status: 'delivered', event_id: first.id });

  // An unknown delivery id is a 404.
  expect((await rest(t, 'POST', '/account/webhook/deliveries/whd_doesnotexist000000/redeliver', { key: a.apiKey })).status).toBe(404);

  // The stream has moved past the given-up events: a new event is delivered in order.
  await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'after-failure' } });
  const next = await waitFor('box.created after the give-up', () => deliveredEvents(receiver.at('/dead')).find((e) => e.type === 'box.created'));
  expect(next.seq).toBeGreaterThan(failedEvent.seq);
});
