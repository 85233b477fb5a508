/** docs/operator/configuration.md: every setting documented, and the file as `pnpm docs:config` writes it. */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { renderConfigDocs, settingComments, settingDocs } from './docs';
import { envSchema, loadConfig } from './index';

const FILE = path.resolve(import.meta.dirname, '../../../docs/operator/configuration.md');

describe('the configuration reference', () => {
  it('reads a doc comment for every setting of the schema, and no key the schema lacks', () => {
    const comments = settingComments();
    expect([...comments.keys()].sort()).toEqual(Object.keys(envSchema.shape).sort());
    const undocumented = [...comments].filter(([, c]) => !c).map(([k]) => k);
    expect(undocumented, 'settings without a /** doc comment */ in packages/config/src/index.ts').toEqual([]);
  });

  it('takes each default from the schema, as loadConfig applies it', () => {
    const byName = new Map(settingDocs().map((s) => [s.name, s.defaultValue]));
    expect(byName.get('PORT')).toBe('3000');
    expect(byName.get('SITE_URL')).toBeNull();
    expect(byName.get('WEBHOOK_ALLOW_PRIVATE')).toBe('false');
    expect(byName.get('SENDING_IP_WARMUP_CAPS')).toBe('5000,10000,20000,40000,80000,160000,320000');
    // Each documented default, set explicitly, loads the same configuration as none at all.
    const explicit = Object.fromEntries([...byName].filter(([, v]) => v !== null && v !== '') as [string, string][]);
    expect(loadConfig(explicit)).toEqual(loadConfig({}));
  });

  it('parses one-line and multi-line comments', () => {
    const src = [
      'export const envSchema = z.object({',
      '  /** One line. */',
      '  A: z.string(),',
      '  /**',
      '   * Two',
      '   * lines.',
      '   */',
      '  B: z',
      '    .string()',
      '    .default("x"),',
      '  C: z.string(),',
      '});',
    ].join('\n');
    expect([...settingComments(src)]).toEqual([
      ['A', 'One line.'],
      ['B', 'Two lines.'],
      ['C', null],
    ]);
  });

  it('docs/operator/configuration.md is the schema as written by pnpm docs:config', () => {
    expect(fs.readFileSync(FILE, 'utf8'), 'run `pnpm docs:config`').toBe(renderConfigDocs());
    for (const name of Object.keys(envSchema.shape)) expect(fs.readFileSync(FILE, 'utf8')).toContain(`| \`${name}\` |`);
  });
});
