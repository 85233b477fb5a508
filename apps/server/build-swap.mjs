// How build.mjs puts a new bundle in place of apps/server/dist without breaking a process that still runs the
// one before. A process loads most of its code lazily (esbuild's split chunks, named by their content: an app's
// code, mailauth, the IMAP server, ...), from dist/ as it was when the process started. A rebuild replaces dist/
// whole; had the earlier build's chunks gone with it, a process started before (the other instance of two run
// from one checkout, or one a supervisor keeps while `pnpm start` rebuilds after an update) would fail the first
// time it needed one of them. So the new dist/ also keeps the files of the builds before it that it does not
// have itself, for KEEP_BUILDS builds, hard-linked (no copy); `.kept` lists them with the build they came from.
import fs from 'node:fs';
import path from 'node:path';

/** How many earlier builds' files a new dist/ keeps: a process outlives that many rebuilds. */
export const KEEP_BUILDS = 3;
const MANIFEST = '.kept';

function readManifest(dir) {
  try {
    const m = JSON.parse(fs.readFileSync(path.join(dir, MANIFEST), 'utf8'));
    if (Number.isInteger(m.build) && m.files && typeof m.files === 'object') return m;
  } catch {
    /* no earlier build, or one from before the manifest */
  }
  return { build: 0, files: {} };
}

/**
 * Carries into fresh (a complete build not yet in place) the files of dist (the build in place, if any) that fresh
 * does not have, from the last keep builds, and writes fresh's manifest. Files fresh has (the entries, main.mjs
 * and the others whose names do not change, and chunks of the same content) are fresh's own. Returns the names
 * carried.
 */
export function carryEarlierBuilds(fresh, dist, keep = KEEP_BUILDS) {
  const before = readManifest(dist);
  const build = before.build + 1;
  const files = {};
  let names = [];
  try {
    names = fs.readdirSync(dist, { withFileTypes: true }).filter((e) => e.isFile() && !e.name.startsWith('.'));
  } catch {
    /* no earlier build */
  }
  for (const { name } of names) {
    if (fs.existsSync(path.join(fresh, name))) continue;
    // A file of the build in place is from that build, unless that build had carried it from one before.
    const from = before.files[name] ?? before.build;
    if (from <= build - 1 - keep) continue;
    try {
      fs.linkSync(path.join(dist, name), path.join(fresh, name));
    } catch {
      fs.copyFileSync(path.join(dist, name), path.join(fresh, name));
    }
    files[name] = from;
  }
  fs.writeFileSync(path.join(fresh, MANIFEST), `${JSON.stringify({ build, files }, null, 1)}\n`);
  return Object.keys(files).sort();
}

/**
 * Puts fresh in place of dist in one rename (a process starting meanwhile finds the old build or the new one,
 * never half of one), after carrying the earlier builds' files into it. When another build swapped its own in
 * first (from the same sources), that one stays and fresh is removed. tag names the temporary directory of the
 * build taken out (the builder's pid).
 */
export function swapInBuild(fresh, dist, tag = process.pid) {
  carryEarlierBuilds(fresh, dist);
  const old = path.join(path.dirname(dist), `.dist-old-${tag}`);
  try {
    fs.renameSync(dist, old);
  } catch {
    /* no earlier build */
  }
  try {
    fs.renameSync(fresh, dist);
  } catch {
    fs.rmSync(fresh, { recursive: true, force: true });
  }
  fs.rmSync(old, { recursive: true, force: true });
}
