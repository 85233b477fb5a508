/** Once per test run: (re)create the template database and apply every migration to it. */
import pg from 'pg';
import { migrate, ServiceUnavailableError } from '@boxes/db';
import { TEMPLATE_DB, adminUrl, databaseUrlFor } from './databases';

async function admin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: adminUrl(), connectionTimeoutMillis: 5000 });
  try {
    await c.connect();
  } catch (err) {
    throw new ServiceUnavailableError(`tests need PostgreSQL at ${new URL(adminUrl()).host}: ${(err as Error).message}`);
  }
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

async function dropLeftovers(c: pg.Client): Promise<void> {
  const { rows } = await c.query<{ datname: string }>("SELECT datname FROM pg_database WHERE datname LIKE 'boxes\\_test\\_%' AND datname <> $1", [TEMPLATE_DB]);
  for (const r of rows) await c.query(`DROP DATABASE IF EXISTS "${r.datname}" WITH (FORCE)`);
}

export default async function setup(): Promise<() => Promise<void>> {
  await admin(async (c) => {
    await dropLeftovers(c);
    await c.query(`DROP DATABASE IF EXISTS "${TEMPLATE_DB}" WITH (FORCE)`);
    await c.query(`CREATE DATABASE "${TEMPLATE_DB}"`);
  });
  await migrate(databaseUrlFor(TEMPLATE_DB));
  return async () => {
    await admin(dropLeftovers);
  };
}
