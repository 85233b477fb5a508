// How build.mjs puts a new bundle in place of apps/server/dist without breaking a process that still runs the
// one before. A process loads most of its code lazily (esbuild's split chunks, named by their content: an app's
// code, mailauth, the IMAP server, ...), from dist/ as it was when the process started. A rebuild replaces dist/
// whole; had the earlier build's chunks gone with it, a process started before (the other instance of two run
// from one checkout, or one a supervisor keeps while `pnpm start` rebuilds after an update) would fail the first
// time it needed one of them. So the new dist/ also keeps the files of the builds before it that it does not
// have itself, for KEEP_BUILDS builds, hard-linked (no copy); `.kept` lists them with the build they came from.
// Files whose names do not change (the entries, extract-thread.mjs, the query compiler's .wasm) are the new
// build's: a process of an earlier build that reads one of them afresh gets the new one.
import fs from 'node:fs';
import path from 'node:path';
import { STAMP } from './build-inputs.mjs';

/** How many earlier builds' files a new dist/ keeps: a process outlives that many rebuilds of changed sources. */
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

function readText(file) {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return null;
  }
}

const code = (err) => (err && typeof err === 'object' && 'code' in err ? err.code : undefined);

/**
 * Carries into fresh (a complete build not yet in place) the files of dist (the build in place, if any) that fresh
 * does not have, from the last keep builds, and writes fresh's manifest. Files fresh has (the entries and chunks of
 * the same content) are fresh's own. A build of the same inputs as the one in place (a second `pnpm build` with
 * nothing changed) takes its number, so it uses up none of the builds kept. Returns the names carried.
 */
export function carryEarlierBuilds(fresh, dist, keep = KEEP_BUILDS) {
  const before = readManifest(dist);
  const inputs = readText(path.join(fresh, STAMP));
  const same = inputs !== null && inputs === readText(path.join(dist, STAMP));
  const build = same ? before.build : before.build + 1;
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
    if (from < build - keep) continue;
    try {
      try {
        fs.linkSync(path.join(dist, name), path.join(fresh, name));
      } catch {
        fs.copyFileSync(path.join(dist, name), path.join(fresh, name));
      }
    } catch (err) {
      // Gone meanwhile: another build (one not holding the build lock) swapped dist/ out.
      if (code(err) === 'ENOENT') continue;
      throw err;
    }
    files[name] = from;
  }
  fs.writeFileSync(path.join(fresh, MANIFEST), `${JSON.stringify({ build, files }, null, 1)}\n`);
  return Object.keys(files).sort();
}

/**
 * Puts fresh in place of dist in one rename (a process starting meanwhile finds the old build or the new one,
 * never half of one), after carrying the earlier builds' files into it. If another build put its own in place
 * between the two renames, that one stays and fresh is removed; on any other failure the build before is put back
 * and the error thrown. tag names the temporary directory of the build taken out (the builder's pid). Builds are
 * meant to run one at a time (`pnpm start` and the tests hold a lock around them): two at once both succeed, the
 * last one's dist/ staying, with what it carried from the dist/ it saw.
 */
export function swapInBuild(fresh, dist, tag = process.pid) {
  carryEarlierBuilds(fresh, dist);
  const old = path.join(path.dirname(dist), `.dist-old-${tag}`);
  // Left by a build of the same tag that stopped half-way.
  fs.rmSync(old, { recursive: true, force: true });
  let moved = false;
  try {
    fs.renameSync(dist, old);
    moved = true;
  } catch (err) {
    if (code(err) !== 'ENOENT') throw err;
  }
  try {
    fs.renameSync(fresh, dist);
  } catch (err) {
    const taken = (code(err) === 'ENOTEMPTY' || code(err) === 'EEXIST') && fs.existsSync(path.join(dist, 'main.mjs'));
    if (!taken) {
      if (moved && !fs.existsSync(dist)) fs.renameSync(old, dist);
      throw err;
    }
    fs.rmSync(fresh, { recursive: true, force: true });
  }
  fs.rmSync(old, { recursive: true, force: true });
}
