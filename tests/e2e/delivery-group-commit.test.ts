/**
 * Group commit of delivery outcomes: the remote 250s that arrive together are recorded in one transaction
 * (markDeliveredMany). Several accounts in one batch, an account whose charge takes the general ledger path
 * (an alert threshold) beside quiet ones, the order of each account's events, the ledger's running balance,
 * a repeated record that changes nothing; then a burst through the real worker and SMTP, seen on /metrics.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { start as startWorker } from '@boxes/worker';
import { markDeliveredMany, messagePrice } from '@boxes/core';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { events, MailSink, send, unique, waitFor } from './mail-send-helpers';

let t: TestServer;
let sink: MailSink;

beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  // No worker: the deliveries wait in the queue until a test records them or starts one.
  t = await startTestServer({ worker: false, resolver: sink.resolver() });
});
afterAll(async () => {
  await t?.stop();
  await sink?.close();
});

async function queuedSends(a: TestAccount, n: number): Promise<{ messageId: string; deliveryId: string }[]> {
  const out: { messageId: string; deliveryId: string }[] = [];
  for (let i = 0; i < n; i++) {
    const r = await send(t, a.apiKey, { to: `gc-${unique()}@remote.test`, subject: `group ${i}`, text: 'x' });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const d = await t.db.delivery.findFirstOrThrow({ where: { messageId: r.body.message_id }, select: { id: true } });
    out.push({ messageId: r.body.message_id, deliveryId: d.id });
  }
  return out;
}

const verify = async (key: string) => (await rest(t, 'GET', '/events/verify', { key })).body;

describe('markDeliveredMany', () => {
  it('records outcomes of three accounts in one transaction: charges, events in order, statuses, alerts on the general path', async () => {
    const price = messagePrice(t.svc);
    const quiet = [await signupAccount(t), await signupAccount(t)];
    const alerted = await signupAccount(t);
    for (const a of [...quiet, alerted]) await t.db.account.update({ where: { id: a.accountId }, data: { freeMessagesLeft: 0, balanceMicros: 1_000_000n } });
    // The alerted account crosses its first threshold on its second charge (of three).
    const threshold = 1_000_000n - (3n * price) / 2n;
    await t.db.account.update({ where: { id: alerted.accountId }, data: { alertFirstMicros: threshold } });

    const sent = new Map<TestAccount, { messageId: string; deliveryId: string }[]>();
    for (const a of [...quiet, alerted]) sent.set(a, await queuedSends(a, 3));
    // Interleaved, as outcomes of different accounts arrive.
    const outcomes = [0, 1, 2].flatMap((i) => [...sent.values()].map((s) => ({ deliveryId: s[i]!.deliveryId, mta: 'mx.remote.test', response: `250 ok ${i}`, attempts: 1 })));

    const recorded = await t.db.$transaction((tx) => markDeliveredMany(t.svc, tx, outcomes));
    expect(recorded.size).toBe(9);

    for (const [a, list] of sent) {
      const ds = await t.db.delivery.findMany({ where: { accountId: a.accountId }, select: { id: true, status: true, settledAt: true } });
      expect(ds.every((d) => d.status === 'delivered' && d.settledAt !== null)).toBe(true);
      const ms = await t.db.message.findMany({ where: { id: { in: list.map((s) => s.messageId) } }, select: { status: true } });
      expect(ms.map((m) => m.status)).toEqual(['delivered', 'delivered', 'delivered']);
      // The events of one account follow the order its outcomes were given.
      const delivered = await events(t, a.apiKey, 'mail.delivered');
      expect(delivered.map((e) => e.data.message_id)).toEqual(list.map((s) => s.messageId));
      expect(delivered.map((e) => e.data.response)).toEqual(['250 ok 0', '250 ok 1', '250 ok 2']);
      expect(await verify(a.apiKey)).toMatchObject({ ok: true });
      // Each charge's balance_after runs on from the one before it; the hold is released.
      const ledger = await t.db.ledgerEntry.findMany({ where: { accountId: a.accountId, type: 'message_sent' }, orderBy: { createdAt: 'asc' } });
      expect(ledger.map((l) => l.balanceAfter)).toEqual([1_000_000n - price, 1_000_000n - 2n * price, 1_000_000n - 3n * price]);
      const acct = await t.db.account.findUniqueOrThrow({ where: { id: a.accountId } });
      expect({ balance: acct.balanceMicros, held: acct.heldMicros }).toEqual({ balance: 1_000_000n - 3n * price, held: 0n });
    }
    // The general path announced the crossing once; the quiet accounts announced nothing.
    expect((await events(t, alerted.apiKey, 'low_balance')).map((e) => e.data.alert)).toEqual(['first']);
    for (const a of quiet) expect(await events(t, a.apiKey, 'low_balance')).toEqual([]);

    // Recorded again (a duplicate job): nothing changes.
    const again = await t.db.$transaction((tx) => markDeliveredMany(t.svc, tx, outcomes));
    expect(again.size).toBe(0);
    for (const a of sent.keys()) expect(await events(t, a.apiKey, 'mail.delivered')).toHaveLength(3);
  });

  it('a burst through the worker and SMTP: outcomes share transactions, every message delivered once, chains verify', async () => {
    const accounts = [await signupAccount(t), await signupAccount(t), await signupAccount(t)];
    const recipients: string[] = [];
    const sends = accounts.flatMap((a) =>
      Array.from({ length: 40 }, () => {
        const to = `burst-${unique()}@remote.test`;
        recipients.push(to);
        return () => send(t, a.apiKey, { to, subject: 'burst', text: 'x' });
      }),
    );
    const accepted = await Promise.all(sends.map((f) => f()));
    expect(accepted.filter((r) => r.status !== 200)).toEqual([]);

    const w = await startWorker(t.config, { svc: t.svc, log: t.runtime.log, publish: null, resolver: sink.resolver() });
    try {
      await waitFor(async () => (await t.db.delivery.count({ where: { accountId: { in: accounts.map((a) => a.accountId) }, status: 'delivered' } })) === 120, 'every delivery recorded', 60_000);
    } finally {
      await w.stop();
    }
    for (const to of recipients) expect(sink.rcptFor(to)).toHaveLength(1);
    for (const a of accounts) {
      expect(await events(t, a.apiKey, 'mail.delivered')).toHaveLength(40);
      expect(await verify(a.apiKey)).toMatchObject({ ok: true });
    }
    const metrics = await (await fetch(`${t.url}/metrics`)).text();
    const largest = Number(/^boxes_group_commit_largest_batch\{kind="delivery_outcomes"\} (\d+)$/m.exec(metrics)?.[1]);
    const batches = Number(/^boxes_group_commit_batches\{kind="delivery_outcomes"\} (\d+)$/m.exec(metrics)?.[1]);
    const items = Number(/^boxes_group_commit_items\{kind="delivery_outcomes"\} (\d+)$/m.exec(metrics)?.[1]);
    expect(items).toBe(120);
    expect(largest).toBeGreaterThan(1);
    expect(batches).toBeLessThan(items);
  }, 90_000);
});
