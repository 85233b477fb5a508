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
 */
import http from 'node:http';
import { staticResolver } from '@boxes/mail';
import { CpuMeter, createBenchDatabase, envInt, loadNote, main, rate, request, runtimeRss, signupAccounts, startBenchRuntime, startProfile } from './common';
import { LoadClient, now } from './load';
import { exec, k, rows, sql } from '@boxes/db';

const SENDS = envInt('BENCH_SENDS', 2000);
const BULK = envInt('BENCH_BULK', 5000, 1, 5000);
const BATCH = envInt('BENCH_BATCH', 1000, 1, 5000);
const CONCURRENCY = envInt('BENCH_CONCURRENCY', 64, 1, 1000);
const ACCOUNTS = envInt('BENCH_ACCOUNTS', 20, 1, 500);
const TIMEOUT_MS = envInt('BENCH_TIMEOUT_S', 300) * 1000;
const SINK_DOMAIN = 'sink.test';
const PROFILE = process.env.BENCH_BULK_PROFILE;

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
  console.log(
    `bench:bulk: ${SENDS} single sends (${CONCURRENCY} in flight, ${ACCOUNTS} accounts), then one bulk job of ${BULK} messages in batches of ${BATCH}, no cool-off; ${loadNote()}`,
  );

  // 1. Single sends.
  rss.start();
  const cpuSingle = new CpuMeter(db.name);
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
  const singleReport = cpuSingle.report(SENDS);
  // Let the worker record the last outcomes before the next phase is measured.
  for (;;) {
    const [r] = await rows(rt.runtime.svc.db, k.selectFrom('deliveries').select(sql<bigint>`count(*)`.as('n')).where('status', '=', sql.lit('delivered')));
    if (Number(r!.n) >= SENDS || Date.now() > deadline) break;
    await new Promise((res) => setTimeout(res, 20));
  }

  // 2. One bulk job.
  const a = accounts[0]!;
  const messages = Array.from({ length: BULK }, (_, n) => ({
    to: `Recipient ${n} <b${n}@${SINK_DOMAIN}>`,
    subject: `Benchmark bulk message ${n}`,
    text: `Hello,\n\nthis is bulk benchmark message ${n}, sent by ${a.primaryAddress}.\n\nRegards,\nthe benchmark\n`,
  }));
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const profile = PROFILE ? await startProfile('of the bulk phase') : null;
  const cpuBulk = new CpuMeter(db.name);
  const t0 = now();
  const created = await request(agent, `${rt.apiBase}/messages/send/bulk`, 'POST', { messages, batch_size: BATCH, cool_off_seconds: 0 }, a.apiKey, 120_000);
  const acceptedMs = now() - t0;
  if (created.status !== 200) throw new Error(`bulk job: ${created.status} ${JSON.stringify(created.body).slice(0, 300)}`);
  const bulk = await load.call({ op: 'waitSink', target: SENDS + BULK, deadline });
  if (bulk.at === null) throw new Error(`bulk: ${bulk.count - SENDS}/${BULK} delivered in time`);
  const bulkMs = bulk.at - t0;
  const bulkRate = rate(BULK, bulkMs);
  const bulkCpu = cpuBulk.perItem(BULK);
  const bulkReport = cpuBulk.report(BULK);
  if (profile) await profile.stop(PROFILE!);
  let job: any = null;
  for (;;) {
    job = (await request(agent, `${rt.apiBase}/messages/send/bulk/${created.body.id}`, 'GET', undefined, a.apiKey)).body;
    if (job.status === 'completed' || Date.now() > deadline) break;
    await new Promise((res) => setTimeout(res, 50));
  }
  agent.destroy();
  setupAgent.destroy();
  rss.stop();

  // A PostgreSQL backend that exits during a phase takes its CPU time with it: a negative difference is unknown.
  const ms = (x: number) => (x < 0 ? 'n/a' : x.toFixed(2));
  console.log(`  single sends: ${SENDS} delivered in ${(singleMs / 1000).toFixed(2)} s; ${singleReport}`);
  console.log(
    `  bulk job: accepted in ${(acceptedMs / 1000).toFixed(2)} s, ${BULK} delivered in ${(bulkMs / 1000).toFixed(2)} s; job ${job?.status}, counts ${JSON.stringify(job?.counts)}; ${bulkReport}`,
  );
  console.log(`  recipients the sink saw more than once: ${bulk.duplicates}`);
  for (const line of rss.lines('over both phases')) console.log(line);
  console.log(
    `bulk: delivered ${bulkRate}/s, worker CPU ${ms(bulkCpu.serverMs)} ms/message (PostgreSQL ${ms(bulkCpu.postgresMs)}, Redis ${ms(bulkCpu.redisMs)}) | ` +
      `single send: delivered ${singleRate}/s, server+worker CPU ${ms(singleCpu.serverMs)} ms/message (PostgreSQL ${ms(singleCpu.postgresMs)}, Redis ${ms(singleCpu.redisMs)}) | ` +
      `bulk = ${(bulkRate / Math.max(1, singleRate)).toFixed(1)}x the single-send rate (aim: 5x)`,
  );
  if (job?.status !== 'completed' || bulk.duplicates) throw new Error(`bulk job ${job?.status}, ${bulk.duplicates} duplicates`);
});
