/**
 * poolTransaction (sql.ts) against a real, migrated PostgreSQL: a transaction on one pg connection of the pool
 * commits, rolls back on an error, reads values as rows() reads them through Prisma, drops a connection that
 * broke mid-transaction from the pool, sends a last statement with its COMMIT (commitWithNext), and runs the whole
 * function again in Prisma's $transaction when asked to.
 */
import net from 'node:net';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { closeDb, createDb, poolOf, type Db } from './client';
import {
  beginTransaction,
  commitWithNext,
  exec,
  k,
  poolRows,
  poolTransaction,
  prepared,
  PrismaTransactionNeeded,
  prismaTx,
  rows,
  sql,
  type SqlClient,
} from './sql';
import { admin, templateDatabase, urlOf } from './template-database';

let db: Db;
templateDatabase('pooltx', (d) => {
  db = d;
});

const at = new Date('2026-03-04T05:06:07.891Z');

const insertAccount = (c: SqlClient, id: string, balance: bigint) =>
  exec(
    c,
    k
      .insertInto('accounts')
      .values({ id, human_email: `${id}@example.com`, primary_address: `agent@${id}.example`, balance_micros: balance, created_at: at, updated_at: at }),
  );

const accountIds = async (prefix: string) =>
  (await rows(db, k.selectFrom('accounts').select('id').where('id', 'like', `${prefix}%`).orderBy('id'))).map((r) => r.id);

describe('poolTransaction', () => {
  it('commits what fn wrote and answers what fn answers; statements see each other inside it', async () => {
    const out = await poolTransaction(db, async (c) => {
      await insertAccount(c, 'acct_ptx_c1', 5n);
      await insertAccount(c, 'acct_ptx_c2', 7n);
      const [sum] = await rows(c, sql<{ n: bigint }>`SELECT count(*) AS n FROM accounts WHERE id LIKE 'acct_ptx_c%'`);
      return sum!.n;
    });
    expect(out).toBe(2n);
    expect(await accountIds('acct_ptx_c')).toEqual(['acct_ptx_c1', 'acct_ptx_c2']);
  });

  it('rolls back on an error and rethrows it; the connection goes back to the pool whole', async () => {
    const boom = new Error('boom');
    await expect(
      poolTransaction(db, async (c) => {
        await insertAccount(c, 'acct_ptx_r1', 1n);
        throw boom;
      }),
    ).rejects.toBe(boom);
    // A failing statement (duplicate key) rolls back the writes before it.
    await insertAccount(db, 'acct_ptx_r2', 1n);
    await expect(
      poolTransaction(db, async (c) => {
        await insertAccount(c, 'acct_ptx_r3', 1n);
        await insertAccount(c, 'acct_ptx_r2', 1n);
      }),
    ).rejects.toThrow(/duplicate key/);
    expect(await accountIds('acct_ptx_r')).toEqual(['acct_ptx_r2']);
    // A statement error caught inside fn: COMMIT would only roll back, so the call fails instead of answering.
    await expect(
      poolTransaction(db, async (c) => {
        await insertAccount(c, 'acct_ptx_r4', 1n);
        await insertAccount(c, 'acct_ptx_r2', 1n).catch(() => undefined);
        return 'done';
      }),
    ).rejects.toThrow(/aborted/);
    expect(await accountIds('acct_ptx_r')).toEqual(['acct_ptx_r2']);
    expect(await poolTransaction(db, async (c) => (await rows(c, sql<{ one: number }>`SELECT 1 AS one`))[0]!.one)).toBe(1);
  });

  it('reads values as rows() through Prisma does: bigint, int, text[], json, bytea, date, timestamptz, null', async () => {
    const statement = sql<Record<string, unknown>>`SELECT ${9_007_199_254_740_993n}::bigint AS big, count(*) AS n, 42 AS i, ${['a', 'b']}::text[] AS arr,
      ${JSON.stringify({ x: [1, 'y'] })}::jsonb AS j, json_build_object('at', ${at}::timestamptz) AS js, decode('0102ff', 'hex') AS b,
      DATE '2026-03-04' AS d, ${at}::timestamptz AS t, NULL::text AS nothing, true AS yes`;
    const viaPool = await poolTransaction(db, (c) => rows(c, statement));
    const viaPrisma = await rows(db, statement);
    expect(viaPool).toEqual(viaPrisma);
    const [r] = viaPool;
    expect(r).toMatchObject({ big: 9_007_199_254_740_993n, n: 1n, i: 42, arr: ['a', 'b'], j: { x: [1, 'y'] }, nothing: null, yes: true });
    expect(r!.t).toEqual(at);
    expect(r!.d).toEqual(new Date('2026-03-04T00:00:00Z'));
    expect([...(r!.b as Uint8Array)]).toEqual([1, 2, 255]);
  });

  it('a connection that breaks mid-transaction fails fn and is dropped from the pool; the next transaction runs', async () => {
    const pool = poolOf(db)!;
    await expect(
      poolTransaction(db, async (c) => {
        await insertAccount(c, 'acct_ptx_b1', 1n);
        const [me] = await rows(c, sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`);
        await admin((a) => a.query('SELECT pg_terminate_backend($1)', [me!.pid]));
        await insertAccount(c, 'acct_ptx_b2', 1n);
      }),
    ).rejects.toThrow();
    // The broken client is not idle in the pool: the next statements get a live connection.
    expect(pool.totalCount).toBe(pool.idleCount);
    await poolTransaction(db, (c) => insertAccount(c, 'acct_ptx_b3', 1n));
    expect(await accountIds('acct_ptx_b')).toEqual(['acct_ptx_b3']);
  });

  it('BEGIN goes with a first statement of ids: quotes, backslashes, commas and braces stay in the values; it is rolled back too', async () => {
    await insertAccount(db, 'acct_ptx_i1', 1n);
    const odd = ["o'brien", 'back\\slash', 'a,b', '{c}', 'q"uote', ''];
    const first = sql<{ ids: string[]; one: string; many: string[] }>`SELECT array_agg(id ORDER BY id) AS ids, ${odd[0]}::text AS one, ${odd}::text[] AS many
      FROM accounts WHERE id = ANY(${['acct_ptx_i1', 'acct_ptx_i2']}::text[])`;
    const [r] = await poolTransaction(db, (c) => rows(c, first));
    expect(r).toEqual({ ids: ['acct_ptx_i1'], one: "o'brien", many: odd });
    // A write as the first statement is inside the transaction: the throw after it rolls it back.
    await expect(
      poolTransaction(db, async (c) => {
        await exec(c, sql`UPDATE accounts SET human_email = ${'changed@example.com'} WHERE id = ANY(${['acct_ptx_i1']}::text[])`);
        throw new Error('after the first statement');
      }),
    ).rejects.toThrow('after the first statement');
    const [after] = await rows(db, sql<{ human_email: string }>`SELECT human_email FROM accounts WHERE id = 'acct_ptx_i1'`);
    expect(after!.human_email).toBe('acct_ptx_i1@example.com');
    // A first statement with other parameters (bigint) or a literal in its text runs after a BEGIN of its own.
    const [n] = await poolTransaction(db, (c) => rows(c, sql<{ n: bigint; s: string }>`SELECT ${5n}::bigint + 1 AS n, 'x' AS s`));
    expect(n).toEqual({ n: 6n, s: 'x' });
    // A placeholder's text inside a quoted identifier stays the identifier's (the statement keeps its parameters).
    const [named] = await poolTransaction(db, (c) =>
      rows(c, sql<Record<string, string>>`SELECT ${'v'}::text AS "col$1", id AS "$1" FROM accounts WHERE id = ${'acct_ptx_i1'}`),
    );
    expect(named).toEqual({ col$1: 'v', $1: 'acct_ptx_i1' });
    // No statement at all: nothing to commit.
    expect(await poolTransaction(db, async () => 'nothing')).toBe('nothing');
  });

  it('beginTransaction begins before the first statement: what follows is in the transaction, and a second call does nothing', async () => {
    await insertAccount(db, 'acct_ptx_b1', 1n);
    await expect(
      poolTransaction(db, async (c) => {
        await Promise.all([beginTransaction(c), rows(db, sql`SELECT 1`)]);
        await beginTransaction(c);
        // Sent without a BEGIN of its own: rolled back below only because the transaction had begun.
        await exec(c, sql`UPDATE accounts SET human_email = ${'changed@example.com'} WHERE id = ${'acct_ptx_b1'}`);
        throw new Error('after the write');
      }),
    ).rejects.toThrow('after the write');
    const [after] = await rows(db, sql<{ human_email: string }>`SELECT human_email FROM accounts WHERE id = 'acct_ptx_b1'`);
    expect(after!.human_email).toBe('acct_ptx_b1@example.com');
    // Committed as any other; in Prisma's transaction it does nothing.
    await poolTransaction(db, async (c) => {
      await beginTransaction(c);
      await exec(c, sql`UPDATE accounts SET balance_micros = 2 WHERE id = ${'acct_ptx_b1'}`);
    });
    await db.$transaction(async (tx) => {
      await beginTransaction(tx);
      await exec(tx, sql`UPDATE accounts SET balance_micros = balance_micros + 1 WHERE id = ${'acct_ptx_b1'}`);
    });
    const [bal] = await rows(db, sql<{ balance_micros: bigint }>`SELECT balance_micros FROM accounts WHERE id = 'acct_ptx_b1'`);
    expect(bal!.balance_micros).toBe(3n);
  });

  it('commitWithNext: the next statement goes out with COMMIT behind it, before its answer; then the transaction is over', async () => {
    // What the pg clients send and when each query's answer ends (its ReadyForQuery), in order.
    const seen: string[] = [];
    const proto = pg.Query.prototype as unknown as { submit: (...a: unknown[]) => unknown; handleReadyForQuery: (...a: unknown[]) => unknown; text?: string };
    const { submit, handleReadyForQuery } = proto;
    // The socket of the transaction's connection, known once the statement is handed to it (submit(connection)).
    let txSocket: unknown = null;
    proto.submit = function (this: { text?: string }, ...args: unknown[]) {
      seen.push(`sent ${this.text}`);
      if (this.text?.startsWith('UPDATE accounts SET balance_micros = 5')) txSocket = (args[0] as { stream: unknown }).stream;
      return submit.apply(this, args);
    };
    proto.handleReadyForQuery = function (this: { text?: string }, ...args: unknown[]) {
      seen.push(`answered ${this.text}`);
      return handleReadyForQuery.apply(this, args);
    };
    // And each write to that socket (no other's): the statement and its COMMIT reach it in one (one wake-up of the server).
    const socket = net.Socket.prototype as unknown as { _write: (...a: unknown[]) => unknown; _writev: (...a: unknown[]) => unknown };
    const { _write, _writev } = socket;
    socket._write = function (this: unknown, ...args: unknown[]) {
      if (this === txSocket) seen.push('write');
      return _write.apply(this, args);
    };
    socket._writev = function (this: unknown, ...args: unknown[]) {
      if (this === txSocket) seen.push('write');
      return _writev.apply(this, args);
    };
    const slow = sql`UPDATE accounts SET balance_micros = 5 FROM pg_sleep(0.05) WHERE id = ${'acct_ptx_w1'}`;
    try {
      await poolTransaction(db, async (c) => {
        await insertAccount(c, 'acct_ptx_w1', 1n);
        commitWithNext(c);
        await exec(c, slow);
        await expect(exec(c, sql`SELECT 1`)).rejects.toThrow(/after the transaction ended/);
      });
    } finally {
      proto.submit = submit;
      proto.handleReadyForQuery = handleReadyForQuery;
      socket._write = _write;
      socket._writev = _writev;
    }
    // The COMMIT went out before the statement ahead of it was answered, in the same write, and no other COMMIT followed.
    const text = seen.find((e) => e.startsWith('sent UPDATE accounts SET balance_micros = 5'))!.slice('sent '.length);
    expect(seen.slice(seen.indexOf(`sent ${text}`))).toEqual([`sent ${text}`, 'sent COMMIT', 'write', `answered ${text}`, 'answered COMMIT']);
    const [a] = await rows(db, sql<{ balance_micros: bigint }>`SELECT balance_micros FROM accounts WHERE id = 'acct_ptx_w1'`);
    expect(a!.balance_micros).toBe(5n);

    // A statement that fails takes everything before it with it; the error is its own and the connection is whole.
    await expect(
      poolTransaction(db, async (c) => {
        await insertAccount(c, 'acct_ptx_w2', 1n);
        commitWithNext(c);
        await insertAccount(c, 'acct_ptx_w1', 1n);
      }),
    ).rejects.toThrow(/duplicate key/);
    expect(await accountIds('acct_ptx_w')).toEqual(['acct_ptx_w1']);
    const pool = poolOf(db)!;
    expect(pool.totalCount).toBe(pool.idleCount);
    for (let i = 0; i < pool.totalCount + 1; i++)
      expect(await poolTransaction(db, async (c) => (await rows(c, sql<{ one: number }>`SELECT 1 AS one`))[0]!.one)).toBe(1);
    // Its error caught inside fn, the call still fails, as with any failed statement: nothing was committed.
    await expect(
      poolTransaction(db, async (c) => {
        await insertAccount(c, 'acct_ptx_w8', 1n);
        commitWithNext(c);
        await insertAccount(c, 'acct_ptx_w1', 1n).catch(() => undefined);
        return 'done';
      }),
    ).rejects.toThrow(/aborted/);
    expect(await accountIds('acct_ptx_w')).toEqual(['acct_ptx_w1']);
    // A value pg cannot send throws before anything goes out: the writes before it are rolled back.
    const circular: { toPostgres(): unknown } = { toPostgres: () => circular };
    await expect(
      poolTransaction(db, async (c) => {
        await insertAccount(c, 'acct_ptx_w7', 1n);
        commitWithNext(c);
        await exec(c, sql`UPDATE accounts SET human_email = ${circular as unknown as string} WHERE id = ${'acct_ptx_w7'}`);
      }),
    ).rejects.toThrow(/circular/);
    expect(await accountIds('acct_ptx_w')).toEqual(['acct_ptx_w1']);
    // Before any statement, or in Prisma's transaction, it changes nothing: COMMIT comes as usual.
    await poolTransaction(db, async (c) => {
      commitWithNext(c);
      await insertAccount(c, 'acct_ptx_w3', 1n);
      await insertAccount(c, 'acct_ptx_w4', 1n);
    });
    await db.$transaction(async (tx) => {
      commitWithNext(tx);
      await insertAccount(tx, 'acct_ptx_w5', 1n);
      await insertAccount(tx, 'acct_ptx_w6', 1n);
    });
    expect(await accountIds('acct_ptx_w')).toEqual(['acct_ptx_w1', 'acct_ptx_w3', 'acct_ptx_w4', 'acct_ptx_w5', 'acct_ptx_w6']);
  });

  it('a transaction past options.timeout is rolled back, as Prisma does: no statement after it expires, no COMMIT', async () => {
    // A statement running past the timeout is cancelled (statement_timeout, set with the BEGIN): one of 30 s in a
    // transaction of 100 ms ends within a few seconds (before, it ran its 30 s).
    const started = performance.now();
    await expect(
      poolTransaction(
        db,
        async (c) => {
          await insertAccount(c, 'acct_ptx_t1', 1n);
          await rows(c, sql`SELECT pg_sleep(${30}::float8)`);
        },
        { timeout: 100 },
      ),
    ).rejects.toThrow(/statement timeout/);
    expect(performance.now() - started).toBeLessThan(10_000);
    await expect(
      poolTransaction(
        db,
        async (c) => {
          await insertAccount(c, 'acct_ptx_t2', 1n);
          await new Promise((r) => setTimeout(r, 150));
          await insertAccount(c, 'acct_ptx_t3', 1n);
        },
        { timeout: 100 },
      ),
    ).rejects.toThrow(/expired/);
    expect(await accountIds('acct_ptx_t')).toEqual([]);
    await poolTransaction(db, (c) => insertAccount(c, 'acct_ptx_t4', 1n), { timeout: 10_000 });
    expect(await accountIds('acct_ptx_t')).toEqual(['acct_ptx_t4']);
  });

  it('a statement waiting on a lock at the timeout is cancelled: the transaction ends, rolled back, and the pool stays whole', async () => {
    const pool = poolOf(db)!;
    // Waiting on a lock another connection holds: the first statement (BEGIN in its round trip) and one after it.
    await insertAccount(db, 'acct_ptx_x2', 5n);
    const [here] = await rows(db, sql<{ name: string }>`SELECT current_database() AS name`);
    const holder = new pg.Client({ connectionString: urlOf(here!.name) });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT id FROM accounts WHERE id = 'acct_ptx_x2' FOR UPDATE`);
      await expect(
        poolTransaction(db, (c) => rows(c, sql`SELECT id FROM accounts WHERE id = ANY(${['acct_ptx_x2']}::text[]) FOR UPDATE`), { timeout: 300 }),
      ).rejects.toThrow(/statement timeout/);
      await expect(
        poolTransaction(
          db,
          async (c) => {
            await insertAccount(c, 'acct_ptx_x3', 1n);
            await exec(c, sql`UPDATE accounts SET balance_micros = balance_micros + ${1n} WHERE id = ${'acct_ptx_x2'}`);
          },
          { timeout: 300 },
        ),
      ).rejects.toThrow(/statement timeout/);
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      await holder.end();
    }
    expect(await accountIds('acct_ptx_x')).toEqual(['acct_ptx_x2']);
    const [row] = await rows(db, sql<{ balance_micros: bigint }>`SELECT balance_micros FROM accounts WHERE id = 'acct_ptx_x2'`);
    expect(row!.balance_micros).toBe(5n);
    // The connections went back to the pool, usable; the timeout was the transactions' own (none is left set).
    expect(pool.totalCount).toBe(pool.idleCount);
    const [t] = await poolRows(db, sql<{ t: string }>`SELECT current_setting('statement_timeout') AS t`);
    expect(t!.t).toBe('0');
    await poolTransaction(db, (c) => insertAccount(c, 'acct_ptx_x4', 1n), { timeout: 10_000 });
    expect(await accountIds('acct_ptx_x')).toEqual(['acct_ptx_x2', 'acct_ptx_x4']);
  });

  it('a prepared() text runs as a named prepared statement on the connection, parsed once, the same rows; it survives a rollback', async () => {
    await poolTransaction(db, (c) => insertAccount(c, 'acct_ptx_n1', 7n));
    const byId = prepared(k.selectFrom('accounts').select(['id', 'balance_micros']).where('id', '=', sql.raw<string>('$1')));
    const named = sql<{ name: string; statement: string }>`SELECT name, statement FROM pg_prepared_statements WHERE name LIKE 'boxes\_%'`;
    const seen = await poolTransaction(db, async (c) => {
      const first = await rows(c, { ...byId, parameters: ['acct_ptx_n1'] });
      const second = await rows(c, { ...byId, parameters: ['acct_ptx_n1'] });
      expect(first).toEqual([{ id: 'acct_ptx_n1', balance_micros: 7n }]);
      expect(second).toEqual(first);
      return rows(c, named);
    });
    expect(seen.filter((s) => s.statement === byId.sql)).toHaveLength(1);
    // Prepared statements outlive the transaction that made them, rolled back or not: the same text runs again.
    await expect(
      poolTransaction(db, async (c) => {
        await rows(c, { ...byId, parameters: ['acct_ptx_n1'] });
        throw new Error('undone');
      }),
    ).rejects.toThrow('undone');
    expect(await poolRows(db, { ...byId, parameters: ['acct_ptx_n1'] })).toEqual([{ id: 'acct_ptx_n1', balance_micros: 7n }]);
    // Outside the pool (Prisma's client) the same statement runs as any other.
    expect(await rows(db, { ...byId, parameters: ['acct_ptx_n1'] })).toEqual([{ id: 'acct_ptx_n1', balance_micros: 7n }]);
    // A pool made without namedStatements (one that may sit behind a transaction pooler) names nothing.
    const plain = createDb(poolOf(db)!.options.connectionString!, { max: 1 });
    try {
      const names = await poolTransaction(plain, async (c) => {
        await rows(c, sql`SELECT 1 AS one`);
        expect(await rows(c, { ...byId, parameters: ['acct_ptx_n1'] })).toEqual([{ id: 'acct_ptx_n1', balance_micros: 7n }]);
        return rows(c, named);
      });
      expect(names).toEqual([]);
    } finally {
      await closeDb(plain);
    }
  });

  it('a named statement the server does not know (a pooler between) turns naming off; one a migration made stale gets a new name', async () => {
    const one = createDb(poolOf(db)!.options.connectionString!, { max: 1, namedStatements: true });
    const pool = poolOf(one)!;
    try {
      await exec(one, sql`CREATE TABLE IF NOT EXISTS ptx_prepared (id text PRIMARY KEY, v integer NOT NULL)`);
      await exec(one, sql`INSERT INTO ptx_prepared VALUES ('a', 1) ON CONFLICT (id) DO UPDATE SET v = 1`);
      const read = prepared(sql<{ v: number }>`SELECT v FROM ptx_prepared WHERE id = ${'a'}`);
      const name = async () => (await poolRows(one, sql<{ name: string }>`SELECT name FROM pg_prepared_statements WHERE statement = ${read.sql}`))[0]?.name;
      expect(await poolRows(one, read)).toEqual([{ v: 1 }]);
      const first = await name();
      expect(first).toMatch(/^boxes_\d+$/);
      // A migration changes the type the statement reads: the next run is refused as a stale plan, then runs again
      // under a new name, in poolRows and (after its transaction is lost) in the next transaction.
      await exec(one, sql`ALTER TABLE ptx_prepared ALTER COLUMN v TYPE bigint`);
      expect(await poolRows(one, read)).toEqual([{ v: 1n }]);
      const second = await name();
      expect(second).toMatch(/^boxes_\d+$/);
      expect(second).not.toBe(first);
      // The server forgets the statement while the client believes it parsed (what a transaction pooler does when
      // the next Bind reaches another server connection): the pool stops naming and the statement runs unnamed.
      await exec(one, sql.raw(`DEALLOCATE ${second}`));
      expect(await poolRows(one, read)).toEqual([{ v: 1n }]);
      expect(await poolTransaction(one, (c) => rows(c, read))).toEqual([{ v: 1n }]);
      expect(await name()).toBeUndefined();
    } finally {
      await exec(one, sql`DROP TABLE IF EXISTS ptx_prepared`);
      await closeDb(one);
    }
  });

  it('PrismaTransactionNeeded rolls back and runs fn again in a Prisma transaction, where prismaTx answers it', async () => {
    const clients: string[] = [];
    const out = await poolTransaction(db, async (c) => {
      await insertAccount(c, `acct_ptx_p${clients.length}`, 1n);
      clients.push(c instanceof Object && 'account' in c ? 'prisma' : 'pool');
      const tx = prismaTx(c, 'a model call');
      return (await tx.account.findUniqueOrThrow({ where: { id: 'acct_ptx_p1' }, select: { balanceMicros: true } })).balanceMicros;
    });
    expect(out).toBe(1n);
    expect(clients).toEqual(['pool', 'prisma']);
    // The pool attempt's insert (acct_ptx_p0) was rolled back.
    expect(await accountIds('acct_ptx_p')).toEqual(['acct_ptx_p1']);
    expect(() => prismaTx(db, 'x')).not.toThrow();
    expect(new PrismaTransactionNeeded('x')).toBeInstanceOf(Error);
  });
});
