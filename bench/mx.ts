/**
 * pnpm bench:mx — inbound mail through the MX, accepted and stored per second.
 *
 * A fresh database and the runtime with the MX (no worker: nothing goes out), on this process's main thread;
 * with BENCH_PROCESSES=1 the MX runs as its own process (`boxes start mx`, on the same database, Redis prefix,
 * secret key and settings, its listeners on free ports) and the load connects to it, the HTTP server alone here.
 * A few accounts, each with a few boxes, are signed up over REST; then BENCH_MX messages (default 5000) are
 * sent to those boxes from a worker thread (bench/load.ts) over BENCH_MX_CONNECTIONS reused SMTP connections
 * (default 8; nodemailer's pooled transport with maxMessages Infinity, so smtp-server's 100 ms early-talker
 * pause is paid once per connection). STARTTLS is used as the MX offers it, like real senders (BENCH_MX_TLS=0
 * turns it off). Stored = received rows in the messages table at the end, which must equal the messages sent.
 * Everything listens on 127.0.0.1; the database and the Redis keys are removed at the end.
 *
 *   BENCH_MX=5000 BENCH_MX_CONNECTIONS=8 BENCH_MX_ACCOUNTS=4 BENCH_MX_BOXES=3 BENCH_WARMUP=200 BENCH_TIMEOUT_S=300
 *   BENCH_DB_POOL (default: the runtime's) BENCH_PROCESSES=1 (the MX as its own process; its CPU is measured apart)
 *   BENCH_MX_PROFILE=<file> (a CPU profile of this process's main thread during the measured Boxes messages)
 *   BENCH_MX_COUNT=1 (all-in-one: this process's PostgreSQL statements by kind and Redis commands per measured message)
 *
 * Memory: the RSS of this process (the apps in it and the load client thread) and of the MX process, idle (after
 * start, before any load) and the peak during the measured messages; Haraka's beside it.
 *
 * The anchors, measured in the same run: a bare smtp-server on this thread that accepts and discards (the same
 * connections, the same STARTTLS, the same messages), the ceiling of the protocol library Boxes builds on; and
 * Haraka (npm `Haraka`, installed into ~/.cache/boxes-bench when missing, BENCH_HARAKA=0 skips it), a complete
 * Node MTA in its own process with the tls plugin, a plugin that accepts every recipient and queue/discard.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { performance } from 'node:perf_hooks';
import { generate } from 'selfsigned';
import {
  CpuMeter,
  createBenchDatabase,
  envInt,
  freePort,
  loadNote,
  main,
  percentile,
  rate,
  request,
  RssMeter,
  runtimeRss,
  signupAccounts,
  sleep,
  startBenchRuntime,
  startBareSmtp,
  startCounting,
  startProfile,
  waitForPort,
} from './common';
import { LoadClient, now } from './load';
import { groupCommitStats } from '@boxes/core';
import { exec, k, rows, sql } from '@boxes/db';

const M = envInt('BENCH_MX', 5000);
const CONNECTIONS = envInt('BENCH_MX_CONNECTIONS', 8, 1, 100);
const ACCOUNTS = envInt('BENCH_MX_ACCOUNTS', 4, 1, 100);
const BOXES = envInt('BENCH_MX_BOXES', 3, 1, 50);
const WARMUP = envInt('BENCH_WARMUP', 200, 0);
const TIMEOUT_MS = envInt('BENCH_TIMEOUT_S', 300) * 1000;
const TLS = process.env.BENCH_MX_TLS !== '0';
const HARAKA_VERSION = '3.3.4';
const PROCESSES = process.env.BENCH_PROCESSES === '1';
/** BENCH_MX_COUNT=1 (all-in-one): this process's PostgreSQL statements and Redis commands per measured message (common.ts startCounting). */
const COUNT = process.env.BENCH_MX_COUNT === '1' && !PROCESSES;

await main('bench:mx', async (onCleanup) => {
  const deadline = Date.now() + TIMEOUT_MS;
  const load = new LoadClient();
  onCleanup(() => load.close());
  const db = await createBenchDatabase();
  onCleanup(() => db.drop());
  const rt = await startBenchRuntime(db, { worker: false, mail: true, ...(PROCESSES ? { processes: {} } : {}) });
  onCleanup(() => rt.stop());
  const rss = runtimeRss(rt);
  // Clients first: the MX waits for open SMTP connections when it stops.
  onCleanup(() => load.close());

  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
  const accounts = await signupAccounts(agent, rt.apiBase, ACCOUNTS);
  const boxes: string[] = [];
  for (const a of accounts) {
    boxes.push(a.primaryAddress);
    for (let b = 1; b < BOXES; b++) {
      const r = await request(agent, `${rt.apiBase}/boxes`, 'POST', { address: `inbox${b}` }, a.apiKey);
      if (r.status !== 200) throw new Error(`creating a box failed: ${r.status} ${JSON.stringify(r.body)}`);
      boxes.push(r.body.address);
    }
  }
  agent.destroy();
  // Inbound mail is charged; keep every account within its free allowance so the ledger path stays the same.
  await exec(rt.runtime.svc.db, k.updateTable('accounts').set({ free_messages_left: M + WARMUP + 1000 }));
  const smtp = { port: rt.smtpPort!, boxes, connections: CONNECTIONS, tls: TLS, deadline };

  if (WARMUP) {
    const w = await load.call({ op: 'smtpSends', ...smtp, count: WARMUP, startSeq: 0 });
    if (w.ok !== WARMUP) throw new Error(`warm-up: ${w.ok}/${WARMUP} messages accepted; first failure: ${w.firstError}`);
  }

  console.log(
    `bench:mx: ${M} messages to ${boxes.length} boxes of ${ACCOUNTS} accounts over ${CONNECTIONS} SMTP connections${TLS ? ' (STARTTLS)' : ''}, ` +
      `after ${WARMUP} warm-up messages, ${PROCESSES ? 'the MX as its own process' : 'all apps in this process'}; ${loadNote()}`,
  );
  if (process.env.BENCH_MX_COUNT === '1' && PROCESSES) console.log('  BENCH_MX_COUNT: not counted, the MX runs in its own process (counting needs all-in-one)');
  const cpu = new CpuMeter(db.name, rt.pids);
  rss.start();
  const elu0 = performance.eventLoopUtilization();
  // The MX's group commits (all-in-one: with the MX as its own process they are not in this process).
  const commitStats = () => groupCommitStats(rt.runtime.svc);
  const commits0 = new Map(commitStats().map((g) => [g.name, g]));
  const profile = process.env.BENCH_MX_PROFILE ? await startProfile('of the measured messages') : null;
  const counting = COUNT ? startCounting(rt.runtime.svc.redis) : null;
  const run = await load.call({ op: 'smtpSends', ...smtp, count: M, startSeq: WARMUP });
  counting?.stop();
  if (profile) await profile.stop(process.env.BENCH_MX_PROFILE!);
  rss.stop();
  const acceptedMs = run.t1 - run.t0;
  const elu = performance.eventLoopUtilization(elu0).utilization;
  const cpuReport = cpu.report(run.ok);
  // The MX answers 250 only after the transaction committed, so the rows are there now; count them.
  const [row] = await rows(rt.runtime.svc.db, k.selectFrom('messages').select(sql<bigint>`count(*)`.as('n')).where('direction', '=', sql.lit('received')));
  const storedMs = now() - run.t0;
  const stored = Number(row!.n) - WARMUP;

  const lat = [...run.latencies].sort((a, b) => a - b);
  const p = (q: number) => percentile(lat, q).toFixed(1);
  console.log(`  SMTP: ${run.ok}/${run.started} messages accepted (250) in ${(acceptedMs / 1000).toFixed(2)} s, ${run.statuses.failed ?? 0} refused or failed`);
  if (run.firstError) console.log(`  first failure: ${run.firstError}`);
  for (const line of counting?.report(run.ok, 'received message') ?? []) console.log(line);
  console.log(`  per-message latency (MAIL FROM to 250, ${CONNECTIONS * 2} queued on ${CONNECTIONS} connections): p50 ${p(50)} ms, p99 ${p(99)} ms`);
  console.log(`  stored: ${stored} received messages in the database`);
  console.log(`  server event loop ${(elu * 100).toFixed(0)}% busy; ${cpuReport}`);
  for (const g of commitStats()) {
    const b = g.batches - (commits0.get(g.name)?.batches ?? 0);
    const n = g.items - (commits0.get(g.name)?.items ?? 0);
    if (b) console.log(`    group commit ${g.name}: ${n} items in ${b} batches (${(n / b).toFixed(1)} a batch)`);
  }
  for (const line of rss.lines()) console.log(line);
  console.log(`mx: accepted ${rate(run.ok, acceptedMs)}/s, stored ${rate(stored, storedMs)}/s (N=${M}, connections=${CONNECTIONS})`);
  if (stored !== M || run.ok !== M) throw new Error(`incomplete run: ${run.ok}/${M} accepted, ${stored}/${M} stored`);

  // The anchor: the same load against a bare smtp-server that accepts and discards.
  const bare = await startBareSmtp();
  onCleanup(() => bare.close());
  const anchor = { ...smtp, port: bare.port };
  if (WARMUP) await load.call({ op: 'smtpSends', ...anchor, count: WARMUP, startSeq: 0 });
  const cpuBare = new CpuMeter(db.name);
  const a = await load.call({ op: 'smtpSends', ...anchor, count: M, startSeq: WARMUP });
  const bareRate = rate(a.ok, a.t1 - a.t0);
  console.log(`  anchor: bare smtp-server (accept and discard; same connections, same STARTTLS): ${a.ok}/${M} accepted; ${cpuBare.report(a.ok)}`);
  console.log(
    `mx anchor: bare smtp-server ${bareRate}/s; Boxes stored ${rate(stored, storedMs)}/s = ${((100 * rate(stored, storedMs)) / Math.max(1, bareRate)).toFixed(0)}% of it`,
  );

  if (process.env.BENCH_HARAKA === '0') return;
  const haraka = await startHaraka().catch((err: Error) => err);
  if (haraka instanceof Error) {
    console.log(`  anchor: Haraka skipped (${haraka.message.split('\n')[0]})`);
    return;
  }
  onCleanup(() => haraka.close());
  const harakaRss = new RssMeter({ 'Haraka process': haraka.pid });
  const h = { ...smtp, port: haraka.port };
  if (WARMUP) await load.call({ op: 'smtpSends', ...h, count: WARMUP, startSeq: 0 });
  const cpuHaraka = new CpuMeter(db.name, { haraka: haraka.pid });
  harakaRss.start();
  const hr = await load.call({ op: 'smtpSends', ...h, count: M, startSeq: WARMUP });
  harakaRss.stop();
  const harakaRate = rate(hr.ok, hr.t1 - hr.t0);
  console.log(
    `  anchor: Haraka ${haraka.version} (tls, accept every recipient, queue/discard; its own process): ${hr.ok}/${M} accepted; ${cpuHaraka.report(hr.ok)}`,
  );
  for (const line of harakaRss.lines()) console.log(line);
  console.log(
    `mx anchor: Haraka ${harakaRate}/s; Boxes stored ${rate(stored, storedMs)}/s = ${((100 * rate(stored, storedMs)) / Math.max(1, harakaRate)).toFixed(0)}% of it`,
  );
});

/**
 * Haraka as the MTA operators run, in its own process on a free port: installed from npm into a cache folder the
 * first time, configured in a temporary folder (its own defaults from `haraka -i`, then smtp.ini, the plugin list,
 * a self-signed certificate for STARTTLS and a one-line plugin that accepts every recipient). Messages are
 * accepted and thrown away (queue/discard with YES_REALLY_DO_DISCARD), as the bare anchor does.
 */
async function startHaraka(): Promise<{ port: number; pid: number; version: string; close(): Promise<void> }> {
  const run = promisify(execFile);
  const home = path.join(os.homedir(), '.cache', 'boxes-bench', `haraka-${HARAKA_VERSION}`);
  const bin = path.join(home, 'node_modules', 'Haraka', 'bin', 'haraka');
  if (!fs.existsSync(bin)) {
    console.log(`  installing Haraka ${HARAKA_VERSION} from npm into ${home}`);
    fs.mkdirSync(home, { recursive: true });
    await run('npm', ['install', '--prefix', home, '--no-audit', '--no-fund', `Haraka@${HARAKA_VERSION}`], { timeout: 300_000 });
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-haraka-'));
  await run(process.execPath, [bin, '-i', dir], { timeout: 60_000 });
  const port = await freePort();
  const pems = await generate([{ name: 'commonName', value: 'haraka.bench.test' }], { keySize: 2048, algorithm: 'sha256' });
  const cfg = (f: string) => path.join(dir, 'config', f);
  fs.writeFileSync(cfg('smtp.ini'), `listen=127.0.0.1:${port}\n`);
  fs.writeFileSync(cfg('plugins'), 'tls\naccept_all\nqueue/discard\n');
  fs.writeFileSync(cfg('log.ini'), '[main]\nlevel=error\n');
  fs.writeFileSync(cfg('tls_key.pem'), pems.private);
  fs.writeFileSync(cfg('tls_cert.pem'), pems.cert);
  // Haraka 3.3's connection code reads a greeting that its shipped connection.ini does not define.
  fs.appendFileSync(cfg('connection.ini'), '\n[message]\ngreeting[]=Haraka (boxes bench anchor)\n');
  fs.writeFileSync(path.join(dir, 'plugins', 'accept_all.js'), 'exports.hook_rcpt = function (next) { next(OK); };\n');
  const child: ChildProcess = spawn(process.execPath, [bin, '-c', dir], {
    env: { ...process.env, YES_REALLY_DO_DISCARD: '1' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<never>((_, reject) => child.once('exit', (code) => reject(new Error(`Haraka exited ${code}: ${err.slice(-500)}`))));
  exited.catch(() => undefined);
  await Promise.race([waitForPort(port, 60_000), exited]);
  return {
    port,
    pid: child.pid!,
    version: HARAKA_VERSION,
    close: async () => {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await Promise.race([exited, sleep(5000)]);
        if (child.exitCode === null) child.kill('SIGKILL');
      }
      child.stderr!.destroy();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
