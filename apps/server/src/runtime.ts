/**
 * The single-process runtime: builds the services (database, Redis, queues) and starts the HTTP server, the
 * worker and the MX. `pnpm start` and the test harness use it; in production each app can run on its own
 * with the same services.
 */
import type { Config } from '@boxes/config';
import {
  announcePlatformVersion,
  ensureBaseZone,
  LocalRegistrar,
  LocalPaymentProvider,
  systemClock,
  type Clock,
  type PaymentProvider,
  type Services,
} from '@boxes/core';
import { closeDb, createDb } from '@boxes/db';
import { createCommandRedis, Jobs } from '@boxes/jobs';
import type { MxResolver } from '@boxes/mail';
// Each app is imported when it starts: a process that runs the worker alone does not hold the HTTP server's
// router, OpenAPI document and pages, nor the MX's parsers, in memory (and the other way round).
import type { MailServerHandle } from '@boxes/mail-server';
import type { WorkerHandle } from '@boxes/worker';
import type { EventPublisher, PushHandle } from '@boxes/push';
import type { DnsHandle } from '@boxes/dns';
import type { ServerHandle } from './index';
import type { MetricsEndpoint } from './metrics-endpoint';
import { createLogger, type Logger } from './logger';
import { tuneGarbageCollection } from './gc-tuning';

export interface Runtime {
  svc: Services;
  log: Logger;
  /** The HTTP server, when it runs in this process. */
  server: ServerHandle | null;
  worker: WorkerHandle | null;
  mail: MailServerHandle | null;
  /** The MQTT broker, when it runs in this process. */
  push: PushHandle | null;
  /** The authoritative DNS server, when it runs in this process. */
  dns: DnsHandle | null;
  /** /metrics of a process without the HTTP server, when METRICS_PORT is set. */
  metrics: MetricsEndpoint | null;
  stop(): Promise<void>;
}

export interface RuntimeOptions {
  secretKey: Buffer;
  /** Start the HTTP server (default true). */
  server?: boolean;
  /** Start the delivery worker (default true). */
  worker?: boolean;
  /** Start the MX (default true). */
  mail?: boolean;
  /** Start the MQTT broker (default true, unless MQTT_BROKER_URL names an external one). */
  push?: boolean;
  /** Start the authoritative DNS server (default true). */
  dns?: boolean;
  /** Outbound routing override (tests stand in for the internet's MX hosts). */
  resolver?: MxResolver;
  log?: Logger;
  dbPoolSize?: number;
  /** The service clock (tests pass an adjustable one). */
  clock?: Clock;
  /** The payment provider (default: the built-in local provider). */
  payments?: PaymentProvider;
  /** Called once the HTTP port is known, before the other apps start (tests set the public URL here). */
  onListening?: (port: number) => void;
}

/**
 * For a server on an ephemeral port (PORT=0: tests, benchmarks): once the port is known, the public URLs the
 * API prints point at it. The app reads svc.config when it builds URLs, so the config is updated in place.
 */
export function publicUrlFollowsPort(config: Config): (port: number) => void {
  return (port) => {
    config.port = port;
    config.siteUrl = `http://127.0.0.1:${port}`;
    config.apiBaseUrl = `${config.siteUrl}/api/v1`;
  };
}

export async function startRuntime(config: Config, opts: RuntimeOptions): Promise<Runtime> {
  tuneGarbageCollection({ server: opts.server !== false, worker: opts.worker !== false, mail: opts.mail !== false });
  // The apps this process runs, loaded before any connection is opened: loading and compiling them holds the
  // event loop for a while, which must not eat into a pool's or a transaction's wait for a connection.
  const wantPush = opts.push !== false && !config.mqtt.brokerUrl;
  const wantPublisher = !wantPush && Boolean(config.mqtt.brokerUrl) && opts.worker !== false;
  const [serverApp, apiPkg, pushApp, workerApp, mailApp, dnsApp] = await Promise.all([
    opts.server === false ? null : import('./index'),
    opts.server === false ? null : import('@boxes/api'),
    wantPush || wantPublisher ? import('@boxes/push') : null,
    opts.worker === false ? null : import('@boxes/worker'),
    opts.mail === false ? null : import('@boxes/mail-server'),
    opts.dns === false ? null : import('@boxes/dns'),
  ]);
  const log = opts.log ?? createLogger(config.logLevel);
  // Named prepared statements only on PostgreSQL's own sessions: not through a transaction pooler (DIRECT_DATABASE_URL set apart).
  const db = createDb(config.databaseUrl, { max: opts.dbPoolSize ?? 20, namedStatements: config.databaseUrl === config.directDatabaseUrl });
  // Connections that requests wait on fail fast while Redis is away (503, or the sweeper enqueues later).
  const redis = createCommandRedis(config, { failFast: true });
  // A connection's 'error' is Redis unreachable (it reconnects by itself; requests answer 503 meanwhile): a
  // warning with its message, no stack.
  redis.on('error', (err) => log.warn({ err: err.message }, 'redis unreachable (counters): reconnecting'));
  const jobs = new Jobs(createCommandRedis(config), config.redisPrefix);
  jobs.connection.on('error', (err) => log.warn({ err: err.message }, 'redis unreachable (queues): reconnecting'));
  const svc: Services = {
    db,
    config,
    secretKey: opts.secretKey,
    jobs,
    redis,
    clock: opts.clock ?? systemClock,
    payments: opts.payments ?? new LocalPaymentProvider(),
    registrar: new LocalRegistrar(),
  };
  const server = opts.server === false ? null : await serverApp!.start(config, { svc, log });
  if (server) {
    const { API_VERSION } = apiPkg!;
    opts.onListening?.(server.port);
    // The base zone (NS, the instance's hosts, free subdomains' mail records) that apps/dns and PowerDNS serve.
    await ensureBaseZone(db, config);
    // A new API version is announced to every account once (platform.updated).
    const announced = await announcePlatformVersion(svc, API_VERSION);
    if (announced.announced && announced.accounts) log.info({ version: API_VERSION, accounts: announced.accounts }, 'platform.updated announced');
  }
  const push = opts.push === false || config.mqtt.brokerUrl ? null : await pushApp!.start(config, { svc, log });
  let publisher: EventPublisher | null = push?.publisher ?? null;
  if (!publisher && config.mqtt.brokerUrl && opts.worker !== false) publisher = await pushApp!.connectPublisher(config, svc);
  const worker =
    opts.worker === false
      ? null
      : await workerApp!.start(config, {
          svc,
          log,
          publish: publisher ? (topic, payload) => publisher!.publish(topic, payload) : null,
          ...(opts.resolver ? { resolver: opts.resolver } : {}),
        });
  const mail = opts.mail === false ? null : await mailApp!.start(config, { svc, log });
  const dns = opts.dns === false ? null : await dnsApp!.start(config, { svc, log });
  // Ephemeral ports (tests): what the API tells mail clients follows the ports actually bound.
  if (mail && config.mailClients.submissionPort === 0) config.mailClients.submissionPort = mail.submissionPort;
  if (mail && config.mailClients.imapPort === 0) config.mailClients.imapPort = mail.imapPort;
  if (push && config.mqtt.port === 0) config.mqtt.publicUrl = config.mqtt.publicUrl.replace(/:0$/, `:${push.port}`);
  const metrics = !server && config.metrics.port !== null ? await (await import('./metrics-endpoint')).startMetricsEndpoint(config, svc) : null;
  return {
    svc,
    log,
    server,
    worker,
    mail,
    push,
    dns,
    metrics,
    async stop() {
      await metrics?.stop();
      await server?.stop();
      await worker?.stop();
      await mail?.stop();
      await dns?.stop();
      await publisher?.close();
      await push?.stop();
      await jobs.close();
      jobs.connection.disconnect();
      redis.disconnect();
      await closeDb(db);
    },
  };
}
