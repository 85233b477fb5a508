/**
 * The MX's RCPT statement (messages/receive.ts: mxRecipientsStatement, mxRecipientsParameters) on a real,
 * migrated PostgreSQL whose tables were never analysed, as on a new instance: each size finds the boxes it is
 * given and nothing for the NULL rows a batch is padded with, each recipient gets its own envelope sender's list
 * entries, and a connection keeps the statement's generic plan after its first runs instead of planning it again
 * for every batch of RCPTs (pg_prepared_statements counts a session's plans of each statement).
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MX_RECIPIENT_SIZES, candidatesOf, groupCommitStats, mxRecipientsParameters, mxRecipientsStatement, resolveMxRecipient } from '@boxes/core';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';

let t: TestServer;
let client: pg.Client;
let a: TestAccount;
let b: TestAccount;

beforeAll(async () => {
  t = await startTestServer();
  client = new pg.Client({ connectionString: t.config.databaseUrl });
  await client.connect();
  a = await signupAccount(t);
  b = await signupAccount(t);
  for (const [acct, body] of [
    [a, { list: 'block', value: 'spam.example', direction: 'receive' }],
    [a, { list: 'allow', value: 'friend@good.example' }],
    [b, { list: 'allow', value: 'good.example', direction: 'send' }],
  ] as const) {
    const r = await rest(t, 'POST', '/lists', { key: acct.apiKey, body });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  }
});
afterAll(async () => {
  await client?.end();
  await t?.stop();
});

async function lookup(items: { address: string; candidates: string[] }[], name: string) {
  const { size, parameters } = mxRecipientsParameters(items);
  const c = mxRecipientsStatement(size);
  const r = await client.query({ name, text: c.sql, values: parameters as unknown[] });
  return { size, rows: r.rows as { i: number; id: string; account_id: string; trust_rows: { list: string; value: string }[] | null }[] };
}

describe("the MX's RCPT statement", () => {
  // Five recipients, each with what the statement must answer for it.
  const cases = () => [
    {
      item: { address: a.primaryAddress, candidates: candidatesOf('x@spam.example') },
      expect: { account_id: a.accountId, trust_rows: [{ list: 'block', value: 'spam.example' }] },
    },
    { item: { address: 'nobody@nowhere.example', candidates: [] }, expect: null },
    {
      item: { address: a.primaryAddress, candidates: candidatesOf('friend@good.example') },
      expect: { account_id: a.accountId, trust_rows: [{ list: 'allow', value: 'friend@good.example' }] },
    },
    // b's entry is for sending only: not one the MX reads.
    { item: { address: b.primaryAddress, candidates: candidatesOf('friend@good.example') }, expect: { account_id: b.accountId, trust_rows: null } },
    // Recipients arrive lowercased (resolveMxRecipient): this one is not, so it is not found.
    { item: { address: b.primaryAddress.toUpperCase(), candidates: [] }, expect: null },
  ];

  it("finds each recipient with its own sender's list entries in every size, and nothing for the NULL rows it is padded with", async () => {
    for (const size of MX_RECIPIENT_SIZES) {
      // Enough recipients to need this size, and fewer than it holds from size 4 on (the rest are NULL rows).
      const n = size <= 2 ? size : size / 2 + 1;
      const list = Array.from({ length: n }, (_, j) => cases()[j % 5]!);
      const { size: used, rows } = await lookup(
        list.map((c) => c.item),
        `rcpt_rows_${size}`,
      );
      expect(used).toBe(size);
      const byNumber = new Map(rows.map((r) => [r.i, r]));
      expect(rows.length).toBe(byNumber.size);
      for (const [j, c] of list.entries()) {
        if (c.expect) expect(byNumber.get(j + 1), `size ${size}, recipient ${j + 1}`).toMatchObject(c.expect);
        else expect(byNumber.has(j + 1), `size ${size}, recipient ${j + 1}`).toBe(false);
      }
      expect(Math.max(...byNumber.keys())).toBeLessThanOrEqual(n);
    }
  });

  it('more recipients than the largest statement holds is an error, not a statement cut short', () => {
    const largest = MX_RECIPIENT_SIZES.at(-1)!;
    expect(() => mxRecipientsParameters(Array.from({ length: largest + 1 }, () => ({ address: a.primaryAddress, candidates: [] })))).toThrow(/at most/);
  });

  it('RCPTs arriving together beyond the largest statement are all answered, each with its own box and entries', async () => {
    const before = groupCommitStats(t.svc).find((g) => g.name === 'mx_recipients')?.largest ?? 0;
    const list = Array.from({ length: 45 }, (_, j) => cases()[j % 4]!);
    const senders = ['x@spam.example', 'y@nowhere.example', 'friend@good.example', 'friend@good.example'];
    const got = await Promise.all(list.map((c, j) => resolveMxRecipient(t.svc, c.item.address, senders[j % 4]!)));
    expect(groupCommitStats(t.svc).find((g) => g.name === 'mx_recipients')!.largest).toBeGreaterThan(Math.max(before, MX_RECIPIENT_SIZES.at(-1)!));
    for (const [j, c] of list.entries()) {
      const r = got[j]!;
      if (!c.expect) {
        expect(r.resolution.kind, `recipient ${j}`).not.toBe('box');
        continue;
      }
      expect(r.resolution.kind, `recipient ${j}`).toBe('box');
      if (r.resolution.kind === 'box') expect(r.resolution.box.accountId).toBe(c.expect.account_id);
      expect(r.rows, `recipient ${j}`).toEqual((c.expect.trust_rows ?? []).map((e) => expect.objectContaining(e)));
    }
  });

  it('a connection plans it a few times, then keeps its generic plan, for one recipient and for several', async () => {
    // These tables were never analysed: an array of recipients was planned anew on every run here.
    const { rows: stats } = await client.query(
      `SELECT count(*)::int AS n FROM pg_stat_user_tables WHERE relname = 'boxes' AND last_analyze IS NULL AND last_autoanalyze IS NULL`,
    );
    expect(stats[0].n).toBe(1);
    for (let run = 0; run < 12; run++) {
      const first = { address: run % 2 ? a.primaryAddress : b.primaryAddress, candidates: candidatesOf('x@spam.example') };
      await lookup([first], 'rcpt_plans_1');
      await lookup([first, { address: b.primaryAddress, candidates: [] }, { address: 'nobody@nowhere.example', candidates: [] }], 'rcpt_plans_4');
    }
    const { rows } = await client.query(
      `SELECT name, generic_plans::int, custom_plans::int FROM pg_prepared_statements WHERE name LIKE 'rcpt_plans_%' ORDER BY name`,
    );
    expect(rows.map((r) => r.name)).toEqual(['rcpt_plans_1', 'rcpt_plans_4']);
    for (const r of rows) {
      expect(r.custom_plans, r.name).toBeLessThanOrEqual(5);
      expect(r.generic_plans, r.name).toBeGreaterThanOrEqual(7);
    }
  });
});
