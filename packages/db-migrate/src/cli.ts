/**
 * `pnpm db:migrate:new <name>` writes the next migration from the difference between prisma/schema.prisma and
 * prisma/migrations, using a throw-away database. `pnpm db:migrate:status` compares the migrations with
 * DATABASE_URL. The service applies migrations itself at start (packages/db/src/migrate.ts).
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { loadConfig } from '@boxes/config';

const here = path.dirname(path.dirname(new URL(import.meta.url).pathname));
const repo = path.resolve(here, '..', '..');
const [command, name, flag] = process.argv.slice(2);
// What the schema cannot say (CHECK constraints, triggers) goes into a migration written by hand: `--empty`
// creates it, named and stamped like any other, when the schema itself has not changed.
const empty = flag === '--empty';

function fail(message: string): never {
  console.error(`db-migrate: ${message}`);
  process.exit(1);
}

/** Prisma 6 wants `url = env(...)` in the datasource block, which Prisma 7 forbids: derive a copy that has it. */
function writeSchemaCopy(): void {
  const source = fs.readFileSync(path.join(repo, 'prisma', 'schema.prisma'), 'utf8');
  const withUrl = source
    // The copy is only diffed, never generated: a client-engine generator keeps the CLI from fetching a native engine.
    .replace(/generator\s+client\s*\{[^}]*\}/, 'generator client {\n  provider   = "prisma-client"\n  output     = "./generated"\n  engineType = "client"\n}')
    .replace(
      /datasource\s+db\s*\{([^}]*)\}/,
      (_m, body: string) => `datasource db {${body.replace(/\n\s*url\s*=.*$/m, '')}  url = env("MIGRATE_DATABASE_URL")\n}`,
    );
  fs.mkdirSync(path.join(here, '.tmp'), { recursive: true });
  fs.writeFileSync(path.join(here, '.tmp', 'schema.prisma'), withUrl);
}

/**
 * A copy of the migrations without their CHECK constraints, for the diff: the schema cannot express them (so
 * they never appear in a diff), and Prisma 6's WASM engine aborts ("RuntimeError: unreachable") when it meets
 * one while introspecting the shadow database.
 */
function migrationsWithoutChecks(dir: string): string {
  const copy = path.join(here, '.tmp', 'migrations');
  fs.rmSync(copy, { recursive: true, force: true });
  fs.cpSync(dir, copy, { recursive: true });
  const check = /^ALTER TABLE "[^"]+" (ADD CONSTRAINT "[^"]+" CHECK \(.*\)|DROP CONSTRAINT "[^"]+_check");$/;
  for (const entry of fs.readdirSync(copy, { withFileTypes: true })) {
    const file = path.join(copy, entry.name, 'migration.sql');
    if (!entry.isDirectory() || !fs.existsSync(file)) continue;
    const sql = fs.readFileSync(file, 'utf8');
    fs.writeFileSync(
      file,
      sql
        .split('\n')
        .filter((line) => !check.test(line.trim()))
        .join('\n'),
    );
  }
  return copy;
}

async function recreate(base: URL, db: string): Promise<void> {
  const admin = new pg.Client({ connectionString: Object.assign(new URL(base), { pathname: '/postgres' }).toString() });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS "${db}" WITH (FORCE)`);
  await admin.query(`CREATE DATABASE "${db}"`);
  await admin.end();
}

function prisma(args: string[], databaseUrl: string, capture = false) {
  const bin = path.join(here, 'node_modules', '.bin', 'prisma');
  const r = spawnSync(bin, [...args, '--config', path.join(here, 'prisma.config.ts')], {
    stdio: capture ? 'pipe' : 'inherit',
    encoding: 'utf8',
    cwd: here,
    env: { ...process.env, MIGRATE_DATABASE_URL: databaseUrl, PRISMA_HIDE_UPDATE_MESSAGE: '1' },
  });
  return { status: r.status ?? 1, stdout: r.stdout ?? '', stderr: r.stderr ?? '' };
}

const config = loadConfig();
writeSchemaCopy();
if (command === 'new') {
  if (!name || !/^[a-z0-9_]+$/.test(name) || (flag !== undefined && !empty)) fail('usage: pnpm db:migrate:new <snake_case_name> [--empty]');
  const dev = new URL(config.directDatabaseUrl);
  dev.pathname = '/boxes_migrate_dev';
  // `migrate diff` replays the existing migrations into the shadow database and diffs the result against
  // the schema. (`migrate dev` cannot run here: its data-loss check wants a shadow factory the WASM engine lacks.)
  // Both are throw-away: on a fresh machine neither exists yet.
  await recreate(dev, 'boxes_migrate_dev');
  await recreate(dev, 'boxes_migrate_dev_shadow');
  const dir = path.join(repo, 'prisma', 'migrations');
  const out = prisma(
    ['migrate', 'diff', '--from-migrations', migrationsWithoutChecks(dir), '--to-schema-datamodel', path.join(here, '.tmp', 'schema.prisma'), '--script'],
    dev.toString(),
    true,
  );
  if (out.status !== 0) fail(`prisma migrate diff failed:\n${out.stderr}`);
  let sql = out.stdout.trim();
  if (!sql || /^-- This is an empty migration\.?$/.test(sql)) {
    if (!empty) {
      console.log('db-migrate: prisma/schema.prisma matches the migrations; nothing to write (--empty writes a migration to fill by hand).');
      process.exit(0);
    }
    sql = '-- Written by hand: prisma/schema.prisma matched the migrations when this was created.';
  } else if (empty) {
    fail('prisma/schema.prisma differs from the migrations: write that migration first, without --empty.');
  }
  const stamp = new Date().toISOString().replace(/\D/g, '').slice(0, 14);
  const target = path.join(dir, `${stamp}_${name}`);
  fs.mkdirSync(target, { recursive: true });
  fs.writeFileSync(path.join(target, 'migration.sql'), `${sql}\n`);
  console.log(`db-migrate: wrote prisma/migrations/${stamp}_${name}/migration.sql; review it and commit it.`);
  process.exit(0);
} else if (command === 'status') {
  process.exit(prisma(['migrate', 'status'], config.directDatabaseUrl).status);
} else {
  fail('commands: new <name> | status');
}
