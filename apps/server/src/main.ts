/**
 * `pnpm start`: the single-machine mode. Reads the configuration, creates the database if missing, applies
 * migrations, checks Redis, and starts every app that exists in one process, printing the URLs.
 */
import fs from 'node:fs';
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

async function main(): Promise<void> {
  const config = loadConfig();
  const log = createLogger(config.logLevel);
  const secretKey = resolveSecretKey(config);
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
