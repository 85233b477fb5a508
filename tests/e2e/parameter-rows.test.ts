/**
 * Statements over a batch of items with one row of parameters per item (packages/db parameterRows), on a real,
 * migrated PostgreSQL whose tables were never analysed, as on a new instance:
 * - the helper itself: NULL padding up to the next size, items past the largest size in further statements
 *   with their numbers carried on, and a statement or an item of the wrong shape refused;
 * - every hot statement written so (the MX's RCPT lookup, the API key lookup, the deliveries' read, the remote
 *   MX's acceptances, the claim of delivered deliveries, the store of composed bytes, the push engine's wake-up
 *   check) and the send-state read (one jsonb parameter): a connection
 *   plans each a few times, then keeps its generic plan, instead of planning it for every batch.
 *   pg_prepared_statements counts a session's plans of each statement; a statement given its ids as one array,
 *   as these were, is the control: it is planned on every run here.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ACCEPTANCES, DELIVERED_CLAIMS, DELIVERY_READS, KEY_LOOKUP, MX_RECIPIENTS, RAW_STORES, SEND_STATES, candidatesOf } from '@boxes/core';
import { compile, parameterRows, poolRows, sql, valueRows, type CompiledQuery, type ParameterRowStatement } from '@boxes/db';
import { WAKE_CHECK } from '@boxes/worker';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';

let t: TestServer;
let client: pg.Client;
let accounts: TestAccount[];
let hashes: string[];
let deliveryIds: string[];

/** The tables these statements read, filled and never analysed. */
const FILLED = ['accounts', 'api_keys', 'domains', 'boxes', 'messages', 'deliveries'];

beforeAll(async () => {
  t = await startTestServer();
  client = new pg.Client({ connectionString: t.config.databaseUrl });
  await client.connect();
  accounts = [await signupAccount(t), await signupAccount(t), await signupAccount(t)];
  // A delivery or two to read (to an address nobody hosts: it only has to exist).
  const sent = await rest(t, 'POST', '/messages/send', { key: accounts[0]!.apiKey, body: { to: ['someone@elsewhere.example'], subject: 'hi', text: 'hello' } });
  expect(sent.status, JSON.stringify(sent.body)).toBe(200);
  // An instance's worth of rows, never analysed (autovacuum off for these tables of this test's own database): on
  // a handful of rows any form of these statements gets its generic plan, and the control below would not tell.
  for (const table of FILLED) await client.query(`ALTER TABLE ${table} SET (autovacuum_enabled = false)`);
  await client.query(`INSERT INTO accounts (id, human_email, primary_address, updated_at)
    SELECT 'acc_fill_' || g, 'owner' || g || '@fill.example', 'agent@fill' || g || '.example', now() FROM generate_series(1, 2000) g`);
  await client.query(`INSERT INTO api_keys (id, account_id, hash, prefix, label)
    SELECT 'key_fill_' || g, 'acc_fill_' || (g % 2000 + 1), md5('fill' || g), 'bx_fill', 'fill' FROM generate_series(1, 4000) g`);
  await client.query(`INSERT INTO domains (id, account_id, name, live_name, mode, status, dkim_selector, dkim_public_key, dkim_private_key_enc)
    SELECT 'dom_fill_' || g, 'acc_fill_' || g, 'fill' || g || '.example', 'fill' || g || '.example', 'hosted', 'active', 's', 'k', 'k'
    FROM generate_series(1, 2000) g`);
  await client.query(`INSERT INTO boxes (id, account_id, domain_id, local_part, address, live_address)
    SELECT 'box_fill_' || g, 'acc_fill_' || (g % 2000 + 1), 'dom_fill_' || (g % 2000 + 1), 'b' || g, 'b' || g || '@fill' || (g % 2000 + 1) || '.example',
      'b' || g || '@fill' || (g % 2000 + 1) || '.example'
    FROM generate_series(1, 4000) g`);
  await client.query(`INSERT INTO messages (id, account_id, direction, status, rfc_message_id, provider_message_id, size_bytes)
    SELECT 'msg_fill_' || g, 'acc_fill_' || (g % 2000 + 1), 'outbound', 'delivered', '<' || g || '@fill.example>', 'msg_fill_' || g, 100
    FROM generate_series(1, 4000) g`);
  await client.query(`INSERT INTO deliveries (id, message_id, account_id, recipient, route, updated_at)
    SELECT 'dlv_fill_' || g, m.id, m.account_id, 'r' || g || '@elsewhere.example', 'smtp', now()
    FROM generate_series(1, 4000) g, (SELECT id, account_id FROM messages WHERE id NOT LIKE 'msg_fill_%' LIMIT 1) m`);
  hashes = (await client.query<{ hash: string }>('SELECT hash FROM api_keys ORDER BY created_at LIMIT 20')).rows.map((r) => r.hash);
  deliveryIds = (await client.query<{ id: string }>('SELECT id FROM deliveries LIMIT 20')).rows.map((r) => r.id);
  expect(hashes.length).toBeGreaterThanOrEqual(3);
  expect(deliveryIds.length).toBeGreaterThanOrEqual(1);
});
afterAll(async () => {
  await client?.end();
  await t?.stop();
});

/** A small statement of the helper's over accounts, selecting each row's number. */
const ACCOUNT_IDS = parameterRows<string, { i: number; id: string }>({
  types: ['text'],
  values: (id) => [id],
  build: (values) => sql`SELECT q.i, a.id FROM ${values} AS q(i, id) JOIN accounts a ON a.id = q.id`,
});

describe('parameterRows', () => {
  it('pads a batch with NULL rows up to the next size, which match nothing', async () => {
    for (const [n, size] of [
      [1, 1],
      [2, 4],
      [4, 4],
      [5, 16],
      [17, 64],
      [65, 256],
      [256, 256],
    ] as const) {
      const { size: got, parameters } = ACCOUNT_IDS.parameters(Array.from({ length: n }, (_, j) => `id${j}`));
      expect(got, `${n} items`).toBe(size);
      expect(parameters.slice(0, n)).toEqual(Array.from({ length: n }, (_, j) => `id${j}`));
      expect(parameters.slice(n)).toEqual(Array(size - n).fill(null));
    }
    expect(() => ACCOUNT_IDS.parameters(Array.from({ length: 257 }, () => 'x'))).toThrow(/at most 256/);
    // Three accounts in a statement for four: three rows, the NULL row matched nothing.
    const three = accounts.map((a) => a.accountId);
    const found = await ACCOUNT_IDS.run(t.svc.db, three);
    expect(found.map((r) => [r.i, r.id]).sort((x, y) => Number(x[0]) - Number(y[0]))).toEqual(three.map((id, j) => [j + 1, id]));
  });

  it('runs more items than the largest size in further statements, numbering each item in the whole batch', async () => {
    // 300 items: two statements (256, then 44 padded to 64); the known accounts sit in both.
    const items = Array.from({ length: 300 }, (_, j) => `nobody_${j}`);
    const at = [0, 257, 299] as const;
    at.forEach((j, n) => {
      items[j] = accounts[n]!.accountId;
    });
    const found = await ACCOUNT_IDS.run(t.svc.db, items);
    expect(found.map((r) => [r.i, r.id]).sort((x, y) => Number(x[0]) - Number(y[0]))).toEqual(at.map((j, n) => [j + 1, accounts[n]!.accountId]));
  });

  it('valueRows: a list inside a larger statement, padded to a size, to at least a given count, and past the largest to a multiple of it', async () => {
    const ids = accounts.map((a) => a.accountId);
    const read = (items: string[], atLeast?: number) =>
      sql<{ i: number; id: string }>`SELECT v.i, a.id FROM ${valueRows(items, ['text'], (id) => [id], atLeast)} AS v(i, id) JOIN accounts a ON a.id = v.id`;
    for (const [items, atLeast, size] of [
      [ids, undefined, 4],
      [ids, 5, 16],
      [[...ids, ...Array.from({ length: 297 }, (_, j) => `nobody_${j}`)], undefined, 512],
    ] as const) {
      expect(compile(read([...items], atLeast)).parameters, `${items.length} items, at least ${atLeast}`).toHaveLength(size);
      // Only the known accounts are found, each under its own number: the NULL rows matched nothing.
      const found = await poolRows(t.svc.db, read([...items], atLeast));
      expect(found.map((r) => [r.i, r.id]).sort((x, y) => Number(x[0]) - Number(y[0]))).toEqual(ids.map((id, j) => [j + 1, id]));
    }
  });

  it('refuses a statement with parameters of its own and an item of the wrong width', () => {
    const extra = parameterRows<string, unknown>({
      types: ['text'],
      values: (id) => [id],
      build: (values) => sql`SELECT a.id FROM ${values} AS q(i, id) JOIN accounts a ON a.id = q.id WHERE a.human_email = ${'x'}`,
    });
    expect(() => extra.statement(1)).toThrow(/2 parameters, not its 1 rows of 1/);
    const wide = parameterRows<string, unknown>({
      types: ['text', 'text'],
      values: (id) => [id],
      build: (values) => sql`SELECT q.i FROM ${values} AS q(i, a, b)`,
    });
    expect(() => wide.parameters(['x'])).toThrow(/1 values for an item, not 2/);
  });
});

describe('a connection keeps the generic plan of the statements written with a row per item', () => {
  /** Runs the statement 12 times on this test's own connection under `name`; answers its plan counts. */
  async function plans(name: string, c: CompiledQuery<unknown>, parameters: () => unknown[]) {
    for (let run = 0; run < 12; run++) await client.query({ name, text: c.sql, values: parameters() });
    const { rows } = await client.query<{ generic_plans: number; custom_plans: number }>(
      'SELECT generic_plans::int, custom_plans::int FROM pg_prepared_statements WHERE name = $1',
      [name],
    );
    expect(rows.length, name).toBe(1);
    return rows[0]!;
  }

  it('on tables never analysed, where the same read with an array of ids is planned on every run', async () => {
    const { rows: stats } = await client.query(
      `SELECT count(*)::int AS n FROM pg_stat_user_tables
       WHERE relname = ANY($1) AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)`,
      [FILLED],
    );
    expect(stats[0].n).toBe(0);
    const control = await plans(
      'array_control',
      { sql: 'SELECT k.id FROM api_keys k WHERE k.hash = ANY($1::text[])', parameters: [], query: null as never, queryId: null as never },
      () => [hashes.slice(0, 2)],
    );
    expect(control.custom_plans).toBe(12);
  });

  const cases: [string, ParameterRowStatement<never, unknown>, (run: number) => unknown[]][] = [
    ['mx_recipients', MX_RECIPIENTS, (run) => [{ address: accounts[run % 3]!.primaryAddress, candidates: candidatesOf('x@spam.example') }]],
    ['key_lookup', KEY_LOOKUP, (run) => [hashes[run % hashes.length]]],
    ['delivery_reads', DELIVERY_READS, (run) => [deliveryIds[run % deliveryIds.length]]],
    // Deliveries nobody has: the statement runs, and changes nothing.
    ['acceptances', ACCEPTANCES, (run) => [{ deliveryId: `dlv_none_${run}`, mta: 'mx.elsewhere.example', response: '250 ok', attempts: 1 }]],
    ['wake_check', WAKE_CHECK, (run) => [accounts[run % 3]!.accountId]],
    // Deliveries and messages nobody has, as above.
    ['delivered_claims', DELIVERED_CLAIMS, (run) => [{ deliveryId: `dlv_none_${run}`, mta: 'mx.elsewhere.example', response: '250 ok', attempts: 1 }]],
    ['raw_stores', RAW_STORES, (run) => [{ id: `msg_none_${run}`, raw_enc: Buffer.from('sealed').toString('base64'), size: 6 }]],
  ];
  for (const [name, statement, item] of cases) {
    it(`${name}, for 1, 3, 10 and 40 items (statements for 1, 4, 16 and 64)`, async () => {
      for (const n of [1, 3, 10, 40]) {
        const items = (run: number) => Array.from({ length: n }, (_, j) => item(run + j)[0]) as never[];
        let run = 0;
        const { size } = statement.parameters(items(0));
        const got = await plans(`${name}_${n}`, statement.statement(size), () => statement.parameters(items(run++)).parameters);
        expect(got.custom_plans, `${name}, ${n} items`).toBeLessThanOrEqual(5);
        expect(got.generic_plans, `${name}, ${n} items`).toBeGreaterThanOrEqual(7);
      }
    });
  }

  it('the send-state read (one jsonb parameter of the requests)', async () => {
    const a = accounts[0]!;
    let run = 0;
    const got = await plans('send_states', SEND_STATES, () => {
      const to = `someone${run++}@elsewhere.example`;
      const request = {
        i: 0,
        account_id: a.accountId,
        froms: [a.primaryAddress],
        recipients: [to],
        domains: ['elsewhere.example'],
        candidates: candidatesOf(to),
        parents: [],
      };
      return [JSON.stringify([request])];
    });
    expect(got.custom_plans).toBeLessThanOrEqual(5);
    expect(got.generic_plans).toBeGreaterThanOrEqual(7);
  });
});
