/**
 * Typed SQL (sql.ts) against a real, migrated PostgreSQL through Prisma's pg adapter: the parameter types that
 * the adapter must carry (bigint, Date, Uint8Array/Buffer, text arrays, json given as text or as an object) reach
 * the columns intact, rows come back as the generated types say, and statements run inside an interactive
 * transaction (its lock and its rollback).
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { Db } from './client';
import { col, compile, exec, k, poolRows, rows, sql, table, tbl } from './sql';
import { templateDatabase } from './template-database';

let db: Db;
templateDatabase('sql', (d) => {
  db = d;
});

const at = new Date('2026-03-04T05:06:07.891Z');

async function insertAccount(id: string, balance: bigint) {
  return rows(
    db,
    k
      .insertInto('accounts')
      .values({ id, human_email: `${id}@example.com`, primary_address: `agent@${id}.example`, balance_micros: balance, created_at: at, updated_at: at })
      .returning(['id', 'balance_micros', 'created_at']),
  );
}

describe('typed SQL through the Prisma client', () => {
  it('bigint and Date parameters reach BIGINT and timestamptz columns and come back as bigint and Date', async () => {
    const big = 9_007_199_254_740_993n; // past Number.MAX_SAFE_INTEGER: a number would lose it
    const [row] = await insertAccount('acct_sql_1', big);
    expect(row).toEqual({ id: 'acct_sql_1', balance_micros: big, created_at: at });
    expect(typeof row!.balance_micros).toBe('bigint');
    expect(row!.created_at).toBeInstanceOf(Date);
    const [neg] = await rows(db, k.selectFrom('accounts').select('balance_micros').where('balance_micros', '=', -big));
    expect(neg).toBeUndefined();
    const later = await rows(
      db,
      k
        .selectFrom('accounts')
        .select('id')
        .where('created_at', '<', new Date(at.getTime() + 1)),
    );
    expect(later.map((r) => r.id)).toEqual(['acct_sql_1']);
  });

  it('a text[] parameter for ANY(), json given as text (::jsonb) or as an object, and bytea from a Buffer', async () => {
    await insertAccount('acct_sql_2', 0n);
    const found = await rows(
      db,
      k
        .selectFrom('accounts')
        .select('id')
        .where('id', '=', sql<string>`ANY(${['acct_sql_1', 'acct_sql_2', 'nope']}::text[])`)
        .orderBy('id'),
    );
    expect(found.map((r) => r.id)).toEqual(['acct_sql_1', 'acct_sql_2']);

    const data = { message_id: 'msg_1', nested: { n: 1, list: ['a', "it's"] } };
    await exec(
      db,
      k.insertInto('events').values({
        id: 'evt_sql_1',
        account_id: 'acct_sql_2',
        seq: 1,
        type: 'test.text',
        data: sql`${JSON.stringify(data)}::jsonb`,
        created_at: at,
        prev_hash: '0',
        hash: '1',
      }),
    );
    await exec(
      db,
      k
        .insertInto('events')
        .values({ id: 'evt_sql_2', account_id: 'acct_sql_2', seq: 2, type: 'test.object', data, created_at: at, prev_hash: '1', hash: '2' }),
    );
    const events = await rows(
      db,
      k
        .selectFrom('events')
        .select(['id', 'data', sql<string>`data->>'message_id'`.as('message_id')])
        .orderBy('seq'),
    );
    expect(events).toEqual([
      { id: 'evt_sql_1', data, message_id: 'msg_1' },
      { id: 'evt_sql_2', data, message_id: 'msg_1' },
    ]);

    const bytes = randomBytes(300);
    const [b] = await rows(db, sql<{ b: Uint8Array; n: number }>`SELECT ${bytes}::bytea AS b, octet_length(${bytes}::bytea) AS n`);
    expect(Buffer.from(b!.b).equals(bytes)).toBe(true);
    expect(b!.n).toBe(300);
  });

  it('poolRows reads the same values as rows: bigint, Date, json, text[] parameters; a statement compiled once with its own placeholders', async () => {
    const statement = k
      .selectFrom('accounts as a')
      .select(['a.id', 'a.balance_micros', 'a.created_at', 'a.free_messages_left'])
      .select(sql<{ n: number }[] | null>`(SELECT json_agg(json_build_object('n', e.seq)) FROM events e WHERE e.account_id = a.id)`.as('events'))
      .where('a.id', '=', sql<string>`ANY(${['acct_sql_1', 'acct_sql_2']}::text[])`)
      .orderBy('a.id');
    const viaPool = await poolRows(db, statement);
    expect(viaPool).toEqual(await rows(db, statement));
    expect(viaPool.map((r) => typeof r.balance_micros)).toEqual(['bigint', 'bigint']);
    expect(viaPool[0]!.balance_micros).toBe(9_007_199_254_740_993n);
    expect(viaPool[0]!.created_at).toEqual(at);
    expect(viaPool[1]!.events).toEqual([{ n: 1 }, { n: 2 }]);
    const once = k.selectFrom('accounts').select('id').where('id', '=', sql.raw<string>('$1')).compile();
    expect(once.parameters).toEqual([]);
    expect((await poolRows<{ id: string }>(db, { ...once, parameters: ['acct_sql_2'] })).map((r) => r.id)).toEqual(['acct_sql_2']);
  });

  it('col() and table() name checked columns in sql templates; compile() shows the text and parameters', async () => {
    const statement = sql<{ id: string; seq: number }>`SELECT ${col('events', 'id', 'e')}, ${col('events', 'seq', 'e')} FROM ${table('events')} e
      WHERE ${col('events', 'account_id', 'e')} = ${'acct_sql_2'} ORDER BY ${col('events', 'seq', null)} DESC`;
    expect(compile(statement).sql.replace(/\s+/g, ' ')).toBe('SELECT "e"."id", "e"."seq" FROM "events" e WHERE "e"."account_id" = $1 ORDER BY "seq" DESC');
    expect(compile(statement).parameters).toEqual(['acct_sql_2']);
    const e = tbl('events', 'e');
    const a = tbl('accounts');
    const joined = sql<{
      seq: number;
      human_email: string;
    }>`SELECT ${e.seq}, ${a.human_email} FROM ${e.$} JOIN ${a.$} ON ${col('accounts', 'id')} = ${e.account_id}
      WHERE ${e.type} = ${'test.object'}`;
    expect(compile(joined).sql.replace(/\s+/g, ' ')).toBe(
      'SELECT "e"."seq", "human_email" FROM "events" AS "e" JOIN "accounts" ON "accounts"."id" = "e"."account_id" WHERE "e"."type" = $1',
    );
    expect(await rows(db, joined)).toEqual([{ seq: 2, human_email: 'acct_sql_2@example.com' }]);
    expect(await rows(db, statement)).toEqual([
      { id: 'evt_sql_2', seq: 2 },
      { id: 'evt_sql_1', seq: 1 },
    ]);
  });

  it('runs inside an interactive transaction: FOR UPDATE holds the row, exec counts rows, a throw rolls back', async () => {
    await expect(
      db.$transaction(async (tx) => {
        const [locked] = await rows(tx, k.selectFrom('accounts').select('balance_micros').where('id', '=', 'acct_sql_2').forUpdate());
        expect(locked).toEqual({ balance_micros: 0n });
        const n = await exec(
          tx,
          k
            .updateTable('accounts')
            .set({ balance_micros: sql`balance_micros + ${5n}` })
            .where('id', '=', 'acct_sql_2'),
        );
        expect(n).toBe(1);
        const [seen] = await rows(tx, k.selectFrom('accounts').select('balance_micros').where('id', '=', 'acct_sql_2'));
        expect(seen).toEqual({ balance_micros: 5n });
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    const [after] = await rows(db, k.selectFrom('accounts').select('balance_micros').where('id', '=', 'acct_sql_2'));
    expect(after).toEqual({ balance_micros: 0n });
  });
});
