/** Prisma client construction. One client per process (it owns a pg pool). */
import { PrismaPg } from '@prisma/adapter-pg';
import { PrismaClient } from './generated/client';

export type Db = PrismaClient;
/** The client inside an interactive transaction. Core functions accept either, so callers can compose them. */
export type Tx = Parameters<Parameters<PrismaClient['$transaction']>[0]>[0];
export type DbClient = Db | Tx;

/** How long a query waits for a new connection to PostgreSQL before it fails (503 at the edges), in ms. */
export const DB_CONNECT_TIMEOUT_MS = 5000;

export function createDb(databaseUrl: string, options: { max?: number } = {}): Db {
  // A bounded connect: an unreachable server fails the query instead of holding the request.
  const adapter = new PrismaPg({ connectionString: databaseUrl, max: options.max ?? 10, connectionTimeoutMillis: DB_CONNECT_TIMEOUT_MS });
  return new PrismaClient({ adapter });
}
