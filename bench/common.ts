/**
 * Shared by the benchmarks: a fresh database (dropped at the end), the runtime on ephemeral ports of
 * 127.0.0.1 with its own Redis key prefix (deleted at the end), keep-alive HTTP, signup, and a few numbers.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import http from 'node:http';
import { availableParallelism, cpus, loadavg } from 'node:os';
import { createCipheriv, generateKeyPairSync, randomBytes, sign as cryptoSign } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { generate } from 'selfsigned';
import { SMTPServer } from 'smtp-server';
import { loadConfig, type Config } from '@boxes/config';
import { ensureDatabase, migrate } from '@boxes/db';
import type { MxResolver } from '@boxes/mail';
import { deleteKeysWithPrefix } from '@boxes/jobs';
import { createLogger, publicUrlFollowsPort, startRuntime, type Runtime } from '@boxes/server';
import { freePort, waitForPort } from '@boxes/testing/ports';

export { freePort, waitForPort };

export function envInt(name: string, fallback: number, min = 1, max = 1_000_000): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${name} must be an integer from ${min} to ${max} (got "${raw}")`);
  return n;
}

const LOCAL_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);

/** A URL from the environment (or the default), refused unless it points at this machine. */
function localUrl(name: string, fallback: string): URL {
  const u = new URL(process.env[name] || fallback);
  if (!LOCAL_HOSTS.has(u.hostname)) throw new Error(`${name} must point at 127.0.0.1 for a benchmark (got ${u.hostname})`);
  return u;
}

export interface BenchDatabase {
  name: string;
  url: string;
  drop(): Promise<void>;
}

/** A fresh database boxes_bench_<random> with every migration applied. */
export async function createBenchDatabase(): Promise<BenchDatabase> {
  const base = localUrl('DATABASE_URL', 'postgresql://postgres@127.0.0.1:5432/boxes');
  const name = `boxes_bench_${randomBytes(5).toString('hex')}`;
  const url = new URL(base);
  url.pathname = `/${name}`;
  const admin = new URL(base);
  admin.pathname = '/postgres';
  await ensureDatabase(url.toString());
  await migrate(url.toString());
  return {
    name,
    url: url.toString(),
    async drop() {
      const c = new pg.Client({ connectionString: admin.toString(), connectionTimeoutMillis: 5000 });
      await c.connect();
      try {
        await c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      } finally {
        await c.end();
      }
    },
  };
}

/** The apps `boxes start <app...>` runs (apps/server/src/main.ts). */
export type AppName = 'server' | 'worker' | 'mx' | 'push' | 'dns';

/** Apps running as their own OS process (`boxes start <app...>`), as production and `pnpm start` run them. */
export interface AppProcess {
  /** The apps it runs, joined with '+': 'worker', 'mx', 'push'. */
  name: string;
  pid: number;
  child: ChildProcess;
  /** The listeners it was given (free ports of 127.0.0.1): smtp, imap, submission (mx), mqtt (push), http (server). */
  ports: Partial<Record<'http' | 'smtp' | 'imap' | 'submission' | 'mqtt', number>>;
  /** SIGTERM (graceful: in-flight jobs and SMTP transactions finish), then waits for the exit. */
  stop(): Promise<void>;
}

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/**
 * What a process the bench starts inherits from the bench's own environment: only what Node and the shell need,
 * so its configuration is exactly the env given (no relay, static route or listener from the caller's shell).
 */
function baseEnv(): Record<string, string> {
  const keep = ['PATH', 'HOME', 'TMPDIR', 'LANG', 'TZ', 'NODE_OPTIONS', 'NODE_PATH', 'BOXES_GC_EXTERNAL_IN_LIMIT', 'BOXES_GC_SMALL_YOUNG'];
  // glibc's allocator settings (MALLOC_ARENA_MAX, MALLOC_TRIM_THRESHOLD_, ...) reach the app processes as an operator's would.
  return Object.fromEntries(
    Object.keys(process.env)
      .filter((k) => keep.includes(k) || k.startsWith('MALLOC_'))
      .map((k) => [k, process.env[k]!]),
  );
}

/**
 * Starts apps as their own OS process (`node --import tsx apps/server/src/cli.ts start <apps...>`, or compiled:
 * `NODE_ENV=production node apps/server/dist/cli.mjs start <apps...>`, built beforehand) with the given
 * environment (the same DATABASE_URL, REDIS_URL, REDIS_PREFIX, BOXES_SECRET_KEY and settings as the rest of the
 * bench), each listener of those apps on a free port of 127.0.0.1 (the DNS server on an ephemeral one). Resolves
 * once the process says it is running and its TCP listeners accept connections.
 */
export async function startAppProcess(apps: AppName[], env: Record<string, string>, timeoutMs = 120_000, compiled = false): Promise<AppProcess> {
  const ports: AppProcess['ports'] = {};
  if (apps.includes('server')) ports.http = await freePort();
  if (apps.includes('mx')) {
    ports.smtp = await freePort();
    ports.imap = await freePort();
    ports.submission = await freePort();
  }
  if (apps.includes('push')) ports.mqtt = await freePort();
  const listeners: Record<string, string> = {
    ...(ports.http ? { PORT: String(ports.http) } : {}),
    ...(ports.smtp ? { SMTP_PORT: String(ports.smtp), IMAP_PORT: String(ports.imap), SUBMISSION_PORT: String(ports.submission) } : {}),
    ...(ports.mqtt ? { MQTT_PORT: String(ports.mqtt) } : {}),
    ...(apps.includes('dns') ? { DNS_PORT: '0' } : {}),
  };
  const name = apps.join('+');
  // Compiled: the bundle `pnpm build` makes (apps/server/dist/cli.mjs), as `pnpm start:prod` runs it.
  const entry = compiled ? [path.join(repoRoot, 'apps/server/dist/cli.mjs')] : ['--import', 'tsx', path.join(repoRoot, 'apps/server/src/cli.ts')];
  // BENCH_APP_PROF=<dir>: each app process writes a CPU profile there when it stops (node --cpu-prof).
  const prof = process.env.BENCH_APP_PROF ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(process.env.BENCH_APP_PROF)}`] : [];
  // BENCH_APP_NODE_ARGS: more node options for the app processes, ones NODE_OPTIONS does not take (--trace-gc).
  const nodeArgs = process.env.BENCH_APP_NODE_ARGS?.split(/\s+/).filter(Boolean) ?? [];
  const child = spawn(process.execPath, [...nodeArgs, ...prof, ...entry, 'start', ...apps], {
    cwd: repoRoot,
    env: { ...baseEnv(), ...(compiled ? { NODE_ENV: 'production' } : {}), ...env, ...listeners },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  // BENCH_APP_OUT=<file>: each app process's output is also appended there (with NODE_OPTIONS=--trace-gc, its
  // garbage collections).
  if (process.env.BENCH_APP_OUT) {
    const file = path.resolve(process.env.BENCH_APP_OUT);
    const tee = (d: Buffer) => appendFileSync(file, d);
    child.stdout!.on('data', tee);
    child.stderr!.on('data', tee);
  }
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    await waitAtMost(exited, 15_000);
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    child.stdout!.destroy();
    child.stderr!.destroy();
  };
  try {
    const end = Date.now() + timeoutMs;
    while (!/boxes: running /.test(out)) {
      if (child.exitCode !== null) throw new Error(`the ${name} process exited ${child.exitCode}: ${out.slice(-2000)}`);
      if (Date.now() > end) throw new Error(`the ${name} process did not start within ${timeoutMs / 1000} s: ${out.slice(-2000)}`);
      await sleep(50);
    }
    for (const port of Object.values(ports)) await waitForPort(port, Math.max(1000, end - Date.now()));
  } catch (err) {
    await stop();
    throw err;
  }
  return { name, pid: child.pid!, child, ports, stop };
}

export interface BenchRuntime {
  runtime: Runtime;
  config: Config;
  /** The settings the runtime was loaded from (what an app process of this run is given too). */
  env: Record<string, string>;
  secretKey: Buffer;
  apiBase: string;
  /** The MX's port: in this process, or the MX process's. */
  smtpPort: number | null;
  /** The MQTT broker's port: in this process, or the push process's. */
  mqttPort: number | null;
  /** Apps running as their own processes (opts.processes), in start order; empty when all run here. */
  procs: AppProcess[];
  /** name -> pid of each app process, for CpuMeter and RssMeter. */
  pids: Record<string, number>;
  /** Deletes this run's Redis keys and stops every app. */
  stop(): Promise<void>;
}

export async function startBenchRuntime(
  db: BenchDatabase,
  opts: {
    worker: boolean;
    mail: boolean;
    /** The MQTT broker (default: in this process only when all apps run here). */
    push?: boolean;
    resolver?: MxResolver;
    env?: Record<string, string>;
    /**
     * Run the worker, the MX and the MQTT broker (those of them asked for) as their own processes (`boxes start
     * <app>`), the HTTP server alone in this process; env is given to those processes only (a resolver cannot
     * cross a process: SMTP_RELAY_URL or SMTP_STATIC_ROUTES route their mail). The worker publishes MQTT through
     * the push process when there is one. workers: how many worker processes (default 1), named `worker 1`,
     * `worker 2`, ... when more than one; they share the queues as any workers of one instance do.
     */
    processes?: { env?: Record<string, string>; compiled?: boolean; workers?: number };
  },
): Promise<BenchRuntime> {
  const redisUrl = localUrl('REDIS_URL', 'redis://127.0.0.1:6379');
  // Only what the benchmark decides: no relay, static route or listener from the caller's environment.
  const env: Record<string, string> = {
    HOST: '127.0.0.1',
    PORT: '0',
    SMTP_HOST: '127.0.0.1',
    SMTP_PORT: '0',
    MQTT_HOST: '127.0.0.1',
    MQTT_PORT: '0',
    IMAP_HOST: '127.0.0.1',
    IMAP_PORT: '0',
    SUBMISSION_HOST: '127.0.0.1',
    SUBMISSION_PORT: '0',
    // Another benchmark or instance may hold the default 1053.
    DNS_HOST: '127.0.0.1',
    DNS_PORT: '0',
    DATABASE_URL: db.url,
    REDIS_URL: redisUrl.toString(),
    REDIS_PREFIX: `boxes-bench-${randomBytes(5).toString('hex')}`,
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL || 'error',
    SIGNUP_RATE_LIMIT_PER_HOUR: '0',
    // A benchmark drives thousands of calls a minute through one key.
    KEY_RATE_LIMIT_PER_MINUTE: '0',
    ...(process.env.DELIVERY_CONCURRENCY ? { DELIVERY_CONCURRENCY: process.env.DELIVERY_CONCURRENCY } : {}),
    ...opts.env,
  };
  const config = loadConfig(env);
  const poolSize = process.env.BENCH_DB_POOL ? envInt('BENCH_DB_POOL', 20, 1, 90) : undefined;
  const secretKey = randomBytes(32);
  const separate = opts.processes;
  const runtime = await startRuntime(config, {
    secretKey,
    worker: opts.worker && !separate,
    mail: opts.mail && !separate,
    push: !separate && opts.push !== false,
    dns: !separate,
    ...(opts.resolver ? { resolver: opts.resolver } : {}),
    ...(poolSize ? { dbPoolSize: poolSize } : {}),
    log: createLogger(config.logLevel),
    onListening: publicUrlFollowsPort(config),
  });
  const procs: AppProcess[] = [];
  const stopProcs = async () => {
    // The worker first (it publishes through the broker), then the rest.
    for (const p of [...procs].reverse()) await p.stop();
  };
  if (separate) {
    try {
      const childEnv = { ...env, BOXES_SECRET_KEY: secretKey.toString('hex'), DELIVERY_CONCURRENCY: String(config.deliveryConcurrency), ...separate.env };
      if (opts.push) procs.push(await startAppProcess(['push'], childEnv));
      const broker = procs.find((p) => p.name === 'push');
      if (opts.mail) procs.push(await startAppProcess(['mx'], childEnv, undefined, separate.compiled));
      const workers = opts.worker ? (separate.workers ?? 1) : 0;
      for (let n = 1; n <= workers; n++) {
        const p = await startAppProcess(['worker'], { ...childEnv, ...(broker ? { MQTT_BROKER_URL: `mqtts://127.0.0.1:${broker.ports.mqtt}` } : {}) });
        procs.push(workers > 1 ? { ...p, name: `worker ${n}` } : p);
      }
    } catch (err) {
      await stopProcs();
      await runtime.stop();
      throw err;
    }
  }
  const byName = (n: string) => procs.find((p) => p.name === n);
  return {
    runtime,
    config,
    env,
    secretKey,
    apiBase: `${runtime.server!.url}/api/v1`,
    smtpPort: runtime.mail?.port ?? byName('mx')?.ports.smtp ?? null,
    mqttPort: runtime.push?.port ?? byName('push')?.ports.mqtt ?? null,
    procs,
    pids: Object.fromEntries(procs.map((p) => [p.name, p.pid])),
    async stop() {
      try {
        await stopProcs();
        await runtime.stop();
      } finally {
        await deleteKeysWithPrefix(config, config.redisPrefix);
      }
    },
  };
}

export interface HttpResult {
  status: number;
  body: any;
  ms: number;
}

/** One JSON request over the given keep-alive agent. */
export function request(agent: http.Agent, url: string, method: string, body?: unknown, key?: string, timeoutMs = 30_000): Promise<HttpResult> {
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  const headers: Record<string, string | number> = {};
  if (payload) {
    headers['content-type'] = 'application/json';
    headers['content-length'] = payload.length;
  }
  if (key) headers.authorization = `Bearer ${key}`;
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, agent, headers, timeout: timeoutMs }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let parsed: unknown = text;
        try {
          parsed = text ? JSON.parse(text) : null;
        } catch {
          /* keep the text */
        }
        resolve({ status: res.statusCode ?? 0, body: parsed, ms: performance.now() - started });
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${url} timed out after ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(payload);
  });
}

export interface BenchAccount {
  accountId: string;
  apiKey: string;
  primaryAddress: string;
  domain: string;
}

/** Signs up `n` accounts over REST (subdomain mode), a few at a time. */
export async function signupAccounts(agent: http.Agent, apiBase: string, n: number): Promise<BenchAccount[]> {
  const one = async (i: number): Promise<BenchAccount> => {
    const intent = await request(agent, `${apiBase}/signup/agentic`, 'POST', {
      human_email: `bench${i}@example.com`,
      domain_intent: { mode: 'subdomain', slug_style: 'word_pair' },
    });
    if (intent.status !== 200) throw new Error(`signup failed: ${intent.status} ${JSON.stringify(intent.body)}`);
    const done = await request(agent, `${apiBase}/signup/agentic/confirm`, 'POST', { intent_id: intent.body.intent_id });
    if (done.status !== 200) throw new Error(`confirm failed: ${done.status} ${JSON.stringify(done.body)}`);
    return { accountId: done.body.account_id, apiKey: done.body.api_key, primaryAddress: done.body.primary_address, domain: done.body.domain };
  };
  const out: BenchAccount[] = [];
  for (let i = 0; i < n; i += 4) {
    out.push(...(await Promise.all(Array.from({ length: Math.min(4, n - i) }, (_, j) => one(i + j)))));
  }
  return out;
}

/** The median of xs (the mean of the middle two for an even count). */
export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

export function percentile(sorted: number[], p: number): number {
  if (!sorted.length) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Waits for p, at most ms; the timer is cleared, so it does not keep the process alive afterwards. */
export async function waitAtMost(p: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([p, new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
  clearTimeout(timer);
}

export const rate = (count: number, ms: number): number => (ms > 0 ? Math.round((count / ms) * 1000) : 0);

/**
 * Runs the benchmark body with cleanup that always happens (also on Ctrl-C), then makes sure the process
 * ends: anything still holding the event loop after cleanup is reported and the process exits anyway.
 */
export async function main(name: string, body: (cleanup: (fn: () => Promise<void>) => void) => Promise<void>): Promise<void> {
  const cleanups: (() => Promise<void>)[] = [];
  let cleaning: Promise<void> | null = null;
  const cleanAll = () =>
    (cleaning ??= (async () => {
      for (const fn of cleanups.reverse()) {
        try {
          await fn();
        } catch (err) {
          console.error(`${name}: cleanup step failed: ${(err as Error).message}`);
        }
      }
    })());
  const onSignal = () => {
    console.error(`${name}: interrupted, cleaning up`);
    void cleanAll().then(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let code = 0;
  try {
    console.log(machineHeader());
    await body((fn) => cleanups.push(fn));
  } catch (err) {
    console.error(`${name}: failed:`, err);
    code = 1;
  } finally {
    await cleanAll();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  process.exitCode = code;
  // Everything is closed; if some handle still holds the loop, do not hang.
  setTimeout(() => {
    const handles = (process as unknown as { _getActiveHandles(): object[] })._getActiveHandles().map((h) => {
      const s = h as { constructor: { name: string }; remotePort?: number; localPort?: number };
      return s.remotePort ? `${s.constructor.name}(${s.localPort}->${s.remotePort})` : s.constructor.name;
    });
    console.error(`${name}: handles still open after cleanup (${handles.join(', ')}); exiting`);
    process.exit(code);
  }, 3000).unref();
}

/**
 * Jiffies (1/100 s) used so far by each process of Redis and of PostgreSQL: its shared processes (WAL writer,
 * checkpointer, ...) and the backends of `database`, not those of other databases (tests of other jobs may share
 * the server). By pid, so a meter can keep what a backend used after it exits (see CpuMeter).
 */
/**
 * What each pid is (PostgreSQL of this database, Redis, or neither: null), learnt once per pid: the sampler runs
 * on the main thread under test, and reading every process's stat and cmdline each time cost it milliseconds a
 * sample on a busy machine, charged to the server's figure.
 */
type Which = 'postgres' | 'redis' | null;

function serviceTicks(database: string, known = new Map<number, Which>()): Map<number, { which: 'postgres' | 'redis'; ticks: number }> {
  const out = new Map<number, { which: 'postgres' | 'redis'; ticks: number }>();
  let pids: number[] = [];
  try {
    pids = readdirSync('/proc')
      .filter((d) => /^\d+$/.test(d))
      .map(Number);
  } catch {
    return out;
  }
  for (const pid of pids) {
    const seen = known.get(pid);
    if (seen === null) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    const close = stat.lastIndexOf(')');
    let which: Which | undefined = seen;
    if (which === undefined) {
      const comm = stat.slice(stat.indexOf('(') + 1, close);
      which = comm === 'postgres' ? 'postgres' : comm === 'redis-server' ? 'redis' : null;
      if (which === 'postgres') {
        let title: string;
        try {
          title = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
        } catch {
          continue;
        }
        // A backend's title is "postgres: <cluster>: <user> <database> <client> <state>".
        const backend = /^postgres: [^:]+: \S+ (\S+) /.exec(title);
        if (backend && backend[1] !== database) which = null;
        // A backend's database never changes; anything else (a backend not yet titled) is looked at again.
        if (backend) known.set(pid, which);
      } else {
        known.set(pid, which);
      }
    }
    if (!which) continue;
    const f = stat.slice(close + 2).split(' ');
    // utime and stime (fields 14 and 15 of stat) are 11 and 12 after the state field.
    out.set(pid, { which, ticks: Number(f[11]) + Number(f[12]) });
  }
  return out;
}

/**
 * PostgreSQL's and Redis's CPU since construction. Sampled every 250 ms and kept per pid at its last reading,
 * so a backend that exits during the measurement still counts (up to its last 250 ms): summing only the live
 * processes at the end used to lose them, and PostgreSQL's figure could go negative.
 */
class ServiceMeter {
  private readonly start: Map<number, number>;
  private readonly last = new Map<number, { which: 'postgres' | 'redis'; ticks: number }>();
  private readonly known = new Map<number, Which>();
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly database: string) {
    const now = serviceTicks(database, this.known);
    this.start = new Map([...now].map(([pid, v]) => [pid, v.ticks]));
    this.sample(now);
    this.timer = setInterval(() => this.sample(), 250);
    this.timer.unref();
  }

  private sample(now = serviceTicks(this.database, this.known)): void {
    for (const [pid, v] of now) this.last.set(pid, v);
  }

  /** Milliseconds used so far. */
  read(): { postgres: number; redis: number } {
    this.sample();
    const out = { postgres: 0, redis: 0 };
    for (const [pid, v] of this.last) out[v.which] += (v.ticks - (this.start.get(pid) ?? 0)) * 10;
    return out;
  }

  stop(): void {
    clearInterval(this.timer);
  }
}

/** The machine's busy and total jiffies so far, over every core (the first line of /proc/stat), or null. */
export function machineTicks(): { busy: number; total: number } | null {
  try {
    const v = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    const idle = (v[3] ?? 0) + (v[4] ?? 0);
    const total = v.reduce((a, b) => a + b, 0);
    return { busy: total - idle, total };
  } catch {
    return null;
  }
}

/** Jiffies used so far by a whole process (all its threads) and its live descendants, or NaN once it is gone. */
export function processTicks(pid: number, depth = 0): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    let ticks = Number(f[11]) + Number(f[12]);
    // Children (a cluster's workers, a launcher's real server) count as the app's own.
    const children = depth < 4 ? readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean) : [];
    for (const c of children) ticks += processTicks(Number(c), depth + 1) || 0;
    return ticks;
  } catch {
    return NaN;
  }
}

/**
 * Jiffies used so far by a process's main thread (by default this one's: the server under test; the load runs in
 * a worker thread), or NaN once it is gone. The main thread of a Node process is its first task (tid = pid).
 */
export function mainThreadTicks(pid = process.pid): number {
  try {
    const stat = readFileSync(`/proc/${pid === process.pid ? 'self' : pid}/task/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(f[11]) + Number(f[12]);
  } catch {
    return NaN;
  }
}

/**
 * CPU used between construction and report(): by this process's main thread (the server: HTTP, worker, MX),
 * by its other threads (the load worker thread, GC helpers, libuv pool), by PostgreSQL for this database, by
 * Redis, and by everything else on the machine (other jobs skew throughput; CPU per message is steadier).
 */
export class CpuMeter {
  private proc = process.cpuUsage();
  private main = mainThreadTicks();
  private machine = machineTicks();
  private services: ServiceMeter;
  private started = performance.now();
  private children: Map<string, { pid: number; ticks: number }>;

  /** children: apps running as their own processes (name -> pid), measured apart. */
  constructor(
    private readonly database: string,
    children: Record<string, number | null> = {},
  ) {
    this.services = new ServiceMeter(database);
    this.children = new Map(Object.entries(children).flatMap(([name, pid]) => (pid ? [[name, { pid, ticks: processTicks(pid) }]] : [])));
  }

  /** CPU milliseconds per item so far: this process's main thread (the server and the worker), PostgreSQL, Redis. */
  perItem(items: number): { serverMs: number; postgresMs: number; redisMs: number } {
    const svc = this.services.read();
    const n = Math.max(1, items);
    return {
      serverMs: ((mainThreadTicks() - this.main) * 10) / n,
      postgresMs: svc.postgres / n,
      redisMs: svc.redis / n,
    };
  }

  /**
   * CPU milliseconds used so far, by part, as numbers (report() prints them): this process's main thread, its
   * other threads, each app process named at construction, PostgreSQL (this database) and Redis. The meter keeps
   * running; stop() ends its sampling.
   */
  totals(): { mainMs: number; otherMs: number; postgresMs: number; redisMs: number; children: Record<string, number> } {
    const p = process.cpuUsage(this.proc);
    const mainMs = (mainThreadTicks() - this.main) * 10;
    const svc = this.services.read();
    return {
      mainMs,
      otherMs: Math.max(0, (p.user + p.system) / 1000 - mainMs),
      postgresMs: svc.postgres,
      redisMs: svc.redis,
      children: Object.fromEntries([...this.children].map(([name, c]) => [name, (processTicks(c.pid) - c.ticks) * 10])),
    };
  }

  /** Ends the sampling of PostgreSQL and Redis (report() does it too). */
  stop(): void {
    this.services.stop();
  }

  report(items: number, unit = 'message'): string {
    const wallMs = performance.now() - this.started;
    const p = process.cpuUsage(this.proc);
    const procMs = (p.user + p.system) / 1000;
    const mainMs = (mainThreadTicks() - this.main) * 10;
    const otherMs = Math.max(0, procMs - mainMs);
    const svc = this.services.read();
    this.services.stop();
    const pgMs = svc.postgres;
    const redisMs = svc.redis;
    const kids = [...this.children].map(([name, c]) => ({ name, ms: (processTicks(c.pid) - c.ticks) * 10 }));
    const kidsMs = kids.reduce((a, k) => a + k.ms, 0);
    const now = machineTicks();
    const cores = availableParallelism();
    let rest = '';
    if (now && this.machine && now.total > this.machine.total) {
      const busy = ((now.busy - this.machine.busy) / (now.total - this.machine.total)) * cores;
      const other = Math.max(0, busy - (procMs + kidsMs + pgMs + redisMs) / wallMs);
      rest = `, other jobs ${other.toFixed(2)}; machine ${busy.toFixed(2)} of ${cores} busy`;
    }
    const c = (ms: number) => (ms / wallMs).toFixed(2);
    const per = (ms: number) => (ms / Math.max(1, items)).toFixed(2);
    // The rate this CPU per item allows with every core busy and nothing else running: what the run could reach if
    // nothing waited (the load client's share included, as it runs on the same cores).
    const allMs = procMs + kidsMs + pgMs + redisMs;
    const ceiling =
      items > 0 && allMs > 0 ? `; ${per(allMs)} ms in all, at most ${Math.round((items * 1000 * cores) / allMs)}/s with all ${cores} cores busy` : '';
    return (
      `CPU cores: server thread ${c(mainMs)}, other threads (load client, GC) ${c(otherMs)}${kids.map((k) => `, ${k.name} process ${c(k.ms)}`).join('')}, PostgreSQL ${c(pgMs)}, Redis ${c(redisMs)}${rest}\n` +
      `    CPU ms per ${unit}: server thread ${per(mainMs)}, other threads ${per(otherMs)}${kids.map((k) => `, ${k.name} process ${per(k.ms)}`).join('')}, PostgreSQL ${per(pgMs)}, Redis ${per(redisMs)}${ceiling}`
    );
  }
}

/**
 * What the machine is, so that runs on different machines of the same kind can be compared: the CPU model,
 * AES-256-GCM throughput in Node (16 KB pieces, as bodies are sealed and opened) beside OpenSSL's own figure for
 * the same block size (`openssl speed`; skipped when the openssl CLI is missing), and what one RSA-2048 signature
 * costs in Node (DKIM signs every sent message with one: about 0.7 ms on an Intel Xeon 2-core machine, where
 * bench:floor's whole `dkim` step took 1.0 to 1.2 ms against 0.23 ms on an AMD EPYC one).
 */
export function machineHeader(): string {
  const model = cpus()[0]?.model.trim() ?? 'unknown CPU';
  const key = randomBytes(32);
  const chunk = randomBytes(16 * 1024);
  const total = 64 * 1024 * 1024;
  const gbPerS = (fn: () => void): number => {
    const t0 = process.hrtime.bigint();
    fn();
    return total / (Number(process.hrtime.bigint() - t0) / 1e9) / 1e9;
  };
  // One cipher fed 16 KB at a time (the raw AES-GCM speed Node gets), and a new cipher per 16 KB message (what
  // sealing or opening one stored body costs, key schedule and IV included).
  const streamed = gbPerS(() => {
    const c = createCipheriv('aes-256-gcm', key, randomBytes(12));
    for (let done = 0; done < total; done += chunk.length) c.update(chunk);
    c.final();
  });
  const perMessage = gbPerS(() => {
    const iv = randomBytes(12);
    for (let done = 0; done < total; done += chunk.length) {
      const c = createCipheriv('aes-256-gcm', key, iv);
      c.update(chunk);
      c.final();
    }
  });
  let opensslGBs = 'openssl CLI missing';
  try {
    const out = execFileSync('openssl', ['speed', '-seconds', '1', '-bytes', '16384', '-evp', 'aes-256-gcm'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: 15_000,
    });
    const line = out.split('\n').find((l) => /^aes-256-gcm\s/i.test(l));
    const kBs = line ? Number(line.trim().split(/\s+/).at(-1)!.replace(/k$/, '')) : Number.NaN;
    opensslGBs = Number.isFinite(kBs) ? `${((kBs * 1000) / 1e9).toFixed(2)} GB/s` : 'openssl output not understood';
  } catch {
    // openssl not installed or refused: the Node figure alone still tells machines apart
  }
  return `machine: ${model}, ${availableParallelism()} cores; AES-256-GCM in 16 KB: Node ${streamed.toFixed(2)} GB/s streamed, ${perMessage.toFixed(2)} GB/s a cipher per message; openssl speed ${opensslGBs}; RSA-2048 signature (DKIM) ${rsaSignMs().toFixed(2)} ms in Node`;
}

/** CPU time of one RSA-2048 SHA-256 signature in Node, the median of five rounds of 50 (after a warm-up round). */
function rsaSignMs(): number {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const data = randomBytes(1024);
  const round = (n: number): number => {
    const t0 = process.cpuUsage();
    for (let i = 0; i < n; i++) cryptoSign('sha256', data, privateKey);
    const used = process.cpuUsage(t0);
    return (used.user + used.system) / 1000 / n;
  };
  round(10);
  return median(Array.from({ length: 5 }, () => round(50)));
}

/** The 1-minute load average, to see whether other jobs share the machine. */
export function loadNote(): string {
  return `load average ${loadavg()[0]!.toFixed(2)} on ${availableParallelism()} cores`;
}

/** A process and its live descendants (a supervisor's children, a launcher's real process), depth-first. */
export function processTree(pid: number, depth = 0): number[] {
  let children: string[] = [];
  try {
    children = depth < 4 ? readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean) : [];
  } catch {
    return [];
  }
  return [pid, ...children.flatMap((c) => processTree(Number(c), depth + 1))];
}

/** Resident memory of one process now (VmRSS of /proc/<pid>/status), in bytes; NaN once it is gone. */
export function rssBytes(pid: number): number {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : NaN;
  } catch {
    return NaN;
  }
}

/** Resident memory of a process and its descendants, in bytes (0 once gone). */
export function treeRssBytes(pid: number): number {
  return processTree(pid).reduce((sum, p) => sum + (rssBytes(p) || 0), 0);
}

export const mb = (bytes: number): string => (Number.isFinite(bytes) ? `${Math.round(bytes / 1024 / 1024)} MB` : 'n/a');

/**
 * Resident memory (RSS, MiB printed as MB) of named processes: idle (taken at construction: after start, before
 * load) and the peak while the load runs (sampled every intervalMs between start() and stop()). Another process
 * counts with its descendants; the bench's own process alone (its children are the app processes, measured
 * apart), and its figure also holds the load generator's worker thread.
 */
export class RssMeter {
  private readonly idle: Map<string, number>;
  private readonly peak = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly procs: Record<string, number | null>,
    private readonly intervalMs = 200,
  ) {
    this.idle = new Map(Object.entries(procs).flatMap(([name, pid]) => (pid ? [[name, this.rss(pid)]] : [])));
  }

  private rss(pid: number): number {
    return pid === process.pid ? rssBytes(pid) : treeRssBytes(pid);
  }

  private sample(): void {
    for (const [name, pid] of Object.entries(this.procs)) {
      if (!pid) continue;
      const now = this.rss(pid);
      if (now > (this.peak.get(name) ?? 0)) this.peak.set(name, now);
    }
  }

  /** Starts sampling (the load begins). */
  start(): this {
    this.sample();
    this.timer = setInterval(() => this.sample(), this.intervalMs);
    this.timer.unref();
    return this;
  }

  /** Stops sampling (the load is over), with one last sample. */
  stop(): this {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.sample();
    return this;
  }

  /** One line per process: `  RSS <name>: idle N MB, peak under load M MB`. */
  lines(label = 'under load'): string[] {
    return [...this.idle].map(
      ([name, idle]) => `  RSS ${name}: idle ${mb(idle)}, peak ${label} ${mb(this.peak.get(name) ?? NaN)} (sampled every ${this.intervalMs} ms)`,
    );
  }
}

/** An RssMeter over the bench's own process (the apps that run in it, and the load generator) and each app process. */
export function runtimeRss(rt: BenchRuntime, load = 'the load client thread'): RssMeter {
  const r = rt.runtime;
  const here = [r.server && 'server', r.worker && 'worker', r.mail && 'MX', r.push && 'MQTT broker', r.dns && 'DNS'].filter(Boolean).join(', ');
  return new RssMeter({ [`bench process (${here}; ${load})`]: process.pid, ...Object.fromEntries(rt.procs.map((p) => [`${p.name} process`, p.pid])) });
}

/**
 * A CPU profile of this process's main thread from now until stop(file) writes it; `what` names it in the line
 * printed. With BENCH_HEAP_PROFILE=1 also a sampling heap profile of the same span (every allocation sampled,
 * those collected since included: what the garbage collector had to clear), written to <file>.heapprofile.
 */
export async function startProfile(what: string): Promise<{ stop(file: string): Promise<void> }> {
  const inspector = await import('node:inspector/promises');
  const { writeFileSync } = await import('node:fs');
  const session = new inspector.Session();
  session.connect();
  const heap = !!process.env.BENCH_HEAP_PROFILE;
  if (heap) {
    await session.post('HeapProfiler.enable');
    await session.post('HeapProfiler.startSampling', {
      samplingInterval: 16384,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: true,
    });
  }
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  return {
    async stop(file) {
      const { profile } = await session.post('Profiler.stop');
      // Both stopped before either is written: writing them is no part of what they measure.
      const sampled = heap ? await session.post('HeapProfiler.stopSampling') : null;
      session.disconnect();
      writeFileSync(file, JSON.stringify(profile));
      console.log(`  CPU profile ${what}: ${file}`);
      if (sampled) {
        writeFileSync(`${file}.heapprofile`, JSON.stringify(sampled.profile));
        console.log(`  heap allocation profile ${what}: ${file}.heapprofile`);
      }
    },
  };
}

/** An smtp-server that accepts every message and discards it, with STARTTLS like the MX. */
export async function startBareSmtp(): Promise<{ port: number; close(): Promise<void> }> {
  const pems = await generate([{ name: 'commonName', value: 'bare.bench.test' }], { keySize: 2048, algorithm: 'sha256' });
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['AUTH'],
    key: pems.private,
    cert: pems.cert,
    logger: false,
    size: 25 * 1024 * 1024,
    onData(stream, _session, cb) {
      stream.on('data', () => undefined);
      stream.on('end', () => cb());
    },
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.server.address() as AddressInfo).port;
  return { port, close: () => new Promise<void>((r) => server.close(() => r())) };
}

/**
 * Counts, until stop(), this process's PostgreSQL statements (pg's Client.query, which Prisma's adapter and the typed
 * SQL both go through) by their first words, and its Redis commands (ioredis sendCommand, BullMQ's included) by
 * name; a MULTI ... EXEC or a pipeline is one round trip however many commands it holds.
 */
export function startCounting(redis: object): { stop(): void; report(items: number, per: string): string[] } {
  const pgCounts = new Map<string, number>();
  const redisCounts = new Map<string, number>();
  let on = true;
  const kind = (text: string) => {
    const t = text.replace(/\s+/g, ' ').trim();
    const m = /^(WITH \w+ AS (?:MATERIALIZED )?\(\s*\w+|\w+)/i.exec(t);
    return `${(m?.[1] ?? t).slice(0, 40)} ${t.length > 40 ? `[${t.slice(0, 90).replace(/"/g, '')}]` : ''}`.trim();
  };
  const pgQuery = pg.Client.prototype.query;
  const wrapped = function (this: pg.Client, config: unknown, ...rest: unknown[]) {
    if (on) {
      const text = typeof config === 'string' ? config : ((config as { text?: string })?.text ?? '?');
      const key = kind(text);
      pgCounts.set(key, (pgCounts.get(key) ?? 0) + 1);
    }
    return (pgQuery as (...a: unknown[]) => unknown).call(this, config, ...rest);
  } as typeof pg.Client.prototype.query;
  pg.Client.prototype.query = wrapped;
  // The class of the runtime's Redis client (ioredis), which BullMQ's connections share.
  const proto = Object.getPrototypeOf(redis) as { sendCommand(c: { name: string }, ...rest: unknown[]): unknown };
  const send = proto.sendCommand;
  const wrappedSend = function (this: unknown, command: { name: string }, ...rest: unknown[]) {
    if (on) redisCounts.set(command.name, (redisCounts.get(command.name) ?? 0) + 1);
    return send.call(this, command, ...rest);
  };
  proto.sendCommand = wrappedSend;
  const lines = (counts: Map<string, number>, n: number) =>
    [...counts].sort((a, b) => b[1] - a[1]).map(([name, c]) => `      ${(c / n).toFixed(2).padStart(6)}  ${name}`);
  return {
    stop() {
      on = false;
      // Two counters can be on at once: the later one wraps the earlier, which then only stops counting.
      if (pg.Client.prototype.query === wrapped) pg.Client.prototype.query = pgQuery;
      if (proto.sendCommand === wrappedSend) proto.sendCommand = send;
    },
    report(items, per) {
      const n = Math.max(1, items);
      const total = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0) / n;
      return [
        `  PostgreSQL statements per ${per}: ${total(pgCounts).toFixed(2)}`,
        ...lines(pgCounts, n),
        `  Redis commands per ${per}: ${total(redisCounts).toFixed(2)}`,
        ...lines(redisCounts, n),
      ];
    },
  };
}
