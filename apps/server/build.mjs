// `pnpm build` for production: the service's own code (apps/*, packages/*) bundled by esbuild into
// apps/server/dist/main.mjs, dist/cli.mjs and dist/extract-thread.mjs (the same depth as src/, so paths to SKILL.md and prisma/migrations
// hold), with every third-party package left as an import of the exact file this install resolved (pnpm keeps
// each workspace package's dependencies beside it, so a bare name would not resolve from dist/).
import { build } from 'esbuild';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { fingerprint, STAMP } from './build-inputs.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.join(here, 'dist');
// Into a directory of its own at the depth of dist/, then swapped in whole: a process starting from dist/
// meanwhile (a restart, a `pnpm start` beside this build) finds the old build or the new one, never half of one,
// and chunks of an earlier build (their names change with their content) do not pile up.
const outdir = path.join(here, `.dist-${process.pid}`);
fs.rmSync(outdir, { recursive: true, force: true });
const inputs = fingerprint();

/** Bare imports outside the workspace: resolved from their importer, kept external by absolute path. */
const linkDependencies = {
  name: 'link-dependencies',
  setup(b) {
    b.onResolve({ filter: /^[^./]/ }, async (args) => {
      if (args.path.startsWith('@boxes/') || args.pluginData === 'linking') return undefined;
      if (args.path.startsWith('node:') || args.kind === 'entry-point') return { path: args.path, external: true };
      const r = await b.resolve(args.path, { kind: args.kind, resolveDir: args.resolveDir, pluginData: 'linking' });
      if (r.errors.length) return { errors: r.errors };
      // Node built-ins without the node: prefix resolve to themselves.
      if (!path.isAbsolute(r.path)) return { path: args.path, external: true };
      return { path: r.path, external: true };
    });
  },
};

await build({
  // extract-thread: the worker's attachment-text thread script (attachment-text.ts looks for it beside the bundle),
  // so the bundle needs no source file of the worker at run time.
  entryPoints: {
    main: path.join(here, 'src/main.ts'),
    cli: path.join(here, 'src/cli.ts'),
    'extract-thread': path.join(here, '../worker/src/extract-thread.mjs'),
  },
  outdir,
  outExtension: { '.js': '.mjs' },
  bundle: true,
  // Dynamic imports become chunks of their own (beside the entries, at the same depth), loaded when first used:
  // without it every app's code, and every package it imports, is loaded by every process, the supervisor too.
  splitting: true,
  platform: 'node',
  format: 'esm',
  target: 'node24',
  sourcemap: true,
  // Conditions as the workspace resolves them (packages export ./src/index.ts).
  plugins: [linkDependencies],
  logLevel: 'warning',
});
fs.writeFileSync(path.join(outdir, STAMP), inputs);
const old = path.join(here, `.dist-old-${process.pid}`);
try {
  fs.renameSync(dist, old);
} catch {
  /* no earlier build */
}
try {
  fs.renameSync(outdir, dist);
} catch {
  // Another build swapped its own in first (from the same sources): that one stays.
  fs.rmSync(outdir, { recursive: true, force: true });
}
fs.rmSync(old, { recursive: true, force: true });
console.log('built apps/server/dist/main.mjs, dist/cli.mjs and dist/extract-thread.mjs');
