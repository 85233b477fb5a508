/**
 * The default layout of `pnpm start` (node apps/server/start.mjs, built first when the sources changed): a
 * supervisor and one process running every app. The supervisor (a shell script the started process becomes, same
 * pid) starts that process again when it dies, and SIGTERM stops both gracefully; the apps stop on their own when
 * the supervisor is killed, and a process that cannot start is not started again.
 */
import fs from 'node:fs';
import path from 'node:path';
import { expect, it } from 'vitest';
import { createTestDatabase, EPHEMERAL_PORTS, repoRoot, spawnNode, waitFor } from '@boxes/testing';

const start = (extra: Record<string, string>) =>
  spawnNode([path.join(repoRoot, 'apps/server/start.mjs')], {
    ...EPHEMERAL_PORTS,
    REDIS_PREFIX: `boxes-supervisor-${Date.now()}`,
    BOXES_SECRET_KEY: 'ef'.repeat(32),
    LOG_LEVEL: 'error',
    BOXES_SINGLE_PROCESS: '',
    BOXES_SPLIT_PROCESSES: '',
    ...extra,
  });

/** The program a process runs now (after an exec, not the one it was started with). */
const programOf = (pid: number): string => fs.readlinkSync(`/proc/${pid}/exe`);

const childrenOf = (pid: number): number[] => fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);

it('pnpm start supervises one process with every app, starts it again when it is killed, and stops on SIGTERM', async () => {
  const db = await createTestDatabase();
  const run = start({ DATABASE_URL: db.url });
  const { child, exited } = run;
  try {
    const url = await waitFor('pnpm start to print its address', () => /Listening on\s+(http:\/\/\S+)/.exec(run.out())?.[1], 120_000);
    expect(run.out()).toContain('Boxes is running (one process, supervised');
    expect((await fetch(`${url}/readyz`)).status).toBe(200);
    // The apps run in the one child; the supervisor runs none of them, and is no Node process at all (the one
    // started became a shell).
    const apps = childrenOf(child.pid!);
    expect(apps).toHaveLength(1);
    expect(programOf(apps[0]!)).toBe(programOf(process.pid));
    expect(programOf(child.pid!)).not.toBe(programOf(process.pid));
    process.kill(apps[0]!, 'SIGKILL');
    await waitFor('the supervisor to start the apps again', () => /process stopped \(SIGKILL\); starting it again/.test(run.out()), 30_000);
    const again = await waitFor('the apps to be running again', () => [...run.out().matchAll(/Listening on\s+(http:\/\/\S+)/g)][1]?.[1], 120_000);
    expect((await fetch(`${again}/readyz`)).status).toBe(200);
    const restarted = childrenOf(child.pid!);
    expect(restarted).toHaveLength(1);
    expect(restarted[0]).not.toBe(apps[0]);
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(fs.existsSync(`/proc/${restarted[0]}`)).toBe(false);
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
    await db.drop();
  }
}, 300_000);

it('the apps stop on their own when the supervisor is killed', async () => {
  const db = await createTestDatabase();
  const run = start({ DATABASE_URL: db.url });
  try {
    await waitFor('pnpm start to print its address', () => /Listening on\s+(http:\/\/\S+)/.exec(run.out())?.[1], 120_000);
    const apps = childrenOf(run.child.pid!);
    expect(apps).toHaveLength(1);
    run.child.kill('SIGKILL');
    await run.exited;
    await waitFor(
      'the orphaned apps process to stop',
      () => !fs.existsSync(`/proc/${apps[0]}`) || /^State:\s+Z/m.test(fs.readFileSync(`/proc/${apps[0]}/status`, 'utf8')),
      60_000,
    );
  } finally {
    if (run.child.exitCode === null) run.child.kill('SIGKILL');
    await db.drop();
  }
}, 300_000);

it('a process that cannot start is not started again: pnpm start ends with its code', async () => {
  const run = start({ DATABASE_URL: 'postgresql://nobody@127.0.0.1:1/none', PORT: 'not-a-port' });
  expect(await run.exited).toBe(1);
  expect(run.out()).toMatch(/^boxes: .*PORT/m);
  expect(run.out()).not.toContain('starting it again');
}, 120_000);
