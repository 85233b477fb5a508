/**
 * Shared by the mail-send*.test.ts files: a local SMTP server standing in for the internet's MX hosts (every
 * outside domain resolves to it), with scripted answers chosen by the recipient's local part, and small
 * helpers to poll the API for asynchronous outcomes.
 */
import { waitFor as baseWaitFor } from '@boxes/testing';
import type { AddressInfo } from 'node:net';
import { SMTPServer, type SMTPServerSession } from 'smtp-server';
import type { MxResolver } from '@boxes/mail';
import { rest, type ApiEvent, type TestServer } from '@boxes/testing';

export interface SinkMessage {
  mailFrom: string;
  rcpt: string[];
  raw: Buffer;
}

export interface RcptAttempt {
  address: string;
  /** The SMTP code the sink answered with. */
  code: number;
}

/**
 * Scripted answers, by the recipient's local part:
 * - reject-*: RCPT answered 550 5.1.1 (a permanent failure: a bounce).
 * - tempfail-rcpt-*: the first two RCPT attempts answered 451, then accepted.
 * - tempfail-data-*: the first two DATA attempts answered 451, then accepted.
 * Anything else is accepted.
 */
export class MailSink {
  readonly messages: SinkMessage[] = [];
  readonly rcpts: RcptAttempt[] = [];
  connections = 0;
  port = 0;
  /** Runs after a message's data arrived and before the sink answers 250 (a test stops a dependency there). */
  beforeAccept: ((rcpt: string[]) => void | Promise<void>) | null = null;
  private readonly dataAttempts = new Map<string, number>();
  private readonly rcptAttempts = new Map<string, number>();
  private readonly server: SMTPServer;

  constructor() {
    this.server = new SMTPServer({
      authOptional: true,
      disabledCommands: ['STARTTLS', 'AUTH'],
      logger: false,
      onConnect: (_session, cb) => {
        this.connections++;
        cb();
      },
      onRcptTo: (address, _session, cb) => {
        const rcpt = address.address.toLowerCase();
        const local = rcpt.slice(0, rcpt.lastIndexOf('@'));
        const n = (this.rcptAttempts.get(rcpt) ?? 0) + 1;
        this.rcptAttempts.set(rcpt, n);
        let code = 250;
        if (local.startsWith('reject-')) code = 550;
        else if (local.startsWith('tempfail-rcpt-') && n <= 2) code = 451;
        this.rcpts.push({ address: rcpt, code });
        if (code === 250) return cb();
        cb(smtpError(code, code === 550 ? '5.1.1 No such user here' : '4.3.0 Try again later'));
      },
      onData: (stream, session, cb) => {
        const chunks: Buffer[] = [];
        stream.on('data', (c: Buffer) => chunks.push(c));
        stream.on('end', () => {
          const rcpt = session.envelope.rcptTo.map((r) => r.address.toLowerCase());
          const tempfail = rcpt.find((r) => r.startsWith('tempfail-data-'));
          if (tempfail) {
            const n = (this.dataAttempts.get(tempfail) ?? 0) + 1;
            this.dataAttempts.set(tempfail, n);
            if (n <= 2) return cb(smtpError(451, '4.3.0 Temporary failure, try again'));
          }
          this.messages.push({ mailFrom: mailFromOf(session), rcpt, raw: Buffer.concat(chunks) });
          if (!this.beforeAccept) return cb();
          Promise.resolve(this.beforeAccept(rcpt)).then(() => cb(), cb);
        });
      },
    });
  }

  async start(): Promise<void> {
    // A sender that dies mid-session (a killed worker) resets its connection: that is the sender's problem.
    this.server.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code !== 'ECONNRESET' && err.code !== 'EPIPE') throw err;
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', () => r()));
    this.port = (this.server.server.address() as AddressInfo).port;
  }

  /** Every outside domain is routed here, so mail that leaves the machine by mistake is seen too. */
  resolver(): MxResolver {
    return { resolve: async () => [{ host: '127.0.0.1', port: this.port }] };
  }

  /** Messages accepted for this recipient. */
  to(address: string): SinkMessage[] {
    const a = address.toLowerCase();
    return this.messages.filter((m) => m.rcpt.includes(a));
  }

  /** RCPT commands seen for this recipient (accepted or not). */
  rcptFor(address: string): RcptAttempt[] {
    const a = address.toLowerCase();
    return this.rcpts.filter((r) => r.address === a);
  }

  async close(): Promise<void> {
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

function smtpError(code: number, message: string): Error {
  return Object.assign(new Error(message), { responseCode: code });
}

function mailFromOf(session: SMTPServerSession): string {
  const f = session.envelope.mailFrom;
  return f ? f.address : '';
}

/** The harness's waitFor, with the condition first as these tests call it. */
export const waitFor = <T>(fn: Parameters<typeof baseWaitFor<T>>[1], what: string, ms = 10_000) => baseWaitFor<T>(what, fn, ms);

/** Every event of the account of the given type(s), oldest first. */
export async function events(t: Pick<TestServer, 'apiBase'>, key: string, type: string): Promise<ApiEvent[]> {
  const r = await rest<{ events: ApiEvent[] }>(t, 'GET', `/events?limit=500&type=${encodeURIComponent(type)}`, { key });
  if (r.status !== 200) throw new Error(`GET /events: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.events;
}

/** GET /messages/{id}, failing on anything but 200. */
export async function getMessage(t: Pick<TestServer, 'apiBase'>, key: string, id: string): Promise<any> {
  const r = await rest(t, 'GET', `/messages/${id}`, { key });
  if (r.status !== 200) throw new Error(`GET /messages/${id}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

/**
 * Waits until every delivery of a sent message reached a final state and the message's status followed;
 * returns the message. (GET /messages/{id} reads the message and its deliveries in two queries, so one
 * response may show final deliveries next to a message status from just before.)
 */
export async function waitSettled(t: Pick<TestServer, 'apiBase'>, key: string, id: string, ms = 10_000): Promise<any> {
  return waitFor(
    async () => {
      const m = await getMessage(t, key, id);
      const final = (s: string) => ['delivered', 'bounced', 'failed'].includes(s);
      return m.deliveries.length > 0 && m.deliveries.every((d: { status: string }) => final(d.status)) && !['queued', 'sending'].includes(m.status) ? m : null;
    },
    `message ${id} to settle`,
    ms,
  );
}

/** POST /messages/send. */
export function send(t: Pick<TestServer, 'apiBase'>, key: string, body: Record<string, unknown>) {
  return rest(t, 'POST', '/messages/send', { key, body });
}

export const unique = (): string => Math.random().toString(36).slice(2, 10);
