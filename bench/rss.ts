/**
 * pnpm bench:rss — the resident memory (RSS) of the real entry, idle: `pnpm start`'s entry (apps/server/src/main.ts,
 * as `boxes start` with no app named) as a child of this script, all apps on free ports of 127.0.0.1 against a fresh database
 * and its own Redis prefix. Once it prints that it is running, it is left alone for BENCH_RSS_SETTLE_S (default
 * 5), then VmRSS of it and of each of its children is sampled every 200 ms for BENCH_RSS_SAMPLE_S (default 3);
 * the most seen is printed, beside the aim of 300 MB for the whole default layout.
 *
 * Layouts: one process (BOXES_SINGLE_PROCESS=1: every app in one process), the default of a machine with two or
 * more cores (a supervisor and one process running every app), and the split one (BOXES_SPLIT_PROCESSES=1: a
 * supervisor, the front with server, MX, MQTT broker and DNS, and the worker); each compiled, as `pnpm start` runs
 * it (node apps/server/start.mjs: dist/ built first when the work tree changed, then dist/main.mjs in the same
 * process, the supervisor) and from source (node --import tsx apps/server/src/main.ts). The default layout's
 * supervisor is the started process itself after it replaced itself with a shell script (same pid): the tree
 * counted is that pid's, so the shell and the apps' process under it are both in it. pnpm in front of
 * `pnpm start` is not counted.
 *
 * Beside each process's RSS it prints the heap V8 actually uses and the memory outside it (process.memoryUsage(),
 * asked through bench/rss-report.cjs, preloaded into every node process of the tree).
 *
 *   BENCH_RSS_SETTLE_S=5 BENCH_RSS_SAMPLE_S=3
 *   BENCH_RSS_BUILDS=compiled,source BENCH_RSS_LAYOUTS=one,default,split (what to measure)
 */
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { deleteKeysWithPrefix } from '@boxes/jobs';
import { createBenchDatabase, envInt, freePort, loadNote, main, mb, processTree, rssBytes, sleep, waitAtMost } from './common';

const SETTLE_MS = envInt('BENCH_RSS_SETTLE_S', 5, 0, 600) * 1000;
const SAMPLE_MS = envInt('BENCH_RSS_SAMPLE_S', 3, 0, 600) * 1000;
const AIM_MB = 300;
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const compiled = path.join(root, 'apps/server/dist/main.mjs');

interface Measured {
  /** Each process of the tree: what it runs, its most RSS over the sampling window, and its own memoryUsage(). */
  procs: { role: string; rss: number; usage: { heapUsed: number; external: number } | null }[];
  total: number;
}

const reportDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-rss-'));
const reporter = path.join(root, 'bench/rss-report.cjs');

/** process.memoryUsage() of the node processes among pids, each asked with SIGUSR2 (see rss-report.cjs). */
async function usageOf(pids: number[]): Promise<Map<number, { heapUsed: number; external: number }>> {
  const asked = pids.filter((pid) => {
    try {
      if (!fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0]!.endsWith('node')) return false;
      process.kill(pid, 'SIGUSR2');
      return true;
    } catch {
      return false;
    }
  });
  await sleep(500);
  const out = new Map<number, { heapUsed: number; external: number }>();
  for (const pid of asked) {
    try {
      out.set(pid, JSON.parse(fs.readFileSync(path.join(reportDir, `${pid}.json`), 'utf8')));
    } catch {
      /* did not answer in time */
    }
  }
  return out;
}

const describe = (p: Measured['procs'][number]) =>
  `${p.role} ${mb(p.rss)}${p.usage ? ` (heap used ${mb(p.usage.heapUsed)}, external ${mb(p.usage.external)})` : ''}`;

/** What a process of the tree runs: the supervisor, or the apps its supervisor gave it (BOXES_APPS). */
function role(pid: number, top: number): string {
  if (pid === top) return 'supervisor';
  try {
    const env = fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
    const apps = env.find((e) => e.startsWith('BOXES_APPS='))?.slice('BOXES_APPS='.length);
    if (apps) return apps === 'worker' ? 'worker' : `front (${apps.split(',').join(', ')})`;
    if (env.includes('BOXES_SUPERVISED=1')) return 'apps (all)';
  } catch {
    /* gone, or not readable */
  }
  return `child ${pid}`;
}

async function measure(cmd: string[], env: Record<string, string>): Promise<Measured> {
  const child = spawn(process.execPath, cmd, { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  try {
    const end = Date.now() + 120_000;
    while (!/Boxes is running/.test(out)) {
      if (child.exitCode !== null) throw new Error(`boxes start exited ${child.exitCode}: ${out.slice(-2000)}`);
      if (Date.now() > end) throw new Error(`boxes start was not running after 120 s: ${out.slice(-2000)}`);
      await sleep(50);
    }
    await sleep(SETTLE_MS);
    const most = new Map<number, number>();
    const sampleEnd = Date.now() + SAMPLE_MS;
    do {
      for (const pid of processTree(child.pid!)) most.set(pid, Math.max(most.get(pid) ?? 0, rssBytes(pid) || 0));
      await sleep(200);
    } while (Date.now() < sampleEnd);
    const usage = await usageOf([...most.keys()]);
    const procs = [...most].map(([pid, rss]) => ({ role: role(pid, child.pid!), rss, usage: usage.get(pid) ?? null }));
    return { procs, total: procs.reduce((a, p) => a + p.rss, 0) };
  } finally {
    const tree = processTree(child.pid!);
    if (child.exitCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await waitAtMost(exited, 15_000);
    }
    for (const pid of tree) {
      try {
        process.kill(pid, 0);
        process.kill(pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
    child.stdout!.destroy();
    child.stderr!.destroy();
  }
}

await main('bench:rss', async (onCleanup) => {
  const db = await createBenchDatabase();
  onCleanup(() => db.drop());
  const redisUrl = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
  if (!['127.0.0.1', 'localhost', '[::1]'].includes(new URL(redisUrl).hostname)) throw new Error('REDIS_URL must point at 127.0.0.1 for a benchmark');
  const prefix = `boxes-bench-${randomBytes(5).toString('hex')}`;
  onCleanup(async () => void (await deleteKeysWithPrefix(redisUrl, prefix)));
  const keep = ['PATH', 'HOME', 'TMPDIR', 'LANG', 'TZ'];
  const base: Record<string, string> = {
    ...Object.fromEntries(keep.flatMap((k) => (process.env[k] ? [[k, process.env[k]!]] : []))),
    DATABASE_URL: db.url,
    REDIS_URL: redisUrl,
    REDIS_PREFIX: prefix,
    BOXES_SECRET_KEY: randomBytes(32).toString('hex'),
    LOG_LEVEL: 'error',
    HOST: '127.0.0.1',
    SMTP_HOST: '127.0.0.1',
    IMAP_HOST: '127.0.0.1',
    SUBMISSION_HOST: '127.0.0.1',
    MQTT_HOST: '127.0.0.1',
    DNS_HOST: '127.0.0.1',
    DNS_PORT: '0',
  };
  const ports = async () => ({
    PORT: String(await freePort()),
    SMTP_PORT: String(await freePort()),
    IMAP_PORT: String(await freePort()),
    SUBMISSION_PORT: String(await freePort()),
    MQTT_PORT: String(await freePort()),
  });

  console.log(
    `bench:rss: pnpm start's entry, idle: ${SETTLE_MS / 1000} s after it is running, the most RSS over ${SAMPLE_MS / 1000} s sampled every 200 ms, per process (MB = MiB); ${loadNote()}`,
  );
  const wanted = (name: string, all: string) => (process.env[name] || all).split(',').map((x) => x.trim());
  const buildsWanted = wanted('BENCH_RSS_BUILDS', 'compiled,source');
  const layoutsWanted = wanted('BENCH_RSS_LAYOUTS', 'one,default,split');
  const builds: { name: string; cmd: string[]; env: Record<string, string> }[] = [];
  if (buildsWanted.includes('compiled')) {
    // What `pnpm start` runs (start.mjs: the build when the sources changed, then dist/main.mjs); built here first
    // so that no start waits for it.
    const built = spawnSync(process.execPath, [path.join(root, 'apps/server/ensure-build.mjs')], { cwd: root, encoding: 'utf8' });
    if (built.status === 0 && fs.existsSync(compiled)) builds.push({ name: 'compiled (pnpm start)', cmd: [path.join(root, 'apps/server/start.mjs')], env: {} });
    else console.log(`  compiled: skipped (apps/server/ensure-build.mjs failed: ${(built.stderr || built.error?.message || '').trim().split('\n')[0]})`);
  }
  if (buildsWanted.includes('source'))
    builds.push({ name: 'from source (tsx)', cmd: ['--import', 'tsx', path.join(root, 'apps/server/src/main.ts')], env: {} });
  type Layout = { key: string; name: string; env: Record<string, string> };
  const allLayouts: Layout[] = [
    { key: 'one', name: 'one process (BOXES_SINGLE_PROCESS=1)', env: { BOXES_SINGLE_PROCESS: '1' } },
    { key: 'default', name: 'default layout (supervisor and one process)', env: {} },
    { key: 'split', name: 'split layout (BOXES_SPLIT_PROCESSES=1)', env: { BOXES_SPLIT_PROCESSES: '1' } },
  ];
  const layouts = allLayouts.filter((l) => layoutsWanted.includes(l.key));

  const single: { name: string; rss: number }[] = [];
  for (const b of builds) {
    for (const l of layouts) {
      const env = { ...base, ...(await ports()), ...b.env, ...l.env, BENCH_RSS_REPORT_DIR: reportDir, NODE_OPTIONS: `--require ${reporter}` };
      const m = await measure(b.cmd, env);
      console.log(`  RSS ${l.name}, ${b.name}: ${m.procs.map(describe).join(', ')}; ${mb(m.total)} in all (aim: ${AIM_MB} MB at most) (${loadNote()})`);
      if (l.key === 'default') single.push({ name: b.name, rss: m.total });
    }
  }
  const verdict = (rss: number) => (rss <= AIM_MB * 1024 * 1024 ? 'within' : 'over');
  console.log(`rss: the default layout idle ${single.map((s) => `${mb(s.rss)} ${s.name} (${verdict(s.rss)})`).join(', ')}; aim: ${AIM_MB} MB at most in all`);
  fs.rmSync(reportDir, { recursive: true, force: true });
});
