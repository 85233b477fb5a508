/**
 * SMTP submission for mail clients (implicit TLS, AUTH with an app-password) with clients nobody here wrote:
 * nodemailer over implicit TLS, swaks --tls-on-connect --auth (PLAIN and LOGIN) and curl smtps://. A submitted
 * message goes the way of POST /messages/send: signature, trailer, DKIM, Bcc from the envelope, events, the sent
 * record; and the refusals: no AUTH (never an open relay), wrong, revoked and API-key passwords, senders the
 * credential may not use, header rules, and a send that would overdraw (554 with the top-up guidance, nothing
 * sent).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { events, MailSink, unique, waitFor, waitSettled } from './mail-send-helpers';

const execFileAsync = promisify(execFile);

let t: TestServer;
let sink: MailSink;
let a: TestAccount;
let billing: { id: string; address: string };
let password: string;
let billingPassword: string;

function client(user: string, pass: string | null) {
  return nodemailer.createTransport({
    host: '127.0.0.1',
    port: t.submissionPort!,
    secure: true,
    tls: { rejectUnauthorized: false },
    ...(pass !== null ? { auth: { user, pass } } : {}),
  });
}

type Mail = Parameters<ReturnType<typeof client>['sendMail']>[0];

async function submit(user: string, pass: string | null, mail: Mail) {
  const c = client(user, pass);
  try {
    return await c.sendMail(mail);
  } finally {
    c.close();
  }
}

async function submitError(user: string, pass: string | null, mail: Mail): Promise<{ responseCode?: number; response?: string; command?: string }> {
  try {
    await submit(user, pass, mail);
  } catch (err) {
    return err as { responseCode?: number; response?: string };
  }
  throw new Error('the submission was accepted');
}

const sentCount = async (accountId: string) => t.db.message.count({ where: { accountId, direction: 'sent' } });

beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  t = await startTestServer({ worker: true, mail: true, resolver: sink.resolver(), env: { MAIL_AUTH_DELAY_MS: '0' } });
  a = await signupAccount(t, 'submit-owner@example.com');
  billing = (await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'billing' } })).body;
  await rest(t, 'PUT', `/boxes/${billing.id}/signature`, { key: a.apiKey, body: { signature: 'Billing team' } });
  password = (await rest(t, 'POST', '/account/app-passwords', { key: a.apiKey, body: { label: 'laptop' } })).body.password;
  billingPassword = (await rest(t, 'POST', '/account/app-passwords', { key: a.apiKey, body: { label: 'billing phone', box: 'billing' } })).body.password;
});
afterAll(async () => {
  await t?.stop();
  await sink?.close();
});

describe('a submitted message goes the way of POST /messages/send', () => {
  it('nodemailer over implicit TLS: To, Cc and an envelope-only Bcc delivered; signature, trailer and DKIM added; the sent record keeps the Bcc', async () => {
    const tag = unique();
    const [to, cc, bcc] = [`to-${tag}@remote.test`, `cc-${tag}@remote.test`, `bcc-${tag}@remote.test`];
    const info = await submit(billing.address, password, {
      from: `"Billing" <${billing.address}>`,
      to,
      cc,
      bcc,
      subject: `submitted ${tag}`,
      text: 'Hello from a mail client',
      html: '<p>Hello from a <b>mail client</b></p>',
      attachments: [{ filename: 'note.txt', content: 'attached text' }],
      headers: { 'X-Campaign': 'clients', 'User-Agent': 'Some Client 1.0' },
    });
    expect(info.response).toMatch(/^250 2\.0\.0 Ok: queued as msg_/);
    const messageId = /queued as (msg_[0-9a-z]+)/.exec(info.response)![1]!;
    const m = await waitSettled(t, a.apiKey, messageId);
    expect(m).toMatchObject({
      direction: 'sent',
      status: 'delivered',
      from: billing.address,
      to: [to],
      cc: [cc],
      bcc: [bcc],
      subject: `submitted ${tag}`,
      box_id: billing.id,
    });
    expect(m.body.text).toContain('Hello from a mail client');
    expect(m.body.text).toContain('Billing team');
    expect(m.body.text).toContain('Sent by an AI agent with Boxes');
    expect(m.body.headers).toMatchObject({ 'X-Campaign': 'clients' });
    expect(m.body.attachments.map((x: { filename: string }) => x.filename)).toEqual(['note.txt']);
    for (const r of [to, cc, bcc]) expect(sink.to(r), r).toHaveLength(1);
    const raw = sink.to(to)[0]!.raw.toString('latin1');
    expect(raw).toMatch(/^DKIM-Signature: /m);
    expect(raw).toMatch(/^X-Campaign: clients/m);
    expect(raw).not.toMatch(/^Bcc:/im);
    expect(raw).not.toMatch(/^User-Agent:/im);
    const sent = (await events(t, a.apiKey, 'mail.sent')).find((e) => e.data.message_id === messageId);
    expect(sent?.data).toMatchObject({ from: billing.address, to: [to], cc: [cc] });
  });

  it('a suppressed recipient is skipped and named in the reply, as POST /messages/send skips it', async () => {
    const tag = unique();
    const [ok, blocked] = [`ok-${tag}@remote.test`, `blocked-${tag}@remote.test`];
    await t.db.suppression.create({ data: { accountId: a.accountId, address: blocked, reason: 'bounce' } });
    const info = await submit(a.primaryAddress, password, { from: a.primaryAddress, to: [ok, blocked], subject: `suppressed ${tag}`, text: 'one of two' });
    expect(info.response).toMatch(new RegExp(`queued as msg_[0-9a-z]+; suppressed, not sent: ${blocked}`));
    await waitFor(() => sink.to(ok).length === 1, 'delivery to the other recipient');
    expect(sink.to(blocked)).toHaveLength(0);
  });

  it('swaks --tls-on-connect --auth PLAIN and LOGIN', async () => {
    for (const method of ['PLAIN', 'LOGIN']) {
      const tag = unique();
      const out = await execFileAsync('swaks', [
        '--server',
        '127.0.0.1',
        '--port',
        String(t.submissionPort),
        '--tls-on-connect',
        '--auth',
        method,
        '--auth-user',
        a.primaryAddress,
        '--auth-password',
        password,
        '--from',
        a.primaryAddress,
        '--to',
        `swaks-${tag}@remote.test`,
        '--header',
        `Subject: swaks ${method} ${tag}`,
        '--body',
        'sent with swaks',
      ]);
      expect(out.stdout).toMatch(/<~ {2}250 2\.0\.0 Ok: queued as msg_/);
      await waitFor(() => sink.to(`swaks-${tag}@remote.test`).length === 1, `swaks ${method} delivery`);
    }
  });

  it('curl smtps:// with --user', async () => {
    const tag = unique();
    const raw = [
      `From: ${a.primaryAddress}`,
      `To: curl-${tag}@remote.test`,
      `Subject: curl ${tag}`,
      `Message-ID: <curl-${tag}@client.test>`,
      '',
      'sent with curl',
      '',
    ].join('\r\n');
    const child = execFileAsync('curl', [
      '--silent',
      '--show-error',
      '--insecure',
      '--url',
      `smtps://127.0.0.1:${t.submissionPort}`,
      '--user',
      `${a.primaryAddress}:${password}`,
      '--mail-from',
      a.primaryAddress,
      '--mail-rcpt',
      `curl-${tag}@remote.test`,
      '--upload-file',
      '-',
    ]);
    child.child.stdin!.end(raw);
    await child;
    const got = await waitFor(() => sink.to(`curl-${tag}@remote.test`)[0], 'curl delivery');
    // Our Message-ID replaces the client's, as for every send.
    // (a long domain folds the header onto the next line: "Message-ID:\r\n <msg_...>")
    expect(got.raw.toString()).toMatch(/^Message-ID:[ \t]*(?:\r?\n[ \t]+)?<msg_/im);
    expect(got.raw.toString()).not.toContain(`curl-${tag}@client.test`);
    expect(got.raw.toString()).toContain('sent with curl');
  });
});

describe('refusals', () => {
  const mail = (from: string) => ({ from, to: `nobody-${unique()}@remote.test`, subject: 'refused', text: 'no' });

  it('without AUTH nothing is accepted: never an open relay', async () => {
    const before = await sentCount(a.accountId);
    const err = await submitError('', null, mail(a.primaryAddress));
    expect(err.responseCode).toBe(530);
    expect(await sentCount(a.accountId)).toBe(before);
  });

  it("wrong, revoked and API-key passwords, and another account's password, get 535", async () => {
    const other = await signupAccount(t, 'submit-other@example.com');
    const otherPw = (await rest(t, 'POST', '/account/app-passwords', { key: other.apiKey, body: { label: 'x' } })).body.password;
    const old = (await rest(t, 'POST', '/account/app-passwords', { key: a.apiKey, body: { label: 'old' } })).body;
    await rest(t, 'DELETE', `/account/app-passwords/${old.id}`, { key: a.apiKey });
    for (const pass of ['AAAA-BBBB-CCCC-DDDD', a.apiKey, old.password, otherPw]) {
      const err = await submitError(a.primaryAddress, pass, mail(a.primaryAddress));
      expect(err.responseCode, pass).toBe(535);
    }
  });

  it('MAIL FROM and From must be boxes the credential may use', async () => {
    const other = await signupAccount(t, 'submit-third@example.com');
    const before = await sentCount(a.accountId);
    // Not a box at all, a box of another account, an outside address.
    for (const from of [`nobox@${a.domain}`, other.primaryAddress, 'someone@gmail.com']) {
      const err = await submitError(a.primaryAddress, password, mail(from));
      expect(err.responseCode, from).toBe(550);
      expect(err.response).toMatch(/not a box this app-password may send from/);
    }
    // The box-limited password sends from its box only, whatever the username.
    expect((await submitError(billing.address, billingPassword, mail(a.primaryAddress))).responseCode).toBe(550);
    const ok = await submit(billing.address, billingPassword, mail(billing.address));
    expect(ok.response).toMatch(/^250/);
    // A From header other than the envelope's sender is checked too.
    const header = await submitError(billing.address, billingPassword, {
      envelope: { from: billing.address, to: ['x@remote.test'] },
      from: a.primaryAddress,
      to: 'x@remote.test',
      subject: 's',
      text: 't',
    });
    expect(header.responseCode).toBe(550);
    expect(await sentCount(a.accountId)).toBe(before + 1);
  });

  it('header rules apply: a reserved header is refused with the rule', async () => {
    const err = await submitError(a.primaryAddress, password, { ...mail(a.primaryAddress), headers: { 'X-Boxes-Agentic-Run': '1' } });
    expect(err.responseCode).toBe(554);
    expect(err.response).toMatch(/reserved/);
  });

  it("swaks: headers named like an object's members (toString, constructor) are kept, a repeat in another case is dropped; __proto__ is refused by name", async () => {
    const swaks = (to: string, headers: string[]) =>
      execFileAsync('swaks', [
        ...['--server', '127.0.0.1', '--port', String(t.submissionPort), '--tls-on-connect'],
        ...['--auth', 'PLAIN', '--auth-user', a.primaryAddress, '--auth-password', password],
        ...['--from', a.primaryAddress, '--to', to, '--body', 'odd header names'],
        ...headers.flatMap((h) => ['--header', h]),
      ]);
    const tag = unique();
    const to = `names-${tag}@remote.test`;
    // A name repeated in another case is the same header: the first is kept, as for a repeat in the same case.
    const out = await swaks(to, [`Subject: names ${tag}`, 'toString: kept 1', 'constructor: kept 2', 'X-Plain: kept 3', 'x-plain: a repeat']);
    const messageId = /queued as (msg_[0-9a-z]+)/.exec(out.stdout)![1]!;
    const m = await waitSettled(t, a.apiKey, messageId);
    expect(m.body.headers).toEqual({ toString: 'kept 1', constructor: 'kept 2', 'X-Plain': 'kept 3' });
    const raw = sink.to(to)[0]!.raw.toString('latin1');
    expect(raw).toMatch(/^Tostring: kept 1/im);
    expect(raw).toMatch(/^Constructor: kept 2/im);

    const before = await sentCount(a.accountId);
    const refused = await swaks(`proto-${tag}@remote.test`, [`Subject: proto ${tag}`, '__proto__: dropped?']).then(
      () => null,
      (err: { stdout?: string }) => err.stdout ?? '',
    );
    expect(refused).toMatch(/<~\* 554 5\.6\.0 The message cannot be sent: headers\.__proto__: the key "__proto__" is not accepted/);
    expect(await sentCount(a.accountId)).toBe(before);
  });

  it('a submission that would overdraw gets 554 with the top-up guidance, and nothing is sent', async () => {
    const poor = await signupAccount(t, 'submit-poor@example.com');
    const pw = (await rest(t, 'POST', '/account/app-passwords', { key: poor.apiKey, body: { label: 'poor' } })).body.password;
    await t.db.account.update({ where: { id: poor.accountId }, data: { freeMessagesLeft: 0, balanceMicros: 0n } });
    const tag = unique();
    const err = await submitError(poor.primaryAddress, pw, { from: poor.primaryAddress, to: `poor-${tag}@remote.test`, subject: 'x', text: 'x' });
    expect(err.responseCode).toBe(554);
    expect(err.response).toMatch(/topup\/mpp/);
    expect(err.response).toMatch(/owner approves/);
    expect(await sentCount(poor.accountId)).toBe(0);
    await new Promise((r) => setTimeout(r, 300));
    expect(sink.to(`poor-${tag}@remote.test`)).toHaveLength(0);
  });
});
