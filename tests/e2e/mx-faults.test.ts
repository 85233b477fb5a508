/**
 * The MX and the HTTP server against hostile clients and their own death: NUL and control characters in the
 * envelope or a header line are refused with a 5xx (not stored, not a 451 that invites retries); an MX killed
 * (SIGKILL) in the middle of a DATA transfer stores nothing partial and the sender's retry is stored exactly
 * once; clients that send a few bytes and go quiet are closed after the configured timeouts while other
 * clients are served.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import tls from 'node:tls';
import { ImapFlow } from 'imapflow';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import nodemailer from 'nodemailer';
import { rest, signupAccount, startTestServer, waitFor, type TestAccount, type TestServer } from '@boxes/testing';

const here = path.dirname(fileURLToPath(import.meta.url));
const SLOW_CLIENTS = 100;

let t: TestServer;
let b: TestAccount;
beforeAll(async () => {
  t = await startTestServer({
    mail: true,
    env: {
      SMTP_SOCKET_TIMEOUT_MS: '1500',
      HTTP_HEADERS_TIMEOUT_MS: '1000',
      HTTP_REQUEST_TIMEOUT_MS: '1500',
      HTTP_IDLE_TIMEOUT_MS: '2000',
      IMAP_LOGIN_TIMEOUT_MS: '1500',
      IMAP_AUTOLOGOUT_MS: '2000',
    },
  });
  b = await signupAccount(t);
});
afterAll(() => t?.stop());

/** A scripted SMTP client on a raw socket: send a line, read the reply (multi-line replies included). */
class RawSmtp {
  private buf = '';
  private waiters: (() => void)[] = [];
  closed = false;
  constructor(readonly socket: net.Socket) {
    socket.setEncoding('latin1');
    socket.on('data', (d: string) => {
      this.buf += d;
      this.waiters.splice(0).forEach((w) => {
        w();
      });
    });
    socket.on('close', () => {
      this.closed = true;
      this.waiters.splice(0).forEach((w) => {
        w();
      });
    });
    socket.on('error', () => undefined);
  }
  static async open(port: number): Promise<RawSmtp> {
    const s = net.connect({ host: '127.0.0.1', port });
    await new Promise<void>((resolve, reject) => {
      s.once('connect', () => resolve());
      s.once('error', reject);
    });
    return new RawSmtp(s);
  }
  /** The next complete reply (its last line has a space after the code). */
  async reply(ms = 10_000): Promise<string> {
    const end = Date.now() + ms;
    for (;;) {
      const m = /^(?:\d{3}-[^\n]*\n)*\d{3} [^\n]*\n/.exec(this.buf);
      if (m) {
        this.buf = this.buf.slice(m[0].length);
        return m[0].trim();
      }
      if (this.closed) return '';
      if (Date.now() > end) throw new Error(`no SMTP reply within ${ms} ms (have ${JSON.stringify(this.buf)})`);
      await new Promise<void>((r) => {
        this.waiters.push(r);
        setTimeout(r, 100);
      });
    }
  }
  async cmd(line: string): Promise<string> {
    this.socket.write(`${line}\r\n`, 'latin1');
    return this.reply();
  }
  close() {
    this.socket.destroy();
  }
}

async function storedSubjects(accountId: string): Promise<string[]> {
  const rows = await t.db.message.findMany({ where: { accountId, direction: 'received' }, select: { subject: true } });
  return rows.map((r) => r.subject ?? '');
}

describe('hostile SMTP input', () => {
  it('refuses a NUL in a header line with 554 and stores nothing', async () => {
    const c = await RawSmtp.open(t.smtpPort!);
    expect(await c.reply()).toMatch(/^220/);
    expect(await c.cmd('EHLO sender.outside.test')).toMatch(/^250/);
    expect(await c.cmd('MAIL FROM:<x@outside.test>')).toMatch(/^250/);
    expect(await c.cmd(`RCPT TO:<${b.primaryAddress}>`)).toMatch(/^250/);
    expect(await c.cmd('DATA')).toMatch(/^354/);
    c.socket.write('From: x@outside.test\r\nSubject: nul\u0000here\r\n\r\nbody\r\n.\r\n', 'latin1');
    expect(await c.reply()).toMatch(/^554 5\.6\.0/);
    // The session goes on: a clean message on the same connection is stored.
    expect(await c.cmd('MAIL FROM:<x@outside.test>')).toMatch(/^250/);
    expect(await c.cmd(`RCPT TO:<${b.primaryAddress}>`)).toMatch(/^250/);
    expect(await c.cmd('DATA')).toMatch(/^354/);
    c.socket.write('From: x@outside.test\r\nSubject: clean\r\n\r\nbody\r\n.\r\n', 'latin1');
    expect(await c.reply()).toMatch(/^250/);
    c.close();
    expect(await storedSubjects(b.accountId)).toEqual(['clean']);
  });

  it('refuses control characters and over-long envelope addresses with 553, not a temporary 451', async () => {
    const c = await RawSmtp.open(t.smtpPort!);
    await c.reply();
    await c.cmd('EHLO sender.outside.test');
    expect(await c.cmd('MAIL FROM:<x\u0001y@outside.test>')).toMatch(/^5\d\d/);
    expect(await c.cmd('MAIL FROM:<x@outside.test>')).toMatch(/^250/);
    const [local, domain] = b.primaryAddress.split('@');
    expect(await c.cmd(`RCPT TO:<${local}\u0000@${domain}>`)).toMatch(/^5\d\d/);
    expect(await c.cmd(`RCPT TO:<${'a'.repeat(330)}@${domain}>`)).toMatch(/^5\d\d/);
    expect(await c.cmd(`RCPT TO:<${b.primaryAddress}>`)).toMatch(/^250/);
    c.close();
  });
});

describe('an MX killed in the middle of DATA', () => {
  let child: ChildProcess | null = null;
  afterAll(() => {
    child?.kill('SIGKILL');
  });

  async function startMx(): Promise<number> {
    // node itself with tsx's loader (not the tsx launcher, whose child would survive a SIGKILL of the launcher).
    child = spawn(process.execPath, ['--import', 'tsx', path.join(here, 'fixtures/mx-process.ts')], {
      cwd: path.resolve(here, '../..'),
      env: {
        ...process.env,
        DATABASE_URL: t.config.databaseUrl,
        REDIS_URL: t.config.redisUrl,
        REDIS_PREFIX: t.config.redisPrefix,
        BASE_DOMAIN: t.config.baseDomain,
        BOXES_SECRET_KEY: t.svc.secretKey.toString('hex'),
        LOG_LEVEL: 'silent',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const c = child;
    return new Promise<number>((resolve, reject) => {
      let out = '';
      c.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /\{"smtpPort":(\d+)\}/.exec(out);
        if (m) resolve(Number(m[1]));
      });
      c.once('exit', (code) => reject(new Error(`the MX process exited (${code}) before listening`)));
    });
  }

  it('stores nothing partial, and the sender’s retry exactly once', async () => {
    const subject = 'killed in the middle';
    const messageId = '<kill-mid-data@outside.test>';
    const body = `${'x'.repeat(998)}\r\n`.repeat(1000); // about 1 MB
    const message = `From: sender@outside.test\r\nTo: ${b.primaryAddress}\r\nSubject: ${subject}\r\nMessage-ID: ${messageId}\r\n\r\n${body}`;

    const port = await startMx();
    const c = await RawSmtp.open(port);
    expect(await c.reply()).toMatch(/^220/);
    await c.cmd('EHLO sender.outside.test');
    expect(await c.cmd('MAIL FROM:<sender@outside.test>')).toMatch(/^250/);
    expect(await c.cmd(`RCPT TO:<${b.primaryAddress}>`)).toMatch(/^250/);
    expect(await c.cmd('DATA')).toMatch(/^354/);
    // Half the message, then the MX dies.
    c.socket.write(message.slice(0, message.length / 2), 'latin1');
    await new Promise((r) => setTimeout(r, 300));
    const dead = new Promise((r) => child!.once('exit', r));
    child!.kill('SIGKILL');
    await dead;
    await waitFor('the connection to drop', () => c.closed, 5000);
    expect(await storedSubjects(b.accountId)).not.toContain(subject);
    const events = await rest(t, 'GET', '/events?type=mail.received', { key: b.apiKey });
    expect(events.body.events.filter((e: any) => e.data.message?.subject === subject)).toEqual([]);

    // The sender retries the whole message on a new MX process: stored once.
    const again = await startMx();
    const transport = nodemailer.createTransport({
      host: '127.0.0.1',
      port: again,
      secure: false,
      tls: { rejectUnauthorized: false },
      name: 'sender.outside.test',
    });
    const info = await transport.sendMail({ envelope: { from: 'sender@outside.test', to: [b.primaryAddress] }, raw: message });
    transport.close();
    expect(info.accepted).toEqual([b.primaryAddress]);
    const subjects = await storedSubjects(b.accountId);
    expect(
      subjects.filter((s) => s === subject),
      JSON.stringify(subjects),
    ).toHaveLength(1);
    const after = await rest(t, 'GET', '/events?type=mail.received', { key: b.apiKey });
    expect(after.body.events.filter((e: any) => e.data.message?.subject === subject)).toHaveLength(1);
    child!.kill('SIGKILL');
  }, 60_000);
});

describe('slow clients', () => {
  async function openQuiet(port: number, first: string | null, n: number): Promise<{ sockets: net.Socket[]; closed: () => number }> {
    let closed = 0;
    const sockets = await Promise.all(
      Array.from(
        { length: n },
        () =>
          new Promise<net.Socket>((resolve, reject) => {
            const s = net.connect({ host: '127.0.0.1', port });
            s.on('error', () => undefined);
            s.once('close', () => closed++);
            // Read (and drop) what the server says, so its closing the connection is seen.
            s.resume();
            s.once('connect', () => {
              if (first !== null) s.write(first);
              resolve(s);
            });
            s.once('error', reject);
          }),
      ),
    );
    return { sockets, closed: () => closed };
  }

  it(`SMTP: ${SLOW_CLIENTS} silent sessions do not starve a client, and are closed after SMTP_SOCKET_TIMEOUT_MS`, async () => {
    const quiet = await openQuiet(t.smtpPort!, 'EH', SLOW_CLIENTS);
    const transport = nodemailer.createTransport({
      host: '127.0.0.1',
      port: t.smtpPort!,
      secure: false,
      tls: { rejectUnauthorized: false },
      name: 'sender.outside.test',
    });
    const started = Date.now();
    await transport.sendMail({ from: 'busy@outside.test', to: b.primaryAddress, subject: 'past the slow ones', text: 'hello' });
    transport.close();
    expect(Date.now() - started).toBeLessThan(1500);
    await waitFor('the silent sessions to be closed', () => quiet.closed() === SLOW_CLIENTS, 10_000);
  });

  it(`IMAP: ${SLOW_CLIENTS} clients that never finish TLS or never log in do not starve a login, and are closed after IMAP_LOGIN_TIMEOUT_MS; a quiet session after IMAP_AUTOLOGOUT_MS`, async () => {
    const port = t.config.mailClients.imapPort;
    // Half never start TLS (a few bytes of nothing); half finish TLS and then say nothing.
    const raw = await openQuiet(port, 'A', SLOW_CLIENTS / 2);
    let quietTls = 0;
    const tlsQuiet = await Promise.all(
      Array.from(
        { length: SLOW_CLIENTS / 2 },
        () =>
          new Promise<tls.TLSSocket>((resolve, reject) => {
            const s = tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false }, () => resolve(s));
            s.on('error', () => undefined);
            s.resume();
            s.once('close', () => quietTls++);
            s.once('error', reject);
          }),
      ),
    );
    expect(tlsQuiet).toHaveLength(SLOW_CLIENTS / 2);
    // A real client logs in past them, at once.
    const password = (await rest(t, 'POST', '/account/app-passwords', { key: b.apiKey, body: { label: 'slow-clients' } })).body.password as string;
    const client = new ImapFlow({
      host: '127.0.0.1',
      port,
      secure: true,
      tls: { rejectUnauthorized: false },
      auth: { user: b.primaryAddress, pass: password },
      logger: false,
    });
    const started = Date.now();
    await client.connect();
    expect(Date.now() - started).toBeLessThan(3000);
    const lock = await client.getMailboxLock('INBOX');
    lock.release();
    // The quiet ones are closed by the login timeout; the logged-in client, left quiet, by the autologout.
    await waitFor('the quiet IMAP connections to be closed', () => raw.closed() + quietTls === SLOW_CLIENTS, 10_000).catch((err) => {
      throw new Error(`${(err as Error).message}: ${raw.closed()} of the raw and ${quietTls} of the TLS ones closed`);
    });
    let loggedOut = false;
    client.on('close', () => (loggedOut = true));
    await waitFor('the quiet session to be logged out', () => loggedOut, 10_000);
  });

  it(`HTTP: ${SLOW_CLIENTS} clients stuck in their headers or body do not starve a request, and are closed after the timeouts`, async () => {
    const url = new URL(t.url);
    const port = Number(url.port);
    const inHead = await openQuiet(port, 'GET /api/v1/account HTTP/1.1\r\nHost: x\r\nX-Slow: ', SLOW_CLIENTS / 2);
    const inBody = await openQuiet(
      port,
      'POST /api/v1/boxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"addr',
      SLOW_CLIENTS / 2,
    );
    const silent = await openQuiet(port, null, 10);
    const started = Date.now();
    const r = await rest(t, 'GET', '/account', { key: (await signupAccount(t)).apiKey });
    expect(r.status).toBe(200);
    expect(Date.now() - started).toBeLessThan(1500);
    await waitFor('the slow clients to be closed', () => inHead.closed() + inBody.closed() + silent.closed() === SLOW_CLIENTS + 10, 10_000);
  });
});
