// Inbound mail over real SMTP to the MX: outside senders using nodemailer, swaks (plain and STARTTLS) and curl;
// what mail.received, GET /messages and GET /messages/{id} show; encryption at rest; reply context
// (a reply to a message sent with context arrives with the same context).
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rest, startTestServer, type TestServer } from '@boxes/testing';
import { accountPool, execFileAsync, rawMessage, requireTool, sendRaw, smtpClient, swaks, waitForEvent, waitForReceived } from './mail-receive-helpers';
import { k, rows as sqlRows } from '@boxes/db';

let t: TestServer;
let port: number;
/** This file's accounts, signed up in parallel once the server is up. */
const accounts = accountPool(() => t, 7);

beforeAll(async () => {
  // No worker: inbound mail needs only the MX, and sent records exist without being delivered.
  t = await startTestServer({ mail: true });
  port = t.smtpPort!;
  accounts.fill();
});
afterAll(async () => {
  await t?.stop();
});

const tag = () => randomBytes(6).toString('hex');

/** Every base64url/base64 piece of a stored column, decoded, so plain text that is merely encoded is caught too. */
function decodedPieces(column: string): string[] {
  return column.split(/[.:$]/).flatMap((p) => [Buffer.from(p, 'base64url').toString('latin1'), Buffer.from(p, 'base64').toString('latin1')]);
}

describe('mail from an outside sender', () => {
  it('nodemailer: 250, mail.received with the message and context null, GET /messages and GET /messages/{id} with the decrypted body; sealed at rest', async () => {
    const a = await accounts.take();
    const marker = `plain-marker-${tag()}`;
    const binary = randomBytes(777);
    const subject = `Quarterly numbers ${tag()}`;
    const rfcId = `<q-numbers-${tag()}@outside.test>`;

    const client = smtpClient(port);
    const info = await client.sendMail({
      envelope: { from: 'alice@outside.test', to: [a.primaryAddress] },
      from: 'Alice Outside <alice@outside.test>',
      to: `Agent <${a.primaryAddress}>`,
      cc: 'carol@outside.test',
      subject,
      messageId: rfcId,
      text: `Hello agent, ${marker}`,
      html: `<p>Hello agent, <b>${marker}</b></p>`,
      headers: { 'X-Ticket': 'T-1001' },
      attachments: [
        { filename: 'notes.txt', content: `attached ${marker}`, contentType: 'text/plain' },
        { filename: 'blob.bin', content: binary, contentType: 'application/octet-stream' },
      ],
    });
    client.close();
    expect(info.response).toMatch(/^250 /);
    expect(info.accepted).toEqual([a.primaryAddress]);
    expect(info.rejected).toEqual([]);

    // The event.
    const ev = await waitForEvent(t, a.apiKey, 'mail.received', (e) => e.data.message.subject === subject);
    expect(ev.data.context).toBeNull();
    expect(ev.data.message).toMatchObject({
      id: expect.stringMatching(/^msg_/),
      from: 'alice@outside.test',
      to: [a.primaryAddress],
      cc: ['carol@outside.test'],
      subject,
      rfc_message_id: rfcId,
      in_reply_to: null,
    });
    expect(ev.data.message.to_box).toBe(a.primaryAddress);
    expect(ev.data.message.size_bytes).toBeGreaterThan(binary.length);
    const id: string = ev.data.message.id;

    // The list, with bodies.
    const list = await rest(t, 'GET', '/messages?direction=received&include=body', { key: a.apiKey });
    expect(list.status).toBe(200);
    expect(list.body.messages).toHaveLength(1);
    const m = list.body.messages[0];
    expect(m).toMatchObject({
      id,
      direction: 'received',
      from: 'alice@outside.test',
      to: [a.primaryAddress],
      cc: ['carol@outside.test'],
      subject,
      rfc_message_id: rfcId,
      context: null,
      body_state: 'available',
    });
    expect(m.body.text).toContain(marker);
    expect(m.body.html).toContain(`<b>${marker}</b>`);
    expect(m.body.attachments.map((x: any) => [x.filename, x.content_type])).toEqual([
      ['notes.txt', 'text/plain'],
      ['blob.bin', 'application/octet-stream'],
    ]);
    // The sent list has nothing: it was received.
    const sentList = await rest(t, 'GET', '/messages?direction=sent', { key: a.apiKey });
    expect(sentList.body.messages).toEqual([]);

    // One message, fully decrypted: body, headers, attachments with their content (include=attachment_content).
    const one = await rest(t, 'GET', `/messages/${id}?include=attachment_content`, { key: a.apiKey });
    expect(one.status).toBe(200);
    expect(one.body).toMatchObject({ id, direction: 'received', subject, rfc_message_id: rfcId, context: null });
    expect(one.body.body.text).toContain(`Hello agent, ${marker}`);
    expect(one.body.body.html).toContain(`<b>${marker}</b>`);
    const header = (name: string) => Object.entries(one.body.body.headers as Record<string, string>).find(([k]) => k.toLowerCase() === name)?.[1];
    expect(header('x-ticket')).toBe('T-1001');
    expect(header('subject')).toBe(subject);
    expect(header('message-id')).toBe(rfcId);
    const [notes, blob] = one.body.body.attachments;
    expect(Buffer.from(notes.content_b64, 'base64').toString()).toBe(`attached ${marker}`);
    expect(Buffer.from(blob.content_b64, 'base64').equals(binary)).toBe(true);
    expect(blob.size_bytes).toBe(binary.length);

    // At rest, body and raw message are sealed: neither the text nor the attachment is readable in the columns.
    const rows = await sqlRows(t.db, k.selectFrom('messages').select(['body_enc', 'raw_enc']).where('id', '=', id));
    expect(rows).toHaveLength(1);
    // raw_enc is bytes (sealBytes): looked at as latin1 text, every byte as it is.
    const raw = rows[0]!.raw_enc;
    for (const column of [rows[0]!.body_enc, raw && Buffer.from(raw).toString('latin1')]) {
      expect(column).toBeTruthy();
      expect(column).not.toContain(marker);
      expect(column).not.toContain(subject);
      for (const piece of decodedPieces(column!)) {
        expect(piece).not.toContain(marker);
        expect(piece).not.toContain('T-1001');
      }
    }
  });
});

describe('other SMTP clients', () => {
  it('swaks (plain and with STARTTLS) delivers to a box', async () => {
    await requireTool('swaks');
    const a = await accounts.take();

    const plainSubject = `via swaks ${tag()}`;
    const plain = await swaks(port, [
      '--from',
      'bob@outside.test',
      '--to',
      a.primaryAddress,
      '--header',
      `Subject: ${plainSubject}`,
      '--body',
      'Sent with swaks, no TLS',
    ]);
    expect(plain.code, plain.out).toBe(0);
    // The reply to the end of DATA, in clear.
    expect(plain.out).toMatch(/^ -> \.\r?\n<- {1,2}250 /m);

    const tlsSubject = `via swaks over TLS ${tag()}`;
    const tls = await swaks(port, [
      '--tls',
      '--from',
      'bob@outside.test',
      '--to',
      a.primaryAddress,
      '--header',
      `Subject: ${tlsSubject}`,
      '--body',
      'Sent with swaks after STARTTLS',
    ]);
    expect(tls.code, tls.out).toBe(0);
    expect(tls.out).toMatch(/^<- {1,2}250[- ]STARTTLS/m);
    expect(tls.out).toMatch(/TLS started/);
    // The envelope and the data went over TLS (swaks marks encrypted lines with ~), and were accepted.
    expect(tls.out).toMatch(/^ ~> MAIL FROM:<bob@outside\.test>/m);
    expect(tls.out).toMatch(/^ ~> \.\r?\n<~ {1,2}250 /m);

    for (const [subject, text] of [
      [plainSubject, 'Sent with swaks, no TLS'],
      [tlsSubject, 'Sent with swaks after STARTTLS'],
    ] as const) {
      const m = await waitForReceived(t, a.apiKey, subject);
      expect(m.direction).toBe('received');
      expect(m.from).toBe('bob@outside.test');
      expect(m.body.text).toContain(text);
      expect(m.context).toBeNull();
      const ev = await waitForEvent(t, a.apiKey, 'mail.received', (e) => e.data.message.id === m.id);
      expect(ev.data.context).toBeNull();
    }
  });

  it('curl (smtp:// with --upload-file -) delivers to a box', async () => {
    await requireTool('curl');
    const a = await accounts.take();
    const subject = `via curl ${tag()}`;
    const raw = rawMessage(
      { From: 'Carl <carl@outside.test>', To: a.primaryAddress, Subject: subject, 'Message-ID': `<curl-${tag()}@outside.test>` },
      'Sent with curl.',
    );
    const run = execFileAsync(
      'curl',
      [
        '--silent',
        '--show-error',
        '--url',
        `smtp://127.0.0.1:${port}/curl.outside.test`,
        '--mail-from',
        'carl@outside.test',
        '--mail-rcpt',
        a.primaryAddress,
        '--upload-file',
        '-',
      ],
      { timeout: 20_000 },
    );
    run.child.stdin!.end(raw);
    await run; // rejects on a non-zero exit (an SMTP refusal)
    const m = await waitForReceived(t, a.apiKey, subject);
    expect(m).toMatchObject({ direction: 'received', from: 'carl@outside.test', to: [a.primaryAddress], context: null });
    expect(m.body.text).toContain('Sent with curl.');
  });

  it('curl reports the refusal of an unknown box (exit code non-zero, 550 in its error)', async () => {
    await requireTool('curl');
    const a = await accounts.take();
    const run = execFileAsync(
      'curl',
      [
        '--silent',
        '--show-error',
        '--url',
        `smtp://127.0.0.1:${port}/curl.outside.test`,
        '--mail-from',
        'carl@outside.test',
        '--mail-rcpt',
        `nobody-here@${a.domain}`,
        '--upload-file',
        '-',
      ],
      { timeout: 20_000 },
    );
    run.child.stdin!.end(rawMessage({ From: 'carl@outside.test', To: `nobody-here@${a.domain}`, Subject: 'lost' }, 'lost'));
    const err = (await run.then(
      () => null,
      (e: unknown) => e,
    )) as { code?: number; stderr?: string } | null;
    expect(err, 'curl should fail').not.toBeNull();
    expect(err!.code).not.toBe(0);
    expect(err!.stderr).toMatch(/550/);
    const list = await rest(t, 'GET', '/messages', { key: a.apiKey });
    expect(list.body.messages).toEqual([]);
  });
});

describe('reply context', () => {
  it('a reply (In-Reply-To and References naming the sent message) carries the context of the send, on the event and the message', async () => {
    const a = await accounts.take();
    const context = { ticket: 4211, customer: { id: 'c_9', tier: 'gold' }, tags: ['refund', 'urgent'], open: true };
    const sent = await rest(t, 'POST', '/messages/send', {
      key: a.apiKey,
      body: { to: 'Dana <dana@outside.test>', subject: 'Your refund', text: 'We are on it.', context },
    });
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    const rfc: string = sent.body.rfc_message_id;
    // No worker runs here: the sent record exists all the same.
    const sentRecord = await rest(t, 'GET', `/messages/${sent.body.message_id}`, { key: a.apiKey });
    expect(sentRecord.body).toMatchObject({ direction: 'sent', rfc_message_id: rfc, context });

    const client = smtpClient(port);
    await client.sendMail({
      from: 'Dana <dana@outside.test>',
      to: a.primaryAddress,
      subject: 'Re: Your refund',
      text: 'Thanks, waiting for it.',
      inReplyTo: rfc,
      references: [`<older-${tag()}@outside.test>`, rfc],
    });
    client.close();

    const ev = await waitForEvent(t, a.apiKey, 'mail.received', (e) => e.data.message.subject === 'Re: Your refund');
    expect(ev.data.context).toEqual(context);
    expect(ev.data.message.in_reply_to).toBe(rfc);
    const m = await waitForReceived(t, a.apiKey, 'Re: Your refund');
    expect(m.context).toEqual(context);
    expect(m.in_reply_to).toBe(rfc);
    const one = await rest(t, 'GET', `/messages/${m.id}`, { key: a.apiKey });
    expect(one.body.context).toEqual(context);

    // A message that is not a reply carries context null.
    await sendRaw(
      port,
      { from: 'dana@outside.test', to: [a.primaryAddress] },
      rawMessage({ From: 'dana@outside.test', To: a.primaryAddress, Subject: 'A new topic', 'Message-ID': `<new-${tag()}@outside.test>` }, 'Unrelated.'),
    );
    const ev2 = await waitForEvent(t, a.apiKey, 'mail.received', (e) => e.data.message.subject === 'A new topic');
    expect(ev2.data.context).toBeNull();
    expect((await waitForReceived(t, a.apiKey, 'A new topic')).context).toBeNull();

    // A reply to a message sent without context carries null as well.
    const plain = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: 'dana@outside.test', subject: 'No context', text: 'plain' } });
    expect(plain.status).toBe(200);
    await sendRaw(
      port,
      { from: 'dana@outside.test', to: [a.primaryAddress] },
      rawMessage(
        {
          From: 'dana@outside.test',
          To: a.primaryAddress,
          Subject: 'Re: No context',
          'In-Reply-To': plain.body.rfc_message_id,
          References: plain.body.rfc_message_id,
        },
        'ok',
      ),
    );
    const ev3 = await waitForEvent(t, a.apiKey, 'mail.received', (e) => e.data.message.subject === 'Re: No context');
    expect(ev3.data.context).toBeNull();
  });

  it("a reply naming another account's message does not get that account's context; the other account's own copy does", async () => {
    const a = await accounts.take();
    const b = await accounts.take();
    const secret = { owner: 'account-b', note: `b-only-${tag()}` };
    const sent = await rest(t, 'POST', '/messages/send', { key: b.apiKey, body: { to: 'erin@outside.test', subject: 'From B', text: 'hi', context: secret } });
    expect(sent.status).toBe(200);
    const rfc: string = sent.body.rfc_message_id;

    // Erin replies to B's message, and copies A's box: one SMTP transaction, two recipients on two accounts.
    const r = await sendRaw(
      port,
      { from: 'erin@outside.test', to: [a.primaryAddress, b.primaryAddress] },
      rawMessage(
        { From: 'erin@outside.test', To: b.primaryAddress, Cc: a.primaryAddress, Subject: 'Re: From B', 'In-Reply-To': rfc, References: rfc },
        'reply',
      ),
    );
    expect(r.accepted.sort()).toEqual([a.primaryAddress, b.primaryAddress].sort());

    const evA = await waitForEvent(t, a.apiKey, 'mail.received', (e) => e.data.message.subject === 'Re: From B');
    expect(evA.data.context).toBeNull();
    expect(JSON.stringify(evA.data)).not.toContain(secret.note);
    const mA = await waitForReceived(t, a.apiKey, 'Re: From B');
    expect(mA.context).toBeNull();

    const evB = await waitForEvent(t, b.apiKey, 'mail.received', (e) => e.data.message.subject === 'Re: From B');
    expect(evB.data.context).toEqual(secret);
    expect((await waitForReceived(t, b.apiKey, 'Re: From B')).context).toEqual(secret);

    // A only ever sees its own copy.
    const listA = await rest(t, 'GET', '/messages', { key: a.apiKey });
    expect(listA.body.messages.map((m: any) => m.id)).toEqual([mA.id]);
  });
});
