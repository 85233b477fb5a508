/**
 * The build of apps/server/dist for the tests that run the compiled bundle (production build, backup and
 * restore): `pnpm build`'s task for @boxes/server alone (turbo, with its cache). The SDK's build, the other task
 * `pnpm build` runs, makes its declarations with TypeScript and takes far longer than the bundle; nothing here
 * uses it, and the SDK package test builds it itself (through pnpm pack).
 * Test files run in parallel, and two builds writing the same apps/server/dist at once could leave a bundle
 * half one and half the other: builds take an exclusive lock (flock(1), util-linux) on a file beside the
 * repository's node_modules, the one `pnpm start` takes to build, so they run one after the other; the later
 * ones are quick (turbo's cache).
 */
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

export async function buildBundle(timeoutMs = 240_000): Promise<void> {
  await promisify(execFile)(
    'flock',
    [path.join(root, 'node_modules', '.boxes-build.lock'), 'pnpm', 'exec', 'turbo', 'run', 'build', '--filter=@boxes/server', '--output-logs=errors-only'],
    { cwd: root, timeout: timeoutMs },
  );
}
