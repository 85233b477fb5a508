/**
 * The test tiers (docs/development.md):
 *   unit    no services at all: parsers, schemas, pure logic (packages/apps src *.test.ts)
 *   db      against a real PostgreSQL, no HTTP (src *.pg.test.ts)
 *   e2e     the servers on ephemeral ports with real clients (tests/e2e)
 *   system  what takes a browser, kills processes, fuzzes, packs or builds (tests/e2e, listed in SYSTEM)
 * `pnpm test` runs typecheck, unit and db (a contributor's loop); `pnpm test:all` runs every tier (CI).
 */
import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

const SYSTEM = [
  'tests/e2e/*-browser.test.ts',
  'tests/e2e/faults.test.ts',
  'tests/e2e/mx-faults.test.ts',
  'tests/e2e/scale-out.test.ts',
  'tests/e2e/openapi-fuzz.test.ts',
  'tests/e2e/sdk-package.test.ts',
  'tests/e2e/production-build.test.ts',
  'tests/e2e/supervisor.test.ts',
  'tests/e2e/container-image.test.ts',
  'tests/e2e/readme.test.ts',
  'tests/e2e/bulk-volume.test.ts',
  'tests/e2e/backup-restore.test.ts',
  'tests/e2e/redis-sentinel.test.ts',
];
const SOURCES = ['apps/*/src/**/*.test.ts', 'packages/*/src/**/*.test.ts'];
const PG = ['apps/*/src/**/*.pg.test.ts', 'packages/*/src/**/*.pg.test.ts'];
const withServices = { globalSetup: ['packages/testing/src/global-setup.ts'] };

export default defineConfig({
  test: {
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // Vitest runs one file fewer at a time than there are cores: one on a 2-core machine, where most files wait on
    // servers, sockets and timers rather than compute. Two at a time there took the whole run (every tier) from
    // 1,150 s to 759 s; with more cores, Vitest's own default.
    maxWorkers: Math.max(2, availableParallelism() - 1),
    projects: [
      { extends: true, test: { name: 'unit', include: SOURCES, exclude: PG } },
      { extends: true, test: { name: 'db', include: PG, ...withServices } },
      { extends: true, test: { name: 'e2e', include: ['tests/e2e/**/*.test.ts'], exclude: SYSTEM, ...withServices } },
      { extends: true, test: { name: 'system', include: SYSTEM, ...withServices } },
    ],
  },
});
