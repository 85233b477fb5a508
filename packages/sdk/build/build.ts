/**
 * `pnpm --filter @boxes/sdk build`: the SDK as a package an agent installs from a tarball or a registry.
 *  - dist/index.js: the SDK's own code (ESM), bundled by esbuild; @trpc/client and @trpc/server stay imports
 *    (its only dependencies);
 *  - dist/*.d.ts: declarations (TypeScript 5.9's compiler: TypeScript 7 has no compiler API yet), with
 *    router-type.d.ts replaced by the standalone router type (emit-router-type.ts), so the declarations name
 *    no @boxes/* package.
 * package.json's publishConfig points the packed package at dist/ (pnpm pack uses it); in the workspace the
 * SDK resolves to its sources.
 */
import fs from 'node:fs';
import path from 'node:path';
import { build } from 'esbuild';
import ts from 'ts5';
import { emitRouterType } from './emit-router-type';

const sdk = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const dist = path.join(sdk, 'dist');
fs.rmSync(dist, { recursive: true, force: true });

await build({
  entryPoints: [path.join(sdk, 'src/index.ts')],
  outfile: path.join(dist, 'index.js'),
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  external: ['@trpc/client', '@trpc/server', '@trpc/server/*'],
  logLevel: 'warning',
});

const program = ts.createProgram([path.join(sdk, 'src/index.ts')], {
  declaration: true,
  emitDeclarationOnly: true,
  outDir: dist,
  rootDir: path.join(sdk, 'src'),
  strict: true,
  skipLibCheck: true,
  module: ts.ModuleKind.ESNext,
  moduleResolution: ts.ModuleResolutionKind.Bundler,
  target: ts.ScriptTarget.ES2022,
  types: ['node'],
});
const emitted = program.emit(undefined, (file, text) => {
  // Only the SDK's own declarations (the program also sees the workspace packages it imports types from).
  if (!path.resolve(file).startsWith(dist)) return;
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
});
const errors = ts
  .getPreEmitDiagnostics(program)
  .concat(emitted.diagnostics)
  .filter((d) => d.category === ts.DiagnosticCategory.Error);
if (errors.length) {
  throw new Error(ts.formatDiagnosticsWithColorAndContext(errors, { getCanonicalFileName: (f) => f, getCurrentDirectory: () => sdk, getNewLine: () => '\n' }));
}
emitRouterType(path.join(dist, 'router-type.d.ts'));

// Relative imports with their extension, as NodeNext consumers require.
for (const f of fs.readdirSync(dist).filter((x) => x.endsWith('.d.ts'))) {
  const file = path.join(dist, f);
  fs.writeFileSync(
    file,
    fs
      .readFileSync(file, 'utf8')
      .replace(/(from\s+['"])(\.\.?\/[^'"]+?)(['"])/g, (m, a: string, p: string, b: string) => (p.endsWith('.js') ? m : `${a}${p}.js${b}`)),
  );
}

// No declaration may name a workspace package.
for (const f of fs.readdirSync(dist).filter((x) => x.endsWith('.d.ts'))) {
  const text = fs.readFileSync(path.join(dist, f), 'utf8');
  if (/from ['"]@boxes\//.test(text) || /import\(['"]@boxes\//.test(text)) throw new Error(`${f} still refers to a workspace package`);
}
console.log(`built ${path.relative(process.cwd(), dist)}: ${fs.readdirSync(dist).join(', ')}`);
