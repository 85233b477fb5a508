/** copyOutBinary against a real PostgreSQL: bytea arrives as its bytes, NULL as null, errors reject. */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyOutBinary, type CopyRow } from './copy-out';

// The server the test run uses (the same rule as @boxes/testing); a temporary table in its postgres database.
const url = new URL(process.env.TEST_DATABASE_URL ?? process.env.DATABASE_URL ?? 'postgresql://postgres@127.0.0.1:5432/boxes');
url.pathname = '/postgres';
const client = new pg.Client({ connectionString: url.toString() });

beforeAll(async () => {
  await client.connect();
  await client.query('CREATE TEMP TABLE blobs (id text, data bytea, n int)');
});
afterAll(() => client.end());

describe('copyOutBinary', () => {
  it('hands over each row as it arrives: bytea as bytes (large ones too), text as UTF-8, NULL as null', async () => {
    const blobs = [randomBytes(0), randomBytes(1), randomBytes(70_000), randomBytes(2_000_000)];
    for (const [i, b] of blobs.entries()) await client.query('INSERT INTO blobs VALUES ($1, $2, $3)', [`b${i}-é`, b, i]);
    await client.query("INSERT INTO blobs VALUES ('none', NULL, NULL)");
    const got: { id: string; data: Buffer | null; n: number | null }[] = [];
    await copyOutBinary(client, 'SELECT id, data, n FROM blobs ORDER BY n NULLS LAST', (row: CopyRow) => {
      // The views are only valid during the call: keep copies.
      got.push({ id: row[0]!.toString('utf8'), data: row[1] ? Buffer.from(row[1]) : null, n: row[2] ? row[2].readInt32BE(0) : null });
    });
    expect(got.map((r) => r.id)).toEqual(['b0-é', 'b1-é', 'b2-é', 'b3-é', 'none']);
    blobs.forEach((b, i) => {
      expect(got[i]!.data!.equals(b)).toBe(true);
    });
    expect(got[4]).toEqual({ id: 'none', data: null, n: null });
    expect(got.map((r) => r.n)).toEqual([0, 1, 2, 3, null]);
  });

  it('an empty result calls nothing; a server error and an error thrown by onRow reject, and the client goes on', async () => {
    let calls = 0;
    await copyOutBinary(client, 'SELECT id FROM blobs WHERE false', () => calls++);
    expect(calls).toBe(0);
    await expect(copyOutBinary(client, 'SELECT nope FROM blobs', () => undefined)).rejects.toThrow(/nope/);
    await expect(
      copyOutBinary(client, 'SELECT id FROM blobs', () => {
        throw new Error('consumer failed');
      }),
    ).rejects.toThrow('consumer failed');
    expect((await client.query('SELECT count(*)::int AS n FROM blobs')).rows[0].n).toBe(5);
  });
});
