// `pnpm build` for production: the service's own code (apps/*, packages/*) bundled by esbuild into
// apps/server/dist/main.mjs, dist/cli.mjs and dist/extract-thread.mjs (the same depth as src/, so paths to SKILL.md and prisma/migrations
// hold), with every third-party package left as an import of the exact file this install resolved (pnpm keeps
// each workspace package's dependencies beside it, so a bare name would not resolve from dist/).
import { build } from 'esbuild';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { fingerprint, STAMP } from './build-inputs.mjs';
import { swapInBuild } from './build-swap.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.join(here, 'dist');
// Into a directory of its own at the depth of dist/, then swapped in whole (build-swap.mjs): a process starting
// from dist/ meanwhile (a restart, a `pnpm start` beside this build) finds the old build or the new one, never half
// of one, and a process still running an earlier build finds its chunks (kept for a few builds, then dropped).
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

/**
 * The Prisma client's query compiler, read from a .wasm file beside the bundle. The generated client imports it
 * as a JavaScript module exporting the WebAssembly as base64 text (4.5 MB), which V8 keeps for the life of the
 * process twice (the module's source and the exported string) after decoding it once. Here the build decodes it
 * into dist/ and the client compiles the file's bytes, which are garbage once compiled. A generated client that
 * no longer loads it this way fails the build rather than being bundled unchanged.
 */
const queryCompilerFile = {
  name: 'query-compiler-file',
  setup(b) {
    b.onLoad({ filter: /[\\/]generated[\\/]internal[\\/]class\.ts$/ }, async (args) => {
      const source = fs.readFileSync(args.path, 'utf8');
      const load = /const \{ wasm \} = await import\("([^"]+\.wasm-base64\.mjs)"\)\s*return await decodeBase64AsWasm\(wasm\)/;
      const m = load.exec(source);
      if (!m) return { errors: [{ text: `${args.path}: the query compiler is not loaded as a base64 module any more; see query-compiler-file in build.mjs` }] };
      const r = await b.resolve(m[1], { kind: 'dynamic-import', resolveDir: path.dirname(args.path), pluginData: 'linking' });
      if (r.errors.length) return { errors: r.errors };
      const { wasm } = await import(r.path);
      const file = path.basename(m[1]).replace(/\.wasm-base64\.mjs$/, '.wasm');
      fs.mkdirSync(outdir, { recursive: true });
      fs.writeFileSync(path.join(outdir, file), Buffer.from(wasm, 'base64'));
      // Every chunk sits in dist/ itself, so the file is beside whichever chunk this code lands in.
      const read = `const { readFile } = await import('node:fs/promises')
    return new WebAssembly.Module(await readFile(new URL(${JSON.stringify(`./${file}`)}, import.meta.url)))`;
      return { contents: source.replace(load, read), loader: 'ts' };
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
  plugins: [linkDependencies, queryCompilerFile],
  logLevel: 'warning',
});
fs.writeFileSync(path.join(outdir, STAMP), inputs);
swapInBuild(outdir, dist);
console.log('built apps/server/dist/main.mjs, dist/cli.mjs and dist/extract-thread.mjs');
