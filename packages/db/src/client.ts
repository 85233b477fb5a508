/** Prisma client construction. One client per process; it runs on a pg pool this module creates and keeps. */
import { PrismaPg } from '@prisma/adapter-pg';
import pg from 'pg';
import { PrismaClient } from './generated/client';

export type Db = PrismaClient;
/** The client inside an interactive transaction. Core functions accept either, so callers can compose them. */
export type Tx = Parameters<Parameters<PrismaClient['$transaction']>[0]>[0];
export type DbClient = Db | Tx;

const pools = new WeakMap<Db, pg.Pool>();
/** The pools that run prepared() texts as named statements (createDb's namedStatements). */
const namingPools = new WeakSet<pg.Pool>();

/** How long a query waits for a new connection to PostgreSQL before it fails (503 at the edges), in ms. */
export const DB_CONNECT_TIMEOUT_MS = 5000;

/**
 * options.namedStatements: the pool's connections are PostgreSQL's own sessions (databaseUrl is PostgreSQL itself,
 * not a transaction pooler), so statements marked prepared() may run as named prepared statements on them (sql.ts).
 * Behind PgBouncer in transaction mode a named statement parsed on one server connection is unknown on the next
 * (before PgBouncer 1.21), so a pool that may go through one leaves it off (the default): every statement then
 * runs unnamed.
 */
export function createDb(databaseUrl: string, options: { max?: number; namedStatements?: boolean } = {}): Db {
  // allowExitOnIdle: a process whose work is done exits even if the client was not disconnected. A bounded
  // connect: an unreachable server fails the query instead of holding the request.
  const pool = new pg.Pool({ connectionString: databaseUrl, max: options.max ?? 10, allowExitOnIdle: true, connectionTimeoutMillis: DB_CONNECT_TIMEOUT_MS });
  // An idle client whose connection the server ends (a restart, DROP DATABASE ... WITH (FORCE) after tests)
  // emits 'error' on the pool; without a listener that is an uncaught exception. The pool drops the client and
  // the next query opens a new connection or reports the failure itself.
  pool.on('error', () => undefined);
  quietWhileCheckedOut(pool);
  if (options.namedStatements) namingPools.add(pool);
  const db = new PrismaClient({ adapter: new PrismaPg(pool) });
  pools.set(db, pool);
  return db;
}

/** The pg pool under a client (its size and waiting clients are reported on /metrics). */
export function poolOf(db: Db): pg.Pool | undefined {
  return pools.get(db);
}

/** Whether the pool runs prepared() texts as named statements (createDb's namedStatements). */
export function namesStatements(pool: pg.Pool): boolean {
  return namingPools.has(pool);
}

/** The pool's statements run unnamed from now on (a named one was unknown on its next server connection: a pooler). */
export function stopNamingStatements(pool: pg.Pool): void {
  namingPools.delete(pool);
}

/** Disconnects the client and ends its pool (the adapter does not end a pool it was given). */
export async function closeDb(db: Db): Promise<void> {
  await db.$disconnect();
  const pool = pools.get(db);
  if (pool && !pool.ended) await pool.end();
}

/**
 * The pool listens for errors only on idle clients. A client checked out between two statements (an open
 * transaction), or one whose query has just finished when the server's FATAL arrives in the same packet
 * (PostgreSQL shutting down), would emit 'error' with nobody listening: an uncaught exception. Every client of
 * the pool gets a listener of its own; the query in flight, or the next one, still fails, and the pool drops
 * the broken client when it is released.
 */
export function quietWhileCheckedOut(pool: pg.Pool): void {
  pool.on('connect', (client) => client.on('error', () => undefined));
}
