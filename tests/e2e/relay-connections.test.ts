/**
 * The connections a worker keeps to its relay (SMTP_RELAY_URL): one per delivery in flight by default
 * (DELIVERY_CONCURRENCY), so no delivery waits behind another for a connection, or SMTP_RELAY_CONNECTIONS for a
 * relay that limits a client's connections. The relay is a local SMTP sink that holds every message until the test
 * releases it, so the messages held at once are the connections open at once.
 */
import { afterEach, expect, it } from 'vitest';
import { rest, signupAccount, startTestServer, waitFor, type TestServer } from '@boxes/testing';
import { MailSink, unique } from './mail-send-helpers';

let t: TestServer | undefined;
let sink: MailSink | undefined;
let releaseHeld: (() => void) | undefined;

afterEach(async () => {
  // A failed test may leave messages held: let them go, so the worker stops.
  releaseHeld?.();
  await t?.stop();
  await sink?.close();
  t = undefined;
  sink = undefined;
});

/** A server whose worker relays everything to a holding sink; answers the sink and a release for what it holds. */
async function relayedServer(env: Record<string, string>): Promise<{ t: TestServer; sink: MailSink; held: () => number; release: () => void }> {
  sink = new MailSink();
  await sink.start();
  let open!: () => void;
  const gate = new Promise<void>((r) => (open = r));
  releaseHeld = open;
  let holding = 0;
  sink.beforeAccept = () => {
    holding++;
    return gate;
  };
  t = await startTestServer({ worker: true, env: { SMTP_RELAY_URL: `smtp://127.0.0.1:${sink.port}`, ...env } });
  return { t, sink, held: () => holding, release: open };
}

async function sendMany(server: TestServer, n: number): Promise<string[]> {
  const a = await signupAccount(server);
  const tag = unique();
  const to: string[] = [];
  for (let i = 0; i < n; i++) {
    const address = `relay-${tag}-${i}@remote.test`;
    const r = await rest(server, 'POST', '/messages/send', { key: a.apiKey, body: { to: address, subject: `relay ${i}`, text: 'x' } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    to.push(address);
  }
  return to;
}

it('by default the relay gets a connection per delivery in flight: 12 messages are held at once over 12 connections', async () => {
  const s = await relayedServer({ DELIVERY_CONCURRENCY: '12' });
  const to = await sendMany(s.t, 12);
  // Each connection carries one message at a time: 12 held at once are 12 connections (nodemailer's default is 5).
  await waitFor('12 messages held by the relay at once', () => s.held() === 12, 20_000);
  s.release();
  await waitFor('every message accepted', () => to.every((a) => s.sink.to(a).length === 1), 20_000);
  expect(s.sink.connections).toBe(12);
});

it('SMTP_RELAY_CONNECTIONS bounds them: 8 messages go over 2 connections, every one delivered once', async () => {
  const s = await relayedServer({ DELIVERY_CONCURRENCY: '12', SMTP_RELAY_CONNECTIONS: '2' });
  const to = await sendMany(s.t, 8);
  await waitFor('2 messages held by the relay', () => s.held() === 2, 20_000);
  s.release();
  await waitFor('every message accepted', () => to.every((a) => s.sink.to(a).length === 1), 20_000);
  expect(s.sink.connections).toBeLessThanOrEqual(2);
  expect(s.sink.messages).toHaveLength(8);
});
