// Delivery reports arriving at the MX over real SMTP: DSNs (RFC 3464) at the envelope bounce address of a
// delivery or at the account's agent@ address, and ARF complaints (RFC 5965). They bounce the delivery, put the
// address on THAT account's suppression list, and move its reputation (one
// account's bounces or complaints do not affect another's; the limits are 3% bounce, 0.05% complaint).
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { staticResolver } from '@boxes/mail';
import { hasMessageId, rest, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import {
  accountPool,
  crlf,
  eventsOf,
  sendRaw,
  sendRawExpectingError,
  startStandInMx,
  waitFor,
  waitForEvent,
  type RemoteDelivery,
} from './mail-receive-helpers';

let t: TestServer;
let port: number;
/** This file's accounts, signed up in parallel once the server is up. */
const accounts = accountPool(() => t, 13);
let remote: Awaited<ReturnType<typeof startStandInMx>>;

beforeAll(async () => {
  remote = await startStandInMx();
  t = await startTestServer({ worker: true, mail: true, resolver: staticResolver({ 'remote.test': { host: '127.0.0.1', port: remote.port } }) });
  port = t.smtpPort!;
  accounts.fill();
});
afterAll(async () => {
  await t?.stop();
  await remote?.close();
});

const tag = () => randomBytes(6).toString('hex');
const REPORT_DATE = 'Sat, 21 Nov 2026 08:00:00 +0000';

interface Sent {
  id: string;
  rfc: string;
  /** What the stand-in remote MX received for this message: one entry per delivery (recipient). */
  copies: RemoteDelivery[];
}

/** Sends from the account to outside addresses and waits until every delivery reached the stand-in MX. */
async function sendDelivered(a: TestAccount, to: string[], subject = `report test ${tag()}`): Promise<Sent> {
  const r = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to, subject, text: `Hello from ${a.primaryAddress}` } });
  if (r.status !== 200) throw new Error(`send failed: ${r.status} ${JSON.stringify(r.body)}`);
  const id: string = r.body.message_id;
  const rfc: string = r.body.rfc_message_id;
  await waitFor(`delivery of ${id}`, async () => {
    const m = await rest(t, 'GET', `/messages/${id}`, { key: a.apiKey });
    return m.body.deliveries.length === to.length && m.body.deliveries.every((d: any) => d.status === 'delivered');
  });
  const copies = remote.received.filter((c) => hasMessageId(c.raw, rfc));
  expect(copies).toHaveLength(to.length);
  return { id, rfc, copies };
}

/** The envelope sender (bounce address) the delivery to that recipient used. */
function bounceAddressFor(sent: Sent, recipient: string): string {
  const copy = sent.copies.find((c) => c.rcpt.includes(recipient));
  if (!copy) throw new Error(`no copy for ${recipient}`);
  return copy.mailFrom;
}

interface DsnRecipient {
  address: string;
  action: 'failed' | 'delayed' | 'delivered';
  status: string;
  diagnostic?: string;
}

/** A Postfix-style delivery status notification about the original message (attached whole, or its headers). */
function dsn(opts: { to: string; subject?: string; original: Buffer; headersOnly?: boolean; recipients: DsnRecipient[] }): string {
  const boundary = `${tag()}.1763712000/mx.remote.test`;
  const original = opts.original.toString('latin1').replace(/\r\n/g, '\n');
  const returned = opts.headersOnly ? `${original.split('\n\n')[0]}\n` : original;
  const blocks = opts.recipients
    .map((r) =>
      [
        `Final-Recipient: rfc822; ${r.address}`,
        `Original-Recipient: rfc822;${r.address}`,
        `Action: ${r.action}`,
        `Status: ${r.status}`,
        'Remote-MTA: dns; mx.remote.test',
        `Diagnostic-Code: smtp; ${r.diagnostic ?? `550 5.1.1 <${r.address}>: Recipient address rejected: User unknown`}`,
      ].join('\n'),
    )
    .join('\n\n');
  return crlf(`Return-Path: <>
Received: by mx.remote.test (Postfix)
	id 3F2A81C0; ${REPORT_DATE} (UTC)
Date: ${REPORT_DATE} (UTC)
From: MAILER-DAEMON@mx.remote.test (Mail Delivery System)
Subject: ${opts.subject ?? 'Undelivered Mail Returned to Sender'}
To: ${opts.to}
Auto-Submitted: auto-replied
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status;
	boundary="${boundary}"
Content-Transfer-Encoding: 8bit
Message-Id: <${tag()}.3F2A81C0@mx.remote.test>

This is a MIME-encapsulated message.

--${boundary}
Content-Description: Notification
Content-Type: text/plain; charset=us-ascii

This is the mail system at host mx.remote.test.

I'm sorry to have to inform you that your message could not
be delivered to one or more recipients. It's attached below.

--${boundary}
Content-Description: Delivery report
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.remote.test
X-Postfix-Queue-ID: 3F2A81C0
Arrival-Date: ${REPORT_DATE} (UTC)

${blocks}

--${boundary}
Content-Description: ${opts.headersOnly ? 'Undelivered Message Headers' : 'Undelivered Message'}
Content-Type: ${opts.headersOnly ? 'text/rfc822-headers' : 'message/rfc822'}
Content-Transfer-Encoding: 8bit

${returned}
--${boundary}--
`);
}

/**
 * An abuse feedback report (ARF) about the original message, attached as message/rfc822; with inline, the
 * original carries Content-Disposition: inline, exactly as in the examples of RFC 5965 Appendix B.
 */
function arf(opts: {
  to: string;
  original: Buffer;
  rcptTo: string;
  mailFrom: string;
  reportedDomain: string;
  subject?: string;
  inline?: boolean;
  feedbackType?: string;
}): string {
  const boundary = `arf_${tag()}_boundary`;
  const original = opts.original.toString('latin1').replace(/\r\n/g, '\n');
  return crlf(`From: <abuse-reports@remote.test>
Date: ${REPORT_DATE}
Subject: ${opts.subject ?? 'FW: Spam complaint'}
To: ${opts.to}
Message-ID: <arf-${tag()}@remote.test>
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report;
	boundary="${boundary}"

--${boundary}
Content-Type: text/plain; charset="US-ASCII"
Content-Transfer-Encoding: 7bit

This is an email abuse report for an email message
received from IP 127.0.0.1 on ${REPORT_DATE}.
For more information about this format please see
http://www.mipassoc.org/arf/.

--${boundary}
Content-Type: message/feedback-report

Feedback-Type: ${opts.feedbackType ?? 'abuse'}
User-Agent: RemoteFBL/1.0
Version: 1
Original-Mail-From: <${opts.mailFrom}>
Original-Rcpt-To: <${opts.rcptTo}>
Arrival-Date: ${REPORT_DATE}
Reported-Domain: ${opts.reportedDomain}
Source-IP: 127.0.0.1

--${boundary}
Content-Type: message/rfc822
${opts.inline ? 'Content-Disposition: inline\n' : ''}
${original}
--${boundary}--
`);
}

/** Sends a report from the null sender, as MTAs do. */
async function deliverReport(to: string, raw: string): Promise<void> {
  const r = await sendRaw(port, { from: '', to: [to] }, raw);
  expect(r.accepted).toEqual([to]);
  expect(r.response).toMatch(/^250 /);
}

const suppressionOf = async (a: TestAccount) => (await rest(t, 'GET', '/suppression', { key: a.apiKey })).body.suppressions as any[];
const deliveryOf = async (a: TestAccount, messageId: string, recipient: string) =>
  ((await rest(t, 'GET', `/messages/${messageId}`, { key: a.apiKey })).body.deliveries as any[]).find((d) => d.recipient === recipient);
const reputationOf = async (a: TestAccount) => {
  const r = await rest(t, 'GET', '/account/reputation', { key: a.apiKey });
  expect(r.status).toBe(200);
  return r.body;
};

describe('DSN (bounce) reports', () => {
  it('a DSN at the envelope bounce address bounces that delivery, emits mail.bounced and suppresses the address for that account only', async () => {
    const a = await accounts.take();
    const b = await accounts.take();
    const gone = `gone-${tag()}@remote.test`;
    const sentA = await sendDelivered(a, [gone]);
    const sentB = await sendDelivered(b, [gone]);

    const bounceTo = bounceAddressFor(sentA, gone);
    expect(bounceTo).toMatch(new RegExp(`^bounces\\+dlv_[0-9a-z]{20}@${a.domain.replace(/\./g, '\\.')}$`));
    // Each delivery has its own bounce address.
    expect(bounceAddressFor(sentB, gone)).not.toBe(bounceTo);

    await deliverReport(bounceTo, dsn({ to: bounceTo, original: sentA.copies[0]!.raw, recipients: [{ address: gone, action: 'failed', status: '5.1.1' }] }));

    const ev = await waitForEvent(t, a.apiKey, 'mail.bounced', (e) => e.data.recipient === gone);
    expect(ev.data).toMatchObject({ message_id: sentA.id, recipient: gone, source: 'dsn' });
    const msg = await rest(t, 'GET', `/messages/${sentA.id}`, { key: a.apiKey });
    expect(msg.body.status).toBe('bounced');
    expect(msg.body.deliveries).toEqual([expect.objectContaining({ recipient: gone, status: 'bounced' })]);
    expect(msg.body.deliveries[0].last_error).toMatch(/5\.1\.1/);

    const listA = await suppressionOf(a);
    expect(listA).toEqual([expect.objectContaining({ address: gone, reason: 'bounce', message_id: sentA.id })]);
    const oneA = await rest(t, 'GET', `/suppression/${encodeURIComponent(gone)}`, { key: a.apiKey });
    expect(oneA.body).toMatchObject({ address: gone, suppressed: true });

    // B mailed the same address: untouched.
    expect(await suppressionOf(b)).toEqual([]);
    const oneB = await rest(t, 'GET', `/suppression/${encodeURIComponent(gone)}`, { key: b.apiKey });
    expect(oneB.body).toMatchObject({ address: gone, suppressed: false });
    expect((await deliveryOf(b, sentB.id, gone)).status).toBe('delivered');
    expect(await eventsOf(t, b.apiKey, 'mail.bounced')).toEqual([]);

    // The suppressed address is no longer attempted for A, still is for B.
    const againA = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: gone, subject: 'again', text: 'again' } });
    expect(againA.body).toMatchObject({ status: 'suppressed', suppressed: [gone], recipients: [] });
    const againB = await rest(t, 'POST', '/messages/send', { key: b.apiKey, body: { to: gone, subject: 'again', text: 'again' } });
    expect(againB.body).toMatchObject({ status: 'queued', recipients: [gone] });
  });

  it("a DSN at the account's agent@ address is matched by the original Message-ID (headers only), stored as mail, and bounces the delivery", async () => {
    const a = await accounts.take();
    const b = await accounts.take();
    const nouser = `nouser-${tag()}@remote.test`;
    const other = `fine-${tag()}@remote.test`;
    const sentA = await sendDelivered(a, [nouser, other]);
    await sendDelivered(b, [nouser]);

    const subject = `Undelivered Mail Returned to Sender ${tag()}`;
    await deliverReport(
      a.primaryAddress,
      dsn({
        to: a.primaryAddress,
        subject,
        original: sentA.copies[0]!.raw,
        headersOnly: true,
        recipients: [
          { address: nouser, action: 'failed', status: '5.1.1' },
          { address: other, action: 'delayed', status: '4.4.1', diagnostic: '451 4.4.1 try again later' },
        ],
      }),
    );

    const ev = await waitForEvent(t, a.apiKey, 'mail.bounced', (e) => e.data.recipient === nouser);
    expect(ev.data).toMatchObject({ message_id: sentA.id, source: 'dsn' });
    expect((await deliveryOf(a, sentA.id, nouser)).status).toBe('bounced');
    // A delayed (4.x.x) recipient is not a bounce.
    expect((await deliveryOf(a, sentA.id, other)).status).toBe('delivered');
    expect((await rest(t, 'GET', `/messages/${sentA.id}`, { key: a.apiKey })).body.status).toBe('partially_delivered');
    expect((await suppressionOf(a)).map((s) => s.address)).toEqual([nouser]);
    expect(await suppressionOf(b)).toEqual([]);

    // The report itself arrived at a box: it is mail like any other.
    const received = await waitForEvent(t, a.apiKey, 'mail.received', (e) => e.data.message.subject === subject);
    expect(received.data.message.to_box).toBe(a.primaryAddress);
  });

  it("reports cannot reach across accounts: a DSN naming A's message sent to B changes nothing; A's bounce address on B's domain is refused", async () => {
    const a = await accounts.take();
    const b = await accounts.take();
    const target = `target-${tag()}@remote.test`;
    const sentA = await sendDelivered(a, [target]);

    // A (forged or misdirected) DSN about A's message, delivered to B's box.
    const subject = `misdirected DSN ${tag()}`;
    await deliverReport(
      b.primaryAddress,
      dsn({ to: b.primaryAddress, subject, original: sentA.copies[0]!.raw, recipients: [{ address: target, action: 'failed', status: '5.1.1' }] }),
    );
    await waitForEvent(t, b.apiKey, 'mail.received', (e) => e.data.message.subject === subject);
    expect((await deliveryOf(a, sentA.id, target)).status).toBe('delivered');
    expect(await suppressionOf(a)).toEqual([]);
    expect(await suppressionOf(b)).toEqual([]);
    expect(await eventsOf(t, a.apiKey, 'mail.bounced')).toEqual([]);
    expect(await eventsOf(t, b.apiKey, 'mail.bounced')).toEqual([]);

    // A's delivery's bounce address, but on B's domain: no such recipient.
    const local = bounceAddressFor(sentA, target).split('@')[0]!;
    const crossed = `${local}@${b.domain}`;
    const err = await sendRawExpectingError(
      port,
      { from: '', to: [crossed] },
      dsn({ to: crossed, original: sentA.copies[0]!.raw, recipients: [{ address: target, action: 'failed', status: '5.1.1' }] }),
    );
    expect(err.responseCode).toBe(550);
    // An unknown delivery id on A's own domain is refused too.
    const made = `bounces+dlv_${'0'.repeat(20)}@${a.domain}`;
    const err2 = await sendRawExpectingError(
      port,
      { from: '', to: [made] },
      dsn({ to: made, original: sentA.copies[0]!.raw, recipients: [{ address: target, action: 'failed', status: '5.1.1' }] }),
    );
    expect(err2.responseCode).toBe(550);
    expect((await deliveryOf(a, sentA.id, target)).status).toBe('delivered');
  });

  it('bounces pushing the bounce rate over 3% give reputation.warning and GET /account/reputation shows the counts; another account is unaffected', async () => {
    const a = await accounts.take();
    const b = await accounts.take();
    const recipients = Array.from({ length: 40 }, (_, i) => `r${String(i).padStart(2, '0')}-${tag()}@remote.test`);
    const sent = await sendDelivered(a, recipients);
    await sendDelivered(b, recipients.slice(0, 2));
    expect(await reputationOf(a)).toMatchObject({ sent: 40, bounced: 0, complained: 0, state: 'ok' });

    // 1 of 40 = 2.5%: under the limit.
    const first = bounceAddressFor(sent, recipients[0]!);
    await deliverReport(first, dsn({ to: first, original: sent.copies[0]!.raw, recipients: [{ address: recipients[0]!, action: 'failed', status: '5.1.1' }] }));
    await waitForEvent(t, a.apiKey, 'mail.bounced', (e) => e.data.recipient === recipients[0]);
    const after1 = await reputationOf(a);
    expect(after1).toMatchObject({ sent: 40, bounced: 1, state: 'ok' });
    expect(after1.bounce_rate).toBeCloseTo(1 / 40, 6);
    expect(await eventsOf(t, a.apiKey, 'reputation.warning')).toEqual([]);

    // 2 of 40 = 5%: over 3%. (The second DSN also reports a delayed recipient, which does not count.)
    const second = bounceAddressFor(sent, recipients[1]!);
    await deliverReport(
      second,
      dsn({
        to: second,
        original: sent.copies[0]!.raw,
        recipients: [
          { address: recipients[1]!, action: 'failed', status: '5.2.1', diagnostic: '550 5.2.1 mailbox disabled' },
          { address: recipients[2]!, action: 'delayed', status: '4.2.2', diagnostic: '452 4.2.2 mailbox full' },
        ],
      }),
    );
    const warning = await waitForEvent(t, a.apiKey, 'reputation.warning');
    expect(warning.data).toMatchObject({ sent: 40, bounced: 2, state: 'bounce_rate_high' });
    expect(warning.data.bounce_rate).toBeGreaterThan(0.03);
    const after2 = await reputationOf(a);
    expect(after2).toMatchObject({ sent: 40, bounced: 2, complained: 0, state: 'bounce_rate_high' });
    expect(after2.bounce_rate).toBeCloseTo(2 / 40, 6);
    expect((await deliveryOf(a, sent.id, recipients[2]!)).status).toBe('delivered');
    expect((await suppressionOf(a)).map((s) => s.address).sort()).toEqual([recipients[0], recipients[1]].sort());

    // B sent to the same addresses: nothing changed for B.
    expect(await reputationOf(b)).toMatchObject({ sent: 2, bounced: 0, complained: 0, state: 'ok' });
    expect(await eventsOf(t, b.apiKey, 'reputation.warning')).toEqual([]);
    expect(await suppressionOf(b)).toEqual([]);
  });
});

describe('ARF complaint reports', () => {
  it('an abuse report suppresses the complaining address with reason complaint and gives reputation.warning; another account is unaffected', async () => {
    const a = await accounts.take();
    const b = await accounts.take();
    const complainer = `complainer-${tag()}@remote.test`;
    const happy = `happy-${tag()}@remote.test`;
    const sent = await sendDelivered(a, [complainer, happy]);
    await sendDelivered(b, [complainer]);

    const subject = `FW: complaint ${tag()}`;
    const copy = sent.copies.find((c) => c.rcpt.includes(complainer))!;
    await deliverReport(
      a.primaryAddress,
      arf({ to: a.primaryAddress, subject, original: copy.raw, rcptTo: complainer, mailFrom: copy.mailFrom, reportedDomain: a.domain }),
    );

    const warning = await waitForEvent(t, a.apiKey, 'reputation.warning');
    // One complaint over two sends is far over 0.05%.
    expect(warning.data).toMatchObject({ sent: 2, complained: 1, state: 'complaint_rate_high' });
    expect(await suppressionOf(a)).toEqual([expect.objectContaining({ address: complainer, reason: 'complaint', message_id: sent.id })]);
    const one = await rest(t, 'GET', `/suppression/${encodeURIComponent(complainer)}`, { key: a.apiKey });
    expect(one.body).toMatchObject({ suppressed: true, entry: { reason: 'complaint' } });
    expect(await reputationOf(a)).toMatchObject({ sent: 2, bounced: 0, complained: 1, state: 'complaint_rate_high' });
    // A complaint is not a bounce: the deliveries stay delivered.
    expect((await deliveryOf(a, sent.id, complainer)).status).toBe('delivered');
    expect(await eventsOf(t, a.apiKey, 'mail.bounced')).toEqual([]);

    expect(await suppressionOf(b)).toEqual([]);
    expect(await reputationOf(b)).toMatchObject({ sent: 1, complained: 0, state: 'ok' });
    expect(await eventsOf(t, b.apiKey, 'reputation.warning')).toEqual([]);
  });

  it('an abuse report at the envelope bounce address of the delivery suppresses the recipient too', async () => {
    const a = await accounts.take();
    const complainer = `fbl-${tag()}@remote.test`;
    const sent = await sendDelivered(a, [complainer]);
    const bounceTo = bounceAddressFor(sent, complainer);
    await deliverReport(bounceTo, arf({ to: bounceTo, original: sent.copies[0]!.raw, rcptTo: complainer, mailFrom: bounceTo, reportedDomain: a.domain }));
    await waitForEvent(t, a.apiKey, 'suppression.added', (e) => e.data.address === complainer);
    expect(await suppressionOf(a)).toEqual([expect.objectContaining({ address: complainer, reason: 'complaint' })]);
    expect(await reputationOf(a)).toMatchObject({ complained: 1, state: 'complaint_rate_high' });
  });

  it('an abuse report laid out as in RFC 5965 Appendix B (original as inline message/rfc822) at agent@ suppresses the complaining address', async () => {
    // The examples of RFC 5965 mark the returned message Content-Disposition: inline, and feedback loops send
    // them to the address registered with them (here agent@), not to the bounce address. The report names the
    // recipient (Original-Rcpt-To) and the delivery's envelope sender (Original-Mail-From), and carries the
    // original message with its Message-ID.
    const a = await accounts.take();
    const complainer = `inline-${tag()}@remote.test`;
    const sent = await sendDelivered(a, [complainer]);
    const copy = sent.copies[0]!;
    const subject = `FW: inline complaint ${tag()}`;
    await deliverReport(
      a.primaryAddress,
      arf({ to: a.primaryAddress, subject, original: copy.raw, rcptTo: complainer, mailFrom: copy.mailFrom, reportedDomain: a.domain, inline: true }),
    );
    // The report arrived (it is stored as mail, in the same transaction that applies it) ...
    await waitForEvent(t, a.apiKey, 'mail.received', (e) => e.data.message.subject === subject);
    // ... and the complaint was applied.
    expect(await suppressionOf(a)).toEqual([expect.objectContaining({ address: complainer, reason: 'complaint' })]);
    expect(await reputationOf(a)).toMatchObject({ complained: 1, state: 'complaint_rate_high' });
  });

  it('a not-spam feedback report (the recipient marked the message as wanted) is not a complaint', async () => {
    // RFC 5965 3.5 / 7.3: Feedback-Type not-spam says the reporter does NOT consider the message spam.
    const a = await accounts.take();
    const fan = `fan-${tag()}@remote.test`;
    const sent = await sendDelivered(a, [fan]);
    const bounceTo = bounceAddressFor(sent, fan);
    const subject = `FW: not spam ${tag()}`;
    await deliverReport(
      a.primaryAddress,
      arf({
        to: a.primaryAddress,
        subject,
        original: sent.copies[0]!.raw,
        rcptTo: fan,
        mailFrom: bounceTo,
        reportedDomain: a.domain,
        feedbackType: 'not-spam',
      }),
    );
    await waitForEvent(t, a.apiKey, 'mail.received', (e) => e.data.message.subject === subject);
    expect(await suppressionOf(a)).toEqual([]);
    expect(await reputationOf(a)).toMatchObject({ complained: 0, state: 'ok' });
    expect(await eventsOf(t, a.apiKey, 'reputation.warning')).toEqual([]);
  });
});
