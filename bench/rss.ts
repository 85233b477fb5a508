/**
 * pnpm bench:rss — the resident memory (RSS) of the real entry, idle: `pnpm start`'s entry (apps/server/src/main.ts,
 * as `boxes start` with no app named) as a child of this script, all apps on free ports of 127.0.0.1 against a fresh database
 * and its own Redis prefix. Once it prints that it is running, it is left alone for BENCH_RSS_SETTLE_S (default
 * 5), then VmRSS of it and of each of its children is sampled every 200 ms for BENCH_RSS_SAMPLE_S (default 3);
 * the most seen is printed, beside the aim of 300 MB for all-in-one.
 *
 * Layouts: one process (BOXES_SINGLE_PROCESS=1: every app in one process) and the default of a machine with two
 * or more cores (a supervisor, the front with server, MX, MQTT broker and DNS, and the worker); each from source
 * (node --import tsx, as `pnpm start`) and compiled (NODE_ENV=production node apps/server/dist/main.mjs, as
 * `pnpm start:prod`; built first with apps/server/build.mjs, about a second, so it is the code of the work tree). The launchers in front of
 * `pnpm start` (pnpm and the tsx command) are not counted: production runs node directly.
 *
 *   BENCH_RSS_SETTLE_S=5 BENCH_RSS_SAMPLE_S=3
 */
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
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
  /** Each process of the tree: what it runs, and its most RSS over the sampling window. */
  procs: { role: string; rss: number }[];
  total: number;
}

/** What a process of the tree runs: the supervisor, or the apps its supervisor gave it (BOXES_APPS). */
function role(pid: number, top: number): string {
  if (pid === top) return 'supervisor';
  try {
    const env = fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
    const apps = env.find((e) => e.startsWith('BOXES_APPS='))?.slice('BOXES_APPS='.length);
    if (apps) return apps === 'worker' ? 'worker' : `front (${apps.split(',').join(', ')})`;
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
    const procs = [...most].map(([pid, rss]) => ({ role: role(pid, child.pid!), rss }));
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
  const builds: { name: string; cmd: string[]; env: Record<string, string> }[] = [
    { name: 'from source (tsx)', cmd: ['--import', 'tsx', path.join(root, 'apps/server/src/main.ts')], env: {} },
  ];
  const built = spawnSync(process.execPath, [path.join(root, 'apps/server/build.mjs')], { cwd: root, encoding: 'utf8' });
  if (built.status === 0 && fs.existsSync(compiled)) builds.push({ name: 'compiled (dist)', cmd: [compiled], env: { NODE_ENV: 'production' } });
  else console.log(`  compiled (dist): skipped (apps/server/build.mjs failed: ${(built.stderr || built.error?.message || '').trim().split('\n')[0]})`);

  const single: { name: string; rss: number }[] = [];
  for (const b of builds) {
    const one = await measure(b.cmd, { ...base, ...(await ports()), ...b.env, BOXES_SINGLE_PROCESS: '1' });
    const extra = one.procs.length > 1 ? ` (${one.procs.map((p) => `${p.role} ${mb(p.rss)}`).join(', ')})` : '';
    console.log(`  RSS one process (BOXES_SINGLE_PROCESS=1), ${b.name}: ${mb(one.total)}${extra} (aim: under ${AIM_MB} MB)`);
    single.push({ name: b.name, rss: one.total });
    const two = await measure(b.cmd, { ...base, ...(await ports()), ...b.env });
    console.log(`  RSS default layout, ${b.name}: ${two.procs.map((p) => `${p.role} ${mb(p.rss)}`).join(', ')}; ${mb(two.total)} in all`);
  }
  const verdict = (rss: number) => (rss < AIM_MB * 1024 * 1024 ? 'under' : 'over');
  console.log(`rss: all-in-one idle ${single.map((s) => `${mb(s.rss)} ${s.name} (${verdict(s.rss)})`).join(', ')}; aim: under ${AIM_MB} MB`);
});
