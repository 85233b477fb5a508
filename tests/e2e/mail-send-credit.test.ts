/**
 * Sending against credit: a send without free messages or credit is refused (402)
 * with top-up guidance and leaves nothing behind; parallel sends cannot overspend; delivered messages are
 * charged in the ledger. Then the same mail calls through the typed SDK (@boxes/sdk), 402 included.
 */
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { BoxesError, createBoxesClient, sentMessage } from '@boxes/sdk';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { MailSink, send, unique, waitFor, waitSettled } from './mail-send-helpers';

let t: TestServer;
let sink: MailSink;

beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  t = await startTestServer({ worker: true, resolver: sink.resolver() });
});
afterAll(async () => {
  await t?.stop();
  await sink?.close();
});

async function setCredit(account: TestAccount, freeMessagesLeft: number, balanceMicros: bigint) {
  await t.db.account.update({ where: { id: account.accountId }, data: { freeMessagesLeft, balanceMicros } });
}

function expectPaymentRequired(r: { status: number; body: any }) {
  expect(r.status, JSON.stringify(r.body)).toBe(402);
  expect(r.body.error.code).toBe('payment_required');
  expect(r.body.error.message).toEqual(expect.any(String));
  expect(r.body.error.top_up.mpp.url).toMatch(/\/account\/credit\/topup\/mpp$/);
  expect(r.body.error.top_up.mpp.url.startsWith(t.apiBase)).toBe(true);
  expect(r.body.error.top_up.human_approval).toEqual(expect.any(String));
  expect(r.body.error.top_up.human_approval.length).toBeGreaterThan(0);
}

describe('credit', () => {
  it('no free messages and no credit: 402 with top-up guidance, nothing sent or stored', async () => {
    const a = await signupAccount(t);
    await setCredit(a, 0, 0n);
    const messagesBefore = await t.db.message.count({ where: { accountId: a.accountId } });
    const to = `broke-${unique()}@remote.test`;

    const r = await send(t, a.apiKey, { to, subject: 'no money', text: 'x', idempotency_key: `k-${unique()}` });
    expectPaymentRequired(r);

    expect(await t.db.message.count({ where: { accountId: a.accountId } })).toBe(messagesBefore);
    expect(await t.db.delivery.count({ where: { accountId: a.accountId } })).toBe(0);
    expect(await t.db.ledgerEntry.count({ where: { accountId: a.accountId, type: 'message_sent' } })).toBe(0);
    const acct = await t.db.account.findUniqueOrThrow({ where: { id: a.accountId } });
    expect({ held: acct.heldMicros, heldFree: acct.heldFreeMessages, balance: acct.balanceMicros }).toEqual({ held: 0n, heldFree: 0, balance: 0n });
    const sent = await rest(t, 'GET', '/events?type=mail.sent', { key: a.apiKey });
    expect(sent.body.events).toEqual([]);
    expect(sink.rcptFor(to)).toEqual([]);

    // A negative balance blocks sending as well.
    await setCredit(a, 0, -5_000n);
    expectPaymentRequired(await send(t, a.apiKey, { to, subject: 'still no money', text: 'x' }));
    expect(await t.db.message.count({ where: { accountId: a.accountId } })).toBe(messagesBefore);
  });

  it('50 parallel sends against credit for exactly 10: 10 accepted, 40 refused with 402, 10 delivered and charged', async () => {
    const a = await signupAccount(t);
    await setCredit(a, 0, 16_000n); // 10 x 1,600 micro-dollars
    const tag = unique();
    const recipients = Array.from({ length: 50 }, (_, i) => `par-${i}-${tag}@remote.test`);

    const results = await Promise.all(recipients.map((to, i) => send(t, a.apiKey, { to, subject: `parallel ${i}`, text: 'x' })));
    const accepted = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status !== 200);
    expect(results.map((r) => r.status).filter((s) => s !== 200 && s !== 402)).toEqual([]);
    expect(accepted).toHaveLength(10);
    expect(refused).toHaveLength(40);
    for (const r of refused) expectPaymentRequired(r);
    for (const r of accepted) expect(r.body.billing).toMatchObject({ messages: 1, paid_messages: 1, free_messages_used: 0, reserved_usd: '0.0016' });

    const acceptedIds = accepted.map((r) => r.body.message_id as string);
    const acceptedRecipients = accepted.map((r) => r.body.recipients[0] as string).sort();
    await Promise.all(acceptedIds.map((id) => waitSettled(t, a.apiKey, id, 15_000)));
    await waitFor(() => recipients.filter((x) => sink.to(x).length > 0).length >= 10, '10 deliveries at the sink');

    const delivered = recipients.filter((x) => sink.to(x).length > 0).sort();
    expect(delivered).toEqual(acceptedRecipients);
    for (const x of delivered) expect(sink.to(x)).toHaveLength(1);
    expect(sink.rcpts.filter((x) => x.address.endsWith(`-${tag}@remote.test`))).toHaveLength(10);
    expect(await t.db.message.count({ where: { accountId: a.accountId, direction: 'sent' } })).toBe(10);

    const balance = await rest(t, 'GET', '/account/credit/balance', { key: a.apiKey });
    expect(balance.status, JSON.stringify(balance.body)).toBe(200);
    expect(balance.body).toMatchObject({ credit_balance_cents: 0, credit_balance_usd: '0', held_usd: '0', free_messages_left: 0, emails_covered: 0 });

    const ledger = await t.db.ledgerEntry.findMany({ where: { accountId: a.accountId, type: 'message_sent' } });
    expect(ledger).toHaveLength(10);
    for (const e of ledger) expect(e.amountMicros).toBe(-1_600n);
    expect(ledger.map((e) => e.messageId).sort()).toEqual([...acceptedIds].sort());

    // Spent: the next send is refused too.
    expectPaymentRequired(await send(t, a.apiKey, { to: `after-${tag}@remote.test`, subject: 'one more', text: 'x' }));
  });
});

describe('the SDK', () => {
  it('messages.send, messages.list and messages.get, typed; a 402 is BoxesError payment_required', async () => {
    const a = await signupAccount(t);
    const client = createBoxesClient({ baseUrl: t.url, apiKey: a.apiKey });
    const to = `sdk-${unique()}@remote.test`;

    const sent = sentMessage(await client.messages.send.mutate({ to: [to], subject: 'via sdk', text: 'typed', context: { order: 9 } }));
    expectTypeOf(sent.message_id).toEqualTypeOf<string>();
    expectTypeOf(sent.status).toEqualTypeOf<'queued' | 'scheduled' | 'suppressed'>();
    expectTypeOf(sent.billing.messages).toEqualTypeOf<number>();
    expect(sent).toMatchObject({ status: 'queued', from: a.primaryAddress, recipients: [to], suppressed: [] });
    expect(sent.message_id).toMatch(/^msg_[0-9a-z]{20}$/);

    const got = await waitFor(async () => {
      const m = await client.messages.get.query({ id: sent.message_id });
      return m.status === 'delivered' ? m : null;
    }, 'delivery through the SDK');
    expectTypeOf(got.deliveries).toEqualTypeOf<
      { recipient: string; status: string; attempts: number; last_error: string | null; delivered_at: string | null }[]
    >();
    expect(got).toMatchObject({ id: sent.message_id, direction: 'sent', to: [to], subject: 'via sdk', context: { order: 9 } });
    // The stored body is what was sent: the text and the default trailer (docs/guide/credit.md: the trailer).
    expect(got.body?.text).toBe(`typed\n\n--\nSent by an AI agent with Boxes: ${t.config.siteUrl}`);
    expect(got.deliveries).toEqual([expect.objectContaining({ recipient: to, status: 'delivered' })]);
    expect(sink.to(to)).toHaveLength(1);

    const list = await client.messages.list.query({ direction: 'sent' });
    expectTypeOf(list.messages).items.toHaveProperty('id').toEqualTypeOf<string>();
    expectTypeOf(list.next_cursor).toEqualTypeOf<string | null>();
    expect(list.messages.map((m) => m.id)).toContain(sent.message_id);
    expect(list.messages.every((m) => m.direction === 'sent')).toBe(true);

    await setCredit(a, 0, 0n);
    let caught: unknown;
    try {
      await client.messages.send.mutate({ to, subject: 'broke', text: 'x' });
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(BoxesError);
    const e = caught as BoxesError;
    expect({ code: e.code, status: e.status }).toEqual({ code: 'payment_required', status: 402 });
    expect((e.details.top_up as { mpp: { url: string } }).mpp.url).toMatch(/\/account\/credit\/topup\/mpp$/);
    expect(await t.db.message.count({ where: { accountId: a.accountId, subject: 'broke' } })).toBe(0);
  });
});
