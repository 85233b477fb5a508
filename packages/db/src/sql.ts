/**
 * Typed SQL: statements written with Kysely against the tables of prisma/schema.prisma, run through Prisma's
 * client, or on the pg pool under it for the hot paths (poolRows, poolTransaction).
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
 * `exec()` hand the compiled text and parameters to any SqlClient (the Prisma client, an interactive
 * transaction, or a poolTransaction's connection) as $queryRawUnsafe / $executeRawUnsafe, so one statement is
 * still one round trip on the same connection and transaction. A renamed or dropped column is a compile error in every statement that names it.
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
import { type Db, namesStatements, poolOf, stopNamingStatements, type Tx } from './client';
import type { DB } from './generated-kysely/types';

export type { DB } from './generated-kysely/types';
export { sql };

/** Compiles statements for PostgreSQL; it never connects (an SqlClient runs them). */
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

/**
 * What rows() and exec() need of a client: the Prisma client, an interactive transaction, or a transaction on
 * a pg connection of the pool (poolTransaction).
 */
export interface SqlClient {
  // biome-ignore lint/suspicious/noExplicitAny: the parameters' types as Prisma's own signatures give them
  $queryRawUnsafe<T = unknown>(query: string, ...values: any[]): Promise<T>;
  // biome-ignore lint/suspicious/noExplicitAny: as above
  $executeRawUnsafe(query: string, ...values: any[]): Promise<number>;
}

/** Runs a statement that answers rows (SELECT, or a write with RETURNING) on db; rows are typed by the statement. */
export async function rows<R>(db: SqlClient, statement: Statement<R>): Promise<R[]> {
  const c = compile(statement);
  return db.$queryRawUnsafe<R[]>(c.sql, ...c.parameters);
}

/**
 * pg's parsers, with BIGINT read as bigint, DATE as the Date of that day at midnight UTC and BYTEA as a
 * Uint8Array of its own memory (as Prisma's raw queries read them) rather than as a string, local midnight and
 * a Buffer that may be a slice of Node's shared pool. Scalars only: arrays of those types (int8[], date[],
 * bytea[]) still read as pg reads them (strings, Buffers), which no pooled statement selects.
 */
const POOL_TYPES = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') => {
    if (oid === pg.types.builtins.INT8) return (v: string) => BigInt(v);
    if (oid === pg.types.builtins.DATE) return (v: string) => new Date(`${v}T00:00:00Z`);
    if (oid === pg.types.builtins.BYTEA) {
      const parse = pg.types.getTypeParser(oid, format) as (v: string) => Buffer;
      return (v: string) => new Uint8Array(parse(v));
    }
    return pg.types.getTypeParser(oid, format);
  }) as typeof pg.types.getTypeParser,
};

/**
 * Runs a statement that answers rows straight on the pg pool under db, outside Prisma's client and outside any
 * transaction: for a hot statement run on its own many times a second (the MX's recipient lookup, one per RCPT),
 * where Prisma's client spends about three times the CPU of the statement's own client side (0.13 to 0.20 ms a
 * statement against 0.03 to 0.05 ms on the 2-core bench machine). Rows come back as pg reads them with the
 * parsers above: the same values as rows() for text, integers, bigint, booleans, bytea, date, timestamptz and
 * json columns (not for numeric, which Prisma reads as a Decimal, nor timestamp without time zone: the schema
 * has neither). Without a pool of ours (a client made elsewhere, or a transaction's client: its statements must
 * run on the transaction's connection), it is rows().
 */
export async function poolRows<R>(db: Db | SqlClient, statement: Statement<R>): Promise<R[]> {
  const pool = poolOf(db as Db);
  if (!pool) return rows(db, statement);
  const c = compile(statement);
  const name = statementName(pool, c.sql);
  const query = { text: c.sql, values: c.parameters as unknown[], types: POOL_TYPES };
  if (!name) return (await pool.query(query)).rows as R[];
  try {
    return (await pool.query({ ...query, name })).rows as R[];
  } catch (err) {
    if (!namedStatementFailed(pool, c.sql, err)) throw err;
    // Once more, unnamed or under its new name (see namedStatementFailed).
    return (await pool.query({ ...query, name: statementName(pool, c.sql) })).rows as R[];
  }
}

/** The name a text runs under on pool: its prepared() name while the pool names statements, else none. */
function statementName(pool: pg.Pool, text: string): string | undefined {
  return namesStatements(pool) ? preparedNames.get(text) : undefined;
}

/**
 * After a named statement failed on pool: whether it failed for being named, and so may be run again.
 * - 26000 (no such prepared statement): the server connection is not the one that parsed it, so a transaction
 *   pooler (PgBouncer before 1.21) sits between the pool and PostgreSQL although DATABASE_URL and
 *   DIRECT_DATABASE_URL are the same: the pool stops naming statements.
 * - 0A000 (cached plan must not change result type): a migration changed a type the statement reads while this
 *   process ran, and every connection that parsed it holds the old plan: the text gets a new name, which each
 *   connection parses afresh.
 */
function namedStatementFailed(pool: pg.Pool, text: string, err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (code === '26000') {
    stopNamingStatements(pool);
    return true;
  }
  if (code === '0A000' && /cached plan/i.test((err as Error).message) && preparedNames.has(text)) {
    preparedNames.set(text, `boxes_${++preparedCount}`);
    return true;
  }
  return false;
}

/** The texts run as named prepared statements on the pool's connections (prepared()), with their names. */
const preparedNames = new Map<string, string>();
/** Names given so far (a text renamed after a migration gets a name never used before). */
let preparedCount = 0;
/** At most this many texts are named; past it a statement runs unnamed, as any other. */
const MAX_PREPARED = 256;

/**
 * Marks a statement's text to run as a named prepared statement wherever it runs on a pool made with
 * namedStatements (poolRows, a poolTransaction; client.ts createDb): each connection parses it once and reuses it, where an unnamed statement is parsed,
 * analysed and planned again on every run (for the hot paths' large statements, a good part of PostgreSQL's
 * CPU for them). Only for texts that repeat: a text whose values are parameters, one of a few shapes, never one
 * with values written into it. Its result columns must not depend on the tables' columns as they stand (no
 * `*`): a column added by a migration while a process runs would otherwise change a prepared statement's
 * result, which PostgreSQL refuses. Answers the statement compiled. Elsewhere (Prisma's client) it runs as usual.
 */
export function prepared<R>(statement: Statement<R>): CompiledQuery<R> {
  const c = compile(statement);
  if (!preparedNames.has(c.sql) && preparedNames.size < MAX_PREPARED) preparedNames.set(c.sql, `boxes_${++preparedCount}`);
  return c;
}

/**
 * The batch sizes a statement with one row of parameters per item is written for (parameterRows). Each text is
 * planned about six times on each pool connection before it keeps its generic plan (five plans for the values
 * given, then the generic one), so fewer sizes mean fewer plans: powers of four, a batch padded at most
 * fourfold with NULL rows, which cost next to nothing.
 */
export const PARAMETER_ROW_SIZES = [1, 4, 16, 64, 256] as const;

/** A statement over a batch of items, one row of parameters per item (parameterRows). */
export interface ParameterRowStatement<I, R> {
  /** The statement for `size` items (one of PARAMETER_ROW_SIZES), compiled once and prepared (see prepared()). */
  statement(size: (typeof PARAMETER_ROW_SIZES)[number]): CompiledQuery<R>;
  /** The smallest size that holds the items (at most the largest) and their parameters, padded with NULL rows. */
  parameters(items: readonly I[]): { size: (typeof PARAMETER_ROW_SIZES)[number]; parameters: unknown[] };
  /**
   * Runs it on db (poolRows: the pool, or a transaction's connection): one statement for a batch up to the
   * largest size (a group commit's batch, at most 200, fits in one), any items past it in further statements one
   * after the other, on the same connection. A row's `i`, where the statement selects it (an int, as the
   * literal it is written as), is its item's number in the whole batch, from 1.
   */
  run(db: Db | SqlClient, items: readonly I[]): Promise<R[]>;
}

/** The largest of PARAMETER_ROW_SIZES: a list longer than it gets a text of its own per multiple (valueRows). */
export const LARGEST_ROWS = PARAMETER_ROW_SIZES[PARAMETER_ROW_SIZES.length - 1]!;

/**
 * `(VALUES (1, $1::t1, $2::t2), (2, ...), ...)`: one row per entry of `rows` (its values, cast to `types`; null
 * for a padding row), numbered from 1.
 */
function valuesList(types: readonly string[], rows: readonly (readonly unknown[] | null)[]): RawBuilder<unknown> {
  const list = rows.map((v, j) => {
    if (v && v.length !== types.length) throw new Error(`valueRows: ${v.length} values for a row, not ${types.length}`);
    return sql`(${sql.lit(j + 1)}, ${sql.join(types.map((t, c) => sql`${v ? v[c] : null}::${sql.raw(t)}`))})`;
  });
  return sql`(VALUES ${sql.join(list)})`;
}

/**
 * The rows of parameterRows as a fragment of a larger statement that runs prepared() (the store writer's):
 * `(VALUES (1, $1::text), ...)`, one row per item with its number (from 1) and `values(item)` cast to `types`,
 * padded with NULL rows up to the next of PARAMETER_ROW_SIZES that holds `atLeast` rows (the items, unless the
 * caller pads two lists of one statement to one size). The caller names the columns (`${rows} AS v(i, id)`), and
 * the NULL rows must match nothing. Given as rows rather than as one array, the list is counted alike by the plan
 * for the values given and by the generic plan (the padded count), so a connection keeps the generic plan; the
 * price is a text per size. Beyond the largest size the rows are padded to a multiple of it: a text per multiple,
 * so a statement holding such a list should run unnamed.
 */
export function valueRows<I>(
  items: readonly I[],
  types: readonly string[],
  values: (item: I) => readonly unknown[],
  atLeast = items.length,
): RawBuilder<unknown> {
  const count = Math.max(items.length, atLeast);
  const size = PARAMETER_ROW_SIZES.find((n) => n >= count) ?? Math.ceil(count / LARGEST_ROWS) * LARGEST_ROWS;
  return valuesList(
    types,
    Array.from({ length: size }, (_, j) => (j < items.length ? values(items[j]!) : null)),
  );
}

/**
 * A statement over a batch of items (ids, addresses, hashes), given one row of parameters per item rather than
 * one array of them. `build` writes the statement around `values`, which reads
 * `(VALUES (1, $1::text, $2::text[]), (2, $3::text, $4::text[]), ...)`: each item's number (from 1), then its
 * `values(item)` cast to `types`; the caller names the columns (`${values} AS q(i, id, ...)`), and the rows must
 * be the statement's only parameters. A batch is padded up to the next of PARAMETER_ROW_SIZES with rows of NULLs,
 * which must match nothing (an inner join or an equality on each, not an outer side). Each item is a row of its
 * own: a read answers an item given twice twice, so callers give each once.
 *
 * Why: a prepared statement is planned anew on every run while PostgreSQL estimates its plan for the values
 * given cheaper than its generic plan, and `= ANY($1::text[])` (or `IN ($1, $2, ...)` with NULLs) with two
 * values is estimated apart from the generic plan's assumed ten, so a statement written that way was planned
 * on every run (on the send path 0.2 to 0.6 ms of PostgreSQL's CPU a plan, several times its execution; see
 * docs/benchmarks.md). With a row per item both plans see the same rows, and each connection keeps the generic
 * plan after its first five runs. A few texts in all, one per size.
 */
export function parameterRows<I, R>(spec: {
  types: readonly string[];
  values: (item: I) => readonly unknown[];
  build: (values: RawBuilder<unknown>) => Statement<R>;
}): ParameterRowStatement<I, R> {
  const width = spec.types.length;
  const texts = new Map<number, CompiledQuery<R>>();
  const self: ParameterRowStatement<I, R> = {
    statement(size) {
      let c = texts.get(size);
      if (!c) {
        const compiled = compile(
          spec.build(
            valuesList(
              spec.types,
              Array.from({ length: size }, () => null),
            ),
          ),
        );
        if (compiled.parameters.length !== size * width) {
          throw new Error(`parameterRows: the statement has ${compiled.parameters.length} parameters, not its ${size} rows of ${width}`);
        }
        c = prepared(compiled);
        texts.set(size, c);
      }
      return c;
    },
    parameters(items) {
      const size = PARAMETER_ROW_SIZES.find((n) => n >= items.length);
      if (size === undefined) throw new Error(`parameterRows: at most ${LARGEST_ROWS} items a statement`);
      const parameters: unknown[] = [];
      for (const it of items) {
        const v = spec.values(it);
        if (v.length !== width) throw new Error(`parameterRows: ${v.length} values for an item, not ${width}`);
        parameters.push(...v);
      }
      for (let j = items.length * width; j < size * width; j++) parameters.push(null);
      return { size, parameters };
    },
    async run(db, items) {
      const out: R[] = [];
      for (let from = 0; from < items.length; from += LARGEST_ROWS) {
        const { size, parameters } = self.parameters(items.slice(from, from + LARGEST_ROWS));
        const found = await poolRows<R>(db, { ...self.statement(size), parameters });
        for (const r of found) {
          const row = r as R & { i?: unknown };
          if (from && 'i' in (row as object)) {
            if (typeof row.i !== 'number') throw new Error(`parameterRows: a row's i is ${typeof row.i}, not a number`);
            row.i += from;
          }
          out.push(r);
        }
      }
      return out;
    },
  };
  return self;
}

/**
 * A parameter written as an SQL literal, for the types a first statement's parameters have (account ids: text
 * and text[]); undefined for any other. The array literal quotes every element, so commas, braces, quotes and
 * backslashes in a value stay in it; escapeLiteral then quotes the whole for the statement's text.
 */
function literal(v: unknown): string | undefined {
  if (v === null || v === undefined) return 'NULL';
  if (typeof v === 'string') return pg.escapeLiteral(v);
  if (Array.isArray(v) && v.every((x) => typeof x === 'string')) {
    return pg.escapeLiteral(`{${v.map((x: string) => `"${x.replace(/[\\"]/g, '\\$&')}"`).join(',')}}`);
  }
  return undefined;
}

/**
 * The statement with its parameters written in as literals, or undefined when that is not plainly safe: only
 * for parameters literal() writes, and a text with no string literal, comment, dollar sign other than the
 * placeholders, or dollar sign inside a quoted identifier (so a placeholder cannot sit inside a literal, an
 * identifier or a comment).
 */
function inlined(text: string, values: unknown[]): string | undefined {
  if (/'|--|\/\*|\$(?!\d)|;/.test(text)) return undefined;
  // Quoted identifiers, read left to right (no string literal is left to hide a quote): none may hold a $.
  for (const id of text.matchAll(/"(?:[^"]|"")*"/g)) if (id[0].includes('$')) return undefined;
  const written = values.map(literal);
  // Short ones only: escaping a long value costs more than the round trip it saves.
  if (written.some((w) => w === undefined || w.length > 2048)) return undefined;
  let ok = true;
  const out = text.replace(/\$(\d+)/g, (_, n: string) => {
    const w = written[Number(n) - 1];
    if (w === undefined) ok = false;
    return w ?? '';
  });
  return ok ? out : undefined;
}

const rolledBack = () => new Error('poolTransaction: the transaction was aborted and rolled back');

/** How pg writes a parameter's value (its utils, not in the package's types). */
const prepareValue = (pg as unknown as { utils: { prepareValue(value: unknown): unknown } }).utils.prepareValue;

/**
 * A transaction on one pg connection of the pool, open for as long as poolTransaction's fn runs. BEGIN goes
 * with the first statement: in the same round trip (one simple query, its parameters written in by inlined())
 * when they are ids, as in the accounts' lock read the send and inbound group commits start with; else just
 * before it.
 */
class PoolTransaction implements SqlClient {
  open = true;
  begun = false;
  /** The next statement goes out with COMMIT behind it, in one round trip (commitWithNext). */
  commitNext = false;
  /**
   * How the COMMIT sent with the last statement was answered, or null while none was: poolTransaction then sends
   * no COMMIT or ROLLBACK of its own.
   */
  endedWith: 'COMMIT' | 'ROLLBACK' | null = null;
  constructor(
    private readonly client: pg.PoolClient,
    /** When the transaction expires (performance.now()), as Prisma's interactive transactions do after their timeout. */
    private readonly expires: number,
    private readonly timeout: number,
    /** The pool of the connection: prepared() texts run named while it names statements (createDb's namedStatements). */
    private readonly pool: pg.Pool,
  ) {}

  /** Past its timeout, a transaction runs no further statement and does not commit (it is rolled back). */
  checkExpired(): void {
    if (performance.now() > this.expires) {
      throw new Error(`poolTransaction: the transaction expired: more than its timeout of ${this.timeout} ms passed since it started`);
    }
  }

  /** Sends BEGIN now, on its own, unless the transaction has begun (see beginTransaction). */
  async begin(): Promise<void> {
    if (!this.open) throw new Error('poolTransaction: statement after the transaction ended');
    this.checkExpired();
    if (this.begun) return;
    this.begun = true;
    await this.client.query(this.beginText());
  }

  /**
   * BEGIN, and each statement of the transaction bounded by its timeout (SET LOCAL: this transaction only, so a
   * pooler between keeps nothing of it): a statement that would run on, or wait on a lock, past the timeout is
   * cancelled by PostgreSQL and the transaction rolled back, where checkExpired only stops the next one. In the
   * same round trip as BEGIN.
   */
  private beginText(): string {
    return `BEGIN; SET LOCAL statement_timeout = ${Math.max(1, Math.ceil(this.timeout))}`;
  }

  private async query(text: string, values: unknown[]): Promise<pg.QueryResult> {
    if (!this.open) throw new Error('poolTransaction: statement after the transaction ended');
    this.checkExpired();
    if (!this.begun) {
      this.begun = true;
      const inline = inlined(text, values);
      if (inline !== undefined) {
        const results = (await this.client.query({ text: `${this.beginText()}; ${inline}`, types: POOL_TYPES })) as unknown as pg.QueryResult[];
        return results[results.length - 1]!;
      }
      await this.client.query(this.beginText());
    }
    const name = statementName(this.pool, text);
    const query: pg.QueryConfig = name ? { text, values, types: POOL_TYPES, name } : { text, values, types: POOL_TYPES };
    if (this.commitNext) return this.queryAndCommit(query);
    if (!name) return this.client.query(query);
    try {
      return await this.client.query(query);
    } catch (err) {
      // The transaction is lost either way; a run again (a group commit's retry) goes unnamed or under the new name.
      namedStatementFailed(this.pool, text, err);
      throw err;
    }
  }

  /**
   * The statement and COMMIT sent together (node-postgres's pipeline mode, for these two only): the COMMIT does not
   * wait for the statement's answer to reach us and go back out. A statement that fails aborts the transaction, and
   * the COMMIT behind it then answers ROLLBACK: the statement's error is thrown, and nothing was committed. The
   * values are made what pg sends before anything goes out, so one it cannot send throws with nothing sent (a
   * statement failing in the client with the COMMIT already out would commit what came before it).
   */
  private async queryAndCommit(query: pg.QueryConfig): Promise<pg.QueryResult> {
    this.commitNext = false;
    const values = query.values?.map((v) => prepareValue(v));
    this.open = false;
    const client = this.client as pg.PoolClient & { pipeline: boolean; connection?: { stream?: { cork?(): void; uncork?(): void } } };
    // Both written to the socket at once (one write, one wake-up of the server): node-postgres writes each
    // query as it is given, and a cork held around both holds the first back until the second is written.
    const stream = client.connection?.stream;
    client.pipeline = true;
    let statement: PromiseSettledResult<pg.QueryResult>;
    let commit: PromiseSettledResult<pg.QueryResult>;
    try {
      stream?.cork?.();
      let sent: [Promise<pg.QueryResult>, Promise<pg.QueryResult>];
      try {
        sent = [client.query({ ...query, values }), client.query('COMMIT')];
      } finally {
        stream?.uncork?.();
      }
      [statement, commit] = await Promise.allSettled(sent);
    } finally {
      client.pipeline = false;
    }
    // Answered: committed or rolled back, there is no transaction left to roll back.
    if (commit.status === 'fulfilled') this.endedWith = commit.value.command === 'COMMIT' ? 'COMMIT' : 'ROLLBACK';
    if (statement.status === 'rejected') {
      if (query.name) namedStatementFailed(this.pool, query.text, statement.reason);
      if (this.endedWith === 'COMMIT') {
        const why = statement.reason instanceof Error ? statement.reason.message : String(statement.reason);
        throw new Error(`poolTransaction: committed, but reading the last statement's answer failed: ${why}`);
      }
      throw statement.reason;
    }
    if (commit.status === 'rejected') throw commit.reason;
    if (this.endedWith === 'ROLLBACK') throw rolledBack();
    return statement.value;
  }

  async $queryRawUnsafe<T = unknown>(text: string, ...values: unknown[]): Promise<T> {
    return (await this.query(text, values)).rows as T;
  }

  async $executeRawUnsafe(text: string, ...values: unknown[]): Promise<number> {
    return (await this.query(text, values)).rowCount ?? 0;
  }
}

/**
 * Begins a poolTransaction's transaction now (BEGIN otherwise goes with its first statement), so that its round
 * trip runs while the caller waits for something else; a no-op in Prisma's transaction, which has begun already.
 */
export async function beginTransaction(c: SqlClient): Promise<void> {
  if (c instanceof PoolTransaction) await c.begin();
}

/**
 * The next statement on c is its last: in a poolTransaction it goes out with COMMIT behind it, one round trip
 * for both (a statement after it throws); in Prisma's transaction nothing changes (COMMIT follows as usual).
 */
export function commitWithNext(c: SqlClient): void {
  if (c instanceof PoolTransaction && c.begun) c.commitNext = true;
}

/** Prisma's default timeout of an interactive transaction, in ms. */
const PRISMA_TX_TIMEOUT_MS = 5000;

/**
 * Thrown by code running in a poolTransaction that needs Prisma's transaction client (model calls) for this
 * batch: poolTransaction rolls back and runs the whole of fn again in Prisma's $transaction. Throw it before
 * anything outside the transaction has been done, since fn runs twice.
 */
export class PrismaTransactionNeeded extends Error {
  constructor(reason: string) {
    super(`needs a Prisma transaction: ${reason}`);
    this.name = 'PrismaTransactionNeeded';
  }
}

/** The Prisma transaction client behind c; in a poolTransaction, throws PrismaTransactionNeeded (see there). */
export function prismaTx(c: SqlClient, reason: string): Tx {
  if (c instanceof PoolTransaction) throw new PrismaTransactionNeeded(reason);
  return c as Tx;
}

/**
 * Runs fn in a transaction on one connection of the pg pool under db (BEGIN, fn, COMMIT), outside Prisma's
 * client: for the hot group commits, where Prisma's interactive transaction costs several times the CPU of
 * the statements' own client side (see poolRows). Statements run through rows() and exec() on the client fn is
 * given; their rows read as poolRows reads them. On an error fn's statements are rolled back and the error
 * rethrown; a connection whose ROLLBACK fails too (the server went away) is dropped from the pool, not reused.
 * fn may throw PrismaTransactionNeeded (prismaTx) for a batch that needs Prisma's models: it then runs again
 * from the start in db.$transaction with options. A transaction that runs past options.timeout (5 s by default,
 * as Prisma's) is rolled back: no statement is sent after it expires, and it does not commit; a statement
 * still running (or waiting on a lock) after the timeout is cancelled by PostgreSQL (statement_timeout, set for
 * the transaction with its BEGIN), so a transaction ends within about twice its timeout. options.maxWait is not
 * used here: the wait for a connection is the pool's connect timeout (DB_CONNECT_TIMEOUT_MS). Without a pool of
 * ours, it is db.$transaction.
 */
export async function poolTransaction<T>(db: Db, fn: (c: SqlClient) => Promise<T>, options?: { maxWait?: number; timeout?: number }): Promise<T> {
  const pool = poolOf(db);
  if (!pool) return db.$transaction((tx) => fn(tx), options);
  const client = await pool.connect();
  const timeout = options?.timeout ?? PRISMA_TX_TIMEOUT_MS;
  const c = new PoolTransaction(client, performance.now() + timeout, timeout, pool);
  let out: T;
  try {
    out = await fn(c);
    // A transaction in which a statement failed (its error caught inside fn) ends in ROLLBACK, not an error; so does
    // one whose last statement failed with its COMMIT behind it (commitWithNext), the error caught the same way.
    if (c.endedWith === 'ROLLBACK') throw rolledBack();
    // Committed with its last statement: that statement ran in time, or it would have thrown.
    if (c.endedWith === null) {
      c.checkExpired();
      if (c.begun && (await client.query('COMMIT')).command === 'ROLLBACK') throw rolledBack();
    }
  } catch (err) {
    c.open = false;
    let broken: Error | undefined;
    if (c.begun && c.endedWith === null) {
      try {
        await client.query('ROLLBACK');
      } catch (e) {
        broken = e instanceof Error ? e : new Error(String(e));
      }
    }
    client.release(broken);
    if (err instanceof PrismaTransactionNeeded) return db.$transaction((tx) => fn(tx), options);
    throw err;
  }
  c.open = false;
  client.release();
  return out;
}

/** Runs a write without RETURNING on db; answers the number of rows it affected. */
export async function exec(db: SqlClient, statement: Statement<unknown>): Promise<number> {
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
