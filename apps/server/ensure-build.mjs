// Builds apps/server/dist (build.mjs) when what it is built from changed since the last build (build-inputs.mjs);
// start.mjs runs it first, in a short-lived process of its own, so the supervisor that stays never holds the walk
// over the sources.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { fingerprint, STAMP } from './build-inputs.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.join(here, 'dist');

function upToDate() {
  try {
    return fs.readFileSync(path.join(dist, STAMP), 'utf8') === fingerprint() && fs.existsSync(path.join(dist, 'main.mjs'));
  } catch {
    return false;
  }
}

if (!upToDate()) {
  console.error('boxes: building the service (apps/server/dist)');
  const built = spawnSync(process.execPath, [path.join(here, 'build.mjs')], { stdio: ['ignore', 'ignore', 'inherit'] });
  if (built.status !== 0) {
    console.error('boxes: building the service failed (node apps/server/build.mjs says why)');
    process.exit(1);
  }
}
