/**
 * Names and URLs of the test databases, derived from TEST_DATABASE_URL or DATABASE_URL (default: local
 * PostgreSQL). Every run has its own prefix, so runs that share a server never drop each other's databases.
 */
export const TEST_DB_PREFIX = 'boxes_test_';
/** Runs whose databases are older than this are abandoned (killed runs); the next run drops them. */
export const STALE_AFTER_SECONDS = 6 * 60 * 60;

function base(): URL {
  return new URL(process.env.TEST_DATABASE_URL ?? process.env.DATABASE_URL ?? 'postgresql://postgres@127.0.0.1:5432/boxes');
}

export function databaseUrlFor(name: string): string {
  const u = base();
  u.pathname = `/${name}`;
  return u.toString();
}

export function adminUrl(): string {
  return databaseUrlFor('postgres');
}

/** A run id: its start time in seconds (to find stale runs) and randomness (to tell concurrent runs apart). */
export function newRunId(): string {
  return `${Math.floor(Date.now() / 1000)}_${Math.random().toString(36).slice(2, 8)}`;
}

export const templateName = (runId: string): string => `${TEST_DB_PREFIX}${runId}_template`;

/** The start time (seconds) encoded in a test database name, or null if the name is not one of ours. */
export function runStartOf(name: string): number | null {
  const m = new RegExp(`^${TEST_DB_PREFIX}(\\d{10})_`).exec(name);
  return m ? Number(m[1]) : null;
}

declare module 'vitest' {
  export interface ProvidedContext {
    /** Set by global-setup.ts for the test files of one run. */
    boxesRunId: string;
  }
}
