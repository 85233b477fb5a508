/**
 * Test harness: a fresh PostgreSQL database per test file (cloned from a migrated template made once per
 * run by global-setup.ts), the real HTTP server on an ephemeral port, and helpers to sign up over REST.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { loadConfig, type Config } from '@boxes/config';
import type { Db } from '@boxes/db';
import type { Clock, Services } from '@boxes/core';
import type { MxResolver } from '@boxes/mail';
import { deleteKeysWithPrefix } from '@boxes/jobs';
import { createLogger, publicUrlFollowsPort, startRuntime, type Runtime, type ServerHandle } from '@boxes/server';
import { inject } from 'vitest';
import { TEST_DB_PREFIX, adminUrl, databaseUrlFor, templateName } from './databases';
import { checkEventsBeforeDrop } from './event-check';

export { adminUrl, databaseUrlFor } from './databases';
/** Deletes a Redis prefix's keys: what a test does to stand for a Redis that lost its data. */
export { deleteKeysWithPrefix } from '@boxes/jobs';

/** Creates a database cloned from the migrated template; returns its URL and a function that drops it. */
export async function createTestDatabase(): Promise<{ url: string; drop: () => Promise<void> }> {
  const runId = inject('boxesRunId');
  const name = `${TEST_DB_PREFIX}${runId}_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl() });
  await admin.connect();
  await admin.query(`CREATE DATABASE "${name}" TEMPLATE "${templateName(runId)}"`);
  await admin.end();
  return {
    url: databaseUrlFor(name),
    drop: async () => {
      await checkEventsBeforeDrop(runId, databaseUrlFor(name));
      const c = new pg.Client({ connectionString: adminUrl() });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      await c.end();
    },
  };
}

/** An event as GET /events serves it. */
export interface ApiEvent {
  id: string;
  seq: number;
  type: string;
  account_id: string;
  created_at: string;
  data: any;
  _chain: { prev_hash: string; hash: string };
}

export interface TestServer {
  url: string;
  apiBase: string;
  config: Config;
  db: Db;
  svc: Services;
  server: ServerHandle;
  runtime: Runtime;
  /** Port of the MX, when started. */
  smtpPort: number | null;
  /** Port of SMTP submission (implicit TLS), when the mail apps run. */
  submissionPort: number | null;
  /** Port of IMAP (implicit TLS), when the mail apps run. */
  imapPort: number | null;
  /** Port of the MQTT broker, when started. */
  mqttPort: number | null;
  /** Port (UDP and TCP) of the authoritative DNS server. */
  dnsPort: number | null;
  stop(): Promise<void>;
}

export interface TestServerOptions {
  env?: Record<string, string>;
  /** Start the delivery worker (default false). */
  worker?: boolean;
  /** Start the MX on an ephemeral port (default false). */
  mail?: boolean;
  /** Start the MQTT broker on an ephemeral port (default false). */
  push?: boolean;
  /** Where outbound mail goes: tests stand in for the internet's MX hosts. */
  resolver?: MxResolver;
  /** The service clock; an AdjustableClock lets a test move time forward (payment TTLs, billing periods). */
  clock?: Clock;
  /**
   * Another process of that server's service: the same database and Redis prefix (for what all processes must
   * share). Its stop() leaves both to the first server.
   */
  sameStoreAs?: TestServer;
  /**
   * A Redis key prefix of its own for a process of sameStoreAs: its queues are then not the ones the service's
   * workers take jobs from (a process whose enqueues are lost, as if it died between its commit and its enqueue).
   */
  ownQueues?: boolean;
  /** A database of the test's own (already migrated), used as it is and left in place by stop(). */
  databaseUrl?: string;
  /**
   * The apps' pools go through a pooler (PgBouncer): DATABASE_URL becomes pooled(the database's URL) and
   * DIRECT_DATABASE_URL stays the database itself (LISTEN, migrations).
   */
  pooled?: (directUrl: string) => string;
}

/** The whole service on ephemeral ports, on a fresh database and its own Redis key prefix. */
export async function startTestServer(opts: TestServerOptions = {}): Promise<TestServer> {
  const env = opts.env ?? {};
  const shared = opts.sameStoreAs;
  const database = shared
    ? { url: shared.config.directDatabaseUrl, drop: async () => {} }
    : opts.databaseUrl
      ? { url: opts.databaseUrl, drop: async () => {} }
      : await createTestDatabase();
  const config = loadConfig({
    ...process.env,
    SMTP_PORT: '0',
    IMAP_PORT: '0',
    SUBMISSION_PORT: '0',
    MQTT_PORT: '0',
    DNS_PORT: '0',
    WEBHOOK_RETRY_SCALE: '0.001',
    DELIVERY_RETRY_SCALE: '0.0001',
    // Test files sign up many accounts from 127.0.0.1; the limit has its own test.
    SIGNUP_RATE_LIMIT_PER_HOUR: '0',
    // Test files make many calls with one key; the per-key limit has its own test.
    KEY_RATE_LIMIT_PER_MINUTE: '0',
    ...env,
    DATABASE_URL: opts.pooled ? opts.pooled(database.url) : database.url,
    DIRECT_DATABASE_URL: database.url,
    PORT: '0',
    REDIS_PREFIX: (!opts.ownQueues && shared?.config.redisPrefix) || `boxes-test-${randomBytes(5).toString('hex')}`,
    LOG_LEVEL: env.LOG_LEVEL ?? process.env.TEST_LOG_LEVEL ?? 'silent',
  });
  const runtime = await startRuntime(config, {
    // Processes of one service share its secret key (sealed bodies, app-password lookups).
    secretKey: shared?.svc.secretKey ?? randomBytes(32),
    worker: opts.worker ?? false,
    mail: opts.mail ?? false,
    push: opts.push ?? false,
    ...(opts.resolver ? { resolver: opts.resolver } : {}),
    ...(opts.clock ? { clock: opts.clock } : {}),
    log: createLogger(config.logLevel),
    onListening: publicUrlFollowsPort(config),
  });
  // The harness always runs the HTTP server.
  const server = runtime.server!;
  return {
    url: server.url,
    apiBase: `${server.url}/api/v1`,
    config,
    db: runtime.svc.db,
    svc: runtime.svc,
    server,
    runtime,
    smtpPort: runtime.mail?.port ?? null,
    submissionPort: runtime.mail?.submissionPort ?? null,
    imapPort: runtime.mail?.imapPort ?? null,
    mqttPort: runtime.push?.port ?? null,
    dnsPort: runtime.dns?.port ?? null,
    async stop() {
      await runtime.stop();
      // This file's queues and counters go with it, once nothing uses them any more.
      if (!shared || opts.ownQueues) await deleteKeysWithPrefix(config, config.redisPrefix);
      if (shared) return;
      await database.drop();
    },
  };
}

type Maybe<T> = T | undefined | null | false;

/**
 * Whether raw RFC 5322 bytes carry this Message-ID header. Header lines longer than 76 characters are folded
 * ("Message-ID:\r\n <id>"), which happens with long domains, so a plain substring search would be flaky.
 */
export function hasMessageId(raw: Buffer | string, messageId: string): boolean {
  const text = typeof raw === 'string' ? raw : raw.toString('latin1');
  const head = text.slice(0, Math.max(0, text.indexOf('\r\n\r\n')) || text.length);
  const escaped = messageId.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`^Message-ID:[ \\t]*(?:\\r?\\n[ \\t]+)?${escaped}`, 'im').test(head);
}

/** Polls fn every 50 ms until it returns something truthy; fails after ms naming what it waited for. */
export async function waitFor<T>(what: string, fn: () => Maybe<T> | Promise<Maybe<T>>, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export interface JsonResponse<T = any> {
  status: number;
  headers: Headers;
  body: T;
}

/** fetch against the REST API with an optional key; parses JSON bodies. */
export async function rest<T = any>(
  t: Pick<TestServer, 'apiBase'>,
  method: string,
  path: string,
  opts: { key?: string | undefined; body?: unknown; rawBody?: string; headers?: Record<string, string> } = {},
): Promise<JsonResponse<T>> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.key) headers.authorization = `Bearer ${opts.key}`;
  let body: string | undefined;
  if (opts.rawBody !== undefined) body = opts.rawBody;
  else if (opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers['content-type'] ??= 'application/json';
  }
  const res = await fetch(`${t.apiBase}${path}`, { method, headers, body });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    /* not JSON: keep the text */
  }
  return { status: res.status, headers: res.headers, body: parsed as T };
}

export interface TestAccount {
  accountId: string;
  apiKey: string;
  keyId: string;
  primaryAddress: string;
  domain: string;
}

/** Signs up (subdomain mode) over REST and returns the new account's owner key. */
export async function signupAccount(t: Pick<TestServer, 'apiBase'>, human = 'owner@example.com'): Promise<TestAccount> {
  const intent = await rest(t, 'POST', '/signup/agentic', { body: { human_email: human, domain_intent: { mode: 'subdomain', slug_style: 'word_pair' } } });
  if (intent.status !== 200) throw new Error(`signup failed: ${intent.status} ${JSON.stringify(intent.body)}`);
  const done = await rest(t, 'POST', '/signup/agentic/confirm', { body: { intent_id: intent.body.intent_id } });
  if (done.status !== 200) throw new Error(`confirm failed: ${done.status} ${JSON.stringify(done.body)}`);
  return {
    accountId: done.body.account_id,
    apiKey: done.body.api_key,
    keyId: done.body.key_id,
    primaryAddress: done.body.primary_address,
    domain: done.body.domain,
  };
}

/** Mints a key with the given scopes (and optional box restriction) using an admin key. */
export async function mintKey(
  t: Pick<TestServer, 'apiBase'>,
  adminKey: string,
  scopes: string[],
  extra: Record<string, unknown> = {},
): Promise<{ id: string; api_key: string }> {
  const r = await rest(t, 'POST', '/account/keys', { key: adminKey, body: { label: `test-${scopes.join('-')}`, scopes, ...extra } });
  if (r.status !== 200) throw new Error(`mint failed: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}
export * from './dns';

export * from './services';
export { buildBundle } from './build';
export { EPHEMERAL_PORTS, repoRoot, spawnNode, type NodeProcess } from './processes';
