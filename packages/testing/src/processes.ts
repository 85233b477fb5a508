/**
 * Boxes run as OS processes of its own (the bundle, `boxes start <app>`, `pnpm start`), for the tests that kill,
 * restart or stop them: the child, what it printed so far (stdout and stderr together, in arrival order), and its
 * exit code once it has exited.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';

/** The repository's root. */
export const repoRoot = path.resolve(import.meta.dirname, '../../..');

/** Every listener of a started service on a port the system picks (each prints the one it got). */
export const EPHEMERAL_PORTS = {
  PORT: '0',
  SMTP_PORT: '0',
  IMAP_PORT: '0',
  SUBMISSION_PORT: '0',
  MQTT_PORT: '0',
  DNS_PORT: '0',
} as const;

export interface NodeProcess {
  child: ChildProcess;
  /** stdout and stderr so far. */
  out: () => string;
  /** The exit code (null when a signal ended it). */
  exited: Promise<number | null>;
}

/** Runs `node <args>` in the repository's root with the test's environment plus `env`. */
export function spawnNode(args: string[], env: Record<string, string | undefined> = {}): NodeProcess {
  const child = spawn(process.execPath, args, { cwd: repoRoot, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return { child, out: () => out, exited };
}
