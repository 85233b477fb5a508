// Shared by the push-*.test.ts files: a real https webhook receiver (self-signed certificate that the service
// trusts through WEBHOOK_CA_FILE), the three ways a receiver verifies a delivery (stripe, standardwebhooks, and
// X-Boxes-Signature by hand), mail through the MX, and a bounded wait.
import { waitFor as baseWaitFor } from '@boxes/testing';
import { createHmac, timingSafeEqual } from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import net, { type AddressInfo, type Socket } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import nodemailer from 'nodemailer';
import { generate } from 'selfsigned';
import Stripe from 'stripe';
import { Webhook } from 'standardwebhooks';
import { rest, type ApiEvent, type TestServer } from '@boxes/testing';

/** The harness's waitFor with a longer default: pushes cross a worker and a network hop. */
export const waitFor = <T>(what: string, fn: Parameters<typeof baseWaitFor<T>>[1], ms = 15_000) => baseWaitFor<T>(what, fn, ms);

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The account's events published to MQTT so far (its MQTT cursor at the head of its chain), so that a subscriber
 * that connects now sees only the events that come after, not one the push engine was still on.
 */
export async function mqttCaughtUp(t: Pick<TestServer, 'db'>, accountId: string): Promise<void> {
  await waitFor('the MQTT cursor at the head', async () => {
    const row = await t.db.account.findUniqueOrThrow({ where: { id: accountId }, select: { mqttCursor: true, chainSeq: true } });
    return row.mqttCursor >= row.chainSeq;
  });
}

/** The receiver's certificate (for 127.0.0.1 and localhost) and a PEM file for WEBHOOK_CA_FILE. */
export async function receiverCertificate(): Promise<{ key: string; cert: string; caFile: string }> {
  const pems = await generate([{ name: 'commonName', value: 'localhost' }], {
    keyType: 'ec',
    algorithm: 'sha256',
    extensions: [
      {
        name: 'subjectAltName',
        altNames: [
          { type: 7, ip: '127.0.0.1' },
          { type: 2, value: 'localhost' },
        ],
      },
    ],
  });
  const caFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-wh-')), 'receiver.pem');
  fs.writeFileSync(caFile, pems.cert);
  return { key: pems.private, cert: pems.cert, caFile };
}

/** One request the receiver saw, and what it answered. */
export interface Received {
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** The body parsed (the event). */
  event: ApiEvent & { api_key?: string };
  /** The status answered, or null when the request was left hanging / dropped. */
  answered: number | null;
}

/** What to do with a request: a status (optionally with headers), 'hang' (no answer until released) or 'drop'. */
export type Behaviour = number | { status: number; headers?: Record<string, string> } | 'hang' | 'drop';

export interface Receiver {
  port: number;
  url(pathname: string): string;
  /** Every request, in arrival order. */
  requests: Received[];
  /** Requests to one path. */
  at(pathname: string): Received[];
  /** Decides the answer for a path; n counts earlier requests to that path (0 for the first). Default 200. */
  behave(pathname: string, fn: (n: number, event: Received['event']) => Behaviour): void;
  /** Answers every hanging request with this status (or drops them with 'drop'). */
  release(status: number | 'drop'): void;
  hanging(): number;
  /** Stops listening and cuts open connections (the receiver is down: connections are refused). */
  down(): Promise<void>;
  /** Listens again on the same port. */
  up(): Promise<void>;
  close(): Promise<void>;
}

/** An https webhook receiver on 127.0.0.1 that records every request and answers as told per path. */
export async function startReceiver(pems: { key: string; cert: string }, port = 0): Promise<Receiver> {
  const requests: Received[] = [];
  const behaviours = new Map<string, (n: number, event: Received['event']) => Behaviour>();
  const hangingRes: { res: import('node:http').ServerResponse; rec: Received }[] = [];
  const sockets = new Set<Socket>();
  const server = https.createServer({ key: pems.key, cert: pems.cert }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const pathname = new URL(req.url ?? '/', 'https://x').pathname;
      const body = Buffer.concat(chunks).toString('utf8');
      let event: Received['event'];
      try {
        event = JSON.parse(body);
      } catch {
        event = {} as Received['event'];
      }
      const n = requests.filter((r) => r.path === pathname).length;
      const rec: Received = { path: pathname, headers: req.headers, body, event, answered: null };
      requests.push(rec);
      const b = behaviours.get(pathname)?.(n, event) ?? 200;
      if (b === 'hang') {
        hangingRes.push({ res, rec });
        return;
      }
      if (b === 'drop') {
        req.socket.destroy();
        return;
      }
      const { status, headers } = typeof b === 'number' ? { status: b, headers: {} } : { status: b.status, headers: b.headers ?? {} };
      rec.answered = status;
      res.writeHead(status, headers).end(status < 300 ? 'ok' : 'no');
    });
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  server.on('tlsClientError', () => undefined);
  const listen = (p: number) =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(p, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
  await listen(port);
  const actualPort = (server.address() as AddressInfo).port;
  const stopListening = () =>
    new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    });
  return {
    port: actualPort,
    url: (pathname) => `https://127.0.0.1:${actualPort}${pathname}`,
    requests,
    at: (pathname) => requests.filter((r) => r.path === pathname),
    behave: (pathname, fn) => void behaviours.set(pathname, fn),
    release(status) {
      for (const { res, rec } of hangingRes.splice(0)) {
        if (status === 'drop') res.socket?.destroy();
        else {
          rec.answered = status;
          res.writeHead(status).end();
        }
      }
    },
    hanging: () => hangingRes.length,
    down: stopListening,
    up: () => listen(actualPort),
    close: async () => {
      if (server.listening) await stopListening();
    },
  };
}

/** A plain TCP listener that only counts connections (proof that nothing was even attempted). */
export async function startCountingListener(): Promise<{ port: number; connections: () => number; close(): Promise<void> }> {
  let count = 0;
  const sockets = new Set<Socket>();
  const server = net.createServer((s) => {
    count++;
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as AddressInfo).port,
    connections: () => count,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

const stripe = new Stripe('sk_test_unused');

/** Stripe's verifier over X-Boxes-Signature (throws when it does not verify); receivedAtMs shifts "now". */
export function verifyStripe(r: Pick<Received, 'body' | 'headers'>, secret: string, receivedAtMs?: number): { id: string; type: string } {
  const header = r.headers['x-boxes-signature'] as string;
  return stripe.webhooks.constructEvent(r.body, header, secret, 300, undefined, receivedAtMs) as unknown as { id: string; type: string };
}

/** The Standard Webhooks verifier over webhook-id / webhook-timestamp / webhook-signature (throws when it fails). */
export function verifyStandard(r: Pick<Received, 'body' | 'headers'>, secret: string): { id: string; type: string } {
  return new Webhook(secret).verify(r.body, r.headers as Record<string, string>) as { id: string; type: string };
}

/** X-Boxes-Signature parsed: t and every v1 value. */
export function parseBoxesSignature(header: string): { t: number; v1: string[] } {
  const parts = header.split(',').map((p) => p.trim());
  const t = Number(parts.find((p) => p.startsWith('t='))?.slice(2));
  return { t, v1: parts.filter((p) => p.startsWith('v1=')).map((p) => p.slice(3)) };
}

/** By hand: some v1 equals hex HMAC-SHA256 of `${t}.${body}` keyed by the secret string. */
export function boxesSignatureMatches(r: Pick<Received, 'body' | 'headers'>, secret: string): boolean {
  const { t, v1 } = parseBoxesSignature(r.headers['x-boxes-signature'] as string);
  const expected = Buffer.from(createHmac('sha256', secret).update(`${t}.${r.body}`).digest('hex'));
  return v1.some((v) => v.length === expected.length && timingSafeEqual(Buffer.from(v), expected));
}

/** The distinct events answered with 2xx, first arrival of each id, in arrival order. */
export function deliveredEvents(requests: Received[]): Received['event'][] {
  const seen = new Set<string>();
  const out: Received['event'][] = [];
  for (const r of requests) {
    if (r.answered === null || r.answered < 200 || r.answered >= 300 || seen.has(r.event.id)) continue;
    seen.add(r.event.id);
    out.push(r.event);
  }
  return out;
}

/** Every event of the account on GET /events (all pages). */
export async function allEvents(t: TestServer, key: string): Promise<ApiEvent[]> {
  const out: ApiEvent[] = [];
  let cursor: string | null = null;
  for (let i = 0; i < 50; i++) {
    const r: { status: number; body: any } = await rest(t, 'GET', `/events?limit=200${cursor ? `&since=${encodeURIComponent(cursor)}` : ''}`, { key });
    if (r.status !== 200) throw new Error(`GET /events: ${r.status} ${JSON.stringify(r.body)}`);
    out.push(...r.body.events);
    if (!r.body.has_more) break;
    cursor = r.body.next_cursor;
  }
  return out;
}

/** Sends one message to the MX as an outside sender would (nodemailer, opportunistic STARTTLS). */
export async function sendMailToMx(port: number, to: string, subject: string, text = 'hello from outside'): Promise<void> {
  const client = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, tls: { rejectUnauthorized: false }, name: 'sender.outside.test' });
  try {
    await client.sendMail({ envelope: { from: 'alice@outside.test', to: [to] }, from: 'Alice <alice@outside.test>', to, subject, text });
  } finally {
    client.close();
  }
}

/** Sets the account's callback URL (PUT /account/callback-webhook); throws unless 200. */
export async function setCallback(t: TestServer, key: string, url: string | null): Promise<void> {
  const r = await rest(t, 'PUT', '/account/callback-webhook', { key, body: { agent_callback_webhook: url } });
  if (r.status !== 200) throw new Error(`PUT /account/callback-webhook: ${r.status} ${JSON.stringify(r.body)}`);
}

export async function signingSecret(t: TestServer, key: string): Promise<string> {
  const r = await rest(t, 'GET', '/account/webhook', { key });
  if (r.status !== 200) throw new Error(`GET /account/webhook: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.signing_secret;
}

/** GET /account/webhook/deliveries (newest first). */
export async function deliveries(t: TestServer, key: string, query = ''): Promise<any[]> {
  const r = await rest(t, 'GET', `/account/webhook/deliveries?limit=200${query}`, { key });
  if (r.status !== 200) throw new Error(`GET /account/webhook/deliveries: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.deliveries;
}
