// Run while the image is built (deploy/Dockerfile): every third-party file the bundle imports, by the absolute
// path apps/server/build.mjs wrote into it, must exist in the runtime tree given (the production-only install),
// and what the bundle resolves at run time (swagger-ui-dist, from apps/server/node_modules) too.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const out = path.resolve(process.argv[2] ?? '/app');
const app = '/app';
const dist = path.join(out, 'apps/server/dist');
const missing = [];
let imports = 0;
for (const file of fs.readdirSync(dist).filter((f) => f.endsWith('.mjs'))) {
  const text = fs.readFileSync(path.join(dist, file), 'utf8');
  for (const m of text.matchAll(/["'](\/[^"'\s]+\/node_modules\/[^"'\s]+)["']/g)) {
    const target = m[1];
    if (!target.startsWith(`${app}/`)) {
      missing.push(`${file}: ${target} (built outside ${app})`);
      continue;
    }
    imports++;
    if (!fs.existsSync(path.join(out, target.slice(app.length)))) missing.push(`${file}: ${target}`);
  }
}
for (const name of ['cli.mjs', 'main.mjs', 'extract-thread.mjs', 'query_compiler_fast_bg.postgresql.wasm'])
  if (!fs.existsSync(path.join(dist, name))) missing.push(`apps/server/dist/${name}`);
for (const name of ['SKILL.md', 'prisma/migrations', 'deploy/healthcheck.mjs']) if (!fs.existsSync(path.join(out, name))) missing.push(name);
try {
  createRequire(path.join(dist, 'cli.mjs')).resolve('swagger-ui-dist/package.json');
} catch {
  missing.push('swagger-ui-dist (resolved from apps/server/dist at run time)');
}
if (missing.length) {
  console.error(`the bundle needs what the runtime tree lacks:\n  ${missing.join('\n  ')}`);
  process.exit(1);
}
console.log(`check-bundle: ${imports} imports of the bundle resolve in ${out}`);
