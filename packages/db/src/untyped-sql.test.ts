/**
 * Raw SQL goes through typed statements (sql.ts): a renamed column is then a compile error, not a failure found
 * by an end-to-end test. This lists what is still written as untyped SQL (Prisma.sql/raw/join templates,
 * $queryRaw, $executeRaw, *Unsafe() calls) in the sources of apps/ and packages/, the tests, the benchmarks and
 * the scripts, per file, against the files not yet converted: a file outside that list, or more untyped
 * statements in a listed file, fails here.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

/** Files not yet converted, with the most untyped statements each may hold. Lower a count as a file is converted. */
const NOT_YET_CONVERTED: Record<string, number> = {
  // The paging test clones a message 1,500 times over whatever columns the table has (information_schema): a
  // statement generic over the schema, which is what a typed one cannot be.
  'tests/e2e/threads.test.ts': 2,
};

/** Where typed statements are compiled and handed to Prisma: the one place *Unsafe() belongs. */
const TYPED_SQL_MODULE = 'packages/db/src/sql.ts';
const THIS_FILE = 'packages/db/src/untyped-sql.test.ts';

// Buffer.allocUnsafe is not SQL.
const UNTYPED = /Prisma\.(?:sql|raw|join|empty)\b|\$(?:queryRaw|executeRaw)(?:Unsafe)?|\b(?!allocUnsafe)\w*Unsafe\(/g;

function countUntyped(source: string): number {
  return source.match(UNTYPED)?.length ?? 0;
}

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(path.join(root, dir), { withFileTypes: true })) {
    const rel = `${dir}/${entry.name}`;
    if (entry.isDirectory()) {
      if (entry.name === 'node_modules' || entry.name.startsWith('generated')) continue;
      out.push(...sources(rel));
    } else if (/\.(ts|tsx|mts)$/.test(entry.name) && !entry.name.endsWith('.d.ts')) out.push(rel);
  }
  return out;
}

function untypedByFile(): Record<string, number> {
  const dirs = ['tests', 'bench', 'scripts'];
  for (const top of ['apps', 'packages']) {
    for (const pkg of readdirSync(path.join(root, top), { withFileTypes: true })) {
      if (pkg.isDirectory()) dirs.push(`${top}/${pkg.name}/src`);
    }
  }
  const found: Record<string, number> = {};
  for (const dir of dirs) {
    let files: string[];
    try {
      files = sources(dir);
    } catch {
      continue; // a package without src/
    }
    for (const f of files) {
      if (f === TYPED_SQL_MODULE || f === THIS_FILE) continue;
      const n = countUntyped(readFileSync(path.join(root, f), 'utf8'));
      if (n) found[f] = n;
    }
  }
  return found;
}

describe('untyped raw SQL', () => {
  it('the pattern counts each untyped form once, and not the typed helpers', () => {
    expect(countUntyped('await tx.$queryRaw`SELECT 1`; db.$executeRawUnsafe(q); Prisma.sql`x`, Prisma.raw("y")')).toBe(4);
    expect(countUntyped('db.$queryRawUnsafe(c.sql, ...c.parameters); somethingUnsafe(x)')).toBe(2);
    expect(countUntyped("await rows(tx, k.selectFrom('accounts').select('id')); await exec(db, sql`SELECT 1`)")).toBe(0);
  });

  it('appears only in files not yet converted, and no more often than listed', () => {
    const found = untypedByFile();
    const outside = Object.keys(found).filter((f) => !(f in NOT_YET_CONVERTED));
    expect(outside, 'untyped SQL in a converted file: write it with k / sql from @boxes/db (packages/db/src/sql.ts)').toEqual([]);
    const grown = Object.entries(found)
      .filter(([f, n]) => n > NOT_YET_CONVERTED[f]!)
      .map(([f, n]) => `${f}: ${n} (listed ${NOT_YET_CONVERTED[f]})`);
    expect(grown, 'more untyped SQL than listed: write the new statements with k / sql from @boxes/db').toEqual([]);
  });
});
