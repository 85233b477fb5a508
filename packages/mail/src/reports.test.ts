import { describe, expect, it } from 'vitest';
import MimeNode from 'nodemailer/lib/mime-node';
import { composeMessage } from './compose';
import { parseMessage } from './parse';
import { parseReport } from './reports';

const crlf = (s: string): Buffer => Buffer.from(s.replace(/\r?\n/g, '\r\n'));

async function report(raw: Buffer) {
  const parsed = await parseMessage(raw);
  return { parsed, report: parseReport(parsed.mail) };
}

/** The message Boxes sent, as it comes back inside reports. */
function original(extra: Partial<Parameters<typeof composeMessage>[0]> = {}): Promise<Buffer> {
  return composeMessage({
    from: { name: 'Agent', address: 'agent@boxes.example' },
    to: ['Nobody@Example.net'],
    cc: [],
    replyTo: [],
    subject: 'hello',
    text: 'hi there',
    headers: {},
    attachments: [],
    messageId: '<orig-1@boxes.example>',
    date: new Date('2026-11-21T07:59:50Z'),
    ...extra,
  });
}

interface ReportPart {
  contentType: string;
  content: string | Buffer;
  headers?: Record<string, string>;
}

/** A top-level multipart/report built with nodemailer's MimeNode (the builder under MailComposer). */
function buildReport(contentType: string, parts: ReportPart[], headers: Record<string, string> = {}): Promise<Buffer> {
  const root = new MimeNode(contentType);
  root.setHeader({
    From: 'MAILER-DAEMON@mx.example.net',
    To: 'agent@boxes.example',
    Subject: 'Delivery Status Notification',
    'Message-ID': '<report-1@mx.example.net>',
    Date: 'Sat, 21 Nov 2026 08:00:00 +0000',
    ...headers,
  });
  for (const p of parts) {
    const child = root.createChild(p.contentType);
    for (const [k, v] of Object.entries(p.headers ?? {})) child.setHeader(k, v);
    child.setContent(typeof p.content === 'string' ? p.content.replace(/\r?\n/g, '\r\n') : p.content);
  }
  return root.build();
}

const POSTFIX_BOUNCE = `Return-Path: <>
Received: by mx.example.net (Postfix)
	id 3F2A81C0; Sat, 21 Nov 2026 08:00:00 +0000 (UTC)
Date: Sat, 21 Nov 2026 08:00:00 +0000 (UTC)
From: MAILER-DAEMON@mx.example.net (Mail Delivery System)
Subject: Undelivered Mail Returned to Sender
To: agent@boxes.example
Auto-Submitted: auto-replied
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status;
	boundary="3F2A81C0.1763712000/mx.example.net"
Content-Transfer-Encoding: 8bit
Message-Id: <20261121080000.3F2A81C0@mx.example.net>

This is a MIME-encapsulated message.

--3F2A81C0.1763712000/mx.example.net
Content-Description: Notification
Content-Type: text/plain; charset=us-ascii

This is the mail system at host mx.example.net.

I'm sorry to have to inform you that your message could not
be delivered to one or more recipients. It's attached below.

For further assistance, please send mail to postmaster.

                   The mail system

<nobody@example.net>: host mx.example.net[192.0.2.1] said: 550 5.1.1
    <nobody@example.net>: Recipient address rejected: User unknown in virtual
    mailbox table (in reply to RCPT TO command)

--3F2A81C0.1763712000/mx.example.net
Content-Description: Delivery report
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.example.net
X-Postfix-Queue-ID: 3F2A81C0
X-Postfix-Sender: rfc822; agent@boxes.example
Arrival-Date: Sat, 21 Nov 2026 07:59:58 +0000 (UTC)

Final-Recipient: rfc822; Nobody@Example.net
Original-Recipient: rfc822;nobody@example.net
Action: failed
Status: 5.1.1
Remote-MTA: dns; mx.example.net
Diagnostic-Code: smtp; 550 5.1.1 <nobody@example.net>: Recipient address
    rejected: User unknown in virtual mailbox table

--3F2A81C0.1763712000/mx.example.net
Content-Description: Undelivered Message
Content-Type: message/rfc822
Content-Transfer-Encoding: 8bit

__ORIGINAL__
--3F2A81C0.1763712000/mx.example.net--
`;

async function postfixBounce(): Promise<Buffer> {
  const orig = (await original()).toString().replace(/\r\n/g, '\n');
  return crlf(POSTFIX_BOUNCE.replace('__ORIGINAL__', orig));
}

describe('parseReport: delivery status notifications (RFC 3464)', () => {
  it('reads a Postfix hard bounce (5.1.1 user unknown) with the original attached as message/rfc822', async () => {
    const { parsed, report: r } = await report(await postfixBounce());
    // parseMessage passes keepDeliveryStatus, so the delivery-status part stays an attachment (not text) and
    // the original is an attachment too.
    expect(parsed.attachments.map((a) => a.contentType)).toEqual(['message/delivery-status', 'message/rfc822']);
    expect(parsed.text ?? '').not.toContain('Reporting-MTA: dns; mx.example.net');
    expect(r).toEqual({
      kind: 'dsn',
      reportingMta: 'mx.example.net',
      originalMessageId: '<orig-1@boxes.example>',
      recipients: [
        {
          address: 'nobody@example.net',
          action: 'failed',
          status: '5.1.1',
          diagnostic: '550 5.1.1 <nobody@example.net>: Recipient address rejected: User unknown in virtual mailbox table',
          permanent: true,
        },
      ],
    });
  });

  it('reads a delayed (4.x.x) DSN with the original headers as text/rfc822-headers', async () => {
    const headersOnly = (await original()).toString().split('\r\n\r\n')[0] + '\r\n';
    const raw = await buildReport('multipart/report; report-type=delivery-status', [
      { contentType: 'text/plain', content: 'Your message has not been delivered yet. The server will keep trying.\n' },
      {
        contentType: 'message/delivery-status',
        content: [
          'Original-Envelope-Id: 0123456789abcdef',
          'Reporting-MTA: dns; relay.example.org',
          'Arrival-Date: Sat, 21 Nov 2026 04:00:00 +0000',
          '',
          'Original-Recipient: rfc822;nobody@example.net',
          'Final-Recipient: rfc822;nobody@example.net',
          'Action: delayed',
          'Status: 4.4.7',
          'Diagnostic-Code: smtp; 451 4.4.7 Temporary lookup failure',
          'Will-Retry-Until: Wed, 25 Nov 2026 04:00:00 +0000',
          '',
        ].join('\n'),
      },
      { contentType: 'text/rfc822-headers', content: headersOnly },
    ]);
    const { report: r } = await report(raw);
    expect(r).toEqual({
      kind: 'dsn',
      reportingMta: 'relay.example.org',
      originalMessageId: '<orig-1@boxes.example>',
      recipients: [{ address: 'nobody@example.net', action: 'delayed', status: '4.4.7', diagnostic: '451 4.4.7 Temporary lookup failure', permanent: false }],
    });
  });

  it('reads a DSN with two recipients (one failed, one delivered), case-insensitive folded fields, attached part', async () => {
    const raw = await buildReport('multipart/report; report-type=delivery-status', [
      { contentType: 'text/plain', content: 'Delivery report.\n' },
      {
        contentType: 'message/delivery-status',
        headers: { 'Content-Disposition': 'attachment' },
        content: [
          'REPORTING-MTA: dns;',
          '  mx2.example.com',
          '',
          'final-recipient: RFC822; <Full@Example.com>',
          'action: Failed',
          'status: 5.2.2 (mailbox full)',
          'diagnostic-code: X-Postfix; host mx2.example.com said: 552 5.2.2',
          '\tMailbox full',
          '',
          'Final-Recipient: rfc822; ok@example.com',
          'Action: delivered',
          'Status: 2.0.0',
          '',
        ].join('\n'),
      },
    ]);
    const { parsed, report: r } = await report(raw);
    // With Content-Disposition: attachment, mailparser does make it an attachment.
    expect(parsed.attachments.map((a) => a.contentType)).toEqual(['message/delivery-status']);
    expect(r).toEqual({
      kind: 'dsn',
      reportingMta: 'mx2.example.com',
      originalMessageId: null,
      recipients: [
        { address: 'full@example.com', action: 'failed', status: '5.2.2', diagnostic: 'host mx2.example.com said: 552 5.2.2 Mailbox full', permanent: true },
        { address: 'ok@example.com', action: 'delivered', status: '2.0.0', diagnostic: null, permanent: false },
      ],
    });
  });

  it('reads message/global-delivery-status (RFC 6533) with a utf-8 address and message/global-headers', async () => {
    const raw = await buildReport('multipart/report; report-type=delivery-status', [
      { contentType: 'text/plain; charset=utf-8', content: 'Delivery failed.\n' },
      {
        contentType: 'message/global-delivery-status',
        content: Buffer.from(
          'Reporting-MTA: dns; mx.exämple.de\r\n\r\nFinal-Recipient: utf-8; J\\x{00FC}rgen@example.de\r\nAction: failed\r\nStatus: 5.1.1\r\n',
          'utf8',
        ),
      },
      { contentType: 'message/global-headers', content: 'From: agent@boxes.example\r\nMessage-ID: <g-1@boxes.example>\r\n' },
    ]);
    const { parsed, report: r } = await report(raw);
    expect(parsed.attachments.map((a) => a.contentType)).toEqual(['message/global-delivery-status', 'message/global-headers']);
    expect(r).toEqual({
      kind: 'dsn',
      reportingMta: 'mx.exämple.de',
      originalMessageId: '<g-1@boxes.example>',
      recipients: [{ address: 'jürgen@example.de', action: 'failed', status: '5.1.1', diagnostic: null, permanent: true }],
    });
  });

  it('uses Original-Recipient when Final-Recipient is unusable, and a failed 4.x.x is not permanent', async () => {
    const raw = await buildReport('multipart/report; report-type=delivery-status', [
      {
        contentType: 'message/delivery-status',
        headers: { 'Content-Disposition': 'attachment' },
        content:
          'Reporting-MTA: dns; mx.example.net\n\nFinal-Recipient: rfc822;\nOriginal-Recipient: rfc822; Alias@Example.net\nAction: failed\nStatus: 4.0.0\n',
      },
    ]);
    const { report: r } = await report(raw);
    expect(r).toMatchObject({ kind: 'dsn', recipients: [{ address: 'alias@example.net', action: 'failed', status: '4.0.0', permanent: false }] });
  });

  it('with an inline-expanded original (and an inline delivery-status), nothing inside the original is taken for report data', async () => {
    // Content-Disposition: inline on message/rfc822 makes mailparser expand the original in place: its headers
    // are gone (no Message-ID), its text joins mail.text, and its own attachments get dotted part ids.
    const inner = await composeMessage({
      from: { address: 'agent@boxes.example' },
      to: ['nobody@example.net'],
      cc: [],
      replyTo: [],
      subject: 'hello',
      text: 'Final-Recipient: rfc822; fake@evil.example\nAction: delivered\n',
      headers: {},
      attachments: [{ filename: 'h.txt', contentType: 'text/rfc822-headers', content: Buffer.from('Message-ID: <nested@evil.example>\r\n') }],
      messageId: '<orig-2@boxes.example>',
      date: new Date('2026-11-21T07:59:50Z'),
    });
    const raw = await buildReport('multipart/report; report-type=delivery-status', [
      { contentType: 'text/plain', content: 'Could not deliver.' },
      {
        contentType: 'message/delivery-status',
        headers: { 'Content-Disposition': 'inline' },
        content: 'Reporting-MTA: dns; mx.example.net\n\nFinal-Recipient: rfc822; nobody@example.net\nAction: failed\nStatus: 5.1.1\n',
      },
      { contentType: 'message/rfc822', headers: { 'Content-Disposition': 'inline' }, content: inner },
    ]);
    const { parsed, report: r } = await report(raw);
    expect(parsed.mail.attachments.map((a) => [a.contentType, a.partId])).toEqual([
      ['message/delivery-status', '2'],
      ['text/rfc822-headers', '3.2'],
    ]);
    expect(parsed.text).toContain('fake@evil.example');
    expect(r).toEqual({
      kind: 'dsn',
      reportingMta: 'mx.example.net',
      originalMessageId: null,
      recipients: [{ address: 'nobody@example.net', action: 'failed', status: '5.1.1', diagnostic: null, permanent: true }],
    });
  });

  it('skips field-like prose in the human-readable part when the report is read from mail.text', async () => {
    const raw = await buildReport('multipart/report; report-type=delivery-status', [
      { contentType: 'text/plain', content: 'Hello,\nNote: this is automated.\nAction: none needed from you\n\nThanks\n' },
      {
        contentType: 'message/delivery-status',
        content: 'Reporting-MTA: dns; mx.example.net\n\nFinal-Recipient: rfc822; a@example.net\nAction: failed\nStatus: 5.7.1\n',
      },
    ]);
    const { report: r } = await report(raw);
    expect(r).toMatchObject({ kind: 'dsn', reportingMta: 'mx.example.net', recipients: [{ address: 'a@example.net', status: '5.7.1', permanent: true }] });
  });
});

describe('parseReport: feedback reports (RFC 5965 ARF)', () => {
  it('reads an abuse report with Original-Rcpt-To and the original headers as text/rfc822-headers', async () => {
    const headersOnly = (await original({ to: ['Alice@ISP.example'], cc: ['bob@isp.example'] })).toString().split('\r\n\r\n')[0] + '\r\n';
    const raw = await buildReport(
      'multipart/report; report-type=feedback-report',
      [
        { contentType: 'text/plain', content: 'This is an email abuse report for an email message received from IP 192.0.2.25.\n' },
        {
          contentType: 'message/feedback-report',
          content: [
            'Feedback-Type: abuse',
            'User-Agent: SomeGenerator/1.0',
            'Version: 1',
            'Original-Mail-From: <Agent@Boxes.example>',
            'Original-Rcpt-To: <Alice@ISP.example>',
            'Original-Rcpt-To: carol@isp.example',
            'Arrival-Date: Sat, 21 Nov 2026 08:00:00 +0000',
            'Source-IP: 192.0.2.25',
            'Reported-Domain: boxes.example',
            '',
          ].join('\n'),
        },
        { contentType: 'text/rfc822-headers', content: headersOnly },
      ],
      { From: 'fbl@isp.example', To: 'abuse@boxes.example', Subject: 'FW: hello' },
    );
    const { parsed, report: r } = await report(raw);
    expect(parsed.attachments.map((a) => a.contentType)).toEqual(['message/feedback-report', 'text/rfc822-headers']);
    expect(r).toEqual({
      kind: 'arf',
      feedbackType: 'abuse',
      userAgent: 'SomeGenerator/1.0',
      originalRcptTo: ['alice@isp.example', 'carol@isp.example'],
      originalMailFrom: 'agent@boxes.example',
      originalMessageId: '<orig-1@boxes.example>',
      originalRecipients: ['alice@isp.example', 'bob@isp.example'],
    });
  });

  it('reads a report without Original-Rcpt-To, falling back to the recipients of the attached message/rfc822', async () => {
    const orig = await original({ to: ['"Dana" <Dana@Mail.example>'], cc: ['eve@mail.example'], messageId: '<orig-9@boxes.example>' });
    const raw = await buildReport(
      'multipart/report; report-type=feedback-report',
      [
        { contentType: 'text/plain', content: 'Spam report\n' },
        { contentType: 'message/feedback-report', content: 'Feedback-Type: Abuse\nUser-Agent: Yahoo!-Mail-Feedback/2.0\nVersion: 1\n' },
        { contentType: 'message/rfc822', content: orig },
      ],
      { From: 'feedback@mail.example', To: 'fbl@boxes.example', Subject: 'Spam report' },
    );
    const { report: r } = await report(raw);
    expect(r).toEqual({
      kind: 'arf',
      feedbackType: 'abuse',
      userAgent: 'Yahoo!-Mail-Feedback/2.0',
      originalRcptTo: [],
      originalMailFrom: null,
      originalMessageId: '<orig-9@boxes.example>',
      originalRecipients: ['dana@mail.example', 'eve@mail.example'],
    });
  });
});

describe('parseReport: everything else', () => {
  it('returns null for an ordinary message', async () => {
    const { report: r } = await report(await original({ attachments: [{ filename: 'a.txt', content: Buffer.from('x'), contentType: 'text/plain' }] }));
    expect(r).toBeNull();
  });

  it('returns null for report parts outside a top-level multipart/report, and for other report types', async () => {
    const ds = 'Reporting-MTA: dns; mx.example.net\n\nFinal-Recipient: rfc822; a@example.net\nAction: failed\nStatus: 5.1.1\n';
    const mixed = await buildReport('multipart/mixed', [
      { contentType: 'text/plain', content: 'fyi\n' },
      { contentType: 'message/delivery-status', headers: { 'Content-Disposition': 'attachment' }, content: ds },
    ]);
    expect((await report(mixed)).report).toBeNull();
    const mdn = await buildReport('multipart/report; report-type=disposition-notification', [
      { contentType: 'text/plain', content: 'Your message was displayed.\n' },
      {
        contentType: 'message/disposition-notification',
        content: 'Reporting-UA: client.example\nFinal-Recipient: rfc822; a@example.net\nDisposition: manual-action/MDN-sent-manually; displayed\n',
      },
    ]);
    expect((await report(mdn)).report).toBeNull();
  });

  it('survives garbage and truncated report parts: null or a partial result, never a throw', async () => {
    // truncated in the middle of the second recipient block, which lacks Action
    const truncated = await buildReport('multipart/report; report-type=delivery-status', [
      {
        contentType: 'message/delivery-status',
        headers: { 'Content-Disposition': 'attachment' },
        content:
          'Reporting-MTA: dns; mx.example.net\n\nFinal-Recipient: rfc822; a@example.net\nAction: failed\nStatus: 5.1.1\n\nFinal-Recipient: rfc822; b@exa',
      },
    ]);
    expect((await report(truncated)).report).toMatchObject({ recipients: [{ address: 'a@example.net' }] });

    const binary = Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919 + 13) % 256));
    for (const contentType of ['message/delivery-status', 'message/global-delivery-status', 'message/feedback-report']) {
      const reportType = contentType === 'message/feedback-report' ? 'feedback-report' : 'delivery-status';
      const raw = await buildReport(`multipart/report; report-type=${reportType}`, [
        { contentType: 'text/plain', content: 'x\n' },
        { contentType, headers: { 'Content-Disposition': 'attachment' }, content: binary },
        { contentType: 'message/rfc822', content: binary },
      ]);
      expect((await report(raw)).report).toBeNull();
    }

    // no Feedback-Type: not a usable ARF; no recipient blocks: not a usable DSN
    const noType = await buildReport('multipart/report; report-type=feedback-report', [
      { contentType: 'message/feedback-report', content: 'User-Agent: x/1\nVersion: 1\n' },
    ]);
    expect((await report(noType)).report).toBeNull();
    const noRecipients = await buildReport('multipart/report; report-type=delivery-status', [
      { contentType: 'text/plain', content: 'Reporting-MTA: dns; mx.example.net\n' },
    ]);
    expect((await report(noRecipients)).report).toBeNull();

    // a Postfix bounce cut off at arbitrary points, and with bytes flipped: never throws
    const full = await postfixBounce();
    let seed = 42;
    const rand = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    for (let i = 0; i < 150; i++) {
      const cut = Buffer.from(full.subarray(0, rand(full.length)));
      for (let j = 0; j < 20; j++) cut[rand(Math.max(cut.length, 1))] = rand(256);
      const parsed = await parseMessage(cut);
      expect(() => parseReport(parsed.mail)).not.toThrow();
    }
  });

  it('caps what it reads from a huge report part', async () => {
    const block = 'Final-Recipient: rfc822; r@example.net\nAction: failed\nStatus: 5.1.1\n\n';
    const raw = await buildReport('multipart/report; report-type=delivery-status', [
      {
        contentType: 'message/delivery-status',
        headers: { 'Content-Disposition': 'attachment' },
        content: 'Reporting-MTA: dns; mx.example.net\n\n' + block.repeat(50_000) + 'Diagnostic-Code: smtp; ' + 'x'.repeat(1_000_000) + '\n',
      },
    ]);
    const started = Date.now();
    const r = (await report(raw)).report;
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(r?.kind).toBe('dsn');
    const recipients = r?.kind === 'dsn' ? r.recipients : [];
    expect(recipients.length).toBeGreaterThan(100);
    expect(recipients.length).toBeLessThanOrEqual(1000);
  });
});
