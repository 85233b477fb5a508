/**
 * pnpm bench:imap — a box of BENCH_IMAP messages (default 10,000) synced in full by mbsync (Debian isync) from
 * Boxes and, in the same run, from Dovecot (Debian dovecot-imapd, installed when missing and run on an
 * unprivileged port) serving the same messages from a Maildir. Both over implicit TLS on 127.0.0.1, with the
 * same mbsync settings (INBOX only, pull into an empty Maildir, FSync off and the Maildir in /dev/shm where there
 * is one, BENCH_IMAP_CLIENT_DIR otherwise, so the disk does not hide the servers).
 *
 * The messages are made here (text, html alternatives and attachments of several sizes, a few KB to ~60 KB),
 * stored in Boxes through the real receive path (parsed, sealed, charged, announced as mail.received) and
 * written as the same bytes into Dovecot's Maildir. The account has an app-password before its mail arrives, so
 * Boxes folds the mail into its folders as it is received; the first sync is of the box as that left it. Then in
 * each of BENCH_IMAP_RUNS rounds each server is synced twice into a fresh Maildir: cold (Boxes' folders dropped
 * and their dead entries vacuumed away, so the login folds the whole event stream again; Dovecot's index
 * removed, so it builds a new one) and warm. Printed: the best time of each kind per server (other jobs on the
 * machine only ever make a run slower), every run, and the ratio Boxes / Dovecot. BENCH_IMAP_PROFILE=<file> writes a CPU profile of the
 * server during the last warm Boxes sync, BENCH_IMAP_PROFILE_COLD=<file> one of the last cold sync, BENCH_IMAP_PROFILE_FIRST=<file> one of the first sync. The server's
 * CPU time (this process, while mbsync runs) per Boxes sync is printed too: on a shared machine it varies less
 * than wall time.
 *
 * The mail app (the MX with IMAP and submission) runs as its own process (`boxes start mx`, as production runs
 * it), so its CPU and memory are the IMAP server's alone: the messages are made and stored through the receive
 * path in this process. It runs compiled (`pnpm build`'s bundle, built first, NODE_ENV=production: what
 * `pnpm start:prod` runs), or from source with BENCH_IMAP_COMPILED=0 (tsx's loader and transpiled sources add
 * about 150 MB to an idle process). BENCH_PROCESSES=0 runs it in this process instead (its CPU is then this
 * process's, and the garbage collections of its heap are counted).
 *
 * Memory: the RSS of the mail process (or of this process with BENCH_PROCESSES=0, which also holds the generated
 * messages and the receive path's work) and of Dovecot (its master and children), idle after start and the peak
 * over the syncs.
 *
 *   BENCH_IMAP=10000 BENCH_IMAP_RUNS=3 BENCH_IMAP_SEED=1 BENCH_TIMEOUT_S=900 BENCH_PROCESSES=1
 */
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { constants as perfConstants, performance, PerformanceObserver } from 'node:perf_hooks';
import { promisify } from 'node:util';
import { receiveMessage } from '@boxes/core';
import {
  createBenchDatabase,
  envInt,
  freePort,
  loadNote,
  main,
  mb,
  median,
  processTicks,
  request,
  rssBytes,
  RssMeter,
  runtimeRss,
  signupAccounts,
  startBenchRuntime,
  waitForPort,
  startProfile,
  treeRssBytes,
} from './common';
import { exec, k, rows, sql, table } from '@boxes/db';

const N = envInt('BENCH_IMAP', 10_000);
const TIMEOUT_MS = envInt('BENCH_TIMEOUT_S', 900) * 1000;
const RUNS = envInt('BENCH_IMAP_RUNS', 3, 1, 20);
/** The mail app as its own process (the default), or in this one (BENCH_PROCESSES=0). */
const SEPARATE = process.env.BENCH_PROCESSES !== '0';
const run = promisify(execFile);

/**
 * A process's CPU time (user + system, ms) by thread group, from /proc: its main thread (JavaScript), V8's
 * worker threads (concurrent and parallel garbage collection, optimising compilers), libuv's thread pool (scrypt,
 * async crypto and file work) and the rest. Shows where a sync's CPU goes beyond the event loop.
 */
type ThreadCpu = { main: number; v8: number; pool: number; other: number };
function threadCpuMs(pid: number): ThreadCpu | null {
  const out: ThreadCpu = { main: 0, v8: 0, pool: 0, other: 0 };
  try {
    for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
      let stat: string;
      let comm: string;
      try {
        stat = fs.readFileSync(`/proc/${pid}/task/${tid}/stat`, 'latin1');
        comm = fs.readFileSync(`/proc/${pid}/task/${tid}/comm`, 'latin1').trim();
      } catch {
        continue; // the thread ended meanwhile
      }
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const ms = ((Number(f[11]) + Number(f[12])) * 1000) / 100;
      const group = Number(tid) === pid ? 'main' : comm.startsWith('V8') ? 'v8' : comm.startsWith('libuv-worker') ? 'pool' : 'other';
      out[group] += ms;
    }
  } catch {
    return null;
  }
  return out;
}
const threadDelta = (a: ThreadCpu | null, b: ThreadCpu | null) =>
  a && b
    ? `main thread ${((b.main - a.main) / 1000).toFixed(2)} s, V8 workers ${((b.v8 - a.v8) / 1000).toFixed(2)} s, libuv pool ${((b.pool - a.pool) / 1000).toFixed(2)} s, other ${((b.other - a.other) / 1000).toFixed(2)} s`
    : 'not measured';

/** A small deterministic generator, so runs compare. */
function rng(seed: number) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 2 ** 32;
  };
}

const WORDS =
  'the of and to in is that for it as was with be by on not he this are or his from at which but have an they you were her she there one all we their been has when who will more no if out so said what up its about into than them can only other new some could time these two may then do first any my now such like our over man me even most made after also did many before must through back years where much your way well down should because each just those people how too little state good very make world still own see men work long get here between both life being under never day same another know while last might us great old year off come since against go came right used take three'.split(
    ' ',
  );

function makeMessages(n: number, to: string): Buffer[] {
  const r = rng(envInt('BENCH_IMAP_SEED', 1));
  const words = (count: number) => Array.from({ length: count }, () => WORDS[Math.floor(r() * WORDS.length)]).join(' ');
  const lines = (bytes: number) => {
    const out: string[] = [];
    let size = 0;
    while (size < bytes) {
      const l = words(8 + Math.floor(r() * 6));
      out.push(l);
      size += l.length + 2;
    }
    return out.join('\r\n');
  };
  const out: Buffer[] = [];
  for (let i = 1; i <= n; i++) {
    const date = new Date(Date.UTC(2026, 0, 1) + i * 60_000).toUTCString().replace('GMT', '+0000');
    const head = [
      `From: Sender ${i % 97} <sender${i % 97}@outside.test>`,
      `To: ${to}`,
      `Subject: ${words(4 + (i % 5))} #${i}`,
      `Date: ${date}`,
      `Message-ID: <bench-${i}@outside.test>`,
      'MIME-Version: 1.0',
    ];
    const text = lines(400 + Math.floor(r() * 4000));
    let body: string;
    if (i % 10 === 0) {
      const attachment = randomBytes(8_000 + Math.floor(r() * 40_000))
        .toString('base64')
        .replace(/.{76}/g, '$&\r\n');
      body = [
        'Content-Type: multipart/mixed; boundary="mixed"',
        '',
        '--mixed',
        'Content-Type: multipart/alternative; boundary="alt"',
        '',
        '--alt',
        'Content-Type: text/plain; charset=utf-8',
        '',
        text,
        '--alt',
        'Content-Type: text/html; charset=utf-8',
        '',
        `<html><body><p>${text.replace(/\r\n/g, '</p>\r\n<p>')}</p></body></html>`,
        '--alt--',
        '--mixed',
        `Content-Type: application/octet-stream; name="data-${i}.bin"`,
        `Content-Disposition: attachment; filename="data-${i}.bin"`,
        'Content-Transfer-Encoding: base64',
        '',
        attachment,
        '--mixed--',
        '',
      ].join('\r\n');
    } else {
      body = ['Content-Type: text/plain; charset=utf-8', '', text, ''].join('\r\n');
    }
    out.push(Buffer.from(`${head.join('\r\n')}\r\n${body}`));
  }
  return out;
}

/**
 * BENCH_IMAP_PROFILE=<file>: a CPU profile of the server during the warm Boxes sync: of this process, or of the
 * mail process through its inspector (started with --inspect on inspectPort, spoken to over its WebSocket).
 */
async function startSyncProfile(inspectPort: number | null): Promise<{ stop(file: string): Promise<void> }> {
  return inspectPort !== null ? startRemoteProfile(inspectPort) : startProfile('of a Boxes sync');
}

async function startRemoteProfile(port: number): Promise<{ stop(file: string): Promise<void> }> {
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as { webSocketDebuggerUrl: string }[];
  const ws = new WebSocket(targets[0]!.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  let next = 0;
  const waiting = new Map<number, (result: unknown) => void>();
  ws.onmessage = (ev) => {
    const m = JSON.parse(String(ev.data)) as { id?: number; result?: unknown };
    if (m.id !== undefined) waiting.get(m.id)?.(m.result);
    if (m.id !== undefined) waiting.delete(m.id);
  };
  const post = (method: string, params?: object) =>
    new Promise<unknown>((resolve) => {
      const id = ++next;
      waiting.set(id, resolve);
      ws.send(JSON.stringify({ id, method, params }));
    });
  await post('Profiler.enable');
  await post('Profiler.start');
  // BENCH_IMAP_HEAP_PROFILE=1: a sampling heap profile of the same sync beside it (<file>.heapprofile).
  const heap = !!process.env.BENCH_IMAP_HEAP_PROFILE;
  if (heap) {
    await post('HeapProfiler.enable');
    // Every allocation sampled, not only what is still live when it stops (a sync's garbage is the point).
    await post('HeapProfiler.startSampling', { samplingInterval: 16384, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
  }
  return {
    async stop(file) {
      const { profile } = (await post('Profiler.stop')) as { profile: unknown };
      fs.writeFileSync(file, JSON.stringify(profile));
      if (heap) {
        const sampled = (await post('HeapProfiler.stopSampling')) as { profile: unknown };
        fs.writeFileSync(`${file}.heapprofile`, JSON.stringify(sampled.profile));
        console.log(`  heap allocation profile of a Boxes sync (the mail process): ${file}.heapprofile`);
      }
      ws.close();
      console.log(`  CPU profile of a Boxes sync (the mail process): ${file}`);
    },
  };
}

async function peerCertificate(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false }, () => {
      const der = s.getPeerCertificate().raw;
      s.end();
      resolve(`-----BEGIN CERTIFICATE-----\n${der.toString('base64').replace(/.{64}/g, '$&\n')}\n-----END CERTIFICATE-----\n`);
    });
    s.once('error', reject);
  });
}

async function ensureTool(cmd: string, pkg: string): Promise<void> {
  try {
    await run('sh', ['-c', `command -v ${cmd}`]);
    return;
  } catch {
    /* missing */
  }
  if (process.getuid?.() !== 0) throw new Error(`${cmd} is missing: apt-get install -y ${pkg}`);
  console.log(`bench:imap: installing ${pkg} from Debian packages`);
  await run('sh', ['-c', `(apt-get install -y -qq ${pkg} || (apt-get update -qq && apt-get install -y -qq ${pkg})) >/dev/null`], {
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    timeout: 600_000,
  });
}

/**
 * CPU time in ms (user + system, 10 ms steps) of a process's children that have exited and been waited for
 * (/proc/<pid>/stat cutime and cstime): mbsync's for this process, the imap and imap-login processes' for the
 * Dovecot master. Null where /proc cannot tell.
 */
function childrenCpuMs(pid: number | 'self'): number | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'latin1');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // Fields 16 and 17 of stat (cutime, cstime), counted from the state field (3).
    return ((Number(fields[13]) + Number(fields[14])) * 1000) / 100;
  } catch {
    return null;
  }
}

/** Garbage collections of this process (the Boxes server's heap) so far, as perf_hooks reports them. */
const gcSeen = { full: 0, young: 0, ms: 0 };
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    const kind = (e as unknown as { detail?: { kind?: number } }).detail?.kind;
    if (kind === perfConstants.NODE_PERFORMANCE_GC_MAJOR) gcSeen.full++;
    else if (kind === perfConstants.NODE_PERFORMANCE_GC_MINOR) gcSeen.young++;
    gcSeen.ms += e.duration;
  }
}).observe({ entryTypes: ['gc'] });

/**
 * mbsync pulling INBOX into an empty Maildir; returns the wall time in ms, the messages stored, the CPU time of
 * this process meanwhile (the Boxes server's, when it is the one synced) and mbsync's own. BENCH_IMAP_TRACE=<dir>
 * writes each sync's IMAP dialogue (mbsync -Dn) there, for looking at what the client asks with a small box.
 */
async function mbsync(
  root: string,
  name: string,
  server: { port: number; user: string; pass: string; cert: string },
  serverCpuMs: () => number,
  serverThreads: () => ThreadCpu | null = () => null,
): Promise<{ ms: number; files: number; cpuMs: number; clientCpuMs: number | null; gc: string; threads: string }> {
  const dir = path.join(root, name);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(path.join(dir, 'mail'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'cert.pem'), server.cert);
  const rc = path.join(dir, 'mbsyncrc');
  fs.writeFileSync(
    rc,
    `FSync no

IMAPAccount a
Host 127.0.0.1
Port ${server.port}
User ${server.user}
Pass ${server.pass}
SSLType IMAPS
CertificateFile ${dir}/cert.pem

IMAPStore remote
Account a

MaildirStore local
Path ${dir}/mail/
Inbox ${dir}/mail/INBOX

Channel c
Far :remote:
Near :local:
Patterns INBOX
Create Near
Sync Pull
SyncState *
`,
  );
  const trace = process.env.BENCH_IMAP_TRACE;
  const cpuStart = serverCpuMs();
  const threadsStart = serverThreads();
  const clientStart = childrenCpuMs('self');
  const gcStart = { ...gcSeen };
  // With BENCH_APP_OUT (the app processes' output, their --trace-gc), each sync is marked there: the collections
  // between two marks are that sync's.
  const mark = (what: string) => process.env.BENCH_APP_OUT && fs.appendFileSync(path.resolve(process.env.BENCH_APP_OUT), `--- bench:imap: ${name} ${what}\n`);
  mark('starts');
  const started = performance.now();
  const out = await run('mbsync', [trace ? '-Dn' : '-q', '-c', rc, '-a'], { timeout: TIMEOUT_MS, maxBuffer: 256 * 1024 * 1024 });
  const ms = performance.now() - started;
  mark('ended');
  const cpuMs = serverCpuMs() - cpuStart;
  const threads = threadDelta(threadsStart, serverThreads());
  const clientEnd = childrenCpuMs('self');
  // GC entries arrive after the collection, on a later turn of the event loop.
  await new Promise((r) => setTimeout(r, 20));
  const gc = SEPARATE
    ? 'not seen (its own process)'
    : `${gcSeen.full - gcStart.full} full + ${gcSeen.young - gcStart.young} young, ${(gcSeen.ms - gcStart.ms).toFixed(0)} ms`;
  if (trace) fs.writeFileSync(path.join(trace, `${name}.log`), out.stdout + out.stderr);
  const files = ['cur', 'new'].reduce((n, d) => n + fs.readdirSync(path.join(dir, 'mail', 'INBOX', d)).length, 0);
  return { ms, files, cpuMs, clientCpuMs: clientStart === null || clientEnd === null ? null : clientEnd - clientStart, gc, threads };
}

/** SIGTERM, then SIGKILL if it has not exited within 5 seconds. */
async function stopProcess(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  proc.kill('SIGTERM');
  const timer = setTimeout(() => proc.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
}

async function startDovecot(
  root: string,
  messages: Buffer[],
  cert: { key: string; cert: string },
): Promise<{ port: number; proc: ChildProcess; user: string; pass: string }> {
  await ensureTool('dovecot', 'dovecot-imapd');
  const base = path.join(root, 'dovecot');
  const maildir = path.join(base, 'maildir');
  for (const d of ['cur', 'new', 'tmp']) fs.mkdirSync(path.join(maildir, d), { recursive: true });
  const t0 = Date.UTC(2026, 0, 1) / 1000;
  messages.forEach((m, i) => {
    const file = path.join(maildir, 'cur', `${t0 + i}.M${i}P1.bench:2,`);
    fs.writeFileSync(file, m);
    fs.utimesSync(file, t0 + i * 60, t0 + i * 60);
  });
  fs.writeFileSync(path.join(base, 'cert.pem'), cert.cert);
  fs.writeFileSync(path.join(base, 'key.pem'), cert.key, { mode: 0o600 });
  const { uid, gid } = fs.statSync('/proc/self');
  const mailUser = await run('id', ['-u', 'dovecot'])
    .then((r) => Number(r.stdout.trim()))
    .catch(() => uid);
  const mailGroup = await run('id', ['-g', 'dovecot'])
    .then((r) => Number(r.stdout.trim()))
    .catch(() => gid);
  await run('chown', ['-R', `${mailUser}:${mailGroup}`, maildir]).catch(() => undefined);
  const port = await freePort();
  const pass = 'bench-password';
  const conf = path.join(base, 'dovecot.conf');
  fs.writeFileSync(
    conf,
    `protocols = imap
listen = 127.0.0.1
base_dir = ${base}/run
state_dir = ${base}/state
log_path = ${base}/dovecot.log
ssl = required
ssl_cert = <${base}/cert.pem
ssl_key = <${base}/key.pem
disable_plaintext_auth = yes
auth_mechanisms = plain login
first_valid_uid = ${mailUser}
first_valid_gid = ${mailGroup}
mail_location = maildir:${maildir}:INDEX=${base}/index
service imap-login {
  inet_listener imap {
    port = 0
  }
  inet_listener imaps {
    address = 127.0.0.1
    port = ${port}
    ssl = yes
  }
}
passdb {
  driver = static
  args = password=${pass}
}
userdb {
  driver = static
  args = uid=${mailUser} gid=${mailGroup} home=${base}/home
}
`,
  );
  fs.mkdirSync(path.join(base, 'index'), { recursive: true });
  fs.mkdirSync(path.join(base, 'home'), { recursive: true });
  await run('chown', ['-R', `${mailUser}:${mailGroup}`, path.join(base, 'index'), path.join(base, 'home')]).catch(() => undefined);
  const proc = spawn('dovecot', ['-F', '-c', conf], { stdio: ['ignore', 'inherit', 'inherit'] });
  try {
    await waitForPort(port, 15_000);
  } catch (err) {
    await stopProcess(proc);
    throw err;
  }
  return { port, proc, user: 'bench', pass };
}

await main('bench:imap', async (onCleanup) => {
  await ensureTool('mbsync', 'isync');
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-bench-imap-'));
  // Dovecot reads its Maildir as its own user.
  fs.chmodSync(root, 0o755);
  // mbsync's Maildirs (10,000 new files per sync) go to memory where there is a tmpfs: on this machine's disk
  // creating them took anywhere from 0.3 to 3.6 s of system time from one run to the next, for either server.
  const shm = '/dev/shm';
  const clientRoot =
    process.env.BENCH_IMAP_CLIENT_DIR ?? (fs.existsSync(shm) && fs.statSync(shm).isDirectory() ? fs.mkdtempSync(path.join(shm, 'boxes-bench-imap-')) : root);
  onCleanup(async () => {
    if (process.env.BENCH_KEEP) console.log(`kept ${root}`);
    else fs.rmSync(root, { recursive: true, force: true });
    if (clientRoot !== root && !process.env.BENCH_IMAP_CLIENT_DIR) fs.rmSync(clientRoot, { recursive: true, force: true });
  });
  const db = await createBenchDatabase();
  onCleanup(() => db.drop());
  const profiling = !!(process.env.BENCH_IMAP_PROFILE || process.env.BENCH_IMAP_PROFILE_COLD || process.env.BENCH_IMAP_PROFILE_FIRST);
  const inspectPort = SEPARATE && profiling ? await freePort() : null;
  let compiled = SEPARATE && process.env.BENCH_IMAP_COMPILED !== '0';
  if (compiled) {
    const built = spawnSync(process.execPath, [path.join(import.meta.dirname, '../apps/server/build.mjs')], { encoding: 'utf8' });
    if (built.status !== 0) {
      console.log(`bench:imap: the mail process runs from source (apps/server/build.mjs failed: ${(built.stderr || '').trim().split('\n')[0]})`);
      compiled = false;
    }
  }
  const rt = await startBenchRuntime(db, {
    worker: false,
    mail: true,
    ...(SEPARATE
      ? {
          processes: {
            compiled,
            ...(inspectPort ? { env: { NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --inspect=127.0.0.1:${inspectPort}`.trim() } } : {}),
          },
        }
      : {}),
  });
  onCleanup(() => rt.stop());
  const rss = runtimeRss(rt, SEPARATE ? 'the generated messages and the receive path' : 'the generated messages');
  const mailProc = rt.procs.find((p) => p.name === 'mx');
  // The server's CPU time so far (user + system, all threads): the mail process's, or this process's.
  const serverCpuMs = mailProc
    ? () => processTicks(mailProc.pid) * 10
    : () => {
        const u = process.cpuUsage();
        return (u.user + u.system) / 1000;
      };
  const serverThreads = () => threadCpuMs(mailProc?.pid ?? process.pid);
  const svc = rt.runtime.svc;

  const agent = new http.Agent({ keepAlive: true, maxSockets: 2 });
  const [account] = await signupAccounts(agent, rt.apiBase, 1);
  const pw = await request(agent, `${rt.apiBase}/account/app-passwords`, 'POST', { label: 'bench' }, account!.apiKey);
  if (pw.status !== 200) throw new Error(`app-password: ${pw.status} ${JSON.stringify(pw.body)}`);
  agent.destroy();
  await exec(svc.db, k.updateTable('accounts').set({ free_messages_left: N + 1000 }));
  const box = await svc.db.box.findFirstOrThrow({ where: { accountId: account!.accountId, isPrimary: true } });

  console.log(
    `bench:imap: ${N} messages to ${box.address}; the mail app ${SEPARATE ? `as its own process, ${compiled ? 'compiled' : 'from source'}` : 'in this process'} (${loadNote()})`,
  );
  let messages: Buffer[] | null = makeMessages(N, box.address);
  const bytes = messages.reduce((n, m) => n + m.length, 0);
  let stored = 0;
  const storeStarted = performance.now();
  const lanes = 4;
  await Promise.all(
    Array.from({ length: lanes }, async (_, lane) => {
      for (let i = lane; i < N; i += lanes) {
        await receiveMessage(svc, { raw: messages![i]!, recipients: [{ kind: 'box', box }], mailFrom: 'sender@outside.test', via: 'smtp' });
        stored++;
      }
    }),
  );
  console.log(
    `  stored ${stored} messages (${(bytes / 1e6).toFixed(1)} MB) through the receive path in ${((performance.now() - storeStarted) / 1000).toFixed(1)} s`,
  );

  // The account has an app-password, so the IMAP server folded its mail in as it arrived (no client connected):
  // how far behind the last message that left it.
  const lastStored = performance.now();
  const caughtUp = async () => {
    const [r] = await rows(
      svc.db,
      k
        .selectFrom('accounts as a')
        .leftJoin('mail_sync_state as s', 's.account_id', 'a.id')
        .select((eb) => sql<number>`${eb.ref('a.chain_seq')} - COALESCE(${eb.ref('s.seq')}, 0)`.as('behind'))
        .where('a.id', '=', account!.accountId),
    );
    return r!.behind === 0;
  };
  let followLag: number | null = null;
  while (performance.now() - lastStored < 30_000) {
    if (await caughtUp()) {
      followLag = performance.now() - lastStored;
      break;
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  // What autovacuum does soon after such a load, done now so it does not run during the first syncs.
  await exec(svc.db, sql`VACUUM ANALYZE`);

  const imapPort = rt.runtime.mail?.imapPort ?? mailProc!.ports.imap!;
  const boxesCert = await peerCertificate(imapPort);
  const boxesServer = { port: imapPort, user: box.address, pass: pw.body.password as string, cert: boxesCert };

  const pems = await import('selfsigned').then((m) => m.generate([{ name: 'commonName', value: '127.0.0.1' }], { keySize: 2048, algorithm: 'sha256' }));
  const dovecot = await startDovecot(root, messages, { key: pems.private, cert: pems.cert });
  // The server runs in this process: the bench's own copy of the messages is let go before the syncs, so the
  // server's garbage collector does not carry it.
  messages = null;
  onCleanup(() => stopProcess(dovecot.proc));
  const dovecotRss = new RssMeter({ 'Dovecot (master and children)': dovecot.proc.pid ?? null });
  const dovecotServer = { port: dovecot.port, user: dovecot.user, pass: dovecot.pass, cert: await peerCertificate(dovecot.port) };

  // Each round: Boxes cold (its folders dropped, so the first login folds the stream again) and warm, then Dovecot
  // cold (its index removed) and warm. The best of the rounds is what the machine can do when others let it.
  const times: Record<'boxes' | 'dovecot', { cold: number[]; warm: number[] }> = { boxes: { cold: [], warm: [] }, dovecot: { cold: [], warm: [] } };
  rss.start();
  dovecotRss.start();
  // The server's RSS between syncs (idle before the first, then after each): what a sync leaves held, beside the
  // peak the meter samples during them.
  const serverPid = mailProc?.pid ?? process.pid;
  const serverRss = () => (serverPid === process.pid ? rssBytes(serverPid) : treeRssBytes(serverPid));
  const phases: [string, number][] = [['idle', serverRss()]];
  // PostgreSQL's part of a Boxes sync: CPU of the backends serving this bench's database (its pools, the fold,
  // autovacuum), from /proc, as a map of pid to ms; a backend that appears during a sync counts from zero.
  const pgBackends = async (): Promise<Map<number, number>> => {
    const out = new Map<number, number>();
    const backends = await rows(svc.db, sql<{ pid: number }>`SELECT pid FROM pg_stat_activity WHERE datname = current_database()`);
    for (const { pid } of backends) {
      try {
        const stat = fs.readFileSync(`/proc/${pid}/stat`, 'latin1');
        const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        out.set(pid, ((Number(f[11]) + Number(f[12])) * 1000) / 100);
      } catch {
        // Gone already, or PostgreSQL runs elsewhere.
      }
    }
    return out;
  };
  const pgDelta = (a: Map<number, number>, b: Map<number, number>) => [...b].reduce((n, [pid, ms]) => n + ms - (a.get(pid) ?? 0), 0);
  // The first sync of the box as the receive path left it (its first login: the password is checked by scrypt).
  const firstProfile = process.env.BENCH_IMAP_PROFILE_FIRST ? await startSyncProfile(inspectPort) : null;
  const pFirst0 = await pgBackends();
  const first = await mbsync(clientRoot, 'boxes-first', boxesServer, serverCpuMs, serverThreads);
  const pFirst1 = await pgBackends();
  // PostgreSQL's part of the first sync, and how many of its backends were new (connections opened for it).
  const firstPg = pFirst1.size ? { ms: pgDelta(pFirst0, pFirst1), opened: [...pFirst1.keys()].filter((pid) => !pFirst0.has(pid)).length } : null;
  if (firstProfile) await firstProfile.stop(process.env.BENCH_IMAP_PROFILE_FIRST!);
  if (first.files !== N) throw new Error(`boxes: mbsync stored ${first.files} of ${N} messages`);
  phases.push(['after the first sync', serverRss()]);
  // CPU of the Boxes server (the mail process, or this one: the bench itself only waits during a sync), per sync.
  const cpu: { cold: number[]; warm: number[] } = { cold: [], warm: [] };
  // Dovecot's processes per sync (its imap and imap-login processes exit with the connection), and mbsync's.
  const dovecotCpu: { cold: number[]; warm: number[] } = { cold: [], warm: [] };
  const clientCpu: Record<'boxes' | 'dovecot', number[]> = { boxes: [], dovecot: [] };
  const gcLast = { cold: '', warm: '' };
  const threadsLast = { cold: '', warm: '' };
  const pgCpu: { cold: number[]; warm: number[] } = { cold: [], warm: [] };
  const dovecotChildren = async (): Promise<number | null> => {
    // Let the master reap the processes of the connection just closed.
    await new Promise((r) => setTimeout(r, 300));
    return childrenCpuMs(dovecot.proc.pid!);
  };
  for (let round = 1; round <= RUNS; round++) {
    await exec(svc.db, k.deleteFrom('mail_folders').where('account_id', '=', account!.accountId));
    await exec(svc.db, k.deleteFrom('mail_sync_state').where('account_id', '=', account!.accountId));
    // The folder as if never made: without its dead entries (left by the DELETE above) in the table's indexes.
    await exec(svc.db, sql`VACUUM ${table('mail_folder_entries')}`);
    const index = path.join(root, 'dovecot', 'index');
    for (const f of fs.readdirSync(index)) fs.rmSync(path.join(index, f), { recursive: true, force: true });
    for (const [name, server] of [
      ['boxes', boxesServer],
      ['dovecot', dovecotServer],
    ] as const) {
      const coldProfile = name === 'boxes' && round === RUNS && process.env.BENCH_IMAP_PROFILE_COLD ? await startSyncProfile(inspectPort) : null;
      const d0 = name === 'dovecot' ? await dovecotChildren() : null;
      const p0 = name === 'boxes' ? await pgBackends() : null;
      const cold = await mbsync(clientRoot, `${name}-cold`, server, serverCpuMs, name === 'boxes' ? serverThreads : undefined);
      if (name === 'boxes') phases.push([`after cold ${round}`, serverRss()]);
      const p1 = name === 'boxes' ? await pgBackends() : null;
      const d1 = name === 'dovecot' ? await dovecotChildren() : null;
      if (coldProfile) await coldProfile.stop(process.env.BENCH_IMAP_PROFILE_COLD!);
      const profile = name === 'boxes' && round === RUNS && process.env.BENCH_IMAP_PROFILE ? await startSyncProfile(inspectPort) : null;
      const warm = await mbsync(clientRoot, `${name}-warm`, server, serverCpuMs, name === 'boxes' ? serverThreads : undefined);
      if (name === 'boxes') phases.push([`after warm ${round}`, serverRss()]);
      const p2 = name === 'boxes' ? await pgBackends() : null;
      const d2 = name === 'dovecot' ? await dovecotChildren() : null;
      if (profile) await profile.stop(process.env.BENCH_IMAP_PROFILE!);
      for (const r of [cold, warm]) if (r.files !== N) throw new Error(`${name}: mbsync stored ${r.files} of ${N} messages`);
      times[name].cold.push(cold.ms);
      times[name].warm.push(warm.ms);
      if (name === 'boxes') {
        cpu.cold.push(cold.cpuMs);
        cpu.warm.push(warm.cpuMs);
        gcLast.cold = cold.gc;
        gcLast.warm = warm.gc;
        threadsLast.cold = cold.threads;
        threadsLast.warm = warm.threads;
        if (p0 && p1 && p2 && p2.size) {
          pgCpu.cold.push(pgDelta(p0, p1));
          pgCpu.warm.push(pgDelta(p1, p2));
        }
      } else if (d0 !== null && d1 !== null && d2 !== null) {
        dovecotCpu.cold.push(d1 - d0);
        dovecotCpu.warm.push(d2 - d1);
      }
      for (const r of [cold, warm]) if (r.clientCpuMs !== null) clientCpu[name].push(r.clientCpuMs);
    }
  }
  rss.stop();
  dovecotRss.stop();
  const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  const best = (xs: number[]) => Math.min(...xs);
  const all = (xs: number[]) => xs.map((x) => (x / 1000).toFixed(2)).join(', ');
  const b = times.boxes;
  const d = times.dovecot;
  console.log(`  mbsync, full sync of INBOX (${N} messages, ${(bytes / 1e6).toFixed(1)} MB) over implicit TLS, best of ${RUNS} (all runs in s):`);
  console.log(
    `    boxes:   first sync ${s(first.ms)} (the folder as the receive path left it: ${followLag === null ? 'not folded 30 s after the last message, so the login folded it' : `folded as the mail arrived, ${followLag.toFixed(0)} ms behind the last message`}; server CPU ${s(first.cpuMs)})`,
  );
  console.log(
    `             cold ${s(best(b.cold))} (folder dropped, the login folds the whole stream again; ${all(b.cold)}), warm ${s(best(b.warm))} (${all(b.warm)})`,
  );
  console.log(`    dovecot: cold ${s(best(d.cold))} (first login builds its index; ${all(d.cold)}), warm ${s(best(d.warm))} (${all(d.warm)})`);
  console.log(
    `    server CPU (user + system) per sync, best: boxes cold ${s(best(cpu.cold))} (${all(cpu.cold)}), warm ${s(best(cpu.warm))} (${all(cpu.warm)})`,
  );
  if (dovecotCpu.cold.length)
    console.log(
      `                                              dovecot cold ${s(best(dovecotCpu.cold))} (${all(dovecotCpu.cold)}), warm ${s(best(dovecotCpu.warm))} (${all(dovecotCpu.warm)})`,
    );
  if (firstPg) console.log(`    PostgreSQL CPU of the first Boxes sync: ${s(firstPg.ms)} (${firstPg.opened} of its backends connected during it)`);
  if (pgCpu.cold.length)
    console.log(
      `    PostgreSQL CPU per Boxes sync (its backends for this database), best: cold ${s(best(pgCpu.cold))} (${all(pgCpu.cold)}), warm ${s(best(pgCpu.warm))} (${all(pgCpu.warm)})`,
    );
  console.log(`    boxes server garbage collections in the last round: cold ${gcLast.cold}; warm ${gcLast.warm}`);
  console.log(`    boxes server CPU by thread: first sync ${first.threads}`);
  console.log(`                                last cold ${threadsLast.cold}`);
  console.log(`                                last warm ${threadsLast.warm}`);
  if (clientCpu.boxes.length && clientCpu.dovecot.length)
    console.log(`    mbsync CPU per sync, best: from boxes ${s(best(clientCpu.boxes))}, from dovecot ${s(best(clientCpu.dovecot))}`);
  console.log(
    `    ratio boxes / dovecot: first sync / cold ${(first.ms / best(d.cold)).toFixed(2)}, cold ${(best(b.cold) / best(d.cold)).toFixed(2)}, warm ${(best(b.warm) / best(d.warm)).toFixed(2)}  (${loadNote()})`,
  );
  // The first sync is one sample and the ratio above sets it against the best of Dovecot's cold syncs: with wall
  // times that swing by 20 to 30% from sync to sync, a lone sample against the least of several is biased against
  // it. Against samples taken the same way: Dovecot's first cold sync (also its first login of the run), and the
  // median of its cold syncs.
  if (d.cold.length > 1)
    console.log(
      `    the first sync against Dovecot's first cold sync ${(first.ms / d.cold[0]!).toFixed(2)}, against the median of its cold syncs ${(first.ms / median(d.cold)).toFixed(2)}`,
    );
  for (const line of [...rss.lines('over the syncs'), ...dovecotRss.lines('over the syncs')]) console.log(line);
  console.log(`  RSS ${mailProc ? 'mx process' : 'bench process'} between syncs: ${phases.map(([at, b]) => `${at} ${mb(b)}`).join(', ')}`);
});
