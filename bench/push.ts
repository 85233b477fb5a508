/**
 * pnpm bench:push — latency from an event's append to its arrival at a local webhook receiver and at an MQTT
 * subscriber (p50, p99), while events are appended at BENCH_PUSH_RATE per second (default 200).
 *
 * A fresh database; the runtime with the worker (push engine) and the MQTT broker. BENCH_PUSH_ACCOUNTS accounts
 * (default 10) each get a callback webhook pointing at a local https receiver (self-signed, trusted through
 * WEBHOOK_CA_FILE; WEBHOOK_ALLOW_PRIVATE for 127.0.0.1) and an MQTT subscriber with a provisioned certificate.
 * The receiver and the subscribers run in a worker thread (bench/push-peer.ts), outside the service's event loop.
 * Events are appended straight through core's appendEvent (what every API change does) round-robin over the
 * accounts for BENCH_PUSH_SECONDS (default 10). The append time is the event's created_at, taken in this
 * process just before the insert, so both clocks are the same. Everything listens on 127.0.0.1; the database and
 * the Redis keys are removed at the end.
 *
 * With BENCH_PROCESSES=1 the apps on the push path run as their own processes, as `pnpm start` and production
 * run them: the MQTT broker (`boxes start push`) and the worker (`boxes start worker`: it wakes on the appends'
 * NOTIFY, drains each account's webhook and MQTT streams and publishes into the broker process through
 * MQTT_BROKER_URL); the HTTP server stays in this process (signups, webhooks, certificates), and the subscribers
 * connect to the broker process. Their CPU is measured apart.
 *
 * Webhook endpoints mode (BENCH_PUSH_ENDPOINTS=5): each account also gets that many webhook endpoints
 * (POST /webhook-endpoints), every one for every event: all but the last point at the receiver (/ep/1 .. /ep/4),
 * the last at a dead endpoint that accepts the connection and never answers (so each attempt waits out
 * WEBHOOK_TIMEOUT_MS and is retried). The callback webhook (/hook) is the one-endpoint figure of the same run;
 * the bench prints the p99 of each live endpoint beside it, and fails if a live endpoint lost an event or got one
 * twice (every answer is 200): the dead one must delay no one.
 *
 * The appends alone (all-in-one; BENCH_PUSH_ALONE=0 skips it): once every event arrived, the push engine is stopped
 * and the same appends run again at the same rate over the same accounts, measured the same way. What they cost
 * (the append and its announcement, which no one hears now) is what an event costs before anything is pushed;
 * the difference is the push's own part (the wake-ups, the reads, the POSTs, the MQTT publishes, the records).
 * Before them, 3 s with nothing appended give the runtime's idle CPU (its queues' and broker's timers), printed
 * as much per event at the rate: it is in both figures.
 *
 * Memory: the RSS of this process (the apps in it, the appends, and the receiver and subscribers' thread) and of
 * each app process, idle (after start, before any load) and the peak from the first append until every event
 * arrived.
 *
 * Statements (BENCH_PUSH_STATEMENTS=1, all-in-one only): every statement this process sends to PostgreSQL from the
 * first append until every event arrived, counted by its first words and printed per event, the appends' own
 * included (BEGIN, the head's lock, the insert, COMMIT).
 *
 *   BENCH_PUSH_RATE=200 BENCH_PUSH_SECONDS=10 BENCH_PUSH_ACCOUNTS=10 BENCH_PROCESSES=1 BENCH_PUSH_ENDPOINTS=5
 * Timeline (BENCH_PUSH_TIMELINE=<ms>, e.g. 1000 or 100): the latencies by the slice of the run their event was
 * appended in (n, p50, p99 and max of each slice, webhook and MQTT), to tell a tail at the start from a
 * periodic one; and by the same slices where the time went (startProbes): the appends' time to commit, event-loop
 * delays of the server and peer threads, GC pauses, the machine's busy cores and busiest processes, what this
 * database's backends waited on (pg_stat_activity every 10 ms, from the peer thread), and PostgreSQL's checkpoint
 * and autovacuum log lines (BENCH_PG_LOG_DIR, /var/log/postgresql by default). The sampling costs CPU of its
 * own: take CPU figures without it.
 * BENCH_PUSH_PROFILE=<file>: a CPU profile of this process's main thread from the first append until every event
 * arrived (all-in-one: the server, the worker and the broker; the profiler's own cost is in the CPU figures).
 *
 *   BENCH_PUSH_RATE=200 BENCH_PUSH_SECONDS=10 BENCH_PUSH_ACCOUNTS=10 BENCH_PROCESSES=1 BENCH_PUSH_ENDPOINTS=5
 *   BENCH_PUSH_STATEMENTS=1 BENCH_PUSH_TIMELINE=1000
 */
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { PerformanceObserver } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { generate } from 'selfsigned';
import { appendEvent } from '@boxes/core';
import {
  CpuMeter,
  startProfile,
  createBenchDatabase,
  envInt,
  loadNote,
  machineTicks,
  main,
  percentile,
  request,
  runtimeRss,
  signupAccounts,
  sleep,
  startBenchRuntime,
} from './common';
import { rows, sql, tbl } from '@boxes/db';
import pg from 'pg';
import { watchTimerLag } from './lag';

const RATE = envInt('BENCH_PUSH_RATE', 200, 1, 5000);
const SECONDS = envInt('BENCH_PUSH_SECONDS', 10, 1, 600);
const ACCOUNTS = envInt('BENCH_PUSH_ACCOUNTS', 10, 1, 200);
const PROCESSES = process.env.BENCH_PROCESSES === '1';
/** The appends measured again alone, the push engine stopped (all-in-one only; BENCH_PUSH_ALONE=0 skips it). */
const ALONE = process.env.BENCH_PUSH_ALONE !== '0' && !PROCESSES;
/** Webhook endpoints per account (0: none, the callback only); the last one is dead. */
const ENDPOINTS = envInt('BENCH_PUSH_ENDPOINTS', 0, 0, 10);
const STATEMENTS = process.env.BENCH_PUSH_STATEMENTS === '1';
/** Slice of the timeline in ms (0: no timeline). */
const TIMELINE = envInt('BENCH_PUSH_TIMELINE', 0, 0, 60_000);

/**
 * CPU ticks of this database's own backends (by their process title), sampled so that a backend that exits
 * still counts: the PostgreSQL figure of CpuMeter also holds the server's shared processes (the WAL writer, the
 * checkpointer), which other databases on the same server keep busy.
 */
function backendTicks(database: string, seen: Map<number, number>): void {
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const title = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      if (!title.startsWith('postgres: ') || title.split(' ')[3] !== database) continue;
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      seen.set(Number(pid), Number(f[11]) + Number(f[12]));
    } catch {
      // exited meanwhile
    }
  }
}

/** A process's CPU jiffies and its name, or null once it is gone. */
function procTicks(pid: string): { ticks: number; name: string } | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
    // A node process by its script (bench/x.ts, vitest, cli start <app>), PostgreSQL by its title.
    const name = cmd[0]?.startsWith('postgres')
      ? cmd.join(' ').slice(0, 40)
      : (cmd.find((a) => /\.(ts|mjs|js)$/.test(a) && !a.includes('node_modules/.pnpm/tsx')) ?? cmd[0] ?? '?').split('/').slice(-2).join('/');
    return { ticks: Number(f[11]) + Number(f[12]), name: `${pid} ${name}` };
  } catch {
    return null;
  }
}

/**
 * What the timeline prints beside the latencies, to find where a slow slice's time went: how long each append
 * took to commit, how late a 10 ms timer of this thread ran (an event-loop block), this process's GC pauses, the
 * machine's busy cores and the processes that used the most CPU in each slice (other jobs on the machine).
 */
function startProbes() {
  const appends: [number, number][] = [];
  const lags: [number, number][] = [];
  const gcs: [number, number, number][] = [];
  const slices: { at: number; busy: number; top: string[] }[] = [];
  const gcObserver = new PerformanceObserver((list) => {
    for (const e of list.getEntries())
      gcs.push([performance.timeOrigin + e.startTime, e.duration, (e as unknown as { detail?: { kind?: number } }).detail?.kind ?? 0]);
  });
  gcObserver.observe({ entryTypes: ['gc'] });
  const lagTimer = watchTimerLag(lags);
  const every = () =>
    new Map(
      fs
        .readdirSync('/proc')
        .filter((d) => /^\d+$/.test(d))
        .flatMap((pid) => {
          const t = procTicks(pid);
          return t ? [[pid, t] as const] : [];
        }),
    );
  let lastMachine = machineTicks() ?? { busy: 0, total: 0 };
  let lastProcs = every();
  let lastAt = Date.now();
  const sliceTimer = setInterval(
    () => {
      const m = machineTicks() ?? lastMachine;
      const procs = every();
      const top = [...procs]
        .map(([pid, t]) => [t.name, (t.ticks - (lastProcs.get(pid)?.ticks ?? t.ticks)) * 10] as const)
        .filter(([, ms]) => ms > 0)
        .sort((x, y) => y[1] - x[1])
        .slice(0, 4)
        .map(([name, ms]) => `${name} ${ms}`);
      slices.push({ at: lastAt, busy: ((m.busy - lastMachine.busy) / Math.max(1, m.total - lastMachine.total)) * os.cpus().length, top });
      lastMachine = m;
      lastProcs = procs;
      lastAt = Date.now();
    },
    Math.max(TIMELINE, 1_000),
  );
  return {
    appends,
    lags,
    gcs,
    slices,
    stop() {
      clearInterval(lagTimer);
      clearInterval(sliceTimer);
      gcObserver.disconnect();
    },
  };
}

/**
 * PostgreSQL's log lines about checkpoints, autovacuum and lock waits (of this database, or the server's) between two times (the server's log, when
 * this process may read it), with their times.
 */
function serverLogLines(database: string, from: number, to: number): [number, string][] {
  const dir = process.env.BENCH_PG_LOG_DIR ?? '/var/log/postgresql';
  const out: [number, string][] = [];
  try {
    for (const f of fs.readdirSync(dir).filter((n) => n.endsWith('.log'))) {
      for (const line of fs.readFileSync(path.join(dir, f), 'utf8').split('\n')) {
        if (!/checkpoint|automatic (vacuum|analyze)|still waiting|deadlock/.test(line)) continue;
        // Another database's errors are not this run's.
        if (/ \S+@boxes_\w+ /.test(line) && !line.includes(`@${database} `)) continue;
        const t = Date.parse(`${line.slice(0, 23).replace(' ', 'T')}Z`);
        if (t >= from && t <= to) out.push([t, line.slice(24).replace(/^UTC /, '').slice(0, 200)]);
      }
    }
  } catch {
    // not readable here
  }
  return out.sort((x, y) => x[0] - y[0]);
}

/** Statements sent by this process while counting, by their first words. */
const statements = new Map<string, number>();
let countStatements = false;
if (STATEMENTS) {
  const query = pg.Client.prototype.query as (...args: unknown[]) => unknown;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    if (countStatements) {
      const q = args[0];
      const text = typeof q === 'string' ? q : ((q as { text?: string } | null)?.text ?? '');
      const words = text.replace(/\s+/g, ' ').trim().split(' ');
      // A CTE by what it writes first, a SELECT by its first column.
      const key = (words[0] === 'WITH' ? words.slice(0, 6) : words.slice(0, 3)).join(' ').slice(0, 60);
      statements.set(key, (statements.get(key) ?? 0) + 1);
    }
    return query.apply(this, args);
  } as never;
}

const summary = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return `p50 ${percentile(s, 50).toFixed(1)} ms, p99 ${percentile(s, 99).toFixed(1)} ms, max ${(s[s.length - 1] ?? 0).toFixed(1)} ms (n=${s.length})`;
};

await main('bench:push', async (onCleanup) => {
  // The local https receiver.
  const pems = await generate([{ name: 'commonName', value: 'localhost' }], {
    keyType: 'ec',
    algorithm: 'sha256',
    extensions: [{ name: 'subjectAltName', altNames: [{ type: 7, ip: '127.0.0.1' }] }],
  });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-bench-push-'));
  onCleanup(async () => fs.rmSync(dir, { recursive: true, force: true }));
  fs.writeFileSync(path.join(dir, 'ca.pem'), pems.cert);
  // The receiver and the subscribers run in a worker thread: the outside world must not share the service's loop.
  // tsx's loader does not reach worker threads on Node 20: register it in the worker, then load the peer.
  const boot = `import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))}).then((m) => { m.register(); return import(${JSON.stringify(new URL('./push-peer.ts', import.meta.url).href)}); })`;
  const peer = new Worker(boot, { eval: true, workerData: { keyPem: pems.private, certPem: pems.cert } });
  const replies: { op: string; [k: string]: unknown }[] = [];
  const waiters: ((m: { op: string; [k: string]: unknown }) => void)[] = [];
  peer.on('message', (m) => (waiters.shift() ?? ((x) => replies.push(x)))(m));
  const nextReply = () => new Promise<{ op: string; [k: string]: unknown }>((r) => (replies.length ? r(replies.shift()!) : waiters.push(r)));
  onCleanup(async () => {
    peer.postMessage({ op: 'close' });
    await Promise.race([nextReply(), sleep(5000)]);
    await peer.terminate();
  });
  const listening = await nextReply();
  const receiverUrl = `https://127.0.0.1:${listening.port as number}/hook`;
  const endpointUrl = (n: number) =>
    n === ENDPOINTS ? `https://127.0.0.1:${listening.deadPort as number}/dead` : `https://127.0.0.1:${listening.port as number}/ep/${n}`;

  const db = await createBenchDatabase();
  onCleanup(() => db.drop());
  const rt = await startBenchRuntime(db, {
    worker: true,
    mail: false,
    push: true,
    env: { WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_CA_FILE: path.join(dir, 'ca.pem') },
    ...(PROCESSES ? { processes: {} } : {}),
  });
  onCleanup(() => rt.stop());
  const rss = runtimeRss(rt, 'the appends, the receiver and subscribers thread');
  const runtime = rt.runtime;
  const apiBase = rt.apiBase;
  const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
  onCleanup(async () => agent.destroy());

  const accounts = await signupAccounts(agent, apiBase, ACCOUNTS);
  const subscribers: { clientId: string; key: string; cert: string; ca: string; topic: string }[] = [];
  for (const a of accounts) {
    const cb = await request(agent, `${apiBase}/account/callback-webhook`, 'PUT', { agent_callback_webhook: receiverUrl }, a.apiKey);
    if (cb.status !== 200) throw new Error(`setting the webhook failed: ${cb.status} ${JSON.stringify(cb.body)}`);
    for (let n = 1; n <= ENDPOINTS; n++) {
      const ep = await request(agent, `${apiBase}/webhook-endpoints`, 'POST', { url: endpointUrl(n) }, a.apiKey);
      if (ep.status !== 200) throw new Error(`creating a webhook endpoint failed: ${ep.status} ${JSON.stringify(ep.body)}`);
    }
    const prov = await request(agent, `${apiBase}/account/iot/provision`, 'POST', undefined, a.apiKey);
    if (prov.status !== 200) throw new Error(`provisioning failed: ${prov.status} ${JSON.stringify(prov.body)}`);
    subscribers.push({
      clientId: prov.body.client_id,
      key: prov.body.private_key,
      cert: prov.body.certificate,
      ca: prov.body.ca_certificate,
      topic: prov.body.topic,
    });
  }
  const waitsUrl = new URL(db.url);
  waitsUrl.pathname = '/postgres';
  peer.postMessage({ op: 'subscribe', mqttPort: rt.mqttPort!, subscribers, ...(TIMELINE ? { waitsUrl: waitsUrl.toString(), database: db.name } : {}) });
  await nextReply();
  await sleep(500); // let the setup events drain

  const total = RATE * SECONDS;
  const layout = PROCESSES ? 'the worker and the MQTT broker as their own processes' : 'all apps in this process';
  const endpointsNote = ENDPOINTS ? `, ${ENDPOINTS} webhook endpoints per account (${ENDPOINTS - 1} live, 1 dead) beside the callback` : '';
  console.log(`bench:push: ${total} events at ${RATE}/s over ${SECONDS} s across ${ACCOUNTS} accounts${endpointsNote}, ${layout}; ${loadNote()}`);
  const cpu = new CpuMeter(db.name, rt.pids);
  const backendsAtStart = new Map<number, number>();
  backendTicks(db.name, backendsAtStart);
  const backendsNow = new Map(backendsAtStart);
  const backendSampler = setInterval(() => backendTicks(db.name, backendsNow), 250);
  rss.start();
  countStatements = true;
  const probe = TIMELINE ? startProbes() : null;
  const profile = process.env.BENCH_PUSH_PROFILE ? await startProfile('of the appends until every event arrived') : null;
  /**
   * `total` events appended at RATE, round-robin over the accounts, concurrently but bounded (a falling-behind
   * machine shows up as a lower achieved rate); resolves when the last has committed.
   */
  const appendAll = async (started: number, onAppended?: (at: number) => void): Promise<void> => {
    let appended = 0;
    const inflight = new Set<Promise<unknown>>();
    while (appended < total) {
      const due = Math.min(total, Math.floor(((Date.now() - started) / 1000) * RATE));
      while (appended < due && inflight.size < 32) {
        const a = accounts[appended % accounts.length]!;
        // The most common event pushed in production, with a payload of its usual size (push-peer.ts counts this type).
        const at = Date.now();
        const p = appendEvent({
          db: runtime.svc.db,
          accountId: a.accountId,
          type: 'mail.delivered',
          data: {
            message_id: `msg_bench${appended}`,
            recipient: 'someone@example.com',
            route: 'mx',
            remote_mta: 'mx.example.com',
            response: '250 2.0.0 Ok: queued',
          },
        })
          .then(() => onAppended?.(at))
          .finally(() => inflight.delete(p));
        inflight.add(p);
        appended += 1;
      }
      await sleep(2);
    }
    await Promise.all(inflight);
  };
  const started = Date.now();
  await appendAll(started, probe ? (at) => probe.appends.push([at, Date.now() - at]) : undefined);
  const appendSeconds = (Date.now() - started) / 1000;
  const deadline = Date.now() + 60_000;
  let webhookLatency: number[] = [];
  let mqttLatency: number[] = [];
  let webhookCreated: number[] = [];
  let mqttCreated: number[] = [];
  let paths: Record<string, { latency: number[]; twice: number }> = {};
  let deadConnections = 0;
  let peerLags: [number, number][] = [];
  let waits: [number, string[]][] = [];
  const livePaths = Array.from({ length: Math.max(0, ENDPOINTS - 1) }, (_, i) => `/ep/${i + 1}`);
  for (;;) {
    peer.postMessage({ op: 'results' });
    const r = await nextReply();
    webhookLatency = r.webhook as number[];
    mqttLatency = r.mqtt as number[];
    webhookCreated = r.webhookCreated as number[];
    mqttCreated = r.mqttCreated as number[];
    paths = r.paths as typeof paths;
    deadConnections = r.deadConnections as number;
    peerLags = (r.lags as [number, number][] | undefined) ?? [];
    waits = (r.waits as [number, string[]][] | undefined) ?? [];
    const endpointsDone = livePaths.every((p) => (paths[p]?.latency.length ?? 0) >= total);
    if ((webhookLatency.length >= total && mqttLatency.length >= total && endpointsDone) || Date.now() > deadline) break;
    await sleep(100);
  }
  rss.stop();
  countStatements = false;
  probe?.stop();
  const pushedCpu = cpu.totals();
  const cpuReport = cpu.report(total, 'event');
  if (profile) await profile.stop(process.env.BENCH_PUSH_PROFILE!);
  clearInterval(backendSampler);
  backendTicks(db.name, backendsNow);
  const backendMs = [...backendsNow].reduce((sum, [pid, t]) => sum + (t - (backendsAtStart.get(pid) ?? 0)) * 10, 0);
  const seenWebhook = { size: webhookLatency.length };
  const seenMqtt = { size: mqttLatency.length };

  console.log(`  appended: ${total} events over ${appendSeconds.toFixed(1)} s (${Math.round(total / appendSeconds)}/s)`);
  console.log(`  webhook: ${summary(webhookLatency)}${seenWebhook.size < total ? `  MISSING ${total - seenWebhook.size}` : ''}`);
  console.log(`  mqtt:    ${summary(mqttLatency)}${seenMqtt.size < total ? `  MISSING ${total - seenMqtt.size}` : ''}`);
  if (TIMELINE) {
    // Latencies by the slice their event was appended in, from the first append.
    const slices = (latency: number[], created: number[]) => {
      const by = new Map<number, number[]>();
      for (let i = 0; i < latency.length; i++) {
        const k = Math.floor((created[i]! - started) / TIMELINE);
        const xs = by.get(k) ?? [];
        if (!xs.length) by.set(k, xs);
        xs.push(latency[i]!);
      }
      return by;
    };
    const hook = slices(webhookLatency, webhookCreated);
    const mq = slices(mqttLatency, mqttCreated);
    const cell = (xs: number[] | undefined) => {
      if (!xs?.length) return '-'.padEnd(30);
      const s = [...xs].sort((a, b) => a - b);
      return `n ${s.length} p50 ${percentile(s, 50).toFixed(0)} p99 ${percentile(s, 99).toFixed(0)} max ${s[s.length - 1]!.toFixed(0)}`.padEnd(30);
    };
    console.log(`  timeline (slices of ${TIMELINE} ms from the first append; ms): webhook | mqtt`);
    const keys = [...new Set([...hook.keys(), ...mq.keys()])].sort((a, b) => a - b);
    for (const k of keys) console.log(`    ${String(k * TIMELINE).padStart(6)}  ${cell(hook.get(k))} | ${cell(mq.get(k))}`);
    if (probe) {
      const slot = (t: number) => Math.floor((t - started) / TIMELINE);
      const group = <T>(xs: T[], at: (x: T) => number) => {
        const by = new Map<number, T[]>();
        for (const x of xs) {
          const k = slot(at(x));
          const g = by.get(k) ?? [];
          if (!g.length) by.set(k, g);
          g.push(x);
        }
        return by;
      };
      const appendsBy = group(probe.appends, (x) => x[0]);
      const lagsBy = group(probe.lags, (x) => x[0]);
      const peerLagsBy = group(peerLags, (x) => x[0]);
      const gcsBy = group(probe.gcs, (x) => x[0]);
      const slicesBy = group(probe.slices, (x) => x.at);
      const max = (xs: number[] | undefined) => (xs?.length ? Math.max(...xs) : 0).toFixed(0);
      console.log(
        '  the same slices: append until committed (p99, max ms) | longest timer delay of the server thread, of the peer thread | GC (longest pause, total ms) | machine busy cores; most CPU (ms in the slice)',
      );
      for (const k of keys) {
        const ap = (appendsBy.get(k) ?? []).map((x) => x[1]).sort((x, y) => x - y);
        const gc = (gcsBy.get(k) ?? []).map((x) => x[1]);
        const sl = slicesBy.get(k)?.[0];
        console.log(
          `    ${String(k * TIMELINE).padStart(6)}  append ${percentile(ap, 99).toFixed(0)}, ${max(ap)} | delay ${max(lagsBy.get(k)?.map((x) => x[1]))}, ${max(peerLagsBy.get(k)?.map((x) => x[1]))} | GC ${max(gc)}, ${gc.reduce((x, y) => x + y, 0).toFixed(0)} | ${sl ? `${sl.busy.toFixed(2)}; ${sl.top.join(', ')}` : '-'}`,
        );
      }
      // What this database's backends were doing (pg_stat_activity every 10 ms): samples by wait (CPU: none).
      console.log("  the same slices: PostgreSQL samples (every 10 ms) of what this database's active backends waited on");
      const waitsBy = group(waits, (x) => x[0]);
      for (const k of keys) {
        const n = new Map<string, number>();
        for (const [, ws] of waitsBy.get(k) ?? []) for (const w of ws) n.set(w, (n.get(w) ?? 0) + 1);
        const top = [...n].sort((x, y) => y[1] - x[1]).slice(0, 5);
        console.log(`    ${String(k * TIMELINE).padStart(6)}  ${(waitsBy.get(k) ?? []).length} samples: ${top.map(([w, c]) => `${w.trim()} ${c}`).join(', ')}`);
      }
      const auto = await rows(
        runtime.svc.db,
        sql<{ relname: string; vacuumed: Date | null; analyzed: Date | null }>`SELECT relname, last_autovacuum AS vacuumed, last_autoanalyze AS analyzed
          FROM pg_stat_user_tables WHERE last_autovacuum IS NOT NULL OR last_autoanalyze IS NOT NULL`,
      );
      for (const r of auto)
        for (const [what, at] of [
          ['autovacuum', r.vacuumed],
          ['autoanalyze', r.analyzed],
        ] as const)
          if (at) console.log(`    PostgreSQL at ${((at.getTime() - started) / 1000).toFixed(2)} s: ${what} of ${r.relname} (ended)`);
      for (const [t, line] of serverLogLines(db.name, started - 2_000, Date.now()))
        console.log(`    PostgreSQL at ${((t - started) / 1000).toFixed(2)} s: ${line}`);
    }
  }
  const endpointFaults: string[] = [];
  if (ENDPOINTS) {
    const p99 = (xs: number[]) =>
      percentile(
        [...xs].sort((x, y) => x - y),
        99,
      ).toFixed(1);
    console.log(`  webhook endpoints: one endpoint (the callback, same run) p99 ${p99(webhookLatency)} ms`);
    for (const p of livePaths) {
      const got = paths[p] ?? { latency: [], twice: 0 };
      const lost = total - got.latency.length;
      console.log(`    live endpoint ${p}: ${summary(got.latency)}; lost ${lost}, pushed twice ${got.twice}`);
      if (lost > 0 || got.twice > 0) endpointFaults.push(`${p}: lost ${lost}, pushed twice ${got.twice}`);
    }
    const we = tbl('webhook_deliveries');
    const deadRows = await rows(
      runtime.svc.db,
      sql<{
        n: bigint;
        retrying: bigint;
      }>`SELECT count(*) AS n, count(*) FILTER (WHERE ${we.status} = 'retrying') AS retrying FROM ${we.$} WHERE ${we.url} LIKE ${'%/dead'}`,
    );
    console.log(
      `    dead endpoint: ${deadConnections} connections accepted and never answered; ${deadRows[0]!.n} attempts logged (${deadRows[0]!.retrying} retrying)`,
    );
  }
  const wd = tbl('webhook_deliveries');
  const attempts = await rows(
    runtime.svc.db,
    sql<{ n: bigint; avg: number; p99: number; failed: bigint }>`
    SELECT count(*) AS n, avg(${wd.latency_ms})::float AS avg, percentile_cont(0.99) WITHIN GROUP (ORDER BY ${wd.latency_ms})::float AS p99,
           count(*) FILTER (WHERE ${wd.status} <> 'delivered') AS failed
    FROM ${wd.$} WHERE ${wd.event_type} = 'mail.delivered' AND ${wd.endpoint_id} IS NULL`,
  );
  const w = attempts[0]!;
  console.log(`  webhook POSTs: ${w.n} attempts (${w.failed} not 2xx), POST latency avg ${w.avg?.toFixed(1)} ms, p99 ${w.p99?.toFixed(1)} ms`);
  console.log(`  until every event arrived: ${cpuReport}`);
  console.log(`    PostgreSQL backends of this database alone: ${(backendMs / total).toFixed(2)} ms per event`);
  for (const line of rss.lines('until every event arrived')) console.log(line);
  if (STATEMENTS) {
    const all = [...statements.values()].reduce((x, y) => x + y, 0);
    console.log(`  statements to PostgreSQL from this process: ${(all / total).toFixed(2)} per event`);
    for (const [key, n] of [...statements].sort((x, y) => y[1] - x[1])) console.log(`    ${(n / total).toFixed(3)}  ${key}`);
  }
  console.log(
    `push: webhook p99 ${percentile(
      [...webhookLatency].sort((x, y) => x - y),
      99,
    ).toFixed(1)} ms, mqtt p99 ${percentile(
      [...mqttLatency].sort((x, y) => x - y),
      99,
    ).toFixed(1)} ms at ${RATE} events/s (machine: ${os.cpus().length} cores)`,
  );
  if (seenWebhook.size < total || seenMqtt.size < total) throw new Error('some events did not arrive within 60 s');
  if (endpointFaults.length) throw new Error(`live webhook endpoints: ${endpointFaults.join('; ')}`);

  // The same appends again with the push engine stopped: what the events cost before anything is pushed (the
  // append and its announcement, which no one hears now), so the push's own part is the difference. It runs second,
  // on a warmed-up process: if that makes the appends a little cheaper than in the first phase, the push's part
  // comes out a little larger.
  if (ALONE) {
    await runtime.worker!.push.stop();
    await sleep(500);
    // The first phase read this database's backends every 250 ms on this thread (backendTicks): so does this one.
    const sampled = new Map<number, number>();
    const sampler = setInterval(() => backendTicks(db.name, sampled), 250);
    // What the runtime costs meanwhile with nothing to do (its queues' and brokers' timers, Redis round trips):
    // part of every figure above, as much per event at this rate.
    const idle = new CpuMeter(db.name, rt.pids);
    const idleStarted = performance.now();
    await sleep(3000);
    const i = idle.totals();
    const idleSeconds = (performance.now() - idleStarted) / 1000;
    idle.stop();
    const perEventAtRate = (ms: number) => (ms / idleSeconds / RATE).toFixed(2);
    console.log(
      `  idle, nothing appended (for 3 s), as much per event at ${RATE}/s: server thread ${perEventAtRate(i.mainMs)}, other threads ${perEventAtRate(i.otherMs)}, PostgreSQL ${perEventAtRate(i.postgresMs)}`,
    );
    const alone = new CpuMeter(db.name, rt.pids);
    const t0 = Date.now();
    await appendAll(t0);
    const aloneSeconds = (Date.now() - t0) / 1000;
    await sleep(200); // the last announcement
    const a = alone.totals();
    alone.stop();
    clearInterval(sampler);
    const per = (ms: number) => (ms / total).toFixed(2);
    console.log(
      `  the same ${total} appends with the push engine stopped (${Math.round(total / aloneSeconds)}/s): CPU ms per event: server thread ${per(a.mainMs)}, other threads ${per(a.otherMs)}, PostgreSQL ${per(a.postgresMs)}`,
    );
    const extras = [STATEMENTS && 'BENCH_PUSH_STATEMENTS', TIMELINE && 'BENCH_PUSH_TIMELINE', process.env.BENCH_PUSH_PROFILE && 'BENCH_PUSH_PROFILE'].filter(
      Boolean,
    );
    if (extras.length) console.log(`  (${extras.join(', ')} ran in the first phase only: its CPU is in the pushed figure, not in the alone one)`);
    console.log(
      `  push's own part (pushed minus alone), CPU ms per event: server thread ${per(pushedCpu.mainMs - a.mainMs)}, PostgreSQL ${per(pushedCpu.postgresMs - a.postgresMs)}; server thread + PostgreSQL ${per(pushedCpu.mainMs + pushedCpu.postgresMs)} pushed, ${per(a.mainMs + a.postgresMs)} the appends alone, ${per(pushedCpu.mainMs + pushedCpu.postgresMs - a.mainMs - a.postgresMs)} the push's part`,
    );
  }
});
