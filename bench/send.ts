/**
 * pnpm bench:send — API sends accepted per second, and deliveries per second to a remote MX.
 *
 * A fresh database; the HTTP server and the delivery worker run on this process's main thread, exactly as
 * startRuntime runs them. The outside world runs in a worker thread (bench/load.ts): the HTTP client and the
 * remote MX, a local SMTP sink that counts recipients, to which staticResolver routes mail for sink.test.
 * Accounts are signed up over REST and given enough free messages; then BENCH_SENDS sends (default 5000) go out
 * with BENCH_CONCURRENCY requests in flight (default 64) over keep-alive HTTP. Everything listens on 127.0.0.1;
 * the database and the Redis keys are removed at the end.
 *
 *   BENCH_SENDS=5000 BENCH_CONCURRENCY=64 BENCH_ACCOUNTS=20 BENCH_WARMUP=200 BENCH_TIMEOUT_S=300
 *   BENCH_DB_POOL (default: the runtime's) DELIVERY_CONCURRENCY (default: the config's)
 *   BENCH_DELIVER=0 runs the API alone (no worker; the deliveries stay queued)
 *   BENCH_PROCESSES=1 runs the worker as its own process (`boxes start worker`, relaying to the sink), as
 *   `pnpm start` and production do, the HTTP server alone in this process; its CPU is measured apart
 *   BENCH_SEND_PROFILE=<file> writes a CPU profile of this process while the measured sends are accepted
 *   BENCH_SEND_COUNT=1 counts (common.ts startCounting), while they are accepted, this process's PostgreSQL statements (by kind) and Redis
 *   commands (by name), per accepted send; with the worker in this process, counts them again from the start
 *   until every send is recorded delivered (the accepting and the delivering sides together), with the mean
 *   batch of each group commit
 *
 * Memory: the RSS of this process (the apps in it and the load client thread) and of the worker process, idle
 * (after start, before any load) and the peak from the measured sends until they are delivered.
 *
 * The anchor, measured in the same run on the same database: the raw ceiling of the event log, one
 * hash-chained append per message done with plain SQL over pg (the statement appendEvent ran before it became the append_event function, no HTTP, no
 * Prisma, no mail), with the same concurrency over the same accounts.
 */
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { canonicalData, canonicalString, EVENTS_CHANNEL, groupCommitStats, newId } from '@boxes/core';
import { staticResolver } from '@boxes/mail';
import {
  CpuMeter,
  createBenchDatabase,
  envInt,
  loadNote,
  main,
  percentile,
  rate,
  runtimeRss,
  signupAccounts,
  sleep,
  startBenchRuntime,
  startCounting,
  startProfile,
} from './common';
import { LoadClient, now } from './load';
import { exec, k, rows, sql } from '@boxes/db';

const N = envInt('BENCH_SENDS', 5000);
const CONCURRENCY = envInt('BENCH_CONCURRENCY', 64, 1, 1000);
const ACCOUNTS = envInt('BENCH_ACCOUNTS', 20, 1, 500);
const WARMUP = envInt('BENCH_WARMUP', 200, 0);
const TIMEOUT_MS = envInt('BENCH_TIMEOUT_S', 300) * 1000;
const DELIVER = process.env.BENCH_DELIVER !== '0';
const PROCESSES = process.env.BENCH_PROCESSES === '1';
const SINK_DOMAIN = 'sink.test';
const PROFILE = process.env.BENCH_SEND_PROFILE;
const COUNT = process.env.BENCH_SEND_COUNT === '1';

/**
 * The anchor's hashing: the canonical bytes of an event body around its seq (JCS orders the members
 * account_id, created_at, data, id, seq, type), so PostgreSQL can hash prefix + seq + suffix in the statement
 * that reads the head: one round trip per append, the least plain SQL can do.
 */
function canonicalAround(body: { id: string; type: string; account_id: string; created_at: string; data: unknown }): { prefix: string; suffix: string } {
  const str = canonicalString;
  return {
    prefix: `{"account_id":${str(body.account_id)},"created_at":${str(body.created_at)},"data":${canonicalData(body.data)},"id":${str(body.id)},"seq":`,
    suffix: `,"type":${str(body.type)}}`,
  };
}

await main('bench:send', async (onCleanup) => {
  const deadline = Date.now() + TIMEOUT_MS;
  const load = new LoadClient();
  onCleanup(() => load.close());
  const { port: sinkPort } = await load.call({ op: 'startSink' });

  const db = await createBenchDatabase();
  onCleanup(() => db.drop());
  const rt = await startBenchRuntime(db, {
    worker: DELIVER,
    mail: false,
    resolver: staticResolver({ [SINK_DOMAIN]: { host: '127.0.0.1', port: sinkPort } }),
    ...(PROCESSES ? { processes: { env: { SMTP_RELAY_URL: `smtp://127.0.0.1:${sinkPort}` } } } : {}),
  });
  const rss = runtimeRss(rt);
  // Runs before the load worker closes (cleanup runs in reverse): the sink waits for the worker's pooled
  // SMTP connections when it stops.
  onCleanup(() => rt.stop());

  const setupAgent = new http.Agent({ keepAlive: true, maxSockets: 4 });
  const accounts = await signupAccounts(setupAgent, rt.apiBase, ACCOUNTS);
  setupAgent.destroy();
  // Enough free messages for every send, so no send meets 402.
  await exec(rt.runtime.svc.db, k.updateTable('accounts').set({ free_messages_left: N + WARMUP + 1000 }));
  const sends = { apiBase: rt.apiBase, accounts, concurrency: CONCURRENCY, deadline, sinkDomain: SINK_DOMAIN };

  if (WARMUP) {
    const w = await load.call({ op: 'httpSends', ...sends, count: WARMUP, startSeq: 0 });
    if (w.ok !== WARMUP) throw new Error(`warm-up: ${w.ok}/${WARMUP} sends answered 200; first failure: ${w.firstError}`);
    if (DELIVER && (await load.call({ op: 'waitSink', target: WARMUP, deadline })).at === null) throw new Error('warm-up deliveries did not arrive in time');
  }

  console.log(
    `bench:send: ${N} sends from ${ACCOUNTS} accounts, ${CONCURRENCY} in flight, after ${WARMUP} warm-up sends${DELIVER ? (PROCESSES ? ', the worker as its own process' : ', all apps in this process') : ', no delivery worker'}; ${loadNote()}`,
  );
  const cpu = new CpuMeter(db.name, rt.pids);
  rss.start();
  const elu0 = performance.eventLoopUtilization();
  const profile = PROFILE ? await startProfile('while accepting') : null;
  const counting = COUNT ? startCounting(rt.runtime.svc.redis) : null;
  const countingAll = COUNT && DELIVER && !PROCESSES ? startCounting(rt.runtime.svc.redis) : null;
  // The key lookups' group commit belongs to the database client, the others to the services.
  const commitStats = () => [...groupCommitStats(rt.runtime.svc), ...groupCommitStats(rt.runtime.svc.db)];
  const commits0 = new Map(commitStats().map((g) => [g.name, g]));
  const run = await load.call({ op: 'httpSends', ...sends, count: N, startSeq: WARMUP });
  counting?.stop();
  if (profile) await profile.stop(PROFILE!);
  const acceptedMs = run.t1 - run.t0;
  const eluAccept = performance.eventLoopUtilization(elu0).utilization;
  const cpuAccept = cpu.report(run.ok);

  let deliveredMs: number | null = null;
  let settledMs: number | null = null;
  let sink = { count: 0, duplicates: 0 };
  let cpuAll = '';
  let eluAll = 0;
  let outcomes: { status: string; n: bigint; retried: bigint }[] = [];
  if (DELIVER) {
    // Deliveries of sends that failed never come: wait for the accepted ones only.
    const w = await load.call({ op: 'waitSink', target: WARMUP + run.ok, deadline });
    sink = { count: w.count - WARMUP, duplicates: w.duplicates };
    deliveredMs = w.at === null ? null : w.at - run.t0;
    eluAll = performance.eventLoopUtilization(elu0).utilization;
    cpuAll = cpu.report(run.ok);
    // The worker records each delivery after the remote MX accepted it: wait for those rows too.
    while (Date.now() < deadline) {
      const [row] = await rows(rt.runtime.svc.db, k.selectFrom('deliveries').select(sql<bigint>`count(*)`.as('n')).where('status', '=', sql.lit('delivered')));
      if (Number(row!.n) >= WARMUP + run.ok) {
        settledMs = now() - run.t0;
        countingAll?.stop();
        break;
      }
      await sleep(20);
    }
    rss.stop();
    outcomes = await rows(
      rt.runtime.svc.db,
      k
        .selectFrom('deliveries')
        .select((eb) => ['status', sql<bigint>`count(*)`.as('n'), sql<bigint>`count(*) FILTER (WHERE ${eb.ref('attempts')} > 1)`.as('retried')])
        .groupBy('status')
        .orderBy('status'),
    );
  }

  if (!DELIVER) rss.stop();
  const lat = [...run.latencies].sort((a, b) => a - b);
  const p = (q: number) => percentile(lat, q).toFixed(1);
  console.log(`  API: ${run.ok}/${run.started} sends answered 200 in ${(acceptedMs / 1000).toFixed(2)} s; statuses ${JSON.stringify(run.statuses)}`);
  if (run.firstError) console.log(`  first failure: ${run.firstError}`);
  console.log(`  API latency: p50 ${p(50)} ms, p90 ${p(90)} ms, p99 ${p(99)} ms, max ${p(100)} ms`);
  if (DELIVER) {
    const at = (ms: number | null) => (ms === null ? ' (timed out)' : ` after ${(ms / 1000).toFixed(2)} s`);
    console.log(`  sink received ${sink.count}/${run.ok}${at(deliveredMs)}; delivery rows marked delivered${at(settledMs)}`);
    console.log(
      `  deliveries (warm-up included): ${outcomes.map((o) => `${o.status} ${o.n}${Number(o.retried) ? ` (${o.retried} retried)` : ''}`).join(', ')}; ` +
        `recipients the sink saw more than once: ${sink.duplicates}`,
    );
  }
  for (const line of counting?.report(run.ok, 'accepted send') ?? []) console.log(line);
  if (countingAll) {
    console.log('  from the first measured send until all are recorded delivered (accepting and delivering):');
    for (const line of countingAll.report(run.ok, 'delivered send')) console.log(line);
    for (const g of commitStats()) {
      const b = g.batches - (commits0.get(g.name)?.batches ?? 0);
      const n = g.items - (commits0.get(g.name)?.items ?? 0);
      if (b) console.log(`      group commit ${g.name}: ${n} items in ${b} batches (${(n / b).toFixed(1)} a batch)`);
    }
  }
  console.log(`  while accepting${DELIVER ? ' (deliveries run meanwhile)' : ''}: server event loop ${(eluAccept * 100).toFixed(0)}% busy; ${cpuAccept}`);
  if (DELIVER) console.log(`  until delivered: server event loop ${(eluAll * 100).toFixed(0)}% busy; ${cpuAll}`);
  for (const line of rss.lines(DELIVER ? 'until delivered' : 'while accepting')) console.log(line);
  const delivered = !DELIVER ? 'n/a (BENCH_DELIVER=0)' : deliveredMs === null ? `timed out (${sink.count} of ${run.ok})` : `${rate(sink.count, deliveredMs)}/s`;
  console.log(`send: accepted ${rate(run.ok, acceptedMs)}/s, delivered ${delivered}, p50 ${p(50)} ms, p99 ${p(99)} ms (N=${N}, concurrency=${CONCURRENCY})`);
  if (run.ok !== N || (DELIVER && deliveredMs === null)) throw new Error(`incomplete run: ${run.ok}/${N} accepted, ${sink.count} delivered`);

  // The anchor: N hash-chained appends with plain SQL, the same concurrency, over the same accounts.
  const pool = new pg.Pool({ connectionString: db.url, max: 20 });
  onCleanup(() => pool.end());
  const cpuRaw = new CpuMeter(db.name);
  const r0 = now();
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < N) {
        const i = next++;
        const accountId = accounts[i % accounts.length]!.accountId;
        const data = { message_id: `msg_${i}`, subject: 'anchor', recipients: 1 };
        const body = { id: newId('evt'), type: 'mail.sent', account_id: accountId, created_at: new Date().toISOString(), data };
        const { prefix, suffix } = canonicalAround(body);
        await pool.query(
          `WITH head AS (SELECT chain_seq + 1 AS seq, chain_hash AS prev FROM accounts WHERE id = $1 FOR NO KEY UPDATE),
             h AS (SELECT seq, prev, encode(sha256(convert_to(prev || E'\\n' || $2 || seq::text || $3, 'UTF8')), 'hex') AS hash FROM head),
             ins AS (INSERT INTO events (id, account_id, seq, type, data, created_at, prev_hash, hash)
                     SELECT $4, $1, seq, 'mail.sent', $5::jsonb, $6, prev, hash FROM h),
             upd AS (UPDATE accounts SET chain_seq = h.seq, chain_hash = h.hash FROM h WHERE accounts.id = $1)
           SELECT pg_notify($7, $1)::text FROM h`,
          [accountId, prefix, suffix, body.id, JSON.stringify(data), body.created_at, `${EVENTS_CHANNEL}_anchor`],
        );
      }
    }),
  );
  const rawMs = now() - r0;
  const rawRate = rate(N, rawMs);
  console.log(`  anchor: ${N} hash-chained appends with plain SQL (pg, ${CONCURRENCY} in flight, ${accounts.length} accounts); ${cpuRaw.report(N)}`);
  const ours = DELIVER && deliveredMs !== null ? rate(sink.count, deliveredMs) : rate(run.ok, acceptedMs);
  console.log(
    `send anchor: plain-SQL appends ${rawRate}/s; Boxes ${DELIVER ? 'delivered' : 'accepted'} ${ours}/s = ${((100 * ours) / Math.max(1, rawRate)).toFixed(0)}% of it`,
  );
});
