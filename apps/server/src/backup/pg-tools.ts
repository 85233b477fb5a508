/**
 * PostgreSQL's own pg_dump and pg_restore, of a version that fits the server: pg_dump must be of the server's
 * major version or newer (it refuses an older one), and pg_restore at least as new as the pg_dump that wrote the
 * archive. Looked for in --pg-bin, then where Debian (/usr/lib/postgresql/<major>/bin) and the PGDG packages
 * for RHEL (/usr/pgsql-<major>/bin) put each version, then on PATH; the server's own major is preferred.
 * The connection goes to them as libpq environment variables, so a password never shows in a process list.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { BackupError } from './archive';

export interface PgTool {
  path: string;
  /** What `--version` printed, e.g. "pg_dump (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)". */
  version: string;
  major: number;
}

function versionOf(file: string): PgTool | null {
  const r = spawnSync(file, ['--version'], { encoding: 'utf8' });
  if (r.status !== 0) return null;
  const version = r.stdout.trim();
  const m = /\(PostgreSQL\)\s+(\d+)/.exec(version);
  return m ? { path: file, version, major: Number(m[1]) } : null;
}

function candidates(tool: 'pg_dump' | 'pg_restore', binDir: string | undefined): string[] {
  if (binDir) return [path.join(binDir, tool)];
  const out: string[] = [];
  for (const root of ['/usr/lib/postgresql', '/usr/local/lib/postgresql']) {
    try {
      for (const v of fs.readdirSync(root)) out.push(path.join(root, v, 'bin', tool));
    } catch {
      /* not this layout */
    }
  }
  try {
    for (const d of fs.readdirSync('/usr')) if (/^pgsql-\d+$/.test(d)) out.push(path.join('/usr', d, 'bin', tool));
  } catch {
    /* no /usr */
  }
  for (const dir of (process.env.PATH ?? '').split(path.delimiter).filter(Boolean)) out.push(path.join(dir, tool));
  return [...new Set(out)].filter((f) => fs.existsSync(f));
}

/**
 * The tool to use with a server of major version `serverMajor`: the same major when installed, else the oldest
 * newer one; `atLeast` raises the floor (pg_restore of an archive from a newer pg_dump).
 */
export function findPgTool(tool: 'pg_dump' | 'pg_restore', serverMajor: number, opts: { binDir?: string | undefined; atLeast?: number } = {}): PgTool {
  const floor = Math.max(serverMajor, opts.atLeast ?? 0);
  const found = candidates(tool, opts.binDir)
    .map(versionOf)
    .filter((t): t is PgTool => t !== null);
  const fit = found.filter((t) => t.major >= floor).sort((a, b) => a.major - b.major);
  const best = fit.find((t) => t.major === serverMajor) ?? fit[0];
  if (!best) {
    const have = found.length ? found.map((t) => `${t.path} (${t.major})`).join(', ') : 'none found';
    throw new BackupError(
      `${tool} ${floor} or newer is needed for PostgreSQL ${serverMajor}; installed: ${have}. Install the client of that version ` +
        `(Debian: apt-get install postgresql-client-${floor}) or name its directory with --pg-bin`,
    );
  }
  return best;
}

/** libpq's environment for a postgresql:// URL (what pg_dump and pg_restore read instead of a URL in argv). */
export function libpqEnv(databaseUrl: string): Record<string, string> {
  const u = new URL(databaseUrl);
  const env: Record<string, string> = {
    PGHOST: decodeURIComponent(u.hostname.replace(/^\[|\]$/g, '')) || 'localhost',
    PGPORT: u.port || '5432',
    PGDATABASE: decodeURIComponent(u.pathname.slice(1)),
  };
  if (u.username) env.PGUSER = decodeURIComponent(u.username);
  if (u.password) env.PGPASSWORD = decodeURIComponent(u.password);
  const params: Record<string, string> = {
    sslmode: 'PGSSLMODE',
    sslrootcert: 'PGSSLROOTCERT',
    sslcert: 'PGSSLCERT',
    sslkey: 'PGSSLKEY',
    host: 'PGHOST',
    port: 'PGPORT',
    user: 'PGUSER',
    password: 'PGPASSWORD',
    application_name: 'PGAPPNAME',
    connect_timeout: 'PGCONNECT_TIMEOUT',
    options: 'PGOPTIONS',
  };
  for (const [k, v] of u.searchParams) if (params[k]) env[params[k]!] = v;
  return env;
}

/**
 * Runs a PostgreSQL tool; its stderr goes into the error when it fails; with pipeStdout its output is a stream.
 * stop() ends it if it still runs (a caller that fails part way must not leave it working, or waiting on a pipe).
 */
export function runPgTool(
  tool: PgTool,
  args: string[],
  databaseUrl: string,
  opts: { pipeStdout?: boolean } = {},
): { done: Promise<void>; stdout: NodeJS.ReadableStream | null; stop: () => void } {
  // The tool's own environment, not the caller's PG* variables (they would name another server).
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('PG'))) as Record<string, string>;
  const child = spawn(tool.path, args, { env: { ...base, ...libpqEnv(databaseUrl) }, stdio: ['ignore', opts.pipeStdout ? 'pipe' : 'ignore', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => {
    if (err.length < 20_000) err += d.toString();
  });
  const done = new Promise<void>((resolve, reject) => {
    child.on('error', (e) => reject(new BackupError(`${path.basename(tool.path)} could not run: ${e.message}`)));
    child.on('close', (code, signal) =>
      code === 0 ? resolve() : reject(new BackupError(`${path.basename(tool.path)} failed (${code ?? signal}): ${err.trim() || 'no message'}`)),
    );
  });
  const stop = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  };
  return { done, stdout: child.stdout, stop };
}
