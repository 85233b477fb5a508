/**
 * `pnpm start`: the single-machine mode. Reads the configuration, starts the local PostgreSQL and Redis when
 * they are the defaults and nothing answers there, creates the database if missing, applies migrations, checks
 * Redis, and starts every app that exists in one process, printing the URLs.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { ConfigError, loadConfig, type Config } from '@boxes/config';
import { ensureDatabase, migrate, ServiceUnavailableError } from '@boxes/db';
import { parseSecretKey } from '@boxes/core';
import { createLogger } from './logger';
import { startRuntime } from './runtime';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

/** BOXES_SECRET_KEY, or (outside production) a key generated once into .data/secret-key. */
function resolveSecretKey(config: Config): Buffer {
  if (config.secretKey) return parseSecretKey(config.secretKey);
  if (config.nodeEnv === 'production') {
    throw new ConfigError('BOXES_SECRET_KEY is required in production (32 bytes as 64 hex characters: openssl rand -hex 32)');
  }
  const file = path.join(repoRoot, '.data', 'secret-key');
  if (!fs.existsSync(file)) {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    fs.writeFileSync(file, randomBytes(32).toString('hex'), { mode: 0o600, flag: 'wx' });
  }
  return parseSecretKey(fs.readFileSync(file, 'utf8').trim());
}

async function checkRedis(url: string): Promise<void> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, connectTimeout: 3000, retryStrategy: () => null });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    await redis.ping();
  } catch (err) {
    const u = new URL(url);
    throw new ServiceUnavailableError(
      `Redis is not reachable at ${u.hostname}:${u.port || 6379} (${(err as Error).message}). Start it (redis-server --daemonize yes --port ${u.port || 6379}) or set REDIS_URL.`,
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
  const missing: string[] = [];
  const pgAt = localDefault(config.databaseUrl, 5432);
  if (pgAt && !(await answers(pgAt.host, pgAt.port))) missing.push('PostgreSQL');
  const redisAt = localDefault(config.redisUrl, 6379);
  if (redisAt && !(await answers(redisAt.host, redisAt.port))) missing.push('Redis');
  if (!missing.length) return;
  console.log(`boxes: ${missing.join(' and ')} not running on this machine; starting ${missing.length > 1 ? 'them' : 'it'} (scripts/start-services.sh)`);
  const run = spawnSync('bash', [path.join(repoRoot, 'scripts/start-services.sh'), '--services-only'], { stdio: ['ignore', 'ignore', 'inherit'] });
  if (run.status !== 0) throw new ServiceUnavailableError(`could not start ${missing.join(' and ')}: run scripts/start-services.sh to see why, or set DATABASE_URL / REDIS_URL`);
}

async function main(): Promise<void> {
  const config = loadConfig();
  const log = createLogger(config.logLevel);
  const secretKey = resolveSecretKey(config);
  await startLocalServices(config);
  await ensureDatabase(config.databaseUrl);
  const { applied } = await migrate(config.databaseUrl);
  if (applied.length) log.info({ applied }, 'migrations applied');
  await checkRedis(config.redisUrl);
  const runtime = await startRuntime(config, { secretKey, log });
  console.log(`Boxes is running.
  API (REST):   ${config.apiBaseUrl}
  tRPC:         ${config.siteUrl}/trpc
  OpenAPI:      ${config.siteUrl}/openapi.yaml
  API reference ${config.siteUrl}/docs
  Discovery:    ${config.siteUrl}/.well-known/agentic.json
  MX (SMTP):    ${config.smtp.host}:${runtime.mail?.port} (mail for *.${config.baseDomain} and hosted domains)
  IMAP:         ${config.mailClients.imapHost}:${runtime.mail?.imapPort} (mail clients: implicit TLS, app-passwords)
  Submission:   ${config.mailClients.submissionHost}:${runtime.mail?.submissionPort} (mail clients: SMTP, implicit TLS, app-passwords)
  MQTT (mTLS):  ${config.mqtt.host}:${runtime.push?.port ?? config.mqtt.brokerUrl}
  Listening on  ${runtime.server.url}`);
  const shutdown = async () => {
    await runtime.stop();
    process.exit(0);
  };
  process.once('SIGINT', shutdown);
  process.once('SIGTERM', shutdown);
}

main().catch((err) => {
  if (err instanceof ConfigError || err instanceof ServiceUnavailableError) {
    console.error(`boxes: ${err.message}`);
  } else {
    console.error('boxes: failed to start:', err);
  }
  process.exit(1);
});
