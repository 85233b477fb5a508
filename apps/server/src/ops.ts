/**
 * What operators watch: /healthz (the process answers), /readyz (PostgreSQL and Redis answer within a bounded
 * time: 200, else 503 naming what failed) and /metrics in Prometheus's text format (prom-client): HTTP requests
 * by route and status, queue depths and the age of the oldest waiting job, deliveries by outcome and inbound
 * mail (from the database, so every process reports the instance's totals), push lag, event-loop lag and the
 * database pool. Scrapes read the database and Redis once each; nothing here runs per request but a counter.
 */
import type { Hono, MiddlewareHandler } from 'hono';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { groupCommitStats, type Services } from '@boxes/core';
import { col, k, poolOf, rows, sql, tbl } from '@boxes/db';
import { RECURRING_SCHEDULER_IDS } from '@boxes/jobs';

const READY_TIMEOUT_MS = 2000;

function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e) => {
        clearTimeout(t);
        reject(e);
      },
    );
  });
}

/** Checks that PostgreSQL and Redis answer; the failing ones are named. */
export async function readiness(svc: Services): Promise<{ ok: boolean; checks: Record<string, string> }> {
  const checks: Record<string, string> = {};
  await Promise.all([
    within(rows(svc.db, sql`SELECT 1`), READY_TIMEOUT_MS, 'PostgreSQL').then(
      () => (checks.postgresql = 'ok'),
      (e: Error) => (checks.postgresql = e.message.split('\n')[0]!),
    ),
    within(svc.redis.ping(), READY_TIMEOUT_MS, 'Redis').then(
      () => (checks.redis = 'ok'),
      (e: Error) => (checks.redis = e.message.split('\n')[0]!),
    ),
  ]);
  return { ok: Object.values(checks).every((v) => v === 'ok'), checks };
}

const acct = tbl('accounts');
const cred = tbl('iot_credentials', 'c');
/** Events not yet pushed, summed over the accounts that push on each channel (one query, read on every scrape). */
const pushLagQuery = sql<{ webhook: bigint | null; mqtt: bigint | null }>`
  SELECT sum(${acct.chain_seq} - ${acct.webhook_cursor}) FILTER (WHERE ${acct.callback_webhook} IS NOT NULL) AS webhook,
         sum(${acct.chain_seq} - ${acct.mqtt_cursor}) FILTER (WHERE EXISTS (SELECT 1 FROM ${cred.$} WHERE ${cred.account_id} = ${col('accounts', 'id')} AND ${cred.revoked_at} IS NULL)) AS mqtt
  FROM ${acct.$}`;

export interface Ops {
  /** Counts every HTTP request by route (a bounded label: the route's pattern) and status. */
  middleware: MiddlewareHandler;
}

/**
 * The metrics of this process, whatever apps it runs: Node's own with the boxes_process_ prefix (event-loop lag,
 * heap, GC, CPU), the group commits it flushed and its database pool. Returns what to run before each scrape.
 */
export function processMetrics(registry: Registry, svc: Services): () => void {
  collectDefaultMetrics({ register: registry, prefix: 'boxes_process_' });
  const groupBatches = new Gauge({
    name: 'boxes_group_commit_batches',
    help: 'Group commits flushed by this process (one transaction each), by kind',
    labelNames: ['kind'],
    registers: [registry],
  });
  const groupItems = new Gauge({
    name: 'boxes_group_commit_items',
    help: 'Items recorded by those group commits, by kind (items / batches = mean batch)',
    labelNames: ['kind'],
    registers: [registry],
  });
  const groupLargest = new Gauge({
    name: 'boxes_group_commit_largest_batch',
    help: 'The largest group commit so far, by kind',
    labelNames: ['kind'],
    registers: [registry],
  });
  const pool = new Gauge({ name: 'boxes_db_pool_clients', help: 'Database pool clients by state', labelNames: ['state'], registers: [registry] });
  return () => {
    // The key lookups' group commit belongs to the database client, the others to the services.
    for (const g of [...groupCommitStats(svc), ...groupCommitStats(svc.db)]) {
      groupBatches.set({ kind: g.name }, g.batches);
      groupItems.set({ kind: g.name }, g.items);
      groupLargest.set({ kind: g.name }, g.largest);
    }
    const p = poolOf(svc.db);
    if (p) {
      pool.set({ state: 'total' }, p.totalCount);
      pool.set({ state: 'idle' }, p.idleCount);
      pool.set({ state: 'waiting' }, p.waitingCount);
    }
  };
}

/**
 * Mounts the request counter and /healthz, /readyz and /metrics (call it before the other routes); `routeOf` maps a request path to its bounded route label (the REST
 * route's OpenAPI path, the tRPC procedure, a fixed name for the other pages).
 */
export function mountOps(app: Hono, svc: Services, routeOf: (method: string, path: string) => string): Ops {
  const registry = new Registry();
  const collectProcess = processMetrics(registry, svc);
  const requests = new Counter({
    name: 'boxes_http_requests_total',
    help: 'HTTP requests by route and status',
    labelNames: ['method', 'route', 'status'],
    registers: [registry],
  });
  const duration = new Histogram({
    name: 'boxes_http_request_duration_seconds',
    help: 'HTTP request duration by route',
    labelNames: ['method', 'route'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  const queueDepth = new Gauge({ name: 'boxes_queue_jobs', help: 'Jobs per queue and state', labelNames: ['queue', 'state'], registers: [registry] });
  const queueAge = new Gauge({
    name: 'boxes_queue_oldest_waiting_seconds',
    help: 'Age of the oldest waiting job per queue',
    labelNames: ['queue'],
    registers: [registry],
  });
  const deliveries = new Gauge({ name: 'boxes_deliveries', help: 'Deliveries by status (all time)', labelNames: ['status'], registers: [registry] });
  const inbound = new Gauge({ name: 'boxes_messages_received', help: 'Messages received (all time)', registers: [registry] });
  const schedulesMissing = new Gauge({
    name: 'boxes_job_schedule_missing',
    help: 'Recurring job (billing cycle, domain verification, audit) whose schedule is not in Redis: 1 while missing; alert when above 0 for longer than a worker sweep',
    labelNames: ['schedule'],
    registers: [registry],
  });
  const pushLag = new Gauge({
    name: 'boxes_push_lag_events',
    help: 'Events not yet pushed, summed over accounts, per channel',
    labelNames: ['channel'],
    registers: [registry],
  });

  async function collect(): Promise<void> {
    const queues = { deliveries: svc.jobs.deliveries, billing: svc.jobs.billing, notices: svc.jobs.notices };
    await Promise.all(
      Object.entries(queues).map(async ([name, q]) => {
        const counts = await q.getJobCounts('waiting', 'active', 'delayed', 'failed', 'completed');
        for (const [state, n] of Object.entries(counts)) queueDepth.set({ queue: name, state }, n);
        const [oldest] = await q.getWaiting(0, 0);
        queueAge.set({ queue: name }, oldest ? Math.max(0, (Date.now() - oldest.timestamp) / 1000) : 0);
      }),
    );
    const missing = new Set<string>(await svc.jobs.missingSchedules());
    for (const id of RECURRING_SCHEDULER_IDS) schedulesMissing.set({ schedule: id }, missing.has(id) ? 1 : 0);
    const [byStatus, received, lag] = await Promise.all([
      rows(
        svc.db,
        k
          .selectFrom('deliveries')
          .select(['status', sql<bigint>`count(*)`.as('n')])
          .groupBy('status'),
      ),
      rows(svc.db, k.selectFrom('messages').select(sql<bigint>`count(*)`.as('n')).where('direction', '=', sql.lit('received'))),
      rows(svc.db, pushLagQuery),
    ]);
    deliveries.reset();
    for (const r of byStatus) deliveries.set({ status: r.status }, Number(r.n));
    inbound.set(Number(received[0]?.n ?? 0));
    pushLag.set({ channel: 'webhook' }, Number(lag[0]?.webhook ?? 0));
    pushLag.set({ channel: 'mqtt' }, Number(lag[0]?.mqtt ?? 0));
  }

  const middleware: MiddlewareHandler = async (c, next) => {
    const started = performance.now();
    await next();
    const route = routeOf(c.req.method, c.req.path);
    requests.inc({ method: c.req.method, route, status: String(c.res.status) });
    duration.observe({ method: c.req.method, route }, (performance.now() - started) / 1000);
  };
  // First, so every route after it (these included) is counted.
  app.use('*', middleware);
  app.get('/healthz', (c) => c.json({ status: 'ok' }));
  app.get('/readyz', async (c) => {
    const r = await readiness(svc);
    return c.json({ status: r.ok ? 'ready' : 'unavailable', checks: r.checks }, r.ok ? 200 : 503);
  });
  app.get('/metrics', async (c) => {
    collectProcess();
    try {
      await within(collect(), 5000, 'the metrics sources');
    } catch {
      // A dependency down: the process metrics and counters are still worth serving; /readyz says what failed.
    }
    return c.body(await registry.metrics(), 200, { 'content-type': registry.contentType });
  });

  return { middleware };
}
