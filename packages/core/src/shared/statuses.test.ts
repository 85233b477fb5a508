/**
 * Status literals in SQL: every `status = '...'`, `status <> '...'` and `status [NOT] IN ('...', ...)` written in
 * the typed SQL of packages/core and apps must be a value of the vocabulary of the table it names (STATUS_COLUMNS).
 * TypeScript checks the Prisma calls (`satisfies`); a literal inside a SQL template is only text, so this scan is
 * what keeps a misspelt one from matching nothing.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { narrowStatus, STATUS_COLUMNS, statusIn, statusLit } from './statuses';
import { compile, k, sql } from '@boxes/db';
import { DELIVERY_STATUSES } from '@boxes/schemas';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../..');

/** table name to its status vocabulary. */
const vocabularies = new Map<string, readonly string[]>(
  Object.entries(STATUS_COLUMNS)
    .filter(([key]) => key.endsWith('.status'))
    .map(([key, values]) => [key.slice(0, -'.status'.length), values]),
);

interface Finding {
  file: string;
  line: number;
  text: string;
  values: string[];
  tables: string[];
}

/** The status literals of a source text, each with the tables it may belong to. */
export function scanStatusLiterals(file: string, source: string): Finding[] {
  const ticks = [...source.matchAll(/`/g)].map((m) => m.index);
  const found: Finding[] = [];
  for (const m of source.matchAll(/(?:\b(\w+)\.)?\bstatus\s*(?:=|<>|!=|\bNOT\s+IN\b|\bIN\b)\s*(\(\s*'[^)]*\)|'[^']*')/gi)) {
    const at = m.index;
    // Only SQL: the literal sits inside a template string (between an odd and an even backtick).
    const before = ticks.filter((t) => t < at);
    if (before.length % 2 === 0) continue;
    const start = before[before.length - 1]!;
    const end = ticks.find((t) => t > at) ?? source.length;
    const sql = source.slice(start, end);
    const values = [...m[2]!.matchAll(/'([^']*)'/g)].map((v) => v[1]!);
    const aliases = new Map<string, string>();
    const named: string[] = [];
    for (const t of sql.matchAll(/\b(?:FROM|JOIN|UPDATE|INTO)\s+"?(\w+)"?(?:\s+(?:AS\s+)?(\w+))?/gi)) {
      if (!vocabularies.has(t[1]!)) continue;
      named.push(t[1]!);
      if (t[2]) aliases.set(t[2], t[1]!);
    }
    const alias = m[1];
    const tables = alias && aliases.has(alias) ? [aliases.get(alias)!] : alias && vocabularies.has(alias) ? [alias] : [...new Set(named)];
    found.push({ file, line: source.slice(0, at).split('\n').length, text: m[0], values, tables });
  }
  return found;
}

function sources(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return e.name === 'node_modules' || e.name === 'generated' ? [] : sources(p);
    return e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') ? [p] : [];
  });
}

/** What is wrong with a finding: no table to check it against, or a value outside every candidate vocabulary. */
function problems(f: Finding): string[] {
  const where = `${path.relative(repo, f.file)}:${f.line} ${f.text}`;
  if (!f.tables.length) return [`${where}: no status table named in this statement`];
  return f.values
    .filter((v) => !f.tables.some((t) => vocabularies.get(t)!.includes(v)))
    .map((v) => `${where}: '${v}' is not a status of ${f.tables.join(' or ')}`);
}

describe('status literals in SQL', () => {
  const roots = [path.join(repo, 'packages/core/src'), ...fs.readdirSync(path.join(repo, 'apps')).map((a) => path.join(repo, 'apps', a, 'src'))].filter((d) =>
    fs.existsSync(d),
  );
  const findings = roots.flatMap(sources).flatMap((file) => scanStatusLiterals(file, fs.readFileSync(file, 'utf8')));

  it('finds the literals of SQL written as text', () => {
    // Statements written with k / sql from @boxes/db take their literals from statusLit/statusIn, which tsc
    // checks; this scan is for SQL still written as text. It must find what such a statement holds (a scan
    // that matches nothing would pass vacuously).
    const src = "const a = sql`UPDATE deliveries d SET status = 'bounced' FROM bulk_jobs j WHERE j.status IN ('halted', 'sending')`;";
    const found = scanStatusLiterals('x.ts', src);
    expect(found.some((f) => f.values.includes('bounced') && f.tables.includes('deliveries'))).toBe(true);
    expect(found.some((f) => f.values.includes('halted') && f.tables.includes('bulk_jobs'))).toBe(true);
  });

  it("each literal is a value of its table's vocabulary", () => {
    expect(findings.flatMap(problems)).toEqual([]);
  });

  it('flags a misspelt literal, an unknown alias table and a statement that names no status table', () => {
    const src = [
      "const a = sql`UPDATE deliveries d SET status = 'delivred' WHERE d.status IN ('queued', 'bulk')`;",
      "const b = sql`SELECT 1 FROM bulk_jobs j JOIN deliveries d ON true WHERE j.status = 'bulk'`;",
      "const c = sql`SELECT 1 FROM x WHERE status = 'queued'`;",
      "const d = { status: 'not sql' };",
    ].join('\n');
    expect(
      scanStatusLiterals('/t.ts', src)
        .flatMap(problems)
        .map((p) => p.replace(/^.*?: /, '')),
    ).toEqual(["'delivred' is not a status of deliveries", "'bulk' is not a status of bulk_jobs", 'no status table named in this statement']);
  });
});

describe('statusLit and statusIn (typed statements)', () => {
  it('render checked constants inline, as the Prisma forms do', () => {
    const q = k
      .selectFrom('deliveries')
      .select('id')
      .where('status', '=', statusLit(DELIVERY_STATUSES, 'queued'))
      .where(sql<boolean>`status IN ${statusIn(DELIVERY_STATUSES, ['delivered', 'bounced'])}`);
    expect(compile(q)).toMatchObject({ sql: `select "id" from "deliveries" where "status" = 'queued' and status IN ('delivered', 'bounced')`, parameters: [] });
    // @ts-expect-error a misspelt status does not compile
    expect(() => statusLit(DELIVERY_STATUSES, 'delivred')).toThrow(/not a status/);
  });
});

describe('narrowStatus', () => {
  it('narrows a listed value and refuses any other', () => {
    expect(narrowStatus(DELIVERY_STATUSES, 'bulk')).toBe('bulk');
    expect(() => narrowStatus(DELIVERY_STATUSES, 'sending')).toThrow(/unknown status 'sending'/);
  });

  it('statusIn renders literals checked against the vocabulary at run time too', () => {
    expect(compile(sql`x IN ${statusIn(DELIVERY_STATUSES, ['delivered', 'bounced'])}`).sql).toBe("x IN ('delivered', 'bounced')");
    // @ts-expect-error a misspelt status does not compile
    expect(() => statusIn(DELIVERY_STATUSES, ['delivred'])).toThrow(/not a status/);
    // @ts-expect-error a status of another column does not compile
    expect(() => statusLit(DELIVERY_STATUSES, 'partially_delivered')).toThrow(/not a status/);
  });
});
