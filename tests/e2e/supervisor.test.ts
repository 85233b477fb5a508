/**
 * The default layout of `pnpm start` (node apps/server/start.mjs, built first when the sources changed): a
 * supervisor and one process running every app. The supervisor starts that process again when it dies, and
 * SIGTERM stops both gracefully.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { expect, it } from 'vitest';
import { createTestDatabase, waitFor } from '@boxes/testing';

const root = path.resolve(import.meta.dirname, '../..');

const childrenOf = (pid: number): number[] => fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);

it('pnpm start supervises one process with every app, starts it again when it is killed, and stops on SIGTERM', async () => {
  const db = await createTestDatabase();
  const child = spawn(process.execPath, [path.join(root, 'apps/server/start.mjs')], {
    cwd: root,
    env: {
      ...process.env,
      PORT: '0',
      SMTP_PORT: '0',
      IMAP_PORT: '0',
      SUBMISSION_PORT: '0',
      MQTT_PORT: '0',
      DNS_PORT: '0',
      DATABASE_URL: db.url,
      REDIS_PREFIX: `boxes-supervisor-${Date.now()}`,
      BOXES_SECRET_KEY: 'ef'.repeat(32),
      LOG_LEVEL: 'error',
      BOXES_SINGLE_PROCESS: '',
      BOXES_SPLIT_PROCESSES: '',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  try {
    const url = await waitFor('pnpm start to print its address', () => /Listening on\s+(http:\/\/\S+)/.exec(out)?.[1], 120_000);
    expect(out).toContain('Boxes is running (one process, supervised');
    expect((await fetch(`${url}/readyz`)).status).toBe(200);
    // The apps run in the one child; the supervisor runs none of them.
    const apps = childrenOf(child.pid!);
    expect(apps).toHaveLength(1);
    process.kill(apps[0]!, 'SIGKILL');
    await waitFor('the supervisor to start the apps again', () => /process stopped \(SIGKILL\); starting it again/.test(out), 30_000);
    const again = await waitFor('the apps to be running again', () => [...out.matchAll(/Listening on\s+(http:\/\/\S+)/g)][1]?.[1], 120_000);
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
