/**
 * Typed SQL: statements written with Kysely against the tables of prisma/schema.prisma, run through Prisma.
 *
 * Where the types come from: `prisma-kysely`, a second generator in prisma/schema.prisma, writes
 * packages/db/src/generated-kysely/types.ts on every `prisma generate` (so on install, beside the client, and
 * not committed). It was chosen over kysely-codegen because it reads the same schema.prisma as the client, needs
 * neither a database nor the schema engine (generate runs with PRISMA_SCHEMA_ENGINE_BINARY=/bin/false), and so
 * cannot drift from the client: there is no committed copy to keep equal. Tables are their @@map names and
 * columns their @map names, as SQL sees them; values are typed as Prisma's raw queries return them (bigint for
 * BIGINT, Date for timestamps, Uint8Array for bytea, unknown for json/jsonb).
 *
 * How statements run: `k` below is a Kysely that only compiles (its driver is a DummyDriver); `rows()` and
 * `exec()` hand the compiled text and parameters to any DbClient (the Prisma client or an interactive
 * transaction) as $queryRawUnsafe / $executeRawUnsafe, so one statement is still one round trip on the same
 * connection and transaction. A renamed or dropped column is a compile error in every statement that names it.
 *
 * What the builder does not express reads as Kysely's `sql` template; table and column names in it go through
 * `tbl()` (or `col()` / `table()`) here, which tsc checks against the schema (plain `sql.ref('...')` strings are
 * not checked):
 *
 *   const a = tbl('accounts', 'a');
 *   sql<{ id: string }>`SELECT ${a.id} FROM ${a.$} WHERE ${a.chain_seq} > ${seq}`
 */
import {
  type Compilable,
  type CompiledQuery,
  DummyDriver,
  Kysely,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  type RawBuilder,
  type SelectType,
  sql,
} from 'kysely';
import pg from 'pg';
import { type Db, type DbClient, poolOf } from './client';
import type { DB } from './generated-kysely/types';

export type { DB } from './generated-kysely/types';
export { sql };

/** Compiles statements for PostgreSQL; it never connects (DbClient runs them). */
export const k = new Kysely<DB>({
  dialect: {
    createAdapter: () => new PostgresAdapter(),
    createDriver: () => new DummyDriver(),
    createIntrospector: (db) => new PostgresIntrospector(db),
    createQueryCompiler: () => new PostgresQueryCompiler(),
  },
});

/** A statement: a query builder, an `sql` template, or an already compiled query. */
export type Statement<R> = Compilable<R> | RawBuilder<R> | CompiledQuery<R>;

/** The compiled text and parameters of a statement (`sql` templates compile against `k`). */
export function compile<R>(statement: Statement<R>): CompiledQuery<R> {
  if ('sql' in statement && 'parameters' in statement) return statement;
  return (statement as RawBuilder<R>).compile(k);
}

/** Runs a statement that answers rows (SELECT, or a write with RETURNING) on db; rows are typed by the statement. */
export async function rows<R>(db: DbClient, statement: Statement<R>): Promise<R[]> {
  const c = compile(statement);
  return db.$queryRawUnsafe<R[]>(c.sql, ...c.parameters);
}

/** pg's parsers, with BIGINT read as bigint (as Prisma's raw queries read it) rather than as a string. */
const POOL_TYPES = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === pg.types.builtins.INT8 ? (v: string) => BigInt(v) : pg.types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser,
};

/**
 * Runs a statement that answers rows straight on the pg pool under db, outside Prisma's client and outside any
 * transaction: for a hot statement run on its own many times a second (the MX's recipient lookup, one per RCPT),
 * where Prisma's client spends about three times the CPU of the statement's own client side (0.13 to 0.20 ms a
 * statement against 0.03 to 0.05 ms on the 2-core bench machine). Rows come back as pg reads them, BIGINT as
 * bigint: the same values as rows() for text, integers, booleans, timestamptz and json columns (not for numeric
 * or timestamp without time zone, which the two read differently). Without a pool of ours (a client made
 * elsewhere), it is rows().
 */
export async function poolRows<R>(db: Db, statement: Statement<R>): Promise<R[]> {
  const pool = poolOf(db);
  if (!pool) return rows(db, statement);
  const c = compile(statement);
  const result = await pool.query({ text: c.sql, values: c.parameters as unknown[], types: POOL_TYPES });
  return result.rows as R[];
}

/** Runs a write without RETURNING on db; answers the number of rows it affected. */
export async function exec(db: DbClient, statement: Statement<unknown>): Promise<number> {
  const c = compile(statement);
  return db.$executeRawUnsafe(c.sql, ...c.parameters);
}

export type Table = keyof DB & string;
export type Column<T extends Table> = keyof DB[T] & string;

/** A table's name for an `sql` template, checked against the schema: sql`... FROM ${table('accounts')} a`. */
export function table<T extends Table>(name: T): RawBuilder<unknown> {
  return sql.table(name);
}

/**
 * A column for an `sql` template, checked against the schema, typed as it reads. With `as`, the reference is
 * qualified by that alias (FROM accounts a: col('accounts', 'chain_seq', 'a') is a.chain_seq); without, by the
 * table's name; with as = null, unqualified.
 */
export function col<T extends Table, C extends Column<T>>(tableName: T, column: C, as?: string | null): RawBuilder<SelectType<DB[T][C]>> {
  const q = as === null ? '' : `${as ?? tableName}.`;
  return sql.ref(`${q}${column}`);
}

/** A table under an alias in an `sql` template: `$` is `table AS alias` (or the bare table), each column its reference. */
export type TableRefs<T extends Table> = { readonly $: RawBuilder<unknown> } & { readonly [C in Column<T>]: RawBuilder<SelectType<DB[T][C]>> };

/**
 * Checked references to one table for `sql` templates: tbl('accounts', 'a').$ is `"accounts" AS "a"` and
 * .chain_seq is `"a"."chain_seq"`; without an alias, `$` is `"accounts"` and the columns are unqualified (for
 * statements on one table, and the target columns of INSERT and UPDATE ... SET).
 */
export function tbl<T extends Table>(name: T, as?: string): TableRefs<T> {
  return new Proxy({} as TableRefs<T>, {
    get(_, prop) {
      // Not a thenable (no column is named then), so a TableRefs passed where a promise may be is not mistaken for one.
      if (typeof prop !== 'string' || prop === 'then') return undefined;
      if (prop === '$') return as ? sql`${sql.table(name)} AS ${sql.id(as)}` : sql.table(name);
      return sql.ref(as ? `${as}.${prop}` : prop);
    },
  });
}
