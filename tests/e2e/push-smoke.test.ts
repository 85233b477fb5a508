// Push end to end: a real https receiver gets signed events; an MQTT client with a provisioned certificate
// receives events over mutual TLS.
import { afterAll, beforeAll, expect, it } from 'vitest';
import mqtt from 'mqtt';
import Stripe from 'stripe';
import { Webhook } from 'standardwebhooks';
import { rest, signupAccount, startTestServer, waitFor, type TestServer } from '@boxes/testing';
import { receiverCertificate, startReceiver, type Receiver } from './push-helpers';

let t: TestServer;
let receiver: Receiver;
let receiverUrl: string;

beforeAll(async () => {
  const pems = await receiverCertificate();
  receiver = await startReceiver(pems);
  receiverUrl = receiver.url('/hook');
  t = await startTestServer({ worker: true, push: true, env: { WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_CA_FILE: pems.caFile } });
});
afterAll(async () => {
  await t?.stop();
  await receiver?.close();
});

it('signup.completed with the api_key reaches the signup callback, signed for stripe and standardwebhooks', async () => {
  const intent = await rest(t, 'POST', '/signup/agentic', {
    body: { human_email: 'o@example.com', domain_intent: { mode: 'subdomain' }, agent_callback_webhook: receiverUrl },
  });
  expect(intent.status, JSON.stringify(intent.body)).toBe(200);
  const done = await rest(t, 'POST', '/signup/agentic/confirm', { body: { intent_id: intent.body.intent_id } });
  const first = await waitFor('signup.completed at the receiver', () =>
    receiver.requests.find((g) => g.event.type === 'signup.completed' && g.event.account_id === done.body.account_id),
  );
  expect(JSON.parse(first.body).api_key).toBe(done.body.api_key);
  const secret = (await rest(t, 'GET', '/account/webhook', { key: done.body.api_key })).body.signing_secret;
  const stripe = new Stripe('sk_test_unused');
  const ev = stripe.webhooks.constructEvent(first.body, first.headers['x-boxes-signature'] as string, secret, 300);
  expect((ev as unknown as { type: string }).type).toBe('signup.completed');
  const wh = new Webhook(secret);
  expect((wh.verify(first.body, first.headers as Record<string, string>) as { id: string }).id).toBe(JSON.parse(first.body).id);
});

it('an MQTT client with a provisioned certificate receives events', async () => {
  const a = await signupAccount(t);
  const prov = await rest(t, 'POST', '/account/iot/provision', { key: a.apiKey });
  expect(prov.status, JSON.stringify(prov.body)).toBe(200);
  const client = await mqtt.connectAsync(`mqtts://127.0.0.1:${t.mqttPort}`, {
    clientId: prov.body.client_id,
    key: prov.body.private_key,
    cert: prov.body.certificate,
    ca: [prov.body.ca_certificate],
    servername: 'localhost',
    reconnectPeriod: 0,
  });
  const messages: string[] = [];
  client.on('message', (_topic, payload) => messages.push(payload.toString()));
  await client.subscribeAsync(prov.body.topic, { qos: 1 });
  await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'mqtt-probe' } });
  const m = await waitFor('box.created over MQTT', () => messages.map((x) => JSON.parse(x)).find((e) => e.type === 'box.created'));
  expect(m.data.box.local_part).toBe('mqtt-probe');
  await client.endAsync();
});
