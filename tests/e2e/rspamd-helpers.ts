// rspamd (Debian's package, installed by scripts/start-services.sh) on an ephemeral port with a temporary
// configuration: Debian's own rules and scores, one normal worker (the HTTP /checkv2 protocol), logs on the
// console, its state in a temporary folder. Started and stopped by the test that needs it.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, waitFor } from '@boxes/testing';
import { requireTool } from './mail-receive-helpers';

export interface RunningRspamd {
  url: string;
  stop(): Promise<void>;
}

export async function startRspamd(): Promise<RunningRspamd> {
  await requireTool('rspamd');
  const dir = await mkdtemp(join(tmpdir(), 'boxes-rspamd-'));
  const port = await freePort();
  await writeFile(
    join(dir, 'rspamd.conf'),
    [
      '.include "$CONFDIR/common.conf"',
      `options { pidfile = "${dir}/rspamd.pid"; .include "$CONFDIR/options.inc" }`,
      'logging { type = "console"; level = "error"; }',
      `worker "normal" { bind_socket = "127.0.0.1:${port}"; .include "$CONFDIR/worker-normal.inc" count = 1; }`,
      '',
    ].join('\n'),
  );
  // -i: the test may run as root; -f: stay in the foreground so stop() ends it.
  const child: ChildProcess = spawn(
    'rspamd',
    ['-f', '-i', '-c', join(dir, 'rspamd.conf'), `--var=DBDIR=${dir}`, `--var=RUNDIR=${dir}`, `--var=LOGDIR=${dir}`],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let stderr = '';
  child.stderr?.on('data', (c: Buffer) => (stderr = (stderr + c.toString()).slice(-4000)));
  const url = `http://127.0.0.1:${port}`;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    await waitFor(
      'rspamd to answer /ping',
      async () => {
        if (child.exitCode !== null) throw new Error(`rspamd exited (${child.exitCode}): ${stderr}`);
        try {
          return (await (await fetch(`${url}/ping`)).text()).trim() === 'pong';
        } catch {
          return false;
        }
      },
      90_000,
    );
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  }
  return {
    url,
    async stop() {
      if (child.exitCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(timer);
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}
