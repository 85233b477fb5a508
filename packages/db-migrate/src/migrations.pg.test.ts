/**
 * prisma/migrations against prisma/schema.prisma, diffed as `pnpm db:migrate:new` does it (Prisma 6's WASM
 * engine through the pg adapter, in throw-away databases): the diff must run, and must be empty, so a
 * migration written by hand that leaves the database different from the schema fails here. Also the adapter
 * underneath: catalog columns of type "char" (pg_constraint.contype of CHECK constraints) reach the engine as
 * single characters, which it requires, and the other system types as text.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PrismaPg } from '@prisma/adapter-pg';
import { ColumnTypeEnum, type SqlQuery } from '@prisma/driver-adapter-utils';
import pg from 'pg';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { diffMigrationsToSchema, dropDatabases } from './diff';
import { RelabelingClient, withCharacterColumns } from './relabel-system-types';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Set by packages/testing global-setup.ts; its teardown drops databases named after the run. */
    boxesRunId: string;
  }
}

const base = new URL(process.env.TEST_DATABASE_URL ?? process.env.DATABASE_URL ?? 'postgresql://postgres@127.0.0.1:5432/boxes');
const urlOf = (name: string) => Object.assign(new URL(base), { pathname: `/${name}` }).toString();
const diffUrl = urlOf(`boxes_test_${inject('boxesRunId')}_migrate_diff`);
const workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-migrate-diff-'));

afterAll(async () => {
  await dropDatabases(diffUrl);
  fs.rmSync(workDir, { recursive: true, force: true });
});

const catalogQuery: SqlQuery = {
  // The types of pg_constraint's contype (of a CHECK constraint), conname and conrelid::regclass.
  sql: `SELECT 'c'::"char" AS contype, 'accounts_status_check'::name AS conname, 'pg_class'::regclass AS rel, 1::int4 AS one`,
  args: [],
  argTypes: [],
};

describe('the adapter of the migration tool', () => {
  const pool = new pg.Pool({ connectionString: urlOf('postgres'), Client: RelabelingClient, max: 2 });

  afterAll(() => pool.end());

  it('reads "char" catalog columns as Character and name and reg* as Text, also inside a transaction', async () => {
    const adapter = withCharacterColumns(await new PrismaPg(pool).connect());
    const plain = await adapter.queryRaw(catalogQuery);
    expect(plain.columnNames).toEqual(['contype', 'conname', 'rel', 'one']);
    expect(plain.columnTypes).toEqual([ColumnTypeEnum.Character, ColumnTypeEnum.Text, ColumnTypeEnum.Text, ColumnTypeEnum.Int32]);
    expect(plain.rows[0]).toEqual(['c', 'accounts_status_check', 'pg_class', 1]);

    const tx = await adapter.startTransaction();
    try {
      expect((await tx.queryRaw(catalogQuery)).columnTypes[0]).toBe(ColumnTypeEnum.Character);
    } finally {
      await tx.rollback();
    }
  });

  it('without the wrapper, the adapter would hand the engine "char" as Text', async () => {
    const adapter = await new PrismaPg(pool).connect();
    expect((await adapter.queryRaw(catalogQuery)).columnTypes[0]).toBe(ColumnTypeEnum.Text);
  });
});

describe('prisma/migrations', () => {
  it('leave the database exactly as prisma/schema.prisma describes it', { timeout: 120_000 }, async () => {
    const sql = await diffMigrationsToSchema(diffUrl, workDir);
    expect(
      sql,
      'prisma/schema.prisma and prisma/migrations differ (a migration written by hand, or a schema change without its migration); this SQL would take the migrations to the schema',
    ).toBe('');
  });
});
