/**
 * docs/operator/configuration.md, written from the settings schema: every variable of `envSchema` with its
 * default (read from the schema) and its meaning (the doc comment above it in index.ts). `pnpm docs:config`
 * writes the file; a test fails when a setting has no doc comment or the file and the schema disagree.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { z } from 'zod';
import { envSchema, FILE_SETTINGS } from './index';

export interface SettingDoc {
  name: string;
  /** The schema's default as the environment would spell it; null: unset unless the meaning says otherwise. */
  defaultValue: string | null;
  /** The doc comment above the setting, on one line; null when it has none. */
  meaning: string | null;
}

const SOURCE = path.join(import.meta.dirname, 'index.ts');

/** The doc comment above each top-level key of `envSchema`, read from the source (comments are not kept at run time). */
export function settingComments(source = fs.readFileSync(SOURCE, 'utf8')): Map<string, string | null> {
  const start = source.indexOf('export const envSchema = z.object({');
  const end = source.indexOf('\n});', start);
  if (start < 0 || end < 0) throw new Error('envSchema not found in packages/config/src/index.ts');
  const comments = new Map<string, string | null>();
  let pending: string[] | null = null;
  let open: string[] | null = null;
  for (const line of source.slice(start, end).split('\n').slice(1)) {
    if (open) {
      const text = line.replace(/^\s*\*\/?\s?/, '').replace(/\*\/\s*$/, '');
      if (/\*\/\s*$/.test(line)) {
        if (text.trim()) open.push(text.trim());
        pending = open;
        open = null;
      } else open.push(text.trim());
      continue;
    }
    const one = /^ {2}\/\*\*\s*(.*?)\s*\*\/\s*$/.exec(line);
    if (one) {
      pending = [one[1]!];
      continue;
    }
    if (/^ {2}\/\*\*\s*$/.test(line)) {
      open = [];
      continue;
    }
    const key = /^ {2}([A-Z][A-Z0-9_]*):/.exec(line);
    if (key) {
      comments.set(key[1]!, pending ? pending.filter(Boolean).join(' ') : null);
      pending = null;
    }
  }
  return comments;
}

type Def = { type: string; defaultValue?: unknown; innerType?: z.ZodType; in?: z.ZodType };

/** The default a setting's schema gives when the variable is unset, before any transform. */
function rawDefault(schema: z.ZodType): unknown {
  let def = (schema as unknown as { _zod: { def: Def } })._zod.def;
  for (;;) {
    if (def.type === 'default') return def.defaultValue;
    const next = def.type === 'pipe' ? def.in : def.type === 'optional' || def.type === 'nullable' ? def.innerType : undefined;
    if (!next) return undefined;
    def = (next as unknown as { _zod: { def: Def } })._zod.def;
  }
}

export function settingDocs(): SettingDoc[] {
  const comments = settingComments();
  return Object.entries(envSchema.shape).map(([name, schema]) => {
    const d = rawDefault(schema as z.ZodType);
    return {
      name,
      defaultValue: d === undefined ? null : String(d),
      meaning: comments.get(name) ?? null,
    };
  });
}

/** A table cell: pipes escaped, and angle brackets (`<PORT>`) as entities so markdown does not read them as HTML. */
const cell = (s: string) => s.replace(/\|/g, '\\|').replace(/</g, '&lt;').replace(/>/g, '&gt;');

export function renderConfigDocs(): string {
  const settings = settingDocs();
  const rows = settings.map(
    (s) =>
      `| \`${s.name}\` | ${s.defaultValue === null ? 'unset' : s.defaultValue === '' ? 'empty' : `\`${cell(s.defaultValue)}\``} | ${cell(s.meaning ?? '')} |`,
  );
  return [
    '<!-- Written by `pnpm docs:config` from packages/config/src/index.ts; a test keeps the two in step. -->',
    '',
    '# Configuration',
    '',
    'Every setting comes from the environment and is read in one place, `packages/config`, at start: a bad value',
    'stops the process with one line naming the variable. An empty variable counts as unset. The defaults work on a',
    'fresh machine; what a production instance sets is in [deployment](deployment.md). Each meaning below is the',
    'setting\'s doc comment in `packages/config/src/index.ts`; "unset" with a computed default says so there.',
    '',
    `${settings.length} settings:`,
    '',
    '| Variable | Default | Meaning |',
    '|---|---|---|',
    ...rows,
    '',
    'A missing PostgreSQL or Redis stops `pnpm start` with one line saying what to start or set. Durations are in',
    'milliseconds (`_MS`) or seconds (`_SECONDS`) as named; booleans take `true`/`false`, `1`/`0` or `yes`/`no`.',
    `Settings that carry secrets may instead be read from a file named by \`<NAME>_FILE\` (Docker and compose secrets,`,
    `Kubernetes Secrets mounted as files; a trailing newline is dropped; setting both forms is an error): ${FILE_SETTINGS.map((n) => `\`${n}\``).join(', ')}.`,
    'Adding a setting means adding it to `envSchema` with a doc comment, then `pnpm docs:config`.',
    '',
  ].join('\n');
}
