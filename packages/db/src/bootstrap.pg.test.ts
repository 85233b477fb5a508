/**
 * Start-up against a real PostgreSQL: ensureDatabase creates a missing database (also when several instances
 * start at once), migrate() is idempotent and safe to run concurrently, an unreachable server is one
 * actionable line, and `pnpm start` turns a missing PostgreSQL or Redis into exactly one "boxes:" line on
 * stderr and exit code 1.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { ensureDatabase, migrate, migrationsDir, ServiceUnavailableError } from './index';
import { admin, urlOf } from './template-database';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

// The boxes_test_ prefix lets the run's global teardown sweep anything a failed test left behind.
const created: string[] = [];
function newName(tag: string): string {
  const name = `boxes_test_${tag}_${randomBytes(5).toString('hex')}`;
  created.push(name);
  return name;
}

async function exists(name: string): Promise<boolean> {
  return admin(async (c) => ((await c.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).rowCount ?? 0) > 0);
}

afterAll(async () => {
  await admin(async (c) => {
    for (const name of created) await c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  });
});

const migrationNames = fs
  .readdirSync(migrationsDir, { withFileTypes: true })
  .filter((d) => d.isDirectory() && fs.existsSync(path.join(migrationsDir, d.name, 'migration.sql')))
  .map((d) => d.name)
  .sort();

async function expectUnavailable(p: Promise<unknown>): Promise<ServiceUnavailableError> {
  const err = await p.then(
    () => {
      throw new Error('expected a ServiceUnavailableError');
    },
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ServiceUnavailableError);
  return err as ServiceUnavailableError;
}

describe('ensureDatabase', () => {
  it('creates a missing database, and is a no-op when it exists', async () => {
    const name = newName('ensure');
    expect(await exists(name)).toBe(false);
    await ensureDatabase(urlOf(name));
    expect(await exists(name)).toBe(true);
    await ensureDatabase(urlOf(name));
    expect(await exists(name)).toBe(true);
    // The new database is usable.
    const c = new pg.Client({ connectionString: urlOf(name) });
    await c.connect();
    expect((await c.query('SELECT current_database() AS db')).rows[0].db).toBe(name);
    await c.end();
  });

  it('several instances starting at once all succeed', async () => {
    const name = newName('race');
    const results = await Promise.allSettled(Array.from({ length: 5 }, () => ensureDatabase(urlOf(name))));
    expect(results.map((r) => (r.status === 'rejected' ? String((r.reason as Error).message) : 'ok'))).toEqual(['ok', 'ok', 'ok', 'ok', 'ok']);
    expect(await exists(name)).toBe(true);
  });

  it('an unreachable server is a ServiceUnavailableError: one line saying what to start or set', async () => {
    for (const url of ['postgresql://postgres@127.0.0.1:1/boxes', 'postgresql://postgres@localhost:1/boxes']) {
      const err = await expectUnavailable(ensureDatabase(url));
      expect(err.message).not.toContain('\n');
      expect(err.message).toContain(`${new URL(url).hostname}:1`);
      expect(err.message).toMatch(/PostgreSQL/);
      expect(err.message).toMatch(/Start it/);
      expect(err.message).toMatch(/DATABASE_URL/);
    }
  });

  it('an unknown role is one line about the credentials', async () => {
    const u = new URL(urlOf('boxes'));
    u.username = `nosuch_${randomBytes(3).toString('hex')}`;
    u.password = '';
    const err = await expectUnavailable(ensureDatabase(u.toString()));
    expect(err.message).not.toContain('\n');
    expect(err.message).toMatch(/DATABASE_URL/);
    expect(err.message).toContain(u.username);
  });

  it('a URL without a database name is refused with one line', async () => {
    const u = new URL(urlOf('x'));
    u.pathname = '/';
    const err = await expectUnavailable(ensureDatabase(u.toString()));
    expect(err.message).not.toContain('\n');
    expect(err.message).toMatch(/DATABASE_URL/);
  });
});

describe('migrate', () => {
  it('applies every migration once; a second run applies nothing', async () => {
    expect(migrationNames.length).toBeGreaterThan(0);
    const name = newName('migrate');
    await ensureDatabase(urlOf(name));
    expect(await migrate(urlOf(name))).toEqual({ applied: migrationNames });
    expect(await migrate(urlOf(name))).toEqual({ applied: [] });
    const rows = await (async () => {
      const c = new pg.Client({ connectionString: urlOf(name) });
      await c.connect();
      try {
        return (
          await c.query<{ migration_name: string }>('SELECT migration_name FROM "_prisma_migrations" WHERE finished_at IS NOT NULL ORDER BY migration_name')
        ).rows;
      } finally {
        await c.end();
      }
    })();
    expect(rows.map((r) => r.migration_name)).toEqual(migrationNames);
  });

  it('concurrent runs apply each migration exactly once', async () => {
    const name = newName('migrate_race');
    await ensureDatabase(urlOf(name));
    const results = await Promise.all([1, 2, 3].map(() => migrate(urlOf(name))));
    expect(results.flatMap((r) => r.applied).sort()).toEqual(migrationNames);
  });

  it('refuses a migration edited after it was applied', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-migrations-'));
    try {
      fs.mkdirSync(path.join(dir, '0001_a'));
      fs.writeFileSync(path.join(dir, '0001_a', 'migration.sql'), 'CREATE TABLE t_a (id int);');
      const name = newName('migrate_edit');
      await ensureDatabase(urlOf(name));
      expect(await migrate(urlOf(name), dir)).toEqual({ applied: ['0001_a'] });
      fs.writeFileSync(path.join(dir, '0001_a', 'migration.sql'), 'CREATE TABLE t_a (id bigint);');
      await expect(migrate(urlOf(name), dir)).rejects.toThrow(/0001_a was edited/);
      // A failing new migration is rolled back and named.
      fs.writeFileSync(path.join(dir, '0001_a', 'migration.sql'), 'CREATE TABLE t_a (id int);');
      fs.mkdirSync(path.join(dir, '0002_b'));
      fs.writeFileSync(path.join(dir, '0002_b', 'migration.sql'), 'CREATE TABLE t_b (id int); SELECT no_such_function();');
      await expect(migrate(urlOf(name), dir)).rejects.toThrow(/migration 0002_b failed/);
      const c = new pg.Client({ connectionString: urlOf(name) });
      await c.connect();
      expect((await c.query("SELECT to_regclass('t_b') AS t")).rows[0].t).toBeNull();
      await c.end();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('an unreachable server is a one-line ServiceUnavailableError', async () => {
    const err = await expectUnavailable(migrate('postgresql://postgres@127.0.0.1:1/boxes'));
    expect(err.message).not.toContain('\n');
    expect(err.message).toMatch(/127\.0\.0\.1:1/);
  });
});

describe('pnpm start', () => {
  function start(env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
    return new Promise((resolve, reject) => {
      const child = spawn(path.join(repoRoot, 'node_modules/.bin/tsx'), ['apps/server/src/main.ts'], {
        cwd: repoRoot,
        // A fixed secret key, so the start does not write .data/secret-key into the work tree.
        env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', PORT: '0', LOG_LEVEL: 'error', BOXES_SECRET_KEY: 'cd'.repeat(32), ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`pnpm start did not exit; stdout: ${stdout} stderr: ${stderr}`));
      }, 25_000);
      child.on('error', reject);
      child.on('exit', (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr });
      });
    });
  }

  function expectOneLine(stderr: string): string {
    const lines = stderr.split('\n').filter((l) => l.length > 0);
    expect(lines, stderr).toHaveLength(1);
    expect(lines[0]).toMatch(/^boxes: /);
    return lines[0]!;
  }

  it('PostgreSQL at a closed port: one "boxes:" line on stderr, exit 1', async () => {
    const r = await start({ DATABASE_URL: 'postgresql://postgres@127.0.0.1:1/boxes', REDIS_URL: 'redis://127.0.0.1:1' });
    expect(r.code).toBe(1);
    const line = expectOneLine(r.stderr);
    expect(line).toContain('PostgreSQL is not reachable at 127.0.0.1:1');
    expect(line).toContain('DATABASE_URL');
    expect(r.stdout).toBe('');
  }, 30_000);

  it('Redis at a closed port: one "boxes:" line on stderr, exit 1', async () => {
    const name = newName('start');
    const r = await start({ DATABASE_URL: urlOf(name), REDIS_URL: 'redis://127.0.0.1:1' });
    expect(r.code).toBe(1);
    const line = expectOneLine(r.stderr);
    expect(line).toContain('Redis is not reachable at 127.0.0.1:1');
    expect(line).toContain('REDIS_URL');
    expect(r.stdout).toBe('');
    // It got as far as creating and migrating the database.
    expect(await exists(name)).toBe(true);
  }, 30_000);

  it('a bad setting: one "boxes:" line naming the variable, exit 1', async () => {
    const r = await start({ PORT: 'abc' });
    expect(r.code).toBe(1);
    expect(expectOneLine(r.stderr)).toMatch(/\bPORT\b/);
  }, 30_000);
});
