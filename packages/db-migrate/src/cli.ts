/**
 * `pnpm db:migrate:new <name>` writes the next migration from the difference between prisma/schema.prisma and
 * prisma/migrations, using a throw-away database. `pnpm db:migrate:status` compares the migrations with
 * DATABASE_URL. The service applies migrations itself at start (packages/db/src/migrate.ts).
 */
import fs from 'node:fs';
import path from 'node:path';
import { loadConfig } from '@boxes/config';
import { diffMigrationsToSchema, migrationsDir, packageDir, runPrisma, writeSchemaCopy } from './diff';

const [command, name, flag] = process.argv.slice(2);
// What the schema cannot say (CHECK constraints, triggers) goes into a migration written by hand: `--empty`
// creates it, named and stamped like any other, when the schema itself has not changed.
const empty = flag === '--empty';
const workDir = path.join(packageDir, '.tmp');

function fail(message: string): never {
  console.error(`db-migrate: ${message}`);
  process.exit(1);
}

const config = loadConfig();
if (command === 'new') {
  if (!name || !/^[a-z0-9_]+$/.test(name) || (flag !== undefined && !empty)) fail('usage: pnpm db:migrate:new <snake_case_name> [--empty]');
  const dev = new URL(config.directDatabaseUrl);
  dev.pathname = '/boxes_migrate_dev';
  // `migrate diff` replays the existing migrations into the shadow database and diffs the result against
  // the schema. (`migrate dev` cannot run here: its data-loss check wants a shadow factory the WASM engine lacks.)
  // Both databases are throw-away, recreated on each run.
  let sql = await diffMigrationsToSchema(dev.toString(), workDir).catch((err: Error) => fail(err.message));
  if (!sql) {
    if (!empty) {
      console.log('db-migrate: prisma/schema.prisma matches the migrations; nothing to write (--empty writes a migration to fill by hand).');
      process.exit(0);
    }
    sql = '-- Written by hand: prisma/schema.prisma matched the migrations when this was created.';
  } else if (empty) {
    fail('prisma/schema.prisma differs from the migrations: write that migration first, without --empty.');
  }
  const stamp = new Date().toISOString().replace(/\D/g, '').slice(0, 14);
  const target = path.join(migrationsDir, `${stamp}_${name}`);
  fs.mkdirSync(target, { recursive: true });
  fs.writeFileSync(path.join(target, 'migration.sql'), `${sql}\n`);
  console.log(`db-migrate: wrote prisma/migrations/${stamp}_${name}/migration.sql; review it and commit it.`);
  process.exit(0);
} else if (command === 'status') {
  process.exit((await runPrisma(['migrate', 'status'], config.directDatabaseUrl, writeSchemaCopy(workDir), false)).status);
} else {
  fail('commands: new <name> | status');
}
