/**
 * The difference between prisma/schema.prisma and prisma/migrations, as SQL, from Prisma 6's `migrate diff`:
 * it replays the migrations into a throw-away shadow database and diffs the result against the schema.
 * `pnpm db:migrate:new` writes it as the next migration; a db test requires it to be empty.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';

export const packageDir = path.dirname(path.dirname(new URL(import.meta.url).pathname));
export const repoDir = path.resolve(packageDir, '..', '..');
export const migrationsDir = path.join(repoDir, 'prisma', 'migrations');

/** Prisma 6 wants `url = env(...)` in the datasource block, which Prisma 7 forbids: write a copy that has it. */
export function writeSchemaCopy(dir: string): string {
  const source = fs.readFileSync(path.join(repoDir, 'prisma', 'schema.prisma'), 'utf8');
  const withUrl = source
    // The copy is only diffed, never generated: a client-engine generator keeps the CLI from fetching a native engine.
    .replace(/generator\s+client\s*\{[^}]*\}/, 'generator client {\n  provider   = "prisma-client"\n  output     = "./generated"\n  engineType = "client"\n}')
    .replace(
      /datasource\s+db\s*\{([^}]*)\}/,
      (_m, body: string) => `datasource db {${body.replace(/\n\s*url\s*=.*$/m, '')}  url = env("MIGRATE_DATABASE_URL")\n}`,
    );
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'schema.prisma');
  fs.writeFileSync(file, withUrl);
  return file;
}

async function admin(databaseUrl: string, statements: string[]): Promise<void> {
  const c = new pg.Client({ connectionString: Object.assign(new URL(databaseUrl), { pathname: '/postgres' }).toString() });
  await c.connect();
  try {
    for (const sql of statements) await c.query(sql);
  } finally {
    await c.end();
  }
}

/** The database of `databaseUrl` and its `_shadow` companion (prisma.config.ts), created empty. */
export async function recreateDatabases(databaseUrl: string): Promise<void> {
  const db = new URL(databaseUrl).pathname.slice(1);
  await admin(
    databaseUrl,
    [db, `${db}_shadow`].flatMap((name) => [`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`, `CREATE DATABASE "${name}"`]),
  );
}

export async function dropDatabases(databaseUrl: string): Promise<void> {
  const db = new URL(databaseUrl).pathname.slice(1);
  await admin(
    databaseUrl,
    [db, `${db}_shadow`].map((name) => `DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`),
  );
}

export interface PrismaRun {
  status: number;
  stdout: string;
  stderr: string;
}

/** Runs the Prisma 6 CLI (with this package's prisma.config.ts) on the Node that runs this code. */
export function runPrisma(args: string[], databaseUrl: string, schema: string, capture = true): Promise<PrismaRun> {
  const cli = path.join(packageDir, 'node_modules', 'prisma', 'build', 'index.js');
  const child = spawn(process.execPath, [cli, ...args, '--config', path.join(packageDir, 'prisma.config.ts')], {
    stdio: capture ? ['ignore', 'pipe', 'pipe'] : 'inherit',
    cwd: packageDir,
    env: { ...process.env, MIGRATE_DATABASE_URL: databaseUrl, MIGRATE_SCHEMA: schema, PRISMA_HIDE_UPDATE_MESSAGE: '1' },
  });
  let stdout = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8').on('data', (s: string) => (stdout += s));
  child.stderr?.setEncoding('utf8').on('data', (s: string) => (stderr += s));
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ status: code ?? 1, stdout, stderr: signal ? `${stderr}\nkilled by ${signal}` : stderr }));
  });
}

/**
 * The SQL that would take the migrations to the schema ('' when they match), diffed in the throw-away database
 * of `databaseUrl` and its `_shadow` companion, both recreated first. Throws when Prisma fails.
 */
export async function diffMigrationsToSchema(databaseUrl: string, workDir: string, migrations = migrationsDir): Promise<string> {
  const schema = writeSchemaCopy(workDir);
  await recreateDatabases(databaseUrl);
  const out = await runPrisma(['migrate', 'diff', '--from-migrations', migrations, '--to-schema-datamodel', schema, '--script'], databaseUrl, schema);
  if (out.status !== 0) throw new Error(`prisma migrate diff failed:\n${out.stderr}`);
  const sql = out.stdout.trim();
  return /^-- This is an empty migration\.?$/.test(sql) ? '' : sql;
}
