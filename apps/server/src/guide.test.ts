/** The docs as files: every relative link in docs/ and the README leads to a file that exists (and its anchor to a heading). */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { docFiles, headingAnchors, pageUrl, REPO_ROOT, relativeLinks, renderPage, resolveLink } from './guide';

const files = docFiles();

describe('the docs', () => {
  it('are found: the README, the indexes, the guide and the operators’ pages', () => {
    const names = files.map((f) => f.file);
    for (const f of ['README.md', 'docs/index.md', 'docs/guide/index.md', 'docs/operator/index.md', 'docs/ARCHITECTURE.md', 'docs/events.md'])
      expect(names).toContain(f);
  });

  it('every relative link points to a file of the repository, and every #anchor to a heading of it', () => {
    const broken: string[] = [];
    for (const { file } of files) {
      for (const href of relativeLinks(fs.readFileSync(path.join(REPO_ROOT, file), 'utf8'))) {
        const { target, fragment } = resolveLink(file, href);
        const full = path.join(REPO_ROOT, target);
        if (target.startsWith('..') || !fs.existsSync(full)) {
          broken.push(`${file}: ${href} (no ${target})`);
          continue;
        }
        if (fragment && target.endsWith('.md') && !headingAnchors(fs.readFileSync(full, 'utf8')).has(fragment))
          broken.push(`${file}: ${href} (no heading #${fragment} in ${target})`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('maps files to pages', () => {
    expect(pageUrl('docs/guide/index.md')).toBe('/docs/guide');
    expect(pageUrl('docs/guide/sending.md')).toBe('/docs/guide/sending');
    expect(pageUrl('docs/ARCHITECTURE.md')).toBe('/docs/architecture');
    expect(pageUrl('docs/index.md')).toBe('/docs/index');
    expect(pageUrl('README.md')).toBe('/docs/readme');
    expect(new Set(files.map((f) => f.url)).size, 'two files on one page').toBe(files.length);
    expect(resolveLink('docs/guide/push.md', '#the-events-feed')).toEqual({ target: 'docs/guide/push.md', fragment: 'the-events-feed' });
    expect(resolveLink('docs/guide/push.md', '../operator/dns.md#x')).toEqual({ target: 'docs/operator/dns.md', fragment: 'x' });
  });

  it('renders links between files as links between pages, anchors as GitHub makes them', () => {
    const served = new Map([
      ['docs/guide/push.md', '/docs/guide/push'],
      ['docs/operator/monitoring.md', '/docs/operator/monitoring'],
    ]);
    const html = renderPage(
      { file: 'docs/guide/sending.md', url: '/docs/guide/sending' },
      '# Sending\n\n## The `send_at` field: scheduled\n\nSee [push](push.md#webhooks), [metrics](../operator/monitoring.md), [code](../../packages/core/src/messages/send.ts) and [site](https://example.com).\n',
      served,
    );
    expect(html).toContain('<title>Sending · Boxes</title>');
    expect(html).toContain('<h2 id="the-send_at-field-scheduled">');
    expect(html).toContain('<a href="/docs/guide/push#webhooks">push</a>');
    expect(html).toContain('<a href="/docs/operator/monitoring">metrics</a>');
    expect(html).toContain(', code and ');
    expect(html).toContain('<a href="https://example.com">site</a>');
  });
});
