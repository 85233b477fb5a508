/**
 * The status vocabularies in the database: every column of STATUS_COLUMNS has a CHECK constraint whose list is
 * exactly the TypeScript array (read back from pg_constraint, so neither can change without the other), the
 * database accepts each value of the list and refuses any other, on insert and on update.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { STATUS_COLUMNS } from '@boxes/core';
import { createTestDatabase } from '@boxes/testing';

let drop: () => Promise<void>;
let client: pg.Client;

beforeAll(async () => {
  const db = await createTestDatabase();
  drop = db.drop;
  client = new pg.Client({ connectionString: db.url });
  await client.connect();
});
afterAll(async () => {
  await client?.end();
  await drop?.();
});

const columns = Object.entries(STATUS_COLUMNS).map(([key, values]) => {
  const [table, column] = key.split('.') as [string, string];
  return { key, table, column, values: [...values] as string[] };
});

/** The values of the CHECK constraints on table that name column. */
async function checkLists(table: string, column: string): Promise<{ name: string; values: string[] }[]> {
  const r = await client.query<{ conname: string; def: string }>(
    `SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'c'`,
    [table],
  );
  return r.rows
    .filter((c) => new RegExp(`\\b${column}\\b`).test(c.def))
    .map((c) => ({ name: c.conname, values: [...c.def.matchAll(/'([^']*)'::text/g)].map((m) => m[1]!) }));
}

/** An INSERT of one row of table with column set to value and every other required column filled by its type. */
async function insertRow(table: string, column: string, value: string): Promise<string> {
  const cols = await client.query<{ column_name: string; data_type: string; udt_name: string }>(
    `SELECT column_name, data_type, udt_name FROM information_schema.columns
     WHERE table_schema = current_schema() AND table_name = $1 AND is_nullable = 'NO' AND column_default IS NULL AND column_name <> $2`,
    [table, column],
  );
  const filler = (type: string, udt: string): string => {
    if (type === 'ARRAY') return `'{}'::${udt.slice(1)}[]`;
    if (/int|numeric|double|real/.test(type)) return '0';
    if (type === 'boolean') return 'false';
    if (type.startsWith('timestamp') || type === 'date') return 'now()';
    if (type === 'jsonb' || type === 'json') return `'{}'::jsonb`;
    if (type === 'bytea') return `'\\x00'::bytea`;
    return `'x_' || gen_random_uuid()`;
  };
  const names = [column, ...cols.rows.map((c) => c.column_name)];
  const values = ['$1', ...cols.rows.map((c) => filler(c.data_type, c.udt_name))];
  return client.query(`INSERT INTO "${table}" (${names.map((n) => `"${n}"`).join(', ')}) VALUES (${values.join(', ')})`, [value]).then(
    () => 'ok',
    (err: { code?: string; constraint?: string }) => `${err.code}:${err.constraint ?? ''}`,
  );
}

/** Runs f in a transaction rolled back after, so the database stays empty. */
async function rolledBack<T>(f: () => Promise<T>): Promise<T> {
  await client.query('BEGIN');
  try {
    return await f();
  } finally {
    await client.query('ROLLBACK');
  }
}

describe('status columns', () => {
  it.each(columns)('$key has one CHECK listing exactly its vocabulary', async ({ table, column, values }) => {
    const checks = await checkLists(table, column);
    expect(checks.map((c) => c.name)).toEqual([`${table}_${column}_check`]);
    expect([...checks[0]!.values].sort()).toEqual([...values].sort());
  });

  it.each(columns)('$key refuses a value outside its vocabulary and takes each value of it', async ({ table, column, values }) => {
    // PostgreSQL checks CHECK constraints before foreign keys, so a row whose filler ids point nowhere still
    // shows whether its status passed: a refused status is 23514 on the column's constraint, an accepted one
    // stops (if at all) at a foreign key (23503).
    await rolledBack(async () => {
      await client.query('SAVEPOINT s');
      expect(await insertRow(table, column, 'bogus_status')).toBe(`23514:${table}_${column}_check`);
      await client.query('ROLLBACK TO SAVEPOINT s');
      for (const value of values) {
        const outcome = await insertRow(table, column, value);
        expect(['ok', '23503'], `${table}.${column} = '${value}': ${outcome}`).toContain(outcome.split(':')[0]);
        await client.query('ROLLBACK TO SAVEPOINT s');
      }
    });
  });

  it('an update to an unknown status fails with a check violation', async () => {
    await rolledBack(async () => {
      await client.query(
        `INSERT INTO accounts (id, human_email, primary_address, updated_at) VALUES ('acct_vocab', 'o@example.com', 'agent@example.com', now())`,
      );
      await client.query(
        `INSERT INTO messages (id, account_id, direction, status, rfc_message_id, provider_message_id, size_bytes)
         VALUES ('msg_vocab', 'acct_vocab', 'sent', 'queued', '<m@example.com>', 'msg_vocab', 1)`,
      );
      await client.query(
        `INSERT INTO deliveries (id, message_id, account_id, recipient, route, updated_at) VALUES ('dlv_vocab', 'msg_vocab', 'acct_vocab', 'r@example.net', 'remote', now())`,
      );
      for (const [table, id, bad] of [
        ['accounts', 'acct_vocab', 'closed'],
        ['messages', 'msg_vocab', 'sending'],
        ['deliveries', 'dlv_vocab', 'delivred'],
      ] as const) {
        await client.query('SAVEPOINT u');
        const err = await client.query(`UPDATE "${table}" SET status = $1 WHERE id = $2`, [bad, id]).then(
          () => null,
          (e: { code?: string; constraint?: string }) => e,
        );
        expect(err, `${table} took status '${bad}'`).toMatchObject({ code: '23514', constraint: `${table}_status_check` });
        await client.query('ROLLBACK TO SAVEPOINT u');
      }
      // The default of a column is in its vocabulary too.
      const d = await client.query<{ status: string }>(`SELECT status FROM deliveries WHERE id = 'dlv_vocab'`);
      expect(d.rows[0]!.status).toBe('queued');
    });
  });
});
