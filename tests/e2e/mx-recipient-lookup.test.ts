/**
 * The MX's RCPT statement (messages/receive.ts: MX_RECIPIENTS, one row of parameters per recipient) on a real,
 * migrated PostgreSQL: each size finds the boxes it is given and nothing for the NULL rows a batch is padded
 * with, and each recipient gets its own envelope sender's list entries. That a connection keeps its generic plan
 * is in parameter-rows.test.ts, with the other statements written so.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MX_RECIPIENTS, candidatesOf, groupCommitStats, resolveMxRecipient } from '@boxes/core';
import { PARAMETER_ROW_SIZES } from '@boxes/db';
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
  const { size, parameters } = MX_RECIPIENTS.parameters(items);
  const c = MX_RECIPIENTS.statement(size);
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
    for (const size of PARAMETER_ROW_SIZES) {
      // Enough recipients to need this size, and fewer than it holds from size 4 on (the rest are NULL rows).
      const n = size === 1 ? 1 : size / 2 + 1;
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
    const largest = PARAMETER_ROW_SIZES.at(-1)!;
    expect(() => MX_RECIPIENTS.parameters(Array.from({ length: largest + 1 }, () => ({ address: a.primaryAddress, candidates: [] })))).toThrow(/at most/);
  });

  it('RCPTs arriving together share a statement, and each is answered with its own box and entries', async () => {
    const list = Array.from({ length: 45 }, (_, j) => cases()[j % 4]!);
    const senders = ['x@spam.example', 'y@nowhere.example', 'friend@good.example', 'friend@good.example'];
    const got = await Promise.all(list.map((c, j) => resolveMxRecipient(t.svc, c.item.address, senders[j % 4]!)));
    // The first goes alone, the other 44 together in one batch.
    expect(groupCommitStats(t.svc).find((g) => g.name === 'mx_recipients')!.largest).toBeGreaterThanOrEqual(44);
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
});
