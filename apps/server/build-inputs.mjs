// What the bundle in dist/ is built from, as one hash: every file of apps/*/src and packages/*/src (the generated
// Prisma client too) with each package.json, the lockfile, build.mjs and build-swap.mjs, by content (a checkout or a
// restored build cache changes modification times, not what is built). build.mjs writes it into dist/.inputs;
// ensure-build.mjs compares it to decide whether `pnpm start` must build first.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
export const STAMP = '.inputs';

export function fingerprint() {
  const hash = createHash('sha256');
  const add = (file) => {
    hash.update(`${path.relative(root, file)}\0`);
    try {
      hash.update(fs.readFileSync(file));
    } catch {
      hash.update('\0missing');
    }
    hash.update('\0');
  };
  const walk = (dir) => {
    let entries;
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : 1));
    for (const e of entries) {
      if (e.name === 'node_modules') continue;
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else add(p);
    }
  };
  for (const group of ['apps', 'packages']) {
    for (const name of fs.readdirSync(path.join(root, group)).sort()) {
      walk(path.join(root, group, name, 'src'));
      add(path.join(root, group, name, 'package.json'));
    }
  }
  add(path.join(here, 'build.mjs'));
  add(path.join(here, 'build-inputs.mjs'));
  add(path.join(here, 'build-swap.mjs'));
  add(path.join(root, 'pnpm-lock.yaml'));
  return hash.digest('hex');
}
