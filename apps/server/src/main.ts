/**
 * The `boxes` entry: `pnpm start` and `pnpm boxes start [app...]`. It reads the configuration, starts the local
 * PostgreSQL and Redis when they are the defaults and nothing answers there, creates the database if missing,
 * applies migrations and checks Redis; then:
 *  - `pnpm start` on a machine with two or more cores: a supervisor and one process running every app, started
 *    again if it dies. This process replaces itself (process.execve, same pid) with a small POSIX shell script
 *    (SUPERVISOR_SH) that runs `node main.mjs start` and starts it again; the shell takes a few MB where a Node
 *    supervisor took an empty Node process (about 50 MB). The process it starts does the checks above;
 *  - with BOXES_SPLIT_PROCESSES=1: two supervised processes, the front (HTTP server, MX, MQTT broker, DNS) and
 *    the worker (deliveries, push, billing, verification), which publishes MQTT through the front's broker; each
 *    is started again on its own, at the cost of a second copy of the service's code in memory;
 *  - with BOXES_SINGLE_PROCESS=1 (or one core): everything in this process, unsupervised;
 *  - `pnpm boxes start <app...>` (apps: server, worker, mx, push, dns): only those apps, in this process, as
 *    production runs them: any number of each against one PostgreSQL and one Redis.
 * SIGINT and SIGTERM stop every app gracefully (in-flight requests, jobs and SMTP transactions finish).
 *
 * Everything beyond Node's own modules is imported where it is used, so a Node supervisor (the split layout's, or
 * the default one where process.execve or /bin/sh is missing) stays small and each process loads only what it runs.
 */
import { fork, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { RedisTarget } from '@boxes/jobs';
import { releaseStartupMemory } from './startup-memory';
import type { Config } from '@boxes/config';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

/** A wrong command line: one line, as the configuration's own errors are. */
class UsageError extends Error {
  override name = 'UsageError';
}

const flag = (v: string | undefined) => v === '1' || v === 'true';

async function checkRedis(target: Exclude<RedisTarget, string>): Promise<void> {
  const { connectRedis, describeRedisTarget, REDIS_CONNECT_TIMEOUT_MS } = await import('@boxes/jobs');
  const { ServiceUnavailableError } = await import('@boxes/db/bootstrap');
  // The connect attempt may take as long as the service's own (a busy machine starting many processes).
  const redis = connectRedis(target, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    connectTimeout: REDIS_CONNECT_TIMEOUT_MS,
    retryStrategy: () => null,
    sentinelRetryStrategy: () => null,
  });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    await redis.ping();
  } catch (err) {
    const port = new URL(target.redisUrl).port || 6379;
    throw new ServiceUnavailableError(
      target.redisSentinel
        ? `Redis is not reachable through ${describeRedisTarget(target)} (${(err as Error).message}). Check the sentinels and REDIS_SENTINELS / REDIS_SENTINEL_NAME.`
        : `Redis is not reachable at ${describeRedisTarget(target)} (${(err as Error).message}). Start it (redis-server --daemonize yes --port ${port}) or set REDIS_URL.`,
    );
  } finally {
    redis.disconnect();
  }
}

/** Whether anything accepts a TCP connection at host:port within a second. */
function answers(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port, timeout: 1000 });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once('connect', () => done(true));
    socket.once('timeout', () => done(false));
    socket.once('error', () => done(false));
  });
}

const LOCAL_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);

/** host and port of a service URL that points at this machine's standard port, else null. */
function localDefault(url: string, port: number): { host: string; port: number } | null {
  const u = new URL(url);
  const p = Number(u.port || port);
  return LOCAL_HOSTS.has(u.hostname) && p === port ? { host: u.hostname.replace(/^\[|\]$/g, ''), port: p } : null;
}

/**
 * When DATABASE_URL / REDIS_URL are this machine's standard ports and nothing answers there, starts them with
 * scripts/start-services.sh (which installs Debian's packages when it can) and says so in one line. Anything
 * else is left to the one-line error of the checks that follow.
 */
async function startLocalServices(config: Config): Promise<void> {
  const { ServiceUnavailableError } = await import('@boxes/db/bootstrap');
  const missing: string[] = [];
  const pgAt = localDefault(config.directDatabaseUrl, 5432);
  if (pgAt && !(await answers(pgAt.host, pgAt.port))) missing.push('PostgreSQL');
  // Behind Sentinel the primary moves: nothing local is started for it.
  const redisAt = config.redisSentinel ? null : localDefault(config.redisUrl, 6379);
  if (redisAt && !(await answers(redisAt.host, redisAt.port))) missing.push('Redis');
  if (!missing.length) return;
  // The compiled bundle of a container image carries no scripts: the checks that follow say what is missing.
  if (!fs.existsSync(path.join(repoRoot, 'scripts/start-services.sh'))) return;
  console.log(`boxes: ${missing.join(' and ')} not running on this machine; starting ${missing.length > 1 ? 'them' : 'it'} (scripts/start-services.sh)`);
  const run = spawnSync('bash', [path.join(repoRoot, 'scripts/start-services.sh'), '--services-only'], { stdio: ['ignore', 'ignore', 'inherit'] });
  if (run.status !== 0)
    throw new ServiceUnavailableError(`could not start ${missing.join(' and ')}: run scripts/start-services.sh to see why, or set DATABASE_URL / REDIS_URL`);
}

export const APPS = ['server', 'worker', 'mx', 'push', 'dns'] as const;
export type AppName = (typeof APPS)[number];
const FRONT: AppName[] = ['server', 'mx', 'push', 'dns'];

/** What a running set of apps reports (a child to its supervisor, or the banner). */
interface Ready {
  url: string | null;
  smtpPort: number | null;
  imapPort: number | null;
  submissionPort: number | null;
  mqttPort: number | null;
  dnsPort: number | null;
  /** /metrics of a process without the HTTP server (METRICS_PORT). */
  metricsUrl: string | null;
  /** The certificate of the mail listeners, when this process runs them. */
  mailTls: { sha256: string; selfSigned: boolean } | null;
}

function parseApps(argv: string[]): AppName[] | null {
  const i = argv.indexOf('start');
  const named = (i >= 0 ? argv.slice(i + 1) : argv).filter((a) => !a.startsWith('-'));
  const env = process.env.BOXES_APPS?.split(',').filter(Boolean) ?? [];
  const list = named.length ? named : env;
  if (!list.length) return null;
  for (const a of list) {
    if (!(APPS as readonly string[]).includes(a)) throw new UsageError(`unknown app "${a}": the apps are ${APPS.join(', ')}`);
  }
  return [...new Set(list)] as AppName[];
}

function banner(config: Config, r: Ready, layout: string, workerMetrics: string | null = null): string {
  return `Boxes is running (${layout}).
  API (REST):   ${config.apiBaseUrl}
  tRPC:         ${config.siteUrl}/trpc
  OpenAPI:      ${config.siteUrl}/openapi.yaml
  API reference ${config.siteUrl}/docs
  Discovery:    ${config.siteUrl}/.well-known/agentic.json
  Agent skill:  ${config.siteUrl}/skill.md
  MCP:          ${config.mcpUrl ?? config.siteUrl}/mcp (Streamable HTTP; Authorization: Bearer <api_key>)
  Operators:    ${config.siteUrl}/healthz, /readyz, /metrics${workerMetrics ? `; the worker's ${workerMetrics}` : ''}
  MX (SMTP):    ${config.smtp.host}:${r.smtpPort} (mail for *.${config.baseDomain} and hosted domains)
  IMAP:         ${config.mailClients.imapHost}:${r.imapPort} (mail clients: implicit TLS, app-passwords)
  Submission:   ${config.mailClients.submissionHost}:${r.submissionPort} (mail clients: SMTP, implicit TLS, app-passwords)
${
  r.mailTls
    ? `  Mail TLS:     ${r.mailTls.selfSigned ? 'self-signed (kept across restarts; pin it)' : 'SMTP_TLS_CERT_FILE'}, SHA-256 ${r.mailTls.sha256}
                ${config.apiBaseUrl}/mail-clients/certificate
`
    : ''
}  MQTT (mTLS):  ${config.mqtt.host}:${r.mqttPort ?? config.mqtt.brokerUrl}
  DNS:          udp+tcp ${config.dns.host}:${r.dnsPort} (authoritative for ${config.baseDomain} and delegated domains)
  Listening on  ${r.url}`;
}

/** Runs the given apps in this process until SIGINT/SIGTERM (or the supervisor goes away). */
async function runApps(config: Config, apps: AppName[], secretKey: Buffer): Promise<Ready> {
  const { createLogger } = await import('./logger');
  const log = createLogger(config.logLevel);
  const on = (a: AppName) => apps.includes(a);
  // Loaded here, not at the top: the supervisor of `pnpm start` runs no app and stays small.
  const { startRuntime } = await import('./runtime');
  const runtime = await startRuntime(config, { secretKey, log, server: on('server'), worker: on('worker'), mail: on('mx'), push: on('push'), dns: on('dns') });
  // Once the caller has said the apps are running (the banner first, then this).
  setImmediate(releaseStartupMemory);
  let stopping = false;
  const shutdown = async () => {
    if (stopping) return;
    stopping = true;
    await runtime.stop();
    process.exit(0);
  };
  process.once('SIGINT', shutdown);
  process.once('SIGTERM', shutdown);
  // A child whose supervisor is gone stops too: a Node supervisor closes the IPC channel when it ends; the shell
  // supervisor has none, so its child notices that it was handed to another parent (checked once a second).
  process.once('disconnect', shutdown);
  if (process.env.BOXES_SUPERVISOR_PID && !process.connected) {
    const parent = process.ppid;
    setInterval(() => {
      if (process.ppid !== parent) void shutdown();
    }, 1000).unref();
  }
  return {
    url: runtime.server?.url ?? null,
    smtpPort: runtime.mail?.port ?? null,
    imapPort: runtime.mail?.imapPort ?? null,
    submissionPort: runtime.mail?.submissionPort ?? null,
    mqttPort: runtime.push?.port ?? null,
    dnsPort: runtime.dns?.port ?? null,
    metricsUrl: runtime.metrics?.url ?? null,
    mailTls: runtime.mail?.tls ?? null,
  };
}

/** A supervised child that stopped before it was running (it has said why on stderr). */
class ChildFailed extends Error {
  constructor(
    name: string,
    readonly code: number,
  ) {
    super(`the ${name} process could not start (exit ${code})`);
  }
}

/**
 * A supervised child process running some apps (null: every app, preparing the database and Redis itself);
 * restarted when it dies, up to 5 times a minute.
 */
function supervise(
  name: string,
  apps: AppName[] | null,
  env: Record<string, string>,
  onExitForGood: (code: number) => void,
): Promise<{ ready: Ready; stop(): Promise<void> }> {
  let child: ChildProcess;
  let stopping = false;
  const restarts: number[] = [];
  return new Promise((resolveFirst, rejectFirst) => {
    let first = true;
    const launch = () => {
      // 'start': the compiled CLI bundles this module, and runs the apps only when told to start them.
      child = fork(fileURLToPath(import.meta.url), ['start'], {
        env: { ...process.env, ...env, ...(apps ? { BOXES_CHILD: '1', BOXES_APPS: apps.join(',') } : { BOXES_SUPERVISED: '1' }) },
        execArgv: process.execArgv,
      });
      child.on('message', (m: { ready?: Ready }) => {
        if (m.ready && first) {
          first = false;
          resolveFirst({
            ready: m.ready,
            stop: () =>
              new Promise<void>((done) => {
                stopping = true;
                if (child.exitCode !== null || child.signalCode !== null) return done();
                child.once('exit', () => done());
                child.kill('SIGTERM');
              }),
          });
        }
      });
      child.on('exit', (code, signal) => {
        if (stopping) return;
        if (first) return rejectFirst(new ChildFailed(name, code ?? 1));
        const now = Date.now();
        restarts.push(now);
        while (restarts.length && restarts[0]! < now - 60_000) restarts.shift();
        if (restarts.length > 5) return onExitForGood(1);
        console.error(`boxes: the ${name} process stopped (${code ?? signal}); starting it again`);
        setTimeout(launch, 1000);
      });
    };
    launch();
  });
}

/**
 * The default layout's supervisor, run by /bin/sh in place of this process (see superviseWithShell); its
 * arguments are the command that runs every app. It restarts that command when it stops, up to 5 times a minute
 * and 1 s apart, then gives up (exit 1). SIGINT and SIGTERM are passed on as SIGTERM and the shell ends (0) once
 * the apps stopped gracefully. A command that stops before it said it is running (SIGUSR1 from the child, once
 * the banner is out) is not restarted: the shell ends with its code, as the error it printed explains.
 * `wait` returns early (above 128) when a trapped signal comes in: then, while the child is still there, it is
 * waited for again, so its own status is the one reported.
 */
const SUPERVISOR_SH = `child= ready= stopping= restarts=
stop() { stopping=1; [ -z "$child" ] || kill -TERM "$child" 2>/dev/null; }
trap stop INT TERM
trap ready=1 USR1
while :; do
  "$@" &
  child=$!
  wait "$child"; code=$?
  while [ "$code" -gt 128 ] && kill -0 "$child" 2>/dev/null; do wait "$child"; code=$?; done
  child=
  [ -z "$stopping" ] || exit 0
  [ -n "$ready" ] || exit $(( code ? code : 1 ))
  why=$code
  [ "$code" -le 128 ] || why=SIG$(kill -l $((code - 128)))
  now=$(date +%s) kept= n=1
  for t in $restarts; do [ $((now - t)) -ge 60 ] || { kept="$kept $t"; n=$((n + 1)); }; done
  restarts="$kept $now"
  if [ "$n" -gt 5 ]; then echo 'boxes: a process keeps stopping; giving up' >&2; exit 1; fi
  echo "boxes: the apps process stopped ($why); starting it again" >&2
  sleep 1 & wait $!
  [ -z "$stopping" ] || exit 0
done`;

/**
 * Replaces this process (same pid, so whatever started `pnpm start` keeps its handle) with SUPERVISOR_SH running
 * `node <this module> start` as the one process of every app. Returns only where that cannot be done (no
 * process.execve, no /bin/sh): the caller supervises with Node instead.
 */
function superviseWithShell(): void {
  if (typeof process.execve !== 'function' || !fs.existsSync('/bin/sh')) return;
  const apps = [process.execPath, ...process.execArgv, fileURLToPath(import.meta.url), 'start'];
  process.execve('/bin/sh', ['sh', '-c', SUPERVISOR_SH, 'boxes-supervisor', ...apps], {
    ...process.env,
    BOXES_SUPERVISED: '1',
    BOXES_SUPERVISOR_PID: String(process.pid),
  });
}

/** Stops the supervised children on SIGINT and SIGTERM, and when one keeps dying. */
function superviseAll(): { add(c: { stop(): Promise<void> }): void; giveUp(code: number): void } {
  let children: { stop(): Promise<void> }[] = [];
  const stopAll = (code: number) => {
    const stopping = children;
    children = [];
    void Promise.all(stopping.map((c) => c.stop())).then(() => process.exit(code));
  };
  process.once('SIGINT', () => stopAll(0));
  process.once('SIGTERM', () => stopAll(0));
  return {
    add: (c) => void children.push(c),
    giveUp: (code) => {
      console.error('boxes: a process keeps stopping; giving up');
      stopAll(code);
    },
  };
}

async function main(): Promise<void> {
  const apps = parseApps(process.argv.slice(2));
  const single = flag(process.env.BOXES_SINGLE_PROCESS) || os.availableParallelism() < 2;
  const supervised = process.env.BOXES_SUPERVISED === '1';
  if (!apps && !single && !supervised && !flag(process.env.BOXES_SPLIT_PROCESSES)) {
    // The default supervisor: one child runs every app and does the checks itself (and prints the banner); the
    // supervisor only starts it again when it dies. A shell where it can (it does not return then), else this
    // process, which imports nothing beyond Node.
    superviseWithShell();
    const all = superviseAll();
    all.add(await supervise('apps', null, {}, all.giveUp));
    return;
  }
  // This process runs apps (the supervisor of the split layout runs none): its collector is set before anything
  // else is loaded (see gc-tuning.ts).
  const mine = apps ?? (single || supervised ? [...APPS] : null);
  if (mine) {
    const { tuneGarbageCollection } = await import('./gc-tuning');
    tuneGarbageCollection({ server: mine.includes('server'), worker: mine.includes('worker'), mail: mine.includes('mx') });
  }
  const { loadConfig } = await import('@boxes/config');
  const config = loadConfig();
  if (process.env.BOXES_CHILD === '1' && apps) {
    // A child of the split layout: the supervisor prepared the database and passed the secret key.
    const { parseSecretKey } = await import('@boxes/core/crypto');
    const ready = await runApps(config, apps, parseSecretKey(process.env.BOXES_SECRET_KEY ?? ''));
    process.send?.({ ready });
    return;
  }
  const { createLogger } = await import('./logger');
  const { resolveSecretKey } = await import('./secret-key');
  const log = createLogger(config.logLevel);
  const secretKey = resolveSecretKey(config);
  await startLocalServices(config);
  // Straight to PostgreSQL (DIRECT_DATABASE_URL): creating a database and the migrations' session lock need a
  // session of their own, which a pooler in transaction mode does not keep.
  const { ensureDatabase } = await import('@boxes/db/bootstrap');
  const { migrate } = await import('@boxes/db/migrate');
  await ensureDatabase(config.directDatabaseUrl);
  const { applied } = await migrate(config.directDatabaseUrl);
  if (applied.length) log.info({ applied }, 'migrations applied');
  await checkRedis(config);
  if (apps || single || supervised) {
    const list = apps ?? [...APPS];
    const ready = await runApps(config, list, secretKey);
    if (ready.url) publicUrl(config, ready.url);
    console.log(
      apps
        ? `boxes: running ${list.join(', ')} (pid ${process.pid})${ready.url ? `; HTTP on ${ready.url}` : ''}${ready.metricsUrl ? `; metrics on ${ready.metricsUrl}` : ''}${ready.mailTls ? `; mail TLS SHA-256 ${ready.mailTls.sha256}` : ''}`
        : banner(config, ready, supervised ? 'one process, supervised: started again if it stops' : 'one process'),
    );
    if (supervised) tellSupervisor(ready);
    return;
  }
  // BOXES_SPLIT_PROCESSES: the front first (the worker publishes MQTT through its broker), then the worker.
  // The key itself, whether it came from BOXES_SECRET_KEY, BOXES_SECRET_KEY_FILE or .data/ (the file is not read again).
  const env = { BOXES_SECRET_KEY: secretKey.toString('hex'), BOXES_SECRET_KEY_FILE: '' };
  const all = superviseAll();
  const front = await supervise('front', FRONT, env, all.giveUp);
  all.add(front);
  const worker = await supervise(
    'worker',
    ['worker'],
    { ...env, ...(front.ready.mqttPort && !config.mqtt.brokerUrl ? { MQTT_BROKER_URL: `mqtts://127.0.0.1:${front.ready.mqttPort}` } : {}) },
    all.giveUp,
  );
  all.add(worker);
  if (front.ready.url) publicUrl(config, front.ready.url);
  console.log(banner(config, front.ready, `two processes: ${FRONT.join(', ')}; and the worker`, worker.ready.metricsUrl));
  // The checks and migrations above are done: what they left behind goes back to the system.
  setImmediate(releaseStartupMemory);
}

/** Tells the supervisor that the apps are running: over IPC to a Node supervisor, with SIGUSR1 to the shell one. */
function tellSupervisor(ready: Ready): void {
  if (process.send) process.send({ ready });
  else if (process.env.BOXES_SUPERVISOR_PID === String(process.ppid)) process.kill(process.ppid, 'SIGUSR1');
}

/** With PORT=0 the server's real address is known only now: the banner shows it. */
function publicUrl(config: Config, url: string): void {
  if (config.port === 0) {
    config.siteUrl = url;
    config.apiBaseUrl = `${url}/api/v1`;
  }
}

main().catch((err) => {
  // The child said why it could not start; the supervisor ends with its code.
  if (err instanceof ChildFailed) process.exit(err.code || 1);
  const name = (err as Error | undefined)?.name;
  if (name === 'ConfigError' || name === 'ServiceUnavailableError' || name === 'UsageError') {
    console.error(`boxes: ${err.message}`);
  } else {
    console.error('boxes: failed to start:', err);
  }
  process.exit(1);
});
