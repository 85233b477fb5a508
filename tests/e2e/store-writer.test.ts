/**
 * The store writer (store/write.ts) on its own, against the real database: it takes each account's changes in
 * order, writes a quiet account in its one statement and an account with something to announce the general
 * way, whatever the caller passed; the rows the caller locked come back moved to what the database holds.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lockAccountsCredit, writeBatch } from '@boxes/core';
import { rest, signupAccount, startTestServer, type TestServer } from '@boxes/testing';

let t: TestServer;

beforeAll(async () => {
  t = await startTestServer({ worker: false });
});
afterAll(async () => {
  await t?.stop();
});

const verify = async (key: string) => (await rest(t, 'GET', '/events/verify', { key })).body;
const eventTypes = async (key: string) => ((await rest(t, 'GET', '/events?limit=100', { key })).body.events as { type: string }[]).map((e) => e.type);

describe('writeBatch', () => {
  it('one batch, two accounts: the quiet one in the statement, the one entering a deficit announced; rows moved, chains verify', async () => {
    const quiet = await signupAccount(t);
    const deficit = await signupAccount(t);
    for (const a of [quiet, deficit]) await t.db.account.update({ where: { id: a.accountId }, data: { freeMessagesLeft: 0, balanceMicros: 150n } });
    const before = { quiet: await eventTypes(quiet.apiKey), deficit: await eventTypes(deficit.apiKey) };
    const supportEvent = (n: number) => ({ type: 'support.question_asked' as const, data: { question_id: `sq_writer${n}`, subject: `writer ${n}` } });

    const locked = await t.db.$transaction(async (tx) => {
      const rows = new Map((await lockAccountsCredit(tx, [quiet.accountId, deficit.accountId].sort())).map((a) => [a.id, a]));
      await writeBatch(t.svc, tx, {
        locked: rows,
        changes: [
          { accountId: quiet.accountId, hold: { micros: 7n, freeMessages: 0 } },
          { accountId: deficit.accountId, charge: { postings: [{ type: 'storage', amountMicros: -100n }] }, event: supportEvent(1) },
          { accountId: quiet.accountId, charge: { postings: [{ type: 'storage', amountMicros: -100n }] }, event: supportEvent(2) },
          // The second charge takes the account below zero: the whole account goes the announced way, in order.
          { accountId: deficit.accountId, charge: { postings: [{ type: 'storage', amountMicros: -100n }] }, event: supportEvent(3) },
          { accountId: quiet.accountId, event: supportEvent(4) },
        ],
      });
      return rows;
    });

    const q = await t.db.account.findUniqueOrThrow({ where: { id: quiet.accountId } });
    expect({ balance: q.balanceMicros, held: q.heldMicros }).toEqual({ balance: 50n, held: 7n });
    const d = await t.db.account.findUniqueOrThrow({ where: { id: deficit.accountId } });
    expect(d.balanceMicros).toBe(-50n);
    expect(d.deficitSince).not.toBeNull();
    // The rows handed over are what the database holds now (a caller writing in runs reads nothing again).
    for (const row of [q, d]) {
      const l = locked.get(row.id)!;
      expect({ balance: l.balance_micros, held: l.held_micros, seq: l.chain_seq, hash: l.chain_hash }).toEqual({
        balance: row.balanceMicros,
        held: row.heldMicros,
        seq: row.chainSeq,
        hash: row.chainHash,
      });
    }
    // Each charge's balance_after runs on from the one before.
    for (const [a, after] of [
      [quiet, [50n]],
      [deficit, [50n, -50n]],
    ] as const) {
      const ledger = await t.db.ledgerEntry.findMany({ where: { accountId: a.accountId, type: 'storage' }, orderBy: { balanceAfter: 'desc' } });
      expect(ledger.map((l) => l.balanceAfter)).toEqual(after);
    }
    // Events in the order given; the deficit announced once, between the charge that caused it and its event.
    const fresh = (key: string, old: string[]) => eventTypes(key).then((all) => all.slice(old.length));
    expect(await fresh(quiet.apiKey, before.quiet)).toEqual(['support.question_asked', 'support.question_asked']);
    expect(await fresh(deficit.apiKey, before.deficit)).toEqual(['support.question_asked', 'billing.deficit', 'support.question_asked']);
    for (const a of [quiet, deficit]) expect(await verify(a.apiKey)).toMatchObject({ ok: true });
  });

  it('a posting with an idempotency key is made once, through the general path', async () => {
    const a = await signupAccount(t);
    const write = () =>
      t.db.$transaction(async (tx) => {
        const locked = new Map((await lockAccountsCredit(tx, [a.accountId])).map((r) => [r.id, r]));
        await writeBatch(t.svc, tx, {
          locked,
          changes: [{ accountId: a.accountId, charge: { postings: [{ type: 'storage', amountMicros: -10n, idempotencyKey: `writer-${a.accountId}` }] } }],
        });
      });
    await write();
    await write();
    expect(await t.db.ledgerEntry.count({ where: { accountId: a.accountId, type: 'storage' } })).toBe(1);
  });

  it('refuses changes for an account the caller did not lock', async () => {
    const a = await signupAccount(t);
    await expect(
      t.db.$transaction((tx) => writeBatch(t.svc, tx, { locked: new Map(), changes: [{ accountId: a.accountId, hold: { micros: 1n, freeMessages: 0 } }] })),
    ).rejects.toThrow(/not locked/);
  });
});
