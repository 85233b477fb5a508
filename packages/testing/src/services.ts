/**
 * A test's own PostgreSQL cluster and Redis server on ephemeral ports, which the test may stop, kill and start
 * again (fault tests). PostgreSQL: Debian's binaries (/usr/lib/postgresql/<version>/bin), initdb into a
 * temporary directory; the server refuses to run as root, so as root it runs as the `postgres` user. Redis:
 * redis-server from the PATH, with an append-only file so that a restart keeps what it acknowledged.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

/** A TCP port on 127.0.0.1 that was free a moment ago (bound and released: for the servers a test starts). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

async function waitForPort(port: number, ms: number): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const c = net.connect({ host: '127.0.0.1', port });
      c.once('connect', () => (c.destroy(), resolve(true)));
      c.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > end) throw new Error(`nothing answers on 127.0.0.1:${port} after ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The bin directory of the newest PostgreSQL installed from Debian's packages, or null. */
export function postgresBinDir(): string | null {
  const root = '/usr/lib/postgresql';
  if (!fs.existsSync(root)) return null;
  const versions = fs
    .readdirSync(root)
    .filter((v) => fs.existsSync(path.join(root, v, 'bin', 'pg_ctl')))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] ? path.join(root, versions[0], 'bin') : null;
}

export function redisServerPath(): string | null {
  try {
    return execFileSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' }).trim() || null;
  } catch {
    return null;
  }
}

const isRoot = () => process.getuid?.() === 0;

export interface PrivatePostgres {
  port: number;
  /** postgresql://postgres@127.0.0.1:<port>/<database> */
  urlFor(database: string): string;
  /** Stops the server: mode fast (clients are disconnected, a clean shutdown) or immediate (like a crash). */
  stop(mode?: 'fast' | 'immediate'): Promise<void>;
  start(): Promise<void>;
  /** Stops it and removes its directory. */
  destroy(): Promise<void>;
}

export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const bin = postgresBinDir();
  if (!bin) throw new Error('PostgreSQL server binaries not found under /usr/lib/postgresql (apt-get install postgresql)');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-pg-'));
  const data = path.join(dir, 'data');
  const asOwner = (file: string, args: string[]) => {
    // As root, the postgres user runs it (the server refuses root); otherwise the current user does.
    const [cmd, argv] = isRoot() ? ['runuser', ['-u', 'postgres', '--', file, ...args]] : [file, args];
    return execFileSync(cmd as string, argv as string[], { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' });
  };
  if (isRoot()) execFileSync('chown', ['postgres:postgres', dir]);
  fs.chmodSync(dir, 0o700);
  asOwner(path.join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--no-sync', '--no-instructions']);
  const port = await freePort();
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200`;
  const pgCtl = (args: string[]) => asOwner(path.join(bin, 'pg_ctl'), ['-D', data, ...args]);
  const handle: PrivatePostgres = {
    port,
    urlFor: (database) => `postgresql://postgres@127.0.0.1:${port}/${database}`,
    async start() {
      try {
        pgCtl(['status']);
        return; // already running
      } catch {
        /* not running: start it */
      }
      pgCtl(['-o', options, '-l', path.join(dir, 'server.log'), '-w', '-t', '60', 'start']);
      await waitForPort(port, 30_000);
    },
    async stop(mode = 'fast') {
      pgCtl(['-m', mode, '-w', '-t', '60', 'stop']);
    },
    async destroy() {
      try {
        pgCtl(['-m', 'immediate', '-w', 'stop']);
      } catch {
        /* not running */
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  await handle.start();
  return handle;
}

export interface PrivateRedis {
  port: number;
  url: string;
  /** SIGTERM (Redis writes its append-only file and exits) or SIGKILL. */
  stop(signal?: 'SIGTERM' | 'SIGKILL'): Promise<void>;
  start(): Promise<void>;
  destroy(): Promise<void>;
}

export async function startPrivateRedis(): Promise<PrivateRedis> {
  const bin = redisServerPath();
  if (!bin) throw new Error('redis-server not found on the PATH (apt-get install redis-server)');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-redis-'));
  const port = await freePort();
  let child: ChildProcess | null = null;
  const handle: PrivateRedis = {
    port,
    url: `redis://127.0.0.1:${port}`,
    async start() {
      if (child && child.exitCode === null) return; // already running
      child = spawn(bin, ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'yes', '--appendfsync', 'always'], {
        stdio: 'ignore',
      });
      await waitForPort(port, 30_000);
    },
    async stop(signal = 'SIGTERM') {
      const c = child;
      child = null;
      if (!c || c.exitCode !== null) return;
      await new Promise<void>((resolve) => {
        c.once('exit', () => resolve());
        c.kill(signal);
      });
    },
    async destroy() {
      await handle.stop('SIGKILL');
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  await handle.start();
  return handle;
}
