/**
 * Once per test run: create this run's template database and apply every migration to it. Test files clone
 * it (packages/testing createTestDatabase). At the end, drop this run's databases and any left by runs that
 * were killed long ago; databases of other runs in progress are left alone.
 */
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { migrate, ServiceUnavailableError } from '@boxes/db';
import { takeRecordedProblems } from './event-check';
import { STALE_AFTER_SECONDS, TEST_DB_PREFIX, adminUrl, databaseUrlFor, newRunId, runStartOf, templateName } from './databases';

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

async function dropWhere(c: pg.Client, pick: (name: string) => boolean): Promise<void> {
  const { rows } = await c.query<{ datname: string }>('SELECT datname FROM pg_database WHERE starts_with(datname, $1)', [TEST_DB_PREFIX]);
  for (const r of rows.filter((r) => pick(r.datname))) await c.query(`DROP DATABASE IF EXISTS "${r.datname}" WITH (FORCE)`);
}

const stale = (name: string): boolean => {
  const start = runStartOf(name);
  return start === null || Date.now() / 1000 - start > STALE_AFTER_SECONDS;
};

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const runId = newRunId();
  const template = templateName(runId);
  await admin(async (c) => {
    await dropWhere(c, stale);
    await c.query(`CREATE DATABASE "${template}"`);
  });
  await migrate(databaseUrlFor(template));
  project.provide('boxesRunId', runId);
  return async () => {
    await admin((c) => dropWhere(c, (name) => name.startsWith(`${TEST_DB_PREFIX}${runId}_`) || stale(name)));
    // Every event the tests wrote must match the event catalogue (event-check.ts).
    const problems = takeRecordedProblems(runId);
    if (problems.length) {
      throw new Error(
        `${problems.length} event(s) written during the tests do not match the event catalogue (packages/schemas/src/event-catalogue.ts):\n${problems.slice(0, 50).join('\n')}`,
      );
    }
  };
}
