/**
 * The one place that reads process.env. Every setting is parsed with zod at boot; a bad value stops the
 * process with one line naming the variable, never a stack trace.
 */
import { z } from 'zod';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';

const port = z.coerce.number().int().min(0).max(65535);
const bool = z.enum(['true', 'false', '1', '0', 'yes', 'no', '']).transform((v) => v === 'true' || v === '1' || v === 'yes');

export const envSchema = z.object({
  /** `production`: BOXES_SECRET_KEY is required (none is generated) and the service's own mail is no longer printed in the log. */
  NODE_ENV: z.enum(['development', 'production', 'test']).default('development'),
  /** The HTTP listener's address (REST, tRPC, MCP, /docs, owner pages). */
  HOST: z.string().default('127.0.0.1'),
  /** The HTTP listener's port; 0: a free port (printed). */
  PORT: port.default(3000),
  /** Public address of the site; the API lives at <SITE_URL>/api/v1. Defaults to http://localhost:<PORT>. */
  SITE_URL: z.url({ protocol: /^https?$/ }).optional(),
  /** Shared domain on which free subdomains are issued: <slug>.<BASE_DOMAIN>. */
  BASE_DOMAIN: z
    .string()
    .regex(/^(?=.{1,200}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9-]{2,63}$/i, 'must be a domain name')
    .default('boxes.localhost'),
  /** Public base of the MCP endpoint ({mcp_url}/mcp); defaults to SITE_URL. */
  MCP_URL: z.url({ protocol: /^https?$/ }).optional(),
  /**
   * Host name mail clients and other MTAs use for this instance (MX target). Defaults to mail.<BASE_DOMAIN>. While it
   * is a *.localhost name, mail and MQTT clients are told the listeners' addresses instead.
   */
  MAIL_HOST: z.string().optional(),
  /** Nameservers an owner sets at the registrar for byo_delegated domains. */
  NAMESERVERS: z.string().default('ns1.boxes.localhost,ns2.boxes.localhost'),
  /** PostgreSQL; the database is created if missing and migrations run at start. */
  DATABASE_URL: z.url({ protocol: /^postgres(ql)?$/ }).default('postgresql://postgres@127.0.0.1:5432/boxes'),
  /**
   * A connection straight to PostgreSQL, for what must keep one server session: LISTEN (push wake-ups, notices,
   * event streams, IMAP), migrations (a session advisory lock) and creating the database. Set it when
   * DATABASE_URL points at a pooler in transaction mode (PgBouncer); defaults to DATABASE_URL.
   */
  DIRECT_DATABASE_URL: z.url({ protocol: /^postgres(ql)?$/ }).optional(),
  /** Redis: queues, rate-limit counters, locks. With REDIS_SENTINELS only its credentials, database number and TLS are used. */
  REDIS_URL: z.url({ protocol: /^rediss?$/ }).default('redis://127.0.0.1:6379'),
  /**
   * Redis Sentinel: host:port of each sentinel (comma-separated). When set, every connection asks them for the
   * current primary of REDIS_SENTINEL_NAME and follows a failover; REDIS_URL then gives only the credentials,
   * the database number and TLS (its host and port are not used).
   */
  REDIS_SENTINELS: z
    .string()
    .default('')
    .transform((spec, ctx) => {
      const out: { host: string; port: number }[] = [];
      for (const part of spec
        .split(',')
        .map((p) => p.trim())
        .filter(Boolean)) {
        const m = /^(\[[0-9a-fA-F:.]+\]|[^:\s]+):(\d{1,5})$/.exec(part);
        const p = m ? Number(m[2]) : 0;
        if (!m || p < 1 || p > 65535) {
          ctx.addIssue({ code: 'custom', message: `bad entry "${part}": expected host:port, e.g. 10.0.0.5:26379` });
          return z.NEVER;
        }
        out.push({ host: m[1]!.replace(/^\[|\]$/g, ''), port: p });
      }
      return out;
    }),
  /** The master group name the sentinels monitor (`sentinel monitor <name> ...`). */
  REDIS_SENTINEL_NAME: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,64}$/)
    .default('boxes'),
  /** The sentinels' own password (`requirepass` in sentinel.conf), when they have one. */
  REDIS_SENTINEL_PASSWORD: z.string().optional(),
  /** 32-byte key (hex or base64) that encrypts secrets at rest. Required in production; elsewhere generated into BOXES_DATA_DIR (.data/) on first start if unset. */
  BOXES_SECRET_KEY: z.string().optional(),
  /**
   * The instance's own files outside the database: the generated secret key (outside production, when
   * BOXES_SECRET_KEY is unset) and what `boxes restore` puts back. Default: .data/ at the repository root.
   */
  BOXES_DATA_DIR: z.string().min(1).optional(),
  /** Key prefix of everything Boxes keeps in Redis (queues, counters). */
  REDIS_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9:_-]{1,64}$/)
    .default('boxes'),
  /** The MX (inbound SMTP) listener. 25 in production; an unprivileged port by default. */
  SMTP_HOST: z.string().default('127.0.0.1'),
  /** The MX port (25 in production). */
  SMTP_PORT: port.default(2525),
  /** Largest message the MX accepts (advertised as SIZE; 552 above it). */
  SMTP_MAX_MESSAGE_BYTES: z.coerce
    .number()
    .int()
    .min(1024)
    .default(25 * 1024 * 1024),
  /** Recipients one MX transaction may name (452 beyond). */
  SMTP_MAX_RECIPIENTS: z.coerce.number().int().min(1).default(100),
  /** Connections the MX serves at once. */
  SMTP_MAX_CONNECTIONS: z.coerce.number().int().min(1).default(500),
  /** An MX session with no bytes from the client for this long is closed (slow or stuck clients). */
  SMTP_SOCKET_TIMEOUT_MS: z.coerce.number().int().min(100).max(3_600_000).default(60_000),
  /** HTTP: the request line and headers must arrive within this (slow clients are closed; 408). */
  HTTP_HEADERS_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).default(20_000),
  /** HTTP: the whole request, body included, must arrive within this. */
  HTTP_REQUEST_TIMEOUT_MS: z.coerce.number().int().min(100).max(3_600_000).default(120_000),
  /** HTTP: a connection with no bytes either way for this long is closed (longer than the 25 s long polls). */
  HTTP_IDLE_TIMEOUT_MS: z.coerce.number().int().min(100).max(3_600_000).default(60_000),
  /** GET /events/stream: a comment line is sent after this long without events (kept below the idle timeout). */
  SSE_HEARTBEAT_MS: z.coerce.number().int().min(100).max(300_000).default(15_000),
  /** Event streams (GET /events/stream) one API key may hold open at once on one server process; the next is 429 until one closes. */
  SSE_MAX_STREAMS_PER_KEY: z.coerce.number().int().min(1).max(1000).default(10),
  /**
   * PEM files of the certificate (with its chain) and key of the MX's STARTTLS, IMAP and submission; without them
   * a self-signed certificate is made once and kept in the database (packages/core/src/platform/mail-certificate.ts).
   */
  SMTP_TLS_CERT_FILE: z.string().optional(),
  /** The private key (PEM) of SMTP_TLS_CERT_FILE; set both or neither. */
  SMTP_TLS_KEY_FILE: z.string().optional(),
  /** IMAP for mail clients (implicit TLS; 993 in production). */
  IMAP_HOST: z.string().default('127.0.0.1'),
  /** The IMAP port (993 in production). */
  IMAP_PORT: port.default(1993),
  /** An IMAP connection must finish TLS and log in within this; then it is closed. */
  IMAP_LOGIN_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).default(60_000),
  /** A logged-in IMAP session with nothing from the client for this long is logged out (RFC 3501: at least 30 minutes). */
  IMAP_AUTOLOGOUT_MS: z.coerce
    .number()
    .int()
    .min(100)
    .max(24 * 3_600_000)
    .default(31 * 60_000),
  /** SMTP submission for mail clients (implicit TLS, AUTH with an app-password; 465 in production). */
  SUBMISSION_HOST: z.string().default('127.0.0.1'),
  /** The submission port (465 in production). */
  SUBMISSION_PORT: port.default(1465),
  /** Mail-client logins: failures one username may have in the window before it is locked out. */
  MAIL_AUTH_USER_MAX_FAILURES: z.coerce.number().int().min(1).default(10),
  /** Failures one client address may have in the window before it is locked out. */
  MAIL_AUTH_ADDRESS_MAX_FAILURES: z.coerce.number().int().min(1).default(30),
  /** The counting window of failures, and how long a lockout lasts (seconds). */
  MAIL_AUTH_LOCKOUT_SECONDS: z.coerce.number().int().min(1).default(900),
  /** Failures answered at once; each one after them is answered this many ms later per extra failure (at most 5 steps). */
  MAIL_AUTH_FREE_FAILURES: z.coerce.number().int().min(0).default(3),
  /** The extra wait per failure after the free ones (ms; at most 5 steps). */
  MAIL_AUTH_DELAY_MS: z.coerce.number().int().min(0).max(10_000).default(1000),
  /** Outbound: send everything that leaves the instance through this relay (smtp://user:pass@host:587). */
  SMTP_RELAY_URL: z.url({ protocol: /^smtps?$/ }).optional(),
  /**
   * Connections each worker keeps open to SMTP_RELAY_URL for single sends (the bulk pool keeps BULK_SMTP_CONNECTIONS
   * beside them). Unset: DELIVERY_CONCURRENCY, one per delivery in flight, so no delivery waits for a connection;
   * set it lower for a relay that limits a client's connections. An MX host gets 5.
   */
  SMTP_RELAY_CONNECTIONS: z.coerce.number().int().min(1).max(500).optional(),
  /** Outbound: fixed routes for domains, domain=host:port[,...] (local testing without DNS). */
  SMTP_STATIC_ROUTES: z.string().optional(),
  /** Port used when delivering to MX hosts found in DNS. */
  SMTP_DELIVERY_PORT: port.default(25),
  /**
   * Spare addresses of this machine that accounts may take as dedicated sending IPs, each with the HELO name
   * its connections announce: `ip=helo.name[,ip=helo.name...]` (IPv4 or IPv6). Empty: no live dedicated IPs.
   */
  SENDING_IPS: z
    .string()
    .default('')
    .transform((spec, ctx) => {
      const out: { ip: string; heloName: string }[] = [];
      for (const part of spec
        .split(',')
        .map((p) => p.trim())
        .filter(Boolean)) {
        const m = /^([0-9a-fA-F.:]+)=([A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*)$/.exec(part);
        if (!m || !isIP(m[1]!)) {
          ctx.addIssue({ code: 'custom', message: `bad entry "${part}": expected ip=helo.name, e.g. 127.0.0.2=mail2.example.net` });
          return z.NEVER;
        }
        out.push({ ip: m[1]!.toLowerCase(), heloName: m[2]!.toLowerCase() });
      }
      return out;
    }),
  /** Confirmation mails of new auto-forwards an account may cause per 24 hours (so forwards cannot spam). */
  FORWARD_CONFIRMATIONS_PER_DAY: z.coerce.number().int().min(1).max(10_000).default(20),
  /**
   * The warm-up of a dedicated IP: its daily caps (messages per UTC day through the address), one per day from
   * the day provisioning finished; after the last day it is active with no cap. Volume over a day's cap goes
   * through the shared addresses.
   */
  SENDING_IP_WARMUP_CAPS: z
    .string()
    .default('5000,10000,20000,40000,80000,160000,320000')
    .transform((spec, ctx) => {
      const caps = spec
        .split(',')
        .map((p) => p.trim())
        .filter(Boolean)
        .map(Number);
      if (!caps.length || caps.some((c) => !Number.isInteger(c) || c < 1)) {
        ctx.addIssue({ code: 'custom', message: 'expected a comma-separated list of positive integers (daily caps)' });
        return z.NEVER;
      }
      return caps;
    }),
  /** Multiplies the delivery retry schedule (tests use a tiny factor). */
  DELIVERY_RETRY_SCALE: z.coerce.number().positive().max(1).default(1),
  /** Deliveries one worker runs at once. */
  DELIVERY_CONCURRENCY: z.coerce.number().int().min(1).max(500).default(50),
  /**
   * How often a worker looks for deliveries whose job was lost (a process that died between storing a send and
   * queueing it) and for recurring-job schedules missing from Redis (milliseconds).
   */
  WORKER_SWEEP_INTERVAL_MS: z.coerce.number().int().min(100).max(600_000).default(5000),
  /** Bulk send jobs: the cool-off between batches when a job names none (seconds; 10 minutes). */
  BULK_COOL_OFF_SECONDS: z.coerce.number().int().min(0).max(86_400).default(600),
  /**
   * The shortest cool-off a job may ask for (seconds). 10 minutes is the rule between batches, for the sending
   * reputation; an operator may loosen it (tests and benchmarks do), a job cannot.
   */
  BULK_MIN_COOL_OFF_SECONDS: z.coerce.number().int().min(0).max(86_400).default(600),
  /** The largest batch a job may ask for: a batch holding the whole job would skip the cool-off altogether. */
  BULK_MAX_BATCH_SIZE: z.coerce.number().int().min(1).max(5000).default(1000),
  /** Bulk jobs of one account queued, sending or cooling off at once; one more is refused with 409. */
  BULK_MAX_ACTIVE_JOBS: z.coerce.number().int().min(1).max(1000).default(3),
  /** The circuit breaker: a job halts when its bounces pass this share of its attempted recipients. */
  BULK_MAX_BOUNCE_RATE: z.coerce.number().min(0).max(1).default(0.02),
  /** ... or its complaints pass this share. */
  BULK_MAX_COMPLAINT_RATE: z.coerce.number().min(0).max(1).default(0.005),
  /** SMTP transactions a bulk batch keeps in flight. */
  BULK_CONCURRENCY: z.coerce.number().int().min(1).max(500).default(64),
  /**
   * SMTP connections a bulk worker keeps open to one destination (MX host or relay); 16 stays under Postfix's
   * default_destination_concurrency_limit (20), what receiving MTAs are used to from one sender.
   */
  BULK_SMTP_CONNECTIONS: z.coerce.number().int().min(1).max(100).default(16),
  /** Allow callback URLs on private and loopback addresses (local development and tests only). */
  WEBHOOK_ALLOW_PRIVATE: bool.default(false),
  /** Extra CA (PEM file) trusted for https callbacks, e.g. a development receiver's self-signed certificate. */
  WEBHOOK_CA_FILE: z.string().optional(),
  /** A webhook delivery must answer 2xx within this (ms); else it is retried. */
  WEBHOOK_TIMEOUT_MS: z.coerce.number().int().min(100).max(60_000).default(10_000),
  /** Multiplies the webhook retry schedule (tests use a tiny factor). */
  WEBHOOK_RETRY_SCALE: z.coerce.number().positive().max(1).default(1),
  /** Webhook endpoints (POST /webhook-endpoints) an account may have. */
  WEBHOOK_MAX_ENDPOINTS: z.coerce.number().int().min(1).max(1000).default(10),
  /** The MQTT broker (mutual TLS). */
  MQTT_HOST: z.string().default('127.0.0.1'),
  /** The MQTT broker's port (mutual TLS). */
  MQTT_PORT: port.default(8883),
  /**
   * The endpoint clients are told to connect to; defaults to mqtts://<MAIL_HOST>:<MQTT_PORT>, or, while MAIL_HOST
   * is a *.localhost name, to the broker's own address (MQTT_HOST; 127.0.0.1 when it listens on every address).
   */
  MQTT_PUBLIC_URL: z.string().optional(),
  /** Publish to an external broker (mqtts://...) instead of the built-in one. */
  MQTT_BROKER_URL: z.string().optional(),
  /** Signups (POST /signup/agentic) one client address may start per hour; 0 turns the limit off. */
  SIGNUP_RATE_LIMIT_PER_HOUR: z.coerce.number().int().min(0).default(30),
  /** Requests one API key may make per minute, on every face (REST, tRPC, MCP tool calls); 0 turns the limit off. */
  KEY_RATE_LIMIT_PER_MINUTE: z.coerce.number().int().min(0).max(1_000_000).default(600),
  /**
   * Length of the counting window. The whole window's share of the per-minute rate may be spent at once (the
   * burst), so a shorter window means smaller bursts: 10 gives 100 requests per 10 s at 600 a minute.
   */
  KEY_RATE_LIMIT_WINDOW_SECONDS: z.coerce.number().int().min(1).max(3600).default(60),
  /** Charge the introductory message price ($0.0004) instead of the standard one ($0.0016). */
  PRICE_INTRODUCTORY: bool.default(false),
  /** How often the worker's repeatable billing job runs (recurring debits: domain hosting, storage, DNS overage). */
  BILLING_CYCLE_MS: z.coerce.number().int().min(100).default(3_600_000),
  /** The payment provider; only the built-in local one (with a simulated card network) exists so far. */
  PAYMENT_PROVIDER: z.enum(['local']).default('local'),
  /** Sender of the mail the service itself sends (owner links, billing notices). Defaults to noreply@<BASE_DOMAIN>. */
  NOTICE_FROM: z.email().optional(),
  /** The authoritative DNS server (apps/dns): UDP and TCP. 53 in production. */
  DNS_HOST: z.string().default('127.0.0.1'),
  /** The DNS server's port (UDP and TCP; 53 in production). */
  DNS_PORT: port.default(1053),
  /** Resolvers the domain verifier and the MX's SPF/DKIM/DMARC/ARC checks ask (ip or ip:port, comma-separated); default: the system's. */
  DNS_RESOLVERS: z.string().optional(),
  /** rspamd's HTTP address (its normal worker, e.g. http://127.0.0.1:11333): every inbound message is scored before it is stored. Unset: no spam scoring. */
  RSPAMD_URL: z.url({ protocol: /^https?$/ }).optional(),
  /** How long the MX waits for rspamd before storing the message unscored. */
  RSPAMD_TIMEOUT_MS: z.coerce.number().int().min(100).max(60_000).default(5000),
  /** The SOA contact of served zones (a domain name: hostmaster.example.com); default hostmaster.<BASE_DOMAIN>. */
  DNS_HOSTMASTER: z.string().optional(),
  /** This instance's public addresses (comma-separated IPv4/IPv6): A/AAAA of MAIL_HOST and the nameservers in the base zone. */
  PUBLIC_ADDRESSES: z.string().optional(),
  /** Days a bring-your-own domain claim may stay unproven before it expires. */
  DOMAIN_CLAIM_TTL_DAYS: z.coerce.number().positive().max(90).default(7),
  /** Days the old domain of an account that moved keeps receiving mail (POST /account/domain). */
  DOMAIN_MOVE_GRACE_DAYS: z.coerce.number().min(0).max(365).default(30),
  /** How often the worker looks for pending domains due for a check (each domain backs off on its own). */
  DOMAIN_VERIFY_INTERVAL_MS: z.coerce.number().int().min(50).default(60_000),
  /** How often the worker's audit job runs: chain checkpoints, body retention, deletion of closed accounts. */
  AUDIT_CYCLE_MS: z.coerce.number().int().min(100).default(3_600_000),
  /** Days the data of a closed account is kept (its export downloadable) before it is deleted for good. */
  ACCOUNT_DELETION_GRACE_DAYS: z.coerce.number().min(0).max(365).default(30),
  /** Hours a send held for the owner's review waits for a decision before it expires (nothing sent). */
  REVIEW_TTL_HOURS: z.coerce.number().positive().max(720).default(72),
  /** Days the data-export link of a closed account works. */
  EXPORT_LINK_TTL_DAYS: z.coerce.number().positive().max(365).default(7),
  /**
   * /metrics and /healthz of a process that runs no HTTP server (`boxes start worker|mx|push|dns`, and the worker
   * of `BOXES_SPLIT_PROCESSES=1 pnpm start`), so Prometheus can scrape each process. Unset: none. 0: a free port.
   */
  METRICS_HOST: z.string().default('127.0.0.1'),
  /** The port of that endpoint; unset: none, 0: a free port (printed). */
  METRICS_PORT: port.optional(),
  /** pino's log level. */
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** Take the client address from X-Forwarded-For (only behind a proxy of your own). */
  TRUST_PROXY: bool.default(false),
});

export interface Config {
  nodeEnv: 'development' | 'production' | 'test';
  host: string;
  port: number;
  siteUrl: string;
  apiBaseUrl: string;
  /** Public base of the MCP endpoint: the endpoint is <mcpUrl>/mcp. */
  mcpUrl: string | undefined;
  baseDomain: string;
  mailHost: string;
  nameservers: string[];
  databaseUrl: string;
  /** DIRECT_DATABASE_URL: PostgreSQL itself, never a transaction pooler (LISTEN, migrations, creating the database). */
  directDatabaseUrl: string;
  redisUrl: string;
  /** REDIS_SENTINELS and REDIS_SENTINEL_NAME: the primary is found through Sentinel; null: REDIS_URL is the server. */
  redisSentinel: { sentinels: { host: string; port: number }[]; name: string; password: string | undefined } | null;
  secretKey: string | undefined;
  /** BOXES_DATA_DIR: where the instance keeps its own files; unset: .data/ at the repository root. */
  dataDir: string | undefined;
  redisPrefix: string;
  smtp: {
    host: string;
    port: number;
    maxMessageBytes: number;
    maxRecipients: number;
    maxConnections: number;
    tlsCertFile: string | undefined;
    tlsKeyFile: string | undefined;
    relayUrl: string | undefined;
    /** SMTP_RELAY_CONNECTIONS, else DELIVERY_CONCURRENCY. */
    relayConnections: number;
    /** SENDING_IPS: addresses accounts may take as dedicated sending IPs, with their HELO names. */
    sendingIps: { ip: string; heloName: string }[];
    /** SENDING_IP_WARMUP_CAPS: the daily caps of a dedicated IP's warm-up, day by day. */
    sendingIpWarmupCaps: number[];
    /** FORWARD_CONFIRMATIONS_PER_DAY: confirmation mails of new forwards per account and 24 hours. */
    forwardConfirmationsPerDay: number;
    staticRoutes: string | undefined;
    deliveryPort: number;
    socketTimeoutMs: number;
  };
  /** Slow-client bounds of the HTTP server (ms). */
  http: { headersTimeoutMs: number; requestTimeoutMs: number; idleTimeoutMs: number; sseHeartbeatMs: number; sseMaxStreamsPerKey: number };
  deliveryRetryScale: number;
  /** Mail clients: IMAP and SMTP submission listeners (both implicit TLS, certificate as the MX's). */
  mailClients: {
    imapHost: string;
    imapPort: number;
    imapLoginTimeoutMs: number;
    imapAutologoutMs: number;
    submissionHost: string;
    submissionPort: number;
    /**
     * The hosts mail clients are told to connect to (app-passwords): MAIL_HOST, or while it is a *.localhost name
     * (the local default mail.boxes.localhost, which resolvers and getaddrinfo do not know) the listener's address.
     */
    imapPublicHost: string;
    submissionPublicHost: string;
    auth: { userMaxFailures: number; addressMaxFailures: number; windowSeconds: number; freeFailures: number; delayMs: number };
  };
  webhook: { allowPrivate: boolean; caFile: string | undefined; timeoutMs: number; retryScale: number; maxEndpoints: number };
  mqtt: { host: string; port: number; publicUrl: string; brokerUrl: string | undefined };
  deliveryConcurrency: number;
  /** Worker sweeps: lost delivery jobs, missing recurring-job schedules (WORKER_SWEEP_INTERVAL_MS). */
  workerSweepIntervalMs: number;
  /** Bulk send jobs: default and floor of the cool-off (seconds), batch and active-job bounds, breaker rates, SMTP transactions in flight. */
  bulk: {
    coolOffSeconds: number;
    minCoolOffSeconds: number;
    maxBatchSize: number;
    maxActiveJobs: number;
    maxBounceRate: number;
    maxComplaintRate: number;
    concurrency: number;
    connections: number;
  };
  billing: { introductoryPrice: boolean; cycleMs: number; paymentProvider: 'local' };
  noticeFrom: string;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  trustProxy: boolean;
  signupRateLimitPerHour: number;
  /** Per-key request limit: quota requests per fixed window of windowSeconds (quota 0: off). */
  keyRateLimit: { perMinute: number; windowSeconds: number; quota: number };
  /** The metrics endpoint of processes without the HTTP server (METRICS_PORT); port null: none. */
  metrics: { host: string; port: number | null };
  dns: {
    host: string;
    port: number;
    /** ip or ip:port; empty: the system's resolvers. */
    resolvers: string[];
    hostmaster: string;
    publicAddresses: string[];
    claimTtlDays: number;
    moveGraceDays: number;
    verifyIntervalMs: number;
  };
  /** Inbound trust (packages/core/src/trust): spam scoring through rspamd when url is set. */
  trust: { rspamdUrl: string | undefined; rspamdTimeoutMs: number };
  /** Audit job period; grace before a closed account's data is deleted; export link lifetime. */
  audit: { cycleMs: number; deletionGraceDays: number; exportLinkTtlDays: number };
  /** Owner review of sends: how long a held send waits for the owner (REVIEW_TTL_HOURS). */
  review: { ttlMs: number };
}

const list = (v: string | undefined): string[] =>
  (v ?? '')
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);

/**
 * The host to tell clients for a server listening on `listener`. A public MAIL_HOST is what they use. A
 * *.localhost MAIL_HOST (RFC 6761) names this machine only by convention: mosquitto, Python and most resolvers
 * cannot resolve mail.boxes.localhost, so a local instance names the address the server listens on.
 */
function advertisedHost(mailHost: string, listener: string): string {
  if (mailHost !== 'localhost' && !mailHost.endsWith('.localhost')) return mailHost;
  const host = listener.trim().replace(/^\[|\]$/g, '');
  return host === '' || host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
}

/** host:port for a URL (IPv6 addresses in brackets). */
const hostPort = (host: string, port: number): string => `${host.includes(':') ? `[${host}]` : host}:${port}`;

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/**
 * Settings that carry secrets may come from a file instead: <NAME>_FILE names it (Docker and compose secrets under
 * /run/secrets, Kubernetes Secrets mounted as files), and its content, without the trailing newline, is the value.
 */
export const FILE_SETTINGS = ['BOXES_SECRET_KEY', 'DATABASE_URL', 'DIRECT_DATABASE_URL', 'REDIS_URL', 'REDIS_SENTINEL_PASSWORD', 'SMTP_RELAY_URL'] as const;

function readFileSettings(set: Record<string, string>): Record<string, string> {
  const out = { ...set };
  for (const name of FILE_SETTINGS) {
    const file = set[`${name}_FILE`];
    if (!file) continue;
    if (set[name]) throw new ConfigError(`invalid configuration: ${name} and ${name}_FILE: set one or the other`);
    let value: string;
    try {
      value = readFileSync(file, 'utf8').replace(/\r?\n$/, '');
    } catch (err) {
      throw new ConfigError(`invalid configuration: ${name}_FILE: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
    }
    if (!value) throw new ConfigError(`invalid configuration: ${name}_FILE: ${file} is empty`);
    out[name] = value;
  }
  return out;
}

/** Parses the environment (or the given record). Throws ConfigError with one readable line per bad setting. */
export function loadConfig(env: Record<string, string | undefined> = process.env, overrides: Partial<Config> = {}): Config {
  // An empty variable (PORT=) means unset, not zero or an empty string.
  const set = readFileSettings(Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== '')) as Record<string, string>);
  const parsed = envSchema.safeParse(set);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `${i.path.join('.') || 'environment'}: ${i.message}`);
    throw new ConfigError(`invalid configuration: ${lines.join('; ')}`);
  }
  const e = parsed.data;
  // One without the other would quietly fall back to the self-signed certificate.
  if (Boolean(e.SMTP_TLS_CERT_FILE) !== Boolean(e.SMTP_TLS_KEY_FILE)) {
    throw new ConfigError(
      'invalid configuration: SMTP_TLS_CERT_FILE and SMTP_TLS_KEY_FILE: set both (the certificate and its private key, PEM files) or neither',
    );
  }
  const port = overrides.port ?? e.PORT;
  const siteUrl = (overrides.siteUrl ?? e.SITE_URL ?? `http://localhost:${port}`).replace(/\/+$/, '');
  const mailHost = (e.MAIL_HOST ?? `mail.${e.BASE_DOMAIN}`).toLowerCase();
  return {
    nodeEnv: e.NODE_ENV,
    host: e.HOST,
    port,
    siteUrl,
    apiBaseUrl: `${siteUrl}/api/v1`,
    mcpUrl: e.MCP_URL?.replace(/\/+$/, ''),
    baseDomain: e.BASE_DOMAIN.toLowerCase(),
    mailHost,
    nameservers: e.NAMESERVERS.split(',')
      .map((s) => s.trim().toLowerCase())
      .filter(Boolean),
    databaseUrl: e.DATABASE_URL,
    directDatabaseUrl: e.DIRECT_DATABASE_URL ?? e.DATABASE_URL,
    redisUrl: e.REDIS_URL,
    redisSentinel: e.REDIS_SENTINELS.length ? { sentinels: e.REDIS_SENTINELS, name: e.REDIS_SENTINEL_NAME, password: e.REDIS_SENTINEL_PASSWORD } : null,
    secretKey: e.BOXES_SECRET_KEY,
    dataDir: e.BOXES_DATA_DIR,
    redisPrefix: e.REDIS_PREFIX,
    smtp: {
      host: e.SMTP_HOST,
      port: e.SMTP_PORT,
      maxMessageBytes: e.SMTP_MAX_MESSAGE_BYTES,
      maxRecipients: e.SMTP_MAX_RECIPIENTS,
      maxConnections: e.SMTP_MAX_CONNECTIONS,
      tlsCertFile: e.SMTP_TLS_CERT_FILE,
      tlsKeyFile: e.SMTP_TLS_KEY_FILE,
      relayUrl: e.SMTP_RELAY_URL,
      relayConnections: e.SMTP_RELAY_CONNECTIONS ?? e.DELIVERY_CONCURRENCY,
      sendingIps: e.SENDING_IPS,
      sendingIpWarmupCaps: e.SENDING_IP_WARMUP_CAPS,
      forwardConfirmationsPerDay: e.FORWARD_CONFIRMATIONS_PER_DAY,
      staticRoutes: e.SMTP_STATIC_ROUTES,
      deliveryPort: e.SMTP_DELIVERY_PORT,
      socketTimeoutMs: e.SMTP_SOCKET_TIMEOUT_MS,
    },
    http: {
      headersTimeoutMs: e.HTTP_HEADERS_TIMEOUT_MS,
      requestTimeoutMs: e.HTTP_REQUEST_TIMEOUT_MS,
      idleTimeoutMs: e.HTTP_IDLE_TIMEOUT_MS,
      sseHeartbeatMs: e.SSE_HEARTBEAT_MS,
      sseMaxStreamsPerKey: e.SSE_MAX_STREAMS_PER_KEY,
    },
    deliveryRetryScale: e.DELIVERY_RETRY_SCALE,
    mailClients: {
      imapHost: e.IMAP_HOST,
      imapPort: e.IMAP_PORT,
      imapLoginTimeoutMs: e.IMAP_LOGIN_TIMEOUT_MS,
      imapAutologoutMs: e.IMAP_AUTOLOGOUT_MS,
      submissionHost: e.SUBMISSION_HOST,
      submissionPort: e.SUBMISSION_PORT,
      imapPublicHost: advertisedHost(mailHost, e.IMAP_HOST),
      submissionPublicHost: advertisedHost(mailHost, e.SUBMISSION_HOST),
      auth: {
        userMaxFailures: e.MAIL_AUTH_USER_MAX_FAILURES,
        addressMaxFailures: e.MAIL_AUTH_ADDRESS_MAX_FAILURES,
        windowSeconds: e.MAIL_AUTH_LOCKOUT_SECONDS,
        freeFailures: e.MAIL_AUTH_FREE_FAILURES,
        delayMs: e.MAIL_AUTH_DELAY_MS,
      },
    },
    billing: { introductoryPrice: e.PRICE_INTRODUCTORY, cycleMs: e.BILLING_CYCLE_MS, paymentProvider: e.PAYMENT_PROVIDER },
    noticeFrom: (e.NOTICE_FROM ?? `noreply@${e.BASE_DOMAIN}`).toLowerCase(),
    webhook: {
      allowPrivate: e.WEBHOOK_ALLOW_PRIVATE,
      caFile: e.WEBHOOK_CA_FILE,
      timeoutMs: e.WEBHOOK_TIMEOUT_MS,
      retryScale: e.WEBHOOK_RETRY_SCALE,
      maxEndpoints: e.WEBHOOK_MAX_ENDPOINTS,
    },
    mqtt: {
      host: e.MQTT_HOST,
      port: e.MQTT_PORT,
      publicUrl: e.MQTT_PUBLIC_URL ?? `mqtts://${hostPort(advertisedHost(mailHost, e.MQTT_HOST), e.MQTT_PORT)}`,
      brokerUrl: e.MQTT_BROKER_URL,
    },
    deliveryConcurrency: e.DELIVERY_CONCURRENCY,
    workerSweepIntervalMs: e.WORKER_SWEEP_INTERVAL_MS,
    bulk: {
      coolOffSeconds: Math.max(e.BULK_COOL_OFF_SECONDS, e.BULK_MIN_COOL_OFF_SECONDS),
      minCoolOffSeconds: e.BULK_MIN_COOL_OFF_SECONDS,
      maxBatchSize: e.BULK_MAX_BATCH_SIZE,
      maxActiveJobs: e.BULK_MAX_ACTIVE_JOBS,
      maxBounceRate: e.BULK_MAX_BOUNCE_RATE,
      maxComplaintRate: e.BULK_MAX_COMPLAINT_RATE,
      concurrency: e.BULK_CONCURRENCY,
      connections: e.BULK_SMTP_CONNECTIONS,
    },
    logLevel: e.LOG_LEVEL,
    trustProxy: e.TRUST_PROXY,
    signupRateLimitPerHour: e.SIGNUP_RATE_LIMIT_PER_HOUR,
    keyRateLimit: {
      perMinute: e.KEY_RATE_LIMIT_PER_MINUTE,
      windowSeconds: e.KEY_RATE_LIMIT_WINDOW_SECONDS,
      quota: e.KEY_RATE_LIMIT_PER_MINUTE === 0 ? 0 : Math.max(1, Math.round((e.KEY_RATE_LIMIT_PER_MINUTE * e.KEY_RATE_LIMIT_WINDOW_SECONDS) / 60)),
    },
    metrics: { host: e.METRICS_HOST, port: e.METRICS_PORT ?? null },
    dns: {
      host: e.DNS_HOST,
      port: e.DNS_PORT,
      resolvers: list(e.DNS_RESOLVERS),
      hostmaster: (e.DNS_HOSTMASTER ?? `hostmaster.${e.BASE_DOMAIN}`).toLowerCase().replace(/\.$/, ''),
      publicAddresses: list(e.PUBLIC_ADDRESSES),
      claimTtlDays: e.DOMAIN_CLAIM_TTL_DAYS,
      moveGraceDays: e.DOMAIN_MOVE_GRACE_DAYS,
      verifyIntervalMs: e.DOMAIN_VERIFY_INTERVAL_MS,
    },
    trust: { rspamdUrl: e.RSPAMD_URL?.replace(/\/+$/, ''), rspamdTimeoutMs: e.RSPAMD_TIMEOUT_MS },
    audit: { cycleMs: e.AUDIT_CYCLE_MS, deletionGraceDays: e.ACCOUNT_DELETION_GRACE_DAYS, exportLinkTtlDays: e.EXPORT_LINK_TTL_DAYS },
    review: { ttlMs: Math.round(e.REVIEW_TTL_HOURS * 3_600_000) },
    ...overrides,
    ...(overrides.siteUrl || overrides.port ? { siteUrl, apiBaseUrl: `${siteUrl}/api/v1` } : {}),
  };
}
