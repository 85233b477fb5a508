// End-to-end mail: an agent sends to an outside address (a local SMTP server standing in for the remote MX),
// and an outside sender mails a box through our MX.
import { afterAll, beforeAll, expect, it } from 'vitest';
import nodemailer from 'nodemailer';
import { staticResolver } from '@boxes/mail';
import { startStandInMx } from './mail-receive-helpers';
import { hasMessageId, rest, signupAccount, startTestServer, waitFor, type TestServer } from '@boxes/testing';

let t: TestServer;
let remote: Awaited<ReturnType<typeof startStandInMx>>;

beforeAll(async () => {
  remote = await startStandInMx();
  t = await startTestServer({ worker: true, mail: true, resolver: staticResolver({ 'remote.test': { host: '127.0.0.1', port: remote.port } }) });
});
afterAll(async () => {
  await t?.stop();
  await remote?.close();
});

it('sends to an outside address and receives from one', async () => {
  const a = await signupAccount(t);
  const sent = await rest(t, 'POST', '/messages/send', {
    key: a.apiKey,
    body: { to: 'Someone <someone@remote.test>', subject: 'Hello', text: 'Hi there', context: { ticket: 42 } },
  });
  expect(sent.status, JSON.stringify(sent.body)).toBe(200);
  const got = await waitFor('the message at the stand-in MX', async () => remote.received.find((r) => r.rcpt.includes('someone@remote.test')));
  expect(got.raw.toString()).toContain('DKIM-Signature:');
  expect(hasMessageId(got.raw, sent.body.rfc_message_id)).toBe(true);

  const client = nodemailer.createTransport({ host: '127.0.0.1', port: t.smtpPort!, secure: false, tls: { rejectUnauthorized: false } });
  await client.sendMail({
    from: 'someone@remote.test',
    to: a.primaryAddress,
    subject: 'Re: Hello',
    text: 'reply',
    inReplyTo: sent.body.rfc_message_id,
    references: [sent.body.rfc_message_id],
  });
  const ev = await waitFor('mail.received', async () => {
    const r = await rest(t, 'GET', '/events?type=mail.received', { key: a.apiKey });
    return r.body.events[0];
  });
  expect(ev.data.context).toEqual({ ticket: 42 });
  const list = await rest(t, 'GET', '/messages?direction=received&include=body', { key: a.apiKey });
  expect(list.body.messages[0].body.text).toContain('reply');
});
