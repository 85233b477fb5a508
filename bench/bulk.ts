/**
 * pnpm bench:bulk — a bulk job's delivery rate beside the single-send rate, measured in the same run.
 *
 * A fresh database; the HTTP server and the worker run on this process's main thread, exactly as startRuntime
 * runs them; the outside world (HTTP client for the single sends, a local SMTP sink that counts recipients,
 * to which staticResolver routes sink.test) runs in a worker thread (bench/load.ts), as in bench:send.
 *
 * 1. Single sends: BENCH_SENDS (default 2000) one-recipient POST /messages/send, BENCH_CONCURRENCY (64) in
 *    flight, from BENCH_ACCOUNTS (20) accounts; delivered per second from the first request to the last
 *    recipient the sink saw.
 * 2. Bulk: one POST /messages/send/bulk of BENCH_BULK (default 5000) one-recipient messages in batches of
 *    BENCH_BATCH (1000), no cool-off (the floor is 0 here); delivered per second from the request to the last
 *    recipient the sink saw.
 * For each: CPU milliseconds per message of the server process's main thread (HTTP and worker), PostgreSQL
 * (this database's backends and the shared processes) and Redis. The aim: bulk delivery at least 5 times the
 * single-send rate. Memory: the RSS of this process (all apps and the load client thread), idle after start and
 * the peak over both phases.
 *
 *   BENCH_SENDS=2000 BENCH_BULK=5000 BENCH_BATCH=1000 BENCH_CONCURRENCY=64 BENCH_ACCOUNTS=20 BENCH_TIMEOUT_S=300
 *   BULK_CONCURRENCY, BULK_SMTP_CONNECTIONS (SMTP transactions in flight per batch, connections; default: the config's)
 *   BENCH_BULK_PROFILE=<file> writes a CPU profile of this process from the bulk request to the last recipient
 *   BENCH_WORKERS=N runs the worker as N processes of its own (`boxes start worker`, mail for sink.test routed to
 *   the sink by SMTP_STATIC_ROUTES), the HTTP server alone in this process, for both phases (default 0: the
 *   worker on this process's main thread). Their CPU is measured apart and counts as the worker's.
 *   BENCH_BULK_JOBS=J sends the bulk messages as J jobs at once (default 1), BENCH_BULK/J messages each: a job's
 *   batches run one after another, so only batches of different jobs run side by side (in two worker processes,
 *   or two at a time in one).
 *
 * What bounds the bulk phase: the worker's main thread busy share over it (this process's event loop
 * utilization, or each worker process's main-thread CPU over the wall time), the machine's busy cores, and each
 * job's batches on a timeline (from the request, each batch's start and end as the job logs them) with its flushes
 * (the deliveries one flush records share its transaction's now() as delivered_at).
 */
import http from 'node:http';
import { staticResolver } from '@boxes/mail';
import { performance } from 'node:perf_hooks';
import {
  CpuMeter,
  createBenchDatabase,
  envInt,
  loadNote,
  main,
  mainThreadTicks,
  rate,
  request,
  runtimeRss,
  signupAccounts,
  startBenchRuntime,
  startProfile,
} from './common';
import { LoadClient, now } from './load';
import { exec, k, rows, sql, tbl } from '@boxes/db';

const SENDS = envInt('BENCH_SENDS', 2000);
const BULK = envInt('BENCH_BULK', 5000, 1, 5000);
const BATCH = envInt('BENCH_BATCH', 1000, 1, 5000);
const CONCURRENCY = envInt('BENCH_CONCURRENCY', 64, 1, 1000);
const ACCOUNTS = envInt('BENCH_ACCOUNTS', 20, 1, 500);
const TIMEOUT_MS = envInt('BENCH_TIMEOUT_S', 300) * 1000;
const SINK_DOMAIN = 'sink.test';
const PROFILE = process.env.BENCH_BULK_PROFILE;
const WORKERS = envInt('BENCH_WORKERS', 0, 0, 8);
const JOBS = envInt('BENCH_BULK_JOBS', 1, 1, 50);

await main('bench:bulk', async (onCleanup) => {
  const deadline = Date.now() + TIMEOUT_MS;
  const load = new LoadClient();
  onCleanup(() => load.close());
  const { port: sinkPort } = await load.call({ op: 'startSink' });

  const db = await createBenchDatabase();
  onCleanup(() => db.drop());
  const rt = await startBenchRuntime(db, {
    worker: true,
    mail: false,
    resolver: staticResolver({ [SINK_DOMAIN]: { host: '127.0.0.1', port: sinkPort } }),
    // The worker processes route sink.test as the resolver above does (a resolver cannot cross a process).
    ...(WORKERS ? { processes: { workers: WORKERS, env: { SMTP_STATIC_ROUTES: `${SINK_DOMAIN}=127.0.0.1:${sinkPort}` } } } : {}),
    env: {
      BULK_COOL_OFF_SECONDS: '0',
      BULK_MIN_COOL_OFF_SECONDS: '0',
      BULK_MAX_BATCH_SIZE: '5000',
      ...Object.fromEntries(['BULK_CONCURRENCY', 'BULK_SMTP_CONNECTIONS'].filter((k) => process.env[k]).map((k) => [k, process.env[k]!])),
    },
  });
  onCleanup(() => rt.stop());
  const rss = runtimeRss(rt);

  const setupAgent = new http.Agent({ keepAlive: true, maxSockets: 4 });
  const accounts = await signupAccounts(setupAgent, rt.apiBase, ACCOUNTS);
  await exec(rt.runtime.svc.db, k.updateTable('accounts').set({ free_messages_left: SENDS + BULK + 1000 }));
  const layout = WORKERS ? `the worker as ${WORKERS} process${WORKERS > 1 ? 'es' : ''} of its own` : "the worker on this process's main thread";
  const jobsNote = JOBS > 1 ? `${JOBS} bulk jobs of ${Math.floor(BULK / JOBS)} messages at once` : `one bulk job of ${BULK} messages`;
  console.log(
    `bench:bulk: ${SENDS} single sends (${CONCURRENCY} in flight, ${ACCOUNTS} accounts), then ${jobsNote} in batches of ${BATCH}, no cool-off; ${layout}; ${loadNote()}`,
  );
  // The worker's CPU: this process's main thread (HTTP server and worker), or the worker processes (all their threads).
  const workerPids = rt.procs.filter((p) => p.name.startsWith('worker')).map((p) => p.pid);
  const workerMs = (c: CpuMeter) => {
    const t = c.totals();
    return WORKERS ? Object.entries(t.children).reduce((a, [name, ms]) => a + (name.startsWith('worker') ? ms : 0), 0) : t.mainMs;
  };

  // 1. Single sends.
  rss.start();
  const cpuSingle = new CpuMeter(db.name, rt.pids);
  const run = await load.call({
    op: 'httpSends',
    apiBase: rt.apiBase,
    accounts,
    concurrency: CONCURRENCY,
    deadline,
    sinkDomain: SINK_DOMAIN,
    count: SENDS,
    startSeq: 0,
  });
  if (run.ok !== SENDS) throw new Error(`single sends: ${run.ok}/${SENDS} answered 200; first failure: ${run.firstError}`);
  const single = await load.call({ op: 'waitSink', target: SENDS, deadline });
  if (single.at === null) throw new Error(`single sends: ${single.count}/${SENDS} delivered in time`);
  const singleMs = single.at - run.t0;
  const singleRate = rate(SENDS, singleMs);
  const singleCpu = cpuSingle.perItem(SENDS);
  const singleWorkerMs = workerMs(cpuSingle) / SENDS;
  const singleReport = cpuSingle.report(SENDS);
  // Let the worker record the last outcomes before the next phase is measured.
  for (;;) {
    const [r] = await rows(rt.runtime.svc.db, k.selectFrom('deliveries').select(sql<bigint>`count(*)`.as('n')).where('status', '=', sql.lit('delivered')));
    if (Number(r!.n) >= SENDS || Date.now() > deadline) break;
    await new Promise((res) => setTimeout(res, 20));
  }

  // 2. The bulk job (or jobs: BENCH_BULK_JOBS, each from its own account, all requested at once).
  const jobAccounts = Array.from({ length: JOBS }, (_, j) => accounts[j % accounts.length]!);
  const perJob = Array.from({ length: JOBS }, (_, j) => Math.floor(BULK / JOBS) + (j < BULK % JOBS ? 1 : 0));
  let seq = 0;
  const bodies = jobAccounts.map((a, j) => ({
    messages: Array.from({ length: perJob[j]! }, () => {
      const n = seq++;
      return {
        to: `Recipient ${n} <b${n}@${SINK_DOMAIN}>`,
        subject: `Benchmark bulk message ${n}`,
        text: `Hello,\n\nthis is bulk benchmark message ${n}, sent by ${a.primaryAddress}.\n\nRegards,\nthe benchmark\n`,
      };
    }),
    batch_size: BATCH,
    cool_off_seconds: 0,
  }));
  const agent = new http.Agent({ keepAlive: true, maxSockets: JOBS });
  const profile = PROFILE ? await startProfile('of the bulk phase') : null;
  const cpuBulk = new CpuMeter(db.name, rt.pids);
  const elu0 = performance.eventLoopUtilization();
  const mainTicks0 = workerPids.map((pid) => mainThreadTicks(pid));
  const t0 = now();
  const wall0 = Date.now();
  const created = await Promise.all(bodies.map((body, j) => request(agent, `${rt.apiBase}/messages/send/bulk`, 'POST', body, jobAccounts[j]!.apiKey, 120_000)));
  const acceptedMs = now() - t0;
  for (const c of created) if (c.status !== 200) throw new Error(`bulk job: ${c.status} ${JSON.stringify(c.body).slice(0, 300)}`);
  const bulk = await load.call({ op: 'waitSink', target: SENDS + BULK, deadline });
  if (bulk.at === null) throw new Error(`bulk: ${bulk.count - SENDS}/${BULK} delivered in time`);
  const bulkMs = bulk.at - t0;
  const bulkRate = rate(BULK, bulkMs);
  const bulkCpu = cpuBulk.perItem(BULK);
  const bulkWorkerMs = workerMs(cpuBulk) / BULK;
  const mainShare = cpuBulk.totals().mainMs / bulkMs;
  const elu = performance.eventLoopUtilization(elu0).utilization;
  const mainBusy = workerPids.map((pid, i) => ((mainThreadTicks(pid) - mainTicks0[i]!) * 10) / bulkMs);
  const bulkReport = cpuBulk.report(BULK);
  if (profile) await profile.stop(PROFILE!);
  const jobs: any[] = [];
  for (const [j, c] of created.entries()) {
    for (;;) {
      const job = (await request(agent, `${rt.apiBase}/messages/send/bulk/${c.body.id}`, 'GET', undefined, jobAccounts[j]!.apiKey)).body;
      if (job.status === 'completed' || Date.now() > deadline) {
        jobs.push(job);
        break;
      }
      await new Promise((res) => setTimeout(res, 50));
    }
  }
  // Each job's batches on a timeline from the request (wall clock, as the job logs them): start-end, and the time
  // between one batch's end and the next one's start (the queue's hand-over and the batch's checks before it starts).
  const logs = await rows(
    rt.runtime.svc.db,
    k
      .selectFrom('bulk_jobs')
      .select(['id', 'batch_log'])
      .where(
        'id',
        'in',
        created.map((c) => c.body.id as string),
      ),
  );
  // Each batch's flushes: the deliveries a flush records share its transaction's now() as delivered_at.
  const [bi, bd] = [tbl('bulk_job_items', 'i'), tbl('deliveries', 'd')];
  const flushes = await rows(
    rt.runtime.svc.db,
    sql<{ job_id: string; batch: number; flushes: bigint; delivered: bigint }>`
      SELECT ${bi.job_id} AS job_id, ${bi.batch} AS batch, count(DISTINCT ${bd.delivered_at}) AS flushes, count(${bd.delivered_at}) AS delivered
      FROM ${bi.$} JOIN ${bd.$} ON ${bd.message_id} = ${bi.message_id}
      WHERE ${bi.job_id} IN (${sql.join(created.map((c) => c.body.id as string))}) GROUP BY 1, 2`,
  );
  const timelines = logs.map((l) => {
    const entries = (l.batch_log as { index: number; started_at: string | null; completed_at: string }[]).sort((x, y) => x.index - y.index);
    const at = (iso: string | null) => (iso === null ? NaN : (Date.parse(iso) - wall0) / 1000);
    let busy = 0;
    let gaps = 0;
    const parts = entries.map((e, n) => {
      const [s, f] = [at(e.started_at), at(e.completed_at)];
      busy += f - s;
      if (n > 0) gaps += s - at(entries[n - 1]!.completed_at);
      return `${s.toFixed(2)}-${f.toFixed(2)}`;
    });
    const own = flushes.filter((f) => f.job_id === l.id);
    const n = own.reduce((a, f) => a + Number(f.flushes), 0);
    const recorded = own.reduce((a, f) => a + Number(f.delivered), 0);
    return { parts, busy, gaps, first: at(entries[0]?.started_at ?? null), flushes: n, perFlush: recorded / Math.max(1, n) };
  });
  agent.destroy();
  setupAgent.destroy();
  rss.stop();

  // A PostgreSQL backend that exits during a phase takes its CPU time with it: a negative difference is unknown.
  const ms = (x: number) => (x < 0 ? 'n/a' : x.toFixed(2));
  console.log(`  single sends: ${SENDS} delivered in ${(singleMs / 1000).toFixed(2)} s; ${singleReport}`);
  const counts = jobs.map((j) => `${j?.status} ${JSON.stringify(j?.counts)}`).join('; ');
  console.log(
    `  bulk: accepted in ${(acceptedMs / 1000).toFixed(2)} s, ${BULK} delivered in ${(bulkMs / 1000).toFixed(2)} s; job${JOBS > 1 ? 's' : ''} ${counts}; ${bulkReport}`,
  );
  const busyNote = WORKERS
    ? `worker main thread${WORKERS > 1 ? 's' : ''} busy ${mainBusy.map((b) => `${(b * 100).toFixed(0)}%`).join(', ')} of the wall time (CPU)`
    : `this process's event loop (HTTP server and worker) ${(elu * 100).toFixed(0)}% busy, its main thread on a core ${(mainShare * 100).toFixed(0)}% of the wall time (busy and not on a core: waiting for one)`;
  console.log(`  over the bulk phase: ${busyNote}`);
  for (const [j, t] of timelines.entries()) {
    console.log(
      `  job ${j + 1} batches (s from the request): ${t.parts.join(', ')}; sending ${t.busy.toFixed(2)} s, between batches ${t.gaps.toFixed(2)} s, before the first ${t.first.toFixed(2)} s; ${t.flushes} flushes of delivered recipients (${t.perFlush.toFixed(0)} a flush)`,
    );
  }
  console.log(`  recipients the sink saw more than once: ${bulk.duplicates}`);
  for (const line of rss.lines('over both phases')) console.log(line);
  const who = WORKERS ? `worker processes` : 'worker';
  console.log(
    `bulk: delivered ${bulkRate}/s, ${who} CPU ${ms(bulkWorkerMs)} ms/message (PostgreSQL ${ms(bulkCpu.postgresMs)}, Redis ${ms(bulkCpu.redisMs)}) | ` +
      `single send: delivered ${singleRate}/s, server+${who} CPU ${ms(singleCpu.serverMs + (WORKERS ? singleWorkerMs : 0))} ms/message (PostgreSQL ${ms(singleCpu.postgresMs)}, Redis ${ms(singleCpu.redisMs)}) | ` +
      `bulk = ${(bulkRate / Math.max(1, singleRate)).toFixed(1)}x the single-send rate (aim: 5x; ${layout})`,
  );
  const unfinished = jobs.filter((j) => j?.status !== 'completed').length;
  if (unfinished || bulk.duplicates) throw new Error(`${unfinished} bulk job(s) not completed, ${bulk.duplicates} duplicates`);
});
