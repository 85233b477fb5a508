/**
 * For this package's database tests: the server the test run uses (urlOf, admin), and a database of the test
 * file's own, cloned from the run's migrated template (packages/testing's global setup makes it), created before
 * the file's tests and dropped after them.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, inject } from 'vitest';
import { closeDb, createDb, type Db } from './client';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Set by packages/testing global-setup.ts: the run whose migrated template the database is cloned from. */
    boxesRunId: string;
  }
}

const base = new URL(process.env.TEST_DATABASE_URL ?? process.env.DATABASE_URL ?? 'postgresql://postgres@127.0.0.1:5432/boxes');
/** The URL of database `name` on the server the test run uses (the same rule as @boxes/testing). */
export const urlOf = (name: string) => Object.assign(new URL(base), { pathname: `/${name}` }).toString();

/** Runs fn on a connection of its own to the server's postgres database (to create, drop, or end backends). */
export async function admin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: urlOf('postgres') });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** Registers the clone's creation and drop; `use` gets the client on it (a pool of two) before the tests run. */
export function templateDatabase(tag: string, use: (db: Db) => void): void {
  const runId = inject('boxesRunId');
  const name = `boxes_test_${runId}_${tag}_${randomBytes(4).toString('hex')}`;
  let db: Db | undefined;
  beforeAll(async () => {
    await admin((c) => c.query(`CREATE DATABASE "${name}" TEMPLATE "boxes_test_${runId}_template"`));
    db = createDb(urlOf(name), { max: 2, namedStatements: true });
    use(db);
  });
  afterAll(async () => {
    if (db) await closeDb(db);
    await admin((c) => c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`));
  });
}
