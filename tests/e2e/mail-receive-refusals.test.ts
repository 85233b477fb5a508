// What the MX refuses, over real SMTP: unknown boxes (550), relaying to domains not hosted here (550, nothing
// stored), messages over SMTP_MAX_MESSAGE_BYTES (552; EHLO advertises SIZE), recipients beyond
// SMTP_MAX_RECIPIENTS (452), mail loops (554 above 30 Received headers); and what it does not refuse: mail
// for an account whose balance is negative (inbound mail continues while sends are blocked).
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rest, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { accountPool, eventsOf, rawMessage, requireTool, sendRaw, sendRawExpectingError, swaks, waitForEvent, waitForReceived } from './mail-receive-helpers';
import { exec, k, rows as sqlRows, sql } from '@boxes/db';

const MAX_BYTES = 50_000;
const MAX_RECIPIENTS = 3;

let t: TestServer;
let port: number;
/** This file's accounts, signed up in parallel once the server is up. */
const accounts = accountPool(() => t, 7);

beforeAll(async () => {
  // Small limits, so the refusals are cheap to provoke.
  t = await startTestServer({ mail: true, env: { SMTP_MAX_MESSAGE_BYTES: String(MAX_BYTES), SMTP_MAX_RECIPIENTS: String(MAX_RECIPIENTS) } });
  port = t.smtpPort!;
  accounts.fill();
});
afterAll(async () => {
  await t?.stop();
});

const tag = () => randomBytes(6).toString('hex');

async function storedCount(accountId?: string): Promise<number> {
  const all = k.selectFrom('messages').select(sql<number>`count(*)::int`.as('n'));
  const rows = await sqlRows(t.db, accountId ? all.where('account_id', '=', accountId) : all);
  return rows[0]!.n;
}

async function expectNothingFor(a: TestAccount): Promise<void> {
  expect(await storedCount(a.accountId)).toBe(0);
  expect(await eventsOf(t, a.apiKey, 'mail.received')).toEqual([]);
  const list = await rest(t, 'GET', '/messages', { key: a.apiKey });
  expect(list.body.messages).toEqual([]);
}

/** A text body of about n bytes in 76-character lines. */
function bodyOfSize(n: number): string {
  const line = 'x'.repeat(74);
  return Array.from({ length: Math.ceil(n / 76) }, () => line).join('\n');
}

describe('unknown recipients and relaying', () => {
  it('RCPT to an unknown box on a hosted domain is refused with 550 (nodemailer and swaks), nothing is stored', async () => {
    await requireTool('swaks');
    const a = await accounts.take();
    const unknown = `no-such-box@${a.domain}`;
    const err = await sendRawExpectingError(
      port,
      { from: 'x@outside.test', to: [unknown] },
      rawMessage({ From: 'x@outside.test', To: unknown, Subject: 'hello?' }, 'anyone?'),
    );
    expect(err.responseCode).toBe(550);
    expect(err.command).toMatch(/RCPT/i);

    const s = await swaks(port, ['--from', 'x@outside.test', '--to', unknown, '--header', 'Subject: hello?']);
    expect(s.code).not.toBe(0);
    expect(s.out).toMatch(/^ -> RCPT TO:<no-such-box@/m);
    expect(s.out).toMatch(/^<\*\* {1,2}550 /m);

    await expectNothingFor(a);
  });

  it('in one transaction a known box gets the message and an unknown one gets 550', async () => {
    const a = await accounts.take();
    const unknown = `ghost@${a.domain}`;
    const subject = `mixed ${tag()}`;
    const r = await sendRaw(
      port,
      { from: 'x@outside.test', to: [a.primaryAddress, unknown] },
      rawMessage({ From: 'x@outside.test', To: `${a.primaryAddress}, ${unknown}`, Subject: subject }, 'hi'),
    );
    expect(r.accepted).toEqual([a.primaryAddress]);
    expect(r.rejected).toEqual([unknown]);
    expect(r.rejectedCodes[unknown]).toBe(550);
    await waitForReceived(t, a.apiKey, subject);
    expect(await storedCount(a.accountId)).toBe(1);
  });

  it('RCPT to a domain not hosted here (relay attempt) is refused with 550 and nothing is stored anywhere', async () => {
    await requireTool('swaks');
    const a = await accounts.take();
    const before = await storedCount();
    for (const victim of ['victim@elsewhere.example', `someone@sub.${a.domain}`, 'postmaster@gmail.test']) {
      const err = await sendRawExpectingError(
        port,
        { from: `spammer@outside.test`, to: [victim] },
        rawMessage({ From: 'spammer@outside.test', To: victim, Subject: 'relay me' }, 'buy now'),
      );
      expect(err.responseCode, victim).toBe(550);
      expect(err.command).toMatch(/RCPT/i);
    }
    const s = await swaks(port, ['--from', 'spammer@outside.test', '--to', 'victim@elsewhere.example', '--header', 'Subject: relay me']);
    expect(s.code).not.toBe(0);
    expect(s.out).toMatch(/^<\*\* {1,2}550 /m);
    // A hosted box listed next to the relay target does not let the foreign recipient through.
    const mixed = await sendRaw(
      port,
      { from: 'spammer@outside.test', to: ['victim@elsewhere.example', a.primaryAddress] },
      rawMessage({ From: 'spammer@outside.test', To: a.primaryAddress, Subject: `relay mixed ${tag()}` }, 'hi'),
    );
    expect(mixed.rejectedCodes['victim@elsewhere.example']).toBe(550);
    expect(mixed.accepted).toEqual([a.primaryAddress]);
    expect(await storedCount()).toBe(before + 1);
  });
});

describe('size limit', () => {
  it('EHLO advertises SIZE; a message over SMTP_MAX_MESSAGE_BYTES is refused with 552 (declared or not) and not stored; one under it is accepted', async () => {
    await requireTool('swaks');
    const a = await accounts.take();

    const hello = await swaks(port, ['--quit-after', 'EHLO', '--from', 'big@outside.test', '--to', a.primaryAddress]);
    expect(hello.code, hello.out).toBe(0);
    expect(hello.out).toMatch(new RegExp(`^<- {1,2}250[- ]SIZE ${MAX_BYTES}\\r?$`, 'm'));

    // nodemailer (declares SIZE on MAIL FROM when the server advertises it, or is refused after DATA).
    const big = rawMessage({ From: 'big@outside.test', To: a.primaryAddress, Subject: 'too big (nodemailer)' }, bodyOfSize(MAX_BYTES + 10_000));
    const err = await sendRawExpectingError(port, { from: 'big@outside.test', to: [a.primaryAddress] }, big);
    expect(err.responseCode).toBe(552);

    // swaks does not declare a size: the MX counts the data and answers the final dot with 552.
    const s = await swaks(port, [
      '--from',
      'big@outside.test',
      '--to',
      a.primaryAddress,
      '--header',
      'Subject: too big (swaks)',
      '--body',
      bodyOfSize(MAX_BYTES + 10_000),
    ]);
    expect(s.code).not.toBe(0);
    expect(s.out).toMatch(/^ -> RCPT TO:.*\r?\n<- {1,2}250 /m);
    expect(s.out).toMatch(/^<\*\* {1,2}552 /m);
    await expectNothingFor(a);

    const fits = `fits ${tag()}`;
    const ok = await sendRaw(
      port,
      { from: 'big@outside.test', to: [a.primaryAddress] },
      rawMessage({ From: 'big@outside.test', To: a.primaryAddress, Subject: fits }, bodyOfSize(MAX_BYTES - 5_000)),
    );
    expect(ok.accepted).toEqual([a.primaryAddress]);
    const m = await waitForReceived(t, a.apiKey, fits);
    expect(m.size_bytes).toBeGreaterThan(MAX_BYTES - 5_000);
    expect(m.size_bytes).toBeLessThanOrEqual(MAX_BYTES);
  });
});

describe('recipient limit', () => {
  it('RCPT beyond SMTP_MAX_RECIPIENTS gets 452; the message is stored for the accepted ones only', async () => {
    const a = await accounts.take();
    const boxes: string[] = [];
    for (let i = 1; i <= MAX_RECIPIENTS + 2; i++) {
      const r = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: `rcpt${i}` } });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      boxes.push(r.body.address);
    }
    const subject = `many recipients ${tag()}`;
    const r = await sendRaw(
      port,
      { from: 'x@outside.test', to: boxes },
      rawMessage({ From: 'x@outside.test', To: boxes.join(', '), Subject: subject }, 'to all'),
    );
    expect(r.accepted).toEqual(boxes.slice(0, MAX_RECIPIENTS));
    expect(r.rejected).toEqual(boxes.slice(MAX_RECIPIENTS));
    for (const extra of boxes.slice(MAX_RECIPIENTS)) expect(r.rejectedCodes[extra]).toBe(452);

    await waitForEvent(t, a.apiKey, 'mail.received', (e) => e.data.message.to_box === boxes[MAX_RECIPIENTS - 1]);
    const events = (await eventsOf(t, a.apiKey, 'mail.received')).filter((e) => e.data.message.subject === subject);
    expect(events.map((e) => e.data.message.to_box).sort()).toEqual(boxes.slice(0, MAX_RECIPIENTS).sort());
    expect(await storedCount(a.accountId)).toBe(MAX_RECIPIENTS);
  });
});

describe('mail loops', () => {
  const received = (n: number) =>
    Array.from(
      { length: n },
      (_, i) =>
        `Received: from hop${i}.loop.test (hop${i}.loop.test [192.0.2.${(i % 250) + 1}])\r\n\tby hop${i + 1}.loop.test with ESMTP id L${i}; Sat, 21 Nov 2026 08:00:00 +0000`,
    ).join('\r\n');

  it('more than 30 Received headers is refused with 554 and not stored; 30 are accepted', async () => {
    const a = await accounts.take();
    const looping = `${received(31)}\r\n${rawMessage({ From: 'loop@outside.test', To: a.primaryAddress, Subject: 'looping' }, 'round and round')}`;
    const err = await sendRawExpectingError(port, { from: 'loop@outside.test', to: [a.primaryAddress] }, looping);
    expect(err.responseCode).toBe(554);
    await expectNothingFor(a);

    const subject = `thirty hops ${tag()}`;
    const ok = `${received(30)}\r\n${rawMessage({ From: 'loop@outside.test', To: a.primaryAddress, Subject: subject }, 'long way')}`;
    const r = await sendRaw(port, { from: 'loop@outside.test', to: [a.primaryAddress] }, ok);
    expect(r.accepted).toEqual([a.primaryAddress]);
    await waitForReceived(t, a.apiKey, subject);
  });
});

describe('negative balance', () => {
  it('inbound mail is stored and announced while the balance is negative, and the ledger records message_received', async () => {
    const a = await accounts.take();
    const start = -5_000_000n; // -5 dollars
    await exec(
      t.db,
      k
        .updateTable('accounts')
        .set({ balance_micros: start, free_messages_left: sql.lit(0) })
        .where('id', '=', a.accountId),
    );
    const balance = await rest(t, 'GET', '/account/credit/balance', { key: a.apiKey });
    expect(balance.body.credit_balance_cents).toBeLessThan(0);
    // Sends are blocked while negative...
    const send = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: 'someone@outside.test', subject: 's', text: 't' } });
    expect(send.status).toBe(402);

    // ...inbound mail is not.
    const subject = `in deficit ${tag()}`;
    const r = await sendRaw(
      port,
      { from: 'x@outside.test', to: [a.primaryAddress] },
      rawMessage({ From: 'x@outside.test', To: a.primaryAddress, Subject: subject }, 'still arrives'),
    );
    expect(r.accepted).toEqual([a.primaryAddress]);
    expect(r.response).toMatch(/^250 /);
    const ev = await waitForEvent(t, a.apiKey, 'mail.received', (e) => e.data.message.subject === subject);
    const m = await waitForReceived(t, a.apiKey, subject);
    expect(m.id).toBe(ev.data.message.id);
    expect(m.body.text).toContain('still arrives');

    const ledger = await t.db.ledgerEntry.findMany({ where: { accountId: a.accountId, type: 'message_received' } });
    expect(ledger).toHaveLength(1);
    expect(ledger[0]!.messageId).toBe(m.id);
    expect(ledger[0]!.freeMessages).toBe(0);
    expect(ledger[0]!.amountMicros).toBeLessThan(0n);
    expect(ledger[0]!.balanceAfter).toBe(start + ledger[0]!.amountMicros);
    const account = await t.db.account.findUniqueOrThrow({ where: { id: a.accountId }, select: { balanceMicros: true } });
    expect(account.balanceMicros).toBe(ledger[0]!.balanceAfter);
  });
});
