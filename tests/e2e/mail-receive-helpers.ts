// Shared by the mail-receive-*.test.ts files: real SMTP clients (nodemailer, swaks, curl) talking to the MX of
// a test server, a stand-in remote MX that records what it receives, and a bounded wait.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import nodemailer from 'nodemailer';
import { rest, signupAccount, type ApiEvent, type TestAccount, type TestServer } from '@boxes/testing';

/** Asynchronous only: the server under test runs in this process, so a synchronous spawn would deadlock it. */
export const execFileAsync = promisify(execFile);

import { waitFor } from '@boxes/testing';
import { MailSink, type SinkMessage } from './mail-send-helpers';

export { waitFor };

/**
 * Fresh accounts, signed up n at a time in parallel (a signup generates a DKIM key, the slow part of most tests
 * here); take() hands out one not used before, signing up more when the pool runs dry.
 */
export function accountPool(t: () => TestServer, n: number) {
  let ready: Promise<TestAccount>[] = [];
  const fill = () => {
    ready = Array.from({ length: n }, () => signupAccount(t()));
    // Failures surface when taken.
    for (const p of ready) p.catch(() => undefined);
  };
  return {
    fill,
    take(): Promise<TestAccount> {
      if (!ready.length) fill();
      return ready.shift()!;
    },
  };
}

/** CRLF line ends, as SMTP carries them. */
export const crlf = (s: string): string => s.replace(/\r?\n/g, '\r\n');

/** A plain SMTP client for the MX (opportunistic STARTTLS against its self-signed certificate). */
export function smtpClient(port: number) {
  return nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, tls: { rejectUnauthorized: false }, name: 'sender.outside.test' });
}

export interface SmtpResult {
  accepted: string[];
  rejected: string[];
  /** SMTP reply code per rejected recipient */
  rejectedCodes: Record<string, number | undefined>;
  response: string;
}

/** Sends raw RFC 5322 bytes with an explicit envelope over one nodemailer connection. */
export async function sendRaw(port: number, envelope: { from: string; to: string[] }, raw: string | Buffer): Promise<SmtpResult> {
  const client = smtpClient(port);
  try {
    const info = await client.sendMail({ envelope, raw });
    const rejectedErrors = (info as { rejectedErrors?: { recipient: string; responseCode?: number }[] }).rejectedErrors ?? [];
    return {
      accepted: (info.accepted as string[]).map(String),
      rejected: (info.rejected as string[]).map(String),
      rejectedCodes: Object.fromEntries(rejectedErrors.map((e) => [e.recipient, e.responseCode])),
      response: String(info.response),
    };
  } finally {
    client.close();
  }
}

/** Sends and expects the transaction to fail; returns nodemailer's error (responseCode, command, response). */
export async function sendRawExpectingError(
  port: number,
  envelope: { from: string; to: string[] },
  raw: string | Buffer,
): Promise<{ responseCode?: number; command?: string; response?: string; message: string }> {
  const client = smtpClient(port);
  try {
    await client.sendMail({ envelope, raw });
  } catch (err) {
    return err as { responseCode?: number; command?: string; response?: string; message: string };
  } finally {
    client.close();
  }
  throw new Error('the SMTP transaction succeeded but was expected to fail');
}

/** A minimal message with the given headers and text body. */
export function rawMessage(headers: Record<string, string>, text: string): string {
  const lines = Object.entries({
    Date: new Date().toUTCString(),
    'MIME-Version': '1.0',
    'Content-Type': 'text/plain; charset=utf-8',
    ...headers,
  }).map(([k, v]) => `${k}: ${v}`);
  return crlf(`${lines.join('\n')}\n\n${text}\n`);
}

/** Fails with an actionable message when an external SMTP client is missing (scripts/start-services.sh installs it). */
export async function requireTool(name: string): Promise<void> {
  try {
    await execFileAsync('sh', ['-c', `command -v ${name}`]);
  } catch {
    throw new Error(`${name} is not installed: run scripts/start-services.sh as root (it installs ${name}) or apt-get install -y ${name}`);
  }
}

/** Runs swaks against the MX; resolves with its exit code and the whole transcript (stdout and stderr). */
export async function swaks(port: number, args: string[]): Promise<{ code: number; out: string }> {
  try {
    const { stdout, stderr } = await execFileAsync('swaks', ['--server', '127.0.0.1', '--port', String(port), '--helo', 'swaks.outside.test', ...args], {
      timeout: 20_000,
      maxBuffer: 16 * 1024 * 1024,
    });
    return { code: 0, out: stdout + stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string; message: string };
    if (typeof e.code !== 'number') throw err;
    return { code: e.code, out: (e.stdout ?? '') + (e.stderr ?? '') };
  }
}

/** Events of one type on GET /events (first page). */
export async function eventsOf(t: TestServer, key: string, type: string): Promise<ApiEvent[]> {
  const r = await rest(t, 'GET', `/events?type=${encodeURIComponent(type)}&limit=500`, { key });
  if (r.status !== 200) throw new Error(`GET /events: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.events as ApiEvent[];
}

/** Waits for an event of that type matching pred. */
export function waitForEvent(t: TestServer, key: string, type: string, pred: (e: ApiEvent) => boolean = () => true, ms?: number): Promise<ApiEvent> {
  return waitFor(`${type} event`, async () => (await eventsOf(t, key, type)).find(pred), ms);
}

/** Waits for the received message (GET /messages) whose subject is given. */
export function waitForReceived(t: TestServer, key: string, subject: string): Promise<any> {
  return waitFor(`received message "${subject}"`, async () => {
    const r = await rest(t, 'GET', '/messages?direction=received&include=body&limit=200', { key });
    return (r.body.messages as any[]).find((m) => m.subject === subject);
  });
}

export type RemoteDelivery = SinkMessage;

/** A stand-in for a remote domain's MX that accepts everything (MailSink without scripted local parts) and records envelope and bytes. */
export async function startStandInMx(): Promise<{ port: number; received: RemoteDelivery[]; close(): Promise<void> }> {
  const sink = new MailSink();
  await sink.start();
  return { port: sink.port, received: sink.messages, close: () => sink.close() };
}
