/** Prisma client construction. One client per process (it owns a pg pool). */
import { PrismaPg } from '@prisma/adapter-pg';
import { PrismaClient } from './generated/client';

export type Db = PrismaClient;
/** The client inside an interactive transaction. Core functions accept either, so callers can compose them. */
export type Tx = Parameters<Parameters<PrismaClient['$transaction']>[0]>[0];
export type DbClient = Db | Tx;

export function createDb(databaseUrl: string, options: { max?: number } = {}): Db {
  const adapter = new PrismaPg({ connectionString: databaseUrl, max: options.max ?? 10 });
  return new PrismaClient({ adapter });
}
