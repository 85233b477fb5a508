// `pnpm build` for production: the service's own code (apps/*, packages/*) bundled by esbuild into
// apps/server/dist/main.mjs, dist/cli.mjs and dist/extract-thread.mjs (the same depth as src/, so paths to SKILL.md and prisma/migrations
// hold), with every third-party package left as an import of the exact file this install resolved (pnpm keeps
// each workspace package's dependencies beside it, so a bare name would not resolve from dist/).
import { build } from 'esbuild';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

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
  outdir: path.join(here, 'dist'),
  outExtension: { '.js': '.mjs' },
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node24',
  sourcemap: true,
  // Conditions as the workspace resolves them (packages export ./src/index.ts).
  plugins: [linkDependencies],
  logLevel: 'warning',
});
console.log('built apps/server/dist/main.mjs, dist/cli.mjs and dist/extract-thread.mjs');
