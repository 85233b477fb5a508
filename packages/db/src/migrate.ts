/**
 * Applies prisma/migrations at start and in tests, without the Prisma CLI (whose engines cannot run here).
 * It keeps Prisma's own bookkeeping table, _prisma_migrations, with the same checksums, so `prisma migrate
 * status` agrees with it. An advisory lock makes concurrent starts of several instances safe.
 */
import { createHash, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { describeConnectionError, ServiceUnavailableError } from './bootstrap';

export const migrationsDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../prisma/migrations');
const LOCK_KEY = 727_274_001;

export interface MigrateResult {
  applied: string[];
}

export async function migrate(databaseUrl: string, dir = migrationsDir): Promise<MigrateResult> {
  const client = new pg.Client({ connectionString: databaseUrl, connectionTimeoutMillis: 5000 });
  try {
    await client.connect();
  } catch (err) {
    throw new ServiceUnavailableError(describeConnectionError(databaseUrl, err));
  }
  const applied: string[] = [];
  try {
    await client.query('SELECT pg_advisory_lock($1)', [LOCK_KEY]);
    await client.query(`CREATE TABLE IF NOT EXISTS "_prisma_migrations" (
      "id" VARCHAR(36) PRIMARY KEY NOT NULL,
      "checksum" VARCHAR(64) NOT NULL,
      "finished_at" TIMESTAMPTZ,
      "migration_name" VARCHAR(255) NOT NULL,
      "logs" TEXT,
      "rolled_back_at" TIMESTAMPTZ,
      "started_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
      "applied_steps_count" INTEGER NOT NULL DEFAULT 0)`);
    const done = await client.query<{ migration_name: string; checksum: string }>(
      'SELECT migration_name, checksum FROM "_prisma_migrations" WHERE finished_at IS NOT NULL AND rolled_back_at IS NULL',
    );
    const have = new Map(done.rows.map((r) => [r.migration_name, r.checksum]));
    const names = fs
      .readdirSync(dir, { withFileTypes: true })
      .filter((d) => d.isDirectory() && fs.existsSync(path.join(dir, d.name, 'migration.sql')))
      .map((d) => d.name)
      .sort();
    for (const name of names) {
      const sql = fs.readFileSync(path.join(dir, name, 'migration.sql'), 'utf8');
      const checksum = createHash('sha256').update(sql).digest('hex');
      const prior = have.get(name);
      if (prior) {
        if (prior !== checksum) {
          throw new Error(`migration ${name} was edited after it was applied; add a new migration instead`);
        }
        continue;
      }
      await client.query('BEGIN');
      try {
        await client.query(sql);
        await client.query(
          `INSERT INTO "_prisma_migrations" (id, checksum, finished_at, migration_name, applied_steps_count)
           VALUES ($1, $2, now(), $3, 1)`,
          [randomUUID(), checksum, name],
        );
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK');
        throw new Error(`migration ${name} failed: ${(err as Error).message}`);
      }
      applied.push(name);
    }
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [LOCK_KEY]).catch(() => undefined);
    await client.end();
  }
  return { applied };
}
