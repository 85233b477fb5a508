/**
 * Group commit. Delivery outcomes: the remote 250s that arrive together are recorded in one transaction
 * (markDeliveredMany). Several accounts in one batch, an account whose charge takes the general ledger path
 * (an alert threshold) beside quiet ones, the order of each account's events, the ledger's running balance,
 * a repeated record that changes nothing; on one pool connection, the writer statement of these batches runs
 * prepared and keeps its generic plan (its lists given as rows of parameters: given as arrays, it was planned on
 * every batch); then a burst through the real worker and SMTP, seen on /metrics.
 * Inbound: messages arriving on many SMTP connections at once share transactions, each stored once, charged
 * from the free allowance and then the credit in order, an alerted account beside quiet ones. Sends: requests
 * that arrive together share transactions; a send the credit refuses gets its 402 alone, two requests with one
 * idempotency_key make one message.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { start as startWorker } from '@boxes/worker';
import { markDeliveredMany, messagePrice } from '@boxes/core';
import { closeDb, createDb, poolRows, poolTransaction, sql } from '@boxes/db';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { events, MailSink, send, unique, waitFor } from './mail-send-helpers';
import { rawMessage, sendRaw } from './mail-receive-helpers';

let t: TestServer;
let sink: MailSink;

beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  // No worker: the deliveries wait in the queue until a test records them or starts one.
  t = await startTestServer({ worker: false, mail: true, resolver: sink.resolver() });
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

async function groupMetrics(kind: string) {
  const metrics = await (await fetch(`${t.url}/metrics`)).text();
  const read = (name: string) => Number(new RegExp(`^boxes_group_commit_${name}\\{kind="${kind}"\\} (\\d+)$`, 'm').exec(metrics)?.[1]);
  return { batches: read('batches'), items: read('items'), largest: read('largest_batch') };
}

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
    const outcomes = [0, 1, 2].flatMap((i) =>
      [...sent.values()].map((s) => ({ deliveryId: s[i]!.deliveryId, mta: 'mx.remote.test', response: `250 ok ${i}`, attempts: 1 })),
    );

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

  it('on a pool connection the writer statement of delivered outcomes runs prepared and keeps its generic plan', async () => {
    // One connection, naming statements as the runtime's pool does: every batch below runs on it.
    const db = createDb(t.config.databaseUrl, { max: 1, namedStatements: true });
    const rounds = 16;
    try {
      const a = await signupAccount(t);
      const b = await signupAccount(t);
      // Queued and never recorded: nothing of a batch's statement may touch it (the lists' NULL rows match nothing).
      const [bystander] = await queuedSends(a, 1);
      const earlier = new Date('2026-01-01T00:00:00Z');
      for (let round = 0; round < rounds; round++) {
        // Three outcomes of two accounts a batch (the settled and the message lists padded to four rows).
        const queued = [...(await queuedSends(a, 2)), ...(await queuedSends(b, 1))];
        // In the first batch one delivery is settled already: its list is shorter, the statement the same text.
        if (round === 0) await t.db.delivery.update({ where: { id: queued[2]!.deliveryId }, data: { settledAt: earlier } });
        const outcomes = queued.map((q) => ({ deliveryId: q.deliveryId, mta: 'mx.remote.test', response: '250 ok', attempts: 1 }));
        const recorded = await poolTransaction(db, (tx) => markDeliveredMany(t.svc, tx, outcomes));
        expect(recorded.size).toBe(3);
        const ms = await t.db.message.findMany({ where: { id: { in: queued.map((q) => q.messageId) } }, select: { status: true } });
        expect(ms.map((m) => m.status)).toEqual(['delivered', 'delivered', 'delivered']);
        const ds = await t.db.delivery.findMany({ where: { id: { in: queued.map((q) => q.deliveryId) } }, select: { id: true, settledAt: true } });
        expect(ds.every((d) => d.settledAt !== null)).toBe(true);
        if (round === 0) expect(ds.find((d) => d.id === queued[2]!.deliveryId)!.settledAt).toEqual(earlier);
      }
      const still = await t.db.delivery.findUniqueOrThrow({ where: { id: bystander!.deliveryId }, select: { status: true, settledAt: true } });
      expect(still).toEqual({ status: 'queued', settledAt: null });
      expect((await t.db.message.findUniqueOrThrow({ where: { id: bystander!.messageId }, select: { status: true } })).status).not.toBe('delivered');
      // Recorded now, so the worker of the next test finds nothing of this one's left to deliver.
      const last = { deliveryId: bystander!.deliveryId, mta: 'mx.remote.test', response: '250 ok', attempts: 1 };
      expect((await t.db.$transaction((tx) => markDeliveredMany(t.svc, tx, [last]))).size).toBe(1);
      for (const x of [a, b]) expect(await verify(x.apiKey)).toMatchObject({ ok: true });
      const plans = await poolRows<{ generic_plans: number; custom_plans: number }>(
        db,
        sql`SELECT generic_plans::int, custom_plans::int FROM pg_prepared_statements WHERE statement LIKE '%settle AS%'`,
      );
      // One text for every batch of this size, planned for its values a few times and then kept (given as arrays,
      // the lists had it planned for its values on every batch).
      expect(plans).toHaveLength(1);
      expect(plans[0]!.generic_plans).toBeGreaterThanOrEqual(rounds / 2);
      expect(plans[0]!.custom_plans).toBeLessThanOrEqual(rounds / 2);
    } finally {
      await closeDb(db);
    }
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
      await waitFor(
        async () => (await t.db.delivery.count({ where: { accountId: { in: accounts.map((a) => a.accountId) }, status: 'delivered' } })) === 120,
        'every delivery recorded',
        60_000,
      );
    } finally {
      await w.stop();
    }
    for (const to of recipients) expect(sink.rcptFor(to)).toHaveLength(1);
    for (const a of accounts) {
      expect(await events(t, a.apiKey, 'mail.delivered')).toHaveLength(40);
      expect(await verify(a.apiKey)).toMatchObject({ ok: true });
    }
    const { batches, items, largest } = await groupMetrics('delivery_outcomes');
    expect(items).toBe(120);
    expect(largest).toBeGreaterThan(1);
    expect(batches).toBeLessThan(items);
  }, 90_000);
});

describe('inbound group commit', () => {
  it('40 messages over 20 SMTP connections at once: each stored once, free allowance then credit in order, alerts on the general path', async () => {
    const price = messagePrice(t.svc);
    const [a, b, c] = [await signupAccount(t), await signupAccount(t), await signupAccount(t)];
    // a: two free messages left, then credit; b: credit only; c: credit with an alert threshold crossed on the way.
    await t.db.account.update({ where: { id: a.accountId }, data: { freeMessagesLeft: 2, balanceMicros: 1_000_000n } });
    await t.db.account.update({ where: { id: b.accountId }, data: { freeMessagesLeft: 0, balanceMicros: 1_000_000n } });
    await t.db.account.update({
      where: { id: c.accountId },
      data: { freeMessagesLeft: 0, balanceMicros: 1_000_000n, alertFirstMicros: 1_000_000n - 5n * price - price / 2n },
    });
    const before = await groupMetrics('inbound_messages');
    const targets = [a, b, c];
    const subjects = targets.map(() => [] as string[]);
    const jobs = Array.from({ length: 39 }, (_, i) => {
      const k = i % 3;
      const subject = `inbound ${i} ${unique()}`;
      subjects[k]!.push(subject);
      return () =>
        sendRaw(
          t.smtpPort!,
          { from: 'x@outside.test', to: [targets[k]!.primaryAddress] },
          rawMessage({ From: 'x@outside.test', To: targets[k]!.primaryAddress, Subject: subject }, 'hello'),
        );
    });
    // And one message for two accounts at once.
    const both = `to a and b ${unique()}`;
    jobs.push(() =>
      sendRaw(
        t.smtpPort!,
        { from: 'x@outside.test', to: [a.primaryAddress, b.primaryAddress] },
        rawMessage({ From: 'x@outside.test', To: `${a.primaryAddress}, ${b.primaryAddress}`, Subject: both }, 'hello'),
      ),
    );
    subjects[0]!.push(both);
    subjects[1]!.push(both);
    const queue = [...jobs];
    await Promise.all(
      Array.from({ length: 20 }, async () => {
        for (let job = queue.shift(); job; job = queue.shift()) expect((await job()).accepted.length).toBeGreaterThan(0);
      }),
    );

    for (const [k, acct] of targets.entries()) {
      const received = await events(t, acct.apiKey, 'mail.received');
      expect(received.map((e) => e.data.message.subject).sort()).toEqual([...subjects[k]!].sort());
      expect(await t.db.message.count({ where: { accountId: acct.accountId, direction: 'received' } })).toBe(subjects[k]!.length);
      expect(await verify(acct.apiKey)).toMatchObject({ ok: true });
      // The ledger runs in the order the events were appended.
      const ledger = await t.db.ledgerEntry.findMany({ where: { accountId: acct.accountId, type: 'message_received' } });
      const order = new Map(received.map((e, i) => [e.data.message.id, i]));
      ledger.sort((x, y) => order.get(x.messageId!)! - order.get(y.messageId!)!);
      const freeFirst = acct === a ? 2 : 0;
      expect(ledger.map((l) => l.freeMessages)).toEqual(ledger.map((_, i) => (i < freeFirst ? 1 : 0)));
      expect(ledger.map((l) => l.balanceAfter)).toEqual(ledger.map((_, i) => 1_000_000n - BigInt(Math.max(0, i + 1 - freeFirst)) * price));
      const row = await t.db.account.findUniqueOrThrow({ where: { id: acct.accountId } });
      expect(row.balanceMicros).toBe(1_000_000n - BigInt(subjects[k]!.length - freeFirst) * price);
    }
    expect((await events(t, c.apiKey, 'low_balance')).map((e) => e.data.alert)).toEqual(['first']);
    expect(await events(t, a.apiKey, 'low_balance')).toEqual([]);

    const after = await groupMetrics('inbound_messages');
    expect(after.items - (before.items || 0)).toBe(40);
    expect(after.largest).toBeGreaterThan(1);
  }, 60_000);
});

describe('send group commit', () => {
  it('concurrent sends of several accounts: credit for exactly five of eight, one idempotency_key raced, chains verify', async () => {
    const price = messagePrice(t.svc);
    const [poor, rich, other] = [await signupAccount(t), await signupAccount(t), await signupAccount(t)];
    await t.db.account.update({ where: { id: poor.accountId }, data: { freeMessagesLeft: 0, balanceMicros: 5n * price } });
    const before = await groupMetrics('sends');
    const key = `race-${unique()}`;
    const calls = [
      ...Array.from({ length: 8 }, (_, i) => () => send(t, poor.apiKey, { to: `p${i}-${unique()}@remote.test`, subject: `poor ${i}`, text: 'x' })),
      ...Array.from({ length: 30 }, (_, i) => () => send(t, rich.apiKey, { to: `r${i}-${unique()}@remote.test`, subject: `rich ${i}`, text: 'x' })),
      ...Array.from({ length: 4 }, () => () => send(t, other.apiKey, { to: 'same@remote.test', subject: 'once', text: 'x', idempotency_key: key })),
    ];
    const answers = await Promise.all(calls.map((f) => f()));
    const poorAnswers = answers.slice(0, 8);
    expect(poorAnswers.filter((r) => r.status === 200)).toHaveLength(5);
    expect(poorAnswers.filter((r) => r.status === 402).map((r) => r.body.error.code)).toEqual(['payment_required', 'payment_required', 'payment_required']);
    expect(answers.slice(8, 38).every((r) => r.status === 200)).toBe(true);
    const raced = answers.slice(38);
    expect(raced.map((r) => r.status)).toEqual([200, 200, 200, 200]);
    expect(new Set(raced.map((r) => r.body.message_id)).size).toBe(1);

    const poorRow = await t.db.account.findUniqueOrThrow({ where: { id: poor.accountId } });
    expect(poorRow.heldMicros).toBe(5n * price);
    expect(await t.db.message.count({ where: { accountId: poor.accountId, direction: 'sent' } })).toBe(5);
    expect(await t.db.message.count({ where: { accountId: rich.accountId, direction: 'sent' } })).toBe(30);
    expect(await t.db.message.count({ where: { accountId: other.accountId, direction: 'sent' } })).toBe(1);
    for (const [a, n] of [
      [poor, 5],
      [rich, 30],
      [other, 1],
    ] as const) {
      const sent = await events(t, a.apiKey, 'mail.sent');
      expect(sent).toHaveLength(n);
      expect(await verify(a.apiKey)).toMatchObject({ ok: true });
      // Each answer's message is the one its event announces.
      const ids = new Set(sent.map((e) => e.data.message_id));
      expect(await t.db.delivery.count({ where: { accountId: a.accountId, messageId: { in: [...ids] } } })).toBe(n);
    }
    const after = await groupMetrics('sends');
    expect(after.items - (before.items || 0)).toBeGreaterThanOrEqual(38);
    expect(after.largest).toBeGreaterThan(1);
  }, 60_000);
});

describe('accounts locked in one order', () => {
  it('two accounts mailing each other while sends and outcomes are batched: every local delivery done at once, no deadlock', async () => {
    const [a, b] = [await signupAccount(t), await signupAccount(t)];
    const w = await startWorker(t.config, { svc: t.svc, log: t.runtime.log, publish: null, resolver: sink.resolver() });
    try {
      // Local deliveries lock the recipient's account (the copy) and the sender's (the outcome) while send
      // batches lock both senders: one order for all, or a cycle stalls a delivery until its retry.
      const sends = Array.from({ length: 60 }, (_, i) => (i % 2 ? [a, b] : [b, a]) as [TestAccount, TestAccount]).map(([from, to], i) =>
        send(t, from.apiKey, { to: to.primaryAddress, subject: `both ways ${i}`, text: 'x' }),
      );
      const answers = await Promise.all(sends);
      expect(answers.filter((r) => r.status !== 200)).toEqual([]);
      const ids = answers.map((r) => r.body.message_id as string);
      await waitFor(async () => (await t.db.message.count({ where: { id: { in: ids }, status: 'delivered' } })) === 60, 'all 60 delivered', 20_000);
      for (const acct of [a, b]) {
        expect(await events(t, acct.apiKey, 'mail.received')).toHaveLength(30);
        expect(await verify(acct.apiKey)).toMatchObject({ ok: true });
      }
    } finally {
      await w.stop();
    }
  }, 60_000);
});
