/** What every core function may need besides its own arguments. */
import type { Config } from '@boxes/config';
import type { Db, DbClient } from '@boxes/db';
import type { Jobs } from '@boxes/jobs';
import type { Redis } from 'ioredis';
import type { Clock } from './clock';
import type { Registrar } from '../domains/registrar';
import type { PaymentProvider } from '../payments/provider';

export interface Services {
  db: Db;
  config: Config;
  /** 32-byte key for secrets at rest (DKIM private keys, later message bodies). */
  secretKey: Buffer;
  /** Queues (BullMQ). */
  jobs: Jobs;
  /** Redis for counters (send-loop detection). */
  redis: Redis;
  /** Time for billing periods, payment TTLs and owner links (tests use an adjustable one). */
  clock: Clock;
  /** The payment processor and wallet (the built-in local provider, or a real one behind the same interface). */
  payments: PaymentProvider;
  /** The domain registrar (the built-in local one is simulated, or a real one behind the same interface). */
  registrar: Registrar;
}

/**
 * Runs fn in the given transaction, or opens one when given the root client. A Prisma 7 transaction client
 * also has $transaction (it would open a savepoint: two more round trips for nothing); only the root client
 * has $disconnect.
 */
export async function inTransaction<T>(db: DbClient, fn: (tx: Parameters<Parameters<Db['$transaction']>[0]>[0]) => Promise<T>): Promise<T> {
  if ('$disconnect' in db && typeof (db as Db).$transaction === 'function') {
    return (db as Db).$transaction(fn, { maxWait: 10_000, timeout: 20_000 });
  }
  return fn(db as Parameters<Parameters<Db['$transaction']>[0]>[0]);
}
