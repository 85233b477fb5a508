// `pnpm start`: runs the compiled service (dist/main.mjs), built first when the sources changed since the last
// build (ensure-build.mjs, in a process of its own: about a second with esbuild, a few milliseconds otherwise).
// Compiled, the service takes less memory than through tsx (no TypeScript transform, no loader hooks), and the
// supervisor that stays is about an empty Node process; see docs/benchmarks.md (rss).
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const ensure = [process.execPath, path.join(here, 'ensure-build.mjs')];
const opts = { stdio: ['ignore', 'inherit', 'inherit'] };
// One build at a time (several starts at once, `pnpm build` beside them): the lock the tests' builds take too
// (flock(1), util-linux); without flock, the check runs unlocked.
let built = spawnSync('flock', [path.join(here, '../../node_modules/.boxes-build.lock'), ...ensure], opts);
if (built.error) built = spawnSync(ensure[0], ensure.slice(1), opts);
if (built.status !== 0) process.exit(built.status ?? 1);
await import(pathToFileURL(path.join(here, 'dist/main.mjs')).href);
