/**
 * A test's own PostgreSQL cluster and Redis server on ephemeral ports, which the test may stop, kill and start
 * again (fault tests). PostgreSQL: Debian's binaries (/usr/lib/postgresql/<version>/bin), initdb into a
 * temporary directory; the server refuses to run as root, so as root it runs as the `postgres` user. Redis:
 * redis-server from the PATH, with an append-only file so that a restart keeps what it acknowledged. Also
 * PgBouncer in transaction mode in front of a PostgreSQL, and a Redis primary with a replica under three
 * sentinels (failover tests).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { connectRedis } from '@boxes/jobs';
import { freePort, waitForPort } from './ports';

export { freePort } from './ports';

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

/** Debian's pgbouncer (/usr/sbin, not always on a user's PATH), or null. */
export function pgbouncerPath(): string | null {
  for (const p of ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer']) if (fs.existsSync(p)) return p;
  try {
    return execFileSync('sh', ['-c', 'command -v pgbouncer'], { encoding: 'utf8' }).trim() || null;
  } catch {
    return null;
  }
}

export interface PgBouncer {
  port: number;
  /** The pooled URL of a database: the direct URL with PgBouncer's address. */
  pooled(directUrl: string): string;
  /** A statement on PgBouncer's admin console (SHOW POOLS, SHOW SERVERS, ...): its rows. */
  admin<R = Record<string, unknown>>(statement: string): Promise<R[]>;
  /** The generated configuration, as written. */
  ini: string;
  stop(): Promise<void>;
}

/**
 * PgBouncer in transaction pooling mode in front of the PostgreSQL of `directUrl` (any database of that server:
 * a `*` entry, or only `databases`), on a free loopback port, with a generated configuration in a temporary directory. poolSize is
 * the server connections per database and user: smaller than the service's own pool, so clients share them.
 * PgBouncer refuses to run as root; as root it switches to the `postgres` user (-u).
 */
export async function startPgBouncer(directUrl: string, opts: { poolSize?: number; databases?: string[] } = {}): Promise<PgBouncer> {
  const bin = pgbouncerPath();
  if (!bin) throw new Error('pgbouncer not found (apt-get install pgbouncer; scripts/start-services.sh installs it)');
  const server = new URL(directUrl);
  const user = decodeURIComponent(server.username || 'postgres');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-pgbouncer-'));
  const port = await freePort();
  const target = [`host=${server.hostname.replace(/^\[|\]$/g, '')}`, `port=${server.port || 5432}`, `user=${user}`];
  if (server.password) target.push(`password=${decodeURIComponent(server.password)}`);
  const ini = [
    '[databases]',
    // Only these databases when named (a client asking for another is refused), else any of the server's.
    ...(opts.databases ? opts.databases.map((d) => `${d} = ${target.join(' ')} dbname=${d}`) : [`* = ${target.join(' ')}`]),
    '',
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    'unix_socket_dir =',
    // Clients are the tests' own processes on loopback; PgBouncer still wants the user in its auth file.
    'auth_type = trust',
    `auth_file = ${path.join(dir, 'userlist.txt')}`,
    'pool_mode = transaction',
    `default_pool_size = ${opts.poolSize ?? 5}`,
    'min_pool_size = 0',
    'reserve_pool_size = 0',
    'max_client_conn = 1000',
    `admin_users = ${user}`,
    `stats_users = ${user}`,
    'ignore_startup_parameters = extra_float_digits',
    // Transaction mode resets nothing between clients; a session setting would leak to the next one.
    'server_reset_query =',
    `logfile = ${path.join(dir, 'pgbouncer.log')}`,
    `pidfile = ${path.join(dir, 'pgbouncer.pid')}`,
    '',
  ].join('\n');
  fs.writeFileSync(path.join(dir, 'pgbouncer.ini'), ini);
  fs.writeFileSync(path.join(dir, 'userlist.txt'), `"${user}" ""\n`);
  if (isRoot()) execFileSync('chown', ['-R', 'postgres:postgres', dir]);
  const child = spawn(bin, [...(isRoot() ? ['-u', 'postgres'] : []), path.join(dir, 'pgbouncer.ini')], { stdio: 'ignore' });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    await waitForPort(port, 15_000);
  } catch (err) {
    child.kill('SIGKILL');
    const log = fs.existsSync(path.join(dir, 'pgbouncer.log')) ? fs.readFileSync(path.join(dir, 'pgbouncer.log'), 'utf8') : '';
    throw new Error(`${(err as Error).message}: pgbouncer did not start\n${log.slice(-2000)}`);
  }
  return {
    port,
    ini,
    pooled(url) {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    async admin<R>(statement: string): Promise<R[]> {
      const c = new pg.Client({ connectionString: `postgresql://${encodeURIComponent(user)}@127.0.0.1:${port}/pgbouncer` });
      await c.connect();
      try {
        return (await c.query(statement)).rows as R[];
      } finally {
        await c.end();
      }
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        await exited;
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface RedisNode {
  port: number;
  /** SIGKILL: the process dies at once, with whatever it had not yet sent to its replica. */
  kill(): Promise<void>;
  running(): boolean;
}

export interface PrivateRedisSentinel {
  /** The master group name the sentinels monitor. */
  name: string;
  /** The primary first, then the replica. */
  nodes: RedisNode[];
  sentinelPorts: number[];
  /** The service's settings: REDIS_SENTINELS and REDIS_SENTINEL_NAME. */
  env: Record<string, string>;
  /** The port of the primary, as the sentinels report it now. */
  primaryPort(): Promise<number>;
  /** The sentinels' logs so far (for a failure's message). */
  logs(): string;
  destroy(): Promise<void>;
}

/** One command to a Redis or Sentinel on loopback (a client of its own, closed after). */
export async function redisCommand(port: number, ...args: (string | number)[]): Promise<unknown> {
  const r = connectRedis(`redis://127.0.0.1:${port}`, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  r.on('error', () => undefined);
  try {
    await r.connect();
    return await r.call(String(args[0]), ...args.slice(1).map(String));
  } finally {
    r.disconnect();
  }
}

/**
 * One primary and one replica (redis-server, no persistence: a replica is the copy) and three sentinels
 * (`redis-server --sentinel`, Debian's redis-sentinel is the same binary) monitoring them with quorum 2, all on
 * free loopback ports. The primary is declared down after downAfterMs without an answer. Resolves once the
 * replica is in sync and every sentinel knows the replica and the other sentinels (SENTINEL CKQUORUM).
 */
export async function startPrivateRedisSentinel(opts: { name?: string; downAfterMs?: number } = {}): Promise<PrivateRedisSentinel> {
  const bin = redisServerPath();
  if (!bin) throw new Error('redis-server not found on the PATH (apt-get install redis-server)');
  const name = opts.name ?? 'boxes';
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-sentinel-'));
  const children: ChildProcess[] = [];
  const spawnRedis = (args: string[]): ChildProcess => {
    const c = spawn(bin, args, { stdio: 'ignore' });
    children.push(c);
    return c;
  };
  const node = async (replicaOf: number | null): Promise<RedisNode> => {
    const port = await freePort();
    const d = path.join(dir, `redis-${port}`);
    fs.mkdirSync(d);
    const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', d, '--save', '', '--appendonly', 'no'];
    const c = spawnRedis([...args, ...(replicaOf ? ['--replicaof', '127.0.0.1', String(replicaOf)] : [])]);
    await waitForPort(port, 30_000);
    return {
      port,
      running: () => c.exitCode === null && c.signalCode === null,
      kill: () =>
        new Promise<void>((resolve) => {
          if (c.exitCode !== null || c.signalCode !== null) return resolve();
          c.once('exit', () => resolve());
          c.kill('SIGKILL');
        }),
    };
  };
  try {
    const primary = await node(null);
    const replica = await node(primary.port);
    const end = Date.now() + 30_000;
    while (!/slave0:.*state=online/.test(String(await redisCommand(primary.port, 'INFO', 'replication')))) {
      if (Date.now() > end) throw new Error('the replica did not come in sync');
      await new Promise((r) => setTimeout(r, 100));
    }
    const sentinelPorts: number[] = [];
    for (let i = 0; i < 3; i++) {
      const port = await freePort();
      const conf = path.join(dir, `sentinel-${port}.conf`);
      fs.writeFileSync(
        conf,
        [
          `port ${port}`,
          'bind 127.0.0.1',
          `dir ${dir}`,
          `logfile ${path.join(dir, `sentinel-${port}.log`)}`,
          `sentinel monitor ${name} 127.0.0.1 ${primary.port} 2`,
          `sentinel down-after-milliseconds ${name} ${opts.downAfterMs ?? 1000}`,
          `sentinel failover-timeout ${name} 10000`,
          `sentinel parallel-syncs ${name} 1`,
          '',
        ].join('\n'),
      );
      spawnRedis([conf, '--sentinel']);
      await waitForPort(port, 30_000);
      sentinelPorts.push(port);
    }
    const ready = async (port: number) => {
      const replicas = (await redisCommand(port, 'SENTINEL', 'REPLICAS', name)) as string[][];
      const quorum = await redisCommand(port, 'SENTINEL', 'CKQUORUM', name).catch(() => null);
      return replicas.length === 1 && typeof quorum === 'string' && quorum.includes('3 usable Sentinels');
    };
    for (const port of sentinelPorts) {
      while (!(await ready(port))) {
        if (Date.now() > end + 30_000) throw new Error(`sentinel ${port} did not see the replica and the other sentinels`);
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    return {
      name,
      nodes: [primary, replica],
      sentinelPorts,
      env: { REDIS_SENTINELS: sentinelPorts.map((p) => `127.0.0.1:${p}`).join(','), REDIS_SENTINEL_NAME: name },
      logs() {
        return sentinelPorts
          .map((p) => {
            const f = path.join(dir, `sentinel-${p}.log`);
            return `--- sentinel :${p}\n${fs.existsSync(f) ? fs.readFileSync(f, 'utf8') : '(no log)'}`;
          })
          .join('\n');
      },
      async primaryPort() {
        for (const port of sentinelPorts) {
          const addr = (await redisCommand(port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name).catch(() => null)) as string[] | null;
          if (addr) return Number(addr[1]);
        }
        throw new Error('no sentinel answers');
      },
      async destroy() {
        await Promise.all(
          children.map(
            (c) =>
              new Promise<void>((resolve) => {
                if (c.exitCode !== null || c.signalCode !== null) return resolve();
                c.once('exit', () => resolve());
                c.kill('SIGKILL');
              }),
          ),
        );
        fs.rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    for (const c of children) c.kill('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}
