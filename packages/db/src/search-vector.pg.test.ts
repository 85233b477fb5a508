/**
 * boxes_search_vector (the migration's SQL function, created here in pg_temp) against a real PostgreSQL: the
 * weights of each part, addresses found whole and by local part and domain, the cut of long bodies, and
 * ts_rank_cd putting a subject match first.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/** The configuration of the index (core search/vector.ts SEARCH_CONFIG). */
const SEARCH_CONFIG = 'english';

const url = new URL(process.env.TEST_DATABASE_URL ?? process.env.DATABASE_URL ?? 'postgresql://postgres@127.0.0.1:5432/boxes');
url.pathname = '/postgres';
const client = new pg.Client({ connectionString: url.toString() });

const migration = readFileSync(
  path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../prisma/migrations/20261126163100_message_search/migration.sql'),
  'utf8',
);

beforeAll(async () => {
  await client.connect();
  const fn = /CREATE FUNCTION boxes_search_vector[\s\S]*?\$\$;/.exec(migration)?.[0];
  if (!fn) throw new Error('the migration has no boxes_search_vector');
  await client.query(fn.replace('CREATE FUNCTION boxes_search_vector', 'CREATE FUNCTION pg_temp.boxes_search_vector'));
});
afterAll(() => client.end());

const vector = async (subject: string | null, addresses: string | null, body: string | null, attachments: string | null) =>
  (await client.query<{ v: string }>('SELECT pg_temp.boxes_search_vector($1, $2, $3, $4)::text AS v', [subject, addresses, body, attachments])).rows[0]!.v;

const matches = async (v: string, q: string) =>
  (await client.query<{ m: boolean }>(`SELECT $1::tsvector @@ websearch_to_tsquery($2::regconfig, $3) AS m`, [v, SEARCH_CONFIG, q])).rows[0]!.m;

describe('boxes_search_vector', () => {
  it('weighs the subject A, addresses B, body C, attachments D', async () => {
    const v = await vector('Quarterly invoice', 'alice@example.com', 'the meeting notes', 'zebra manifest');
    expect(v).toMatch(/'invoic':\d+A/);
    expect(v).toMatch(/'alice@example.com':\d+B/);
    expect(v).toMatch(/'meet':\d+C/);
    // D is the default weight, which tsvector text leaves unwritten.
    expect(v).toMatch(/'zebra':\d+(?![ABC])/);
    // Stop words are not kept; the text itself is not in the vector.
    expect(v).not.toContain("'the'");
  });

  it('finds an address whole, by its local part and by its domain', async () => {
    const v = await vector(null, 'alice@example.com bob@other.test', null, null);
    for (const q of ['alice@example.com', 'alice', 'example.com', 'bob', 'other.test']) expect(await matches(v, q), q).toBe(true);
    expect(await matches(v, 'carol')).toBe(false);
  });

  it('takes nulls, and cuts a body at 100,000 characters', async () => {
    expect(await vector(null, null, null, null)).toBe('');
    const long = `${'filler '.repeat(15_000)}needle`;
    expect(await matches(await vector(null, null, long, null), 'needle')).toBe(false);
    expect(await matches(await vector(null, null, `needle ${long}`, null), 'needle')).toBe(true);
  });

  it('ts_rank_cd ranks a subject match above a body match', async () => {
    const { rows } = await client.query<{ s: number; b: number }>(
      `SELECT ts_rank_cd(pg_temp.boxes_search_vector('invoice due', NULL, 'hello there', NULL), q) AS s,
              ts_rank_cd(pg_temp.boxes_search_vector('hello', NULL, 'the invoice is due', NULL), q) AS b
       FROM websearch_to_tsquery('english', 'invoice') q`,
    );
    expect(rows[0]!.s).toBeGreaterThan(rows[0]!.b);
  });
});
