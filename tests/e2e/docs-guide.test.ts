// The guide served beside the API reference: /docs/guide and every page it links to, over real HTTP, with every
// link between the pages answering 200.
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '@boxes/testing';

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(() => t?.stop());

const root = path.resolve(import.meta.dirname, '../..');
const hrefs = (html: string) => [...html.matchAll(/<a href="([^"]+)"/g)].map((m) => m[1]!.replace(/&amp;/g, '&'));

it('serves the guide index, linking every page of docs/guide', async () => {
  const res = await fetch(`${t.url}/docs/guide`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/html/);
  const html = await res.text();
  expect(html).toMatch(/<h1[^>]*>The Boxes guide<\/h1>/);
  const links = new Set(hrefs(html));
  for (const f of fs.readdirSync(path.join(root, 'docs/guide')).filter((n) => n.endsWith('.md') && n !== 'index.md'))
    expect(links, `the index links ${f}`).toContain(`/docs/guide/${f.replace(/\.md$/, '').toLowerCase()}`);
  // A trailing slash is the same page.
  expect((await fetch(`${t.url}/docs/guide/`)).status).toBe(200);
});

it('renders a page from its markdown: headings with anchors, code blocks, tables', async () => {
  const html = await (await fetch(`${t.url}/docs/guide/sending`)).text();
  expect(html).toMatch(/<h1[^>]*>Sending mail<\/h1>/);
  expect(html).toContain('<pre><code');
  expect(html).toContain('POST /messages/send');
  const config = await (await fetch(`${t.url}/docs/operator/configuration`)).text();
  expect(config).toContain('<table>');
  expect(config).toContain('<code>BOXES_SECRET_KEY</code>');
});

it('every link of every page reachable from the index answers 200', async () => {
  const seen = new Set<string>();
  const queue = ['/docs/index', '/docs/guide', '/docs/operator', '/docs/readme'];
  const broken: string[] = [];
  while (queue.length) {
    const page = queue.shift()!;
    if (seen.has(page)) continue;
    seen.add(page);
    const res = await fetch(`${t.url}${page}`);
    if (res.status !== 200) {
      broken.push(`${page}: ${res.status}`);
      continue;
    }
    if (!page.startsWith('/docs/') || page.startsWith('/docs/assets')) continue;
    for (const href of hrefs(await res.text())) {
      if (!href.startsWith('/')) continue;
      const target = href.split('#')[0]!;
      if (target === '/docs' || target.startsWith('/docs/')) queue.push(target);
    }
  }
  expect(broken).toEqual([]);
  // The guide, the operators' pages, the architecture, the benchmarks and the event types were all reached.
  for (const p of ['/docs/guide/push', '/docs/operator/configuration', '/docs/operator/monitoring', '/docs/architecture', '/docs/benchmarks', '/docs/events'])
    expect(seen, p).toContain(p);
});

it('leaves the API reference where it was, and answers 404 for a page that does not exist', async () => {
  const ref = await fetch(`${t.url}/docs`);
  expect(ref.status).toBe(200);
  expect(await ref.text()).toContain('Boxes API reference');
  const missing = await fetch(`${t.url}/docs/guide/no-such-page`);
  expect(missing.status).toBe(404);
  expect(((await missing.json()) as { error: { code: string } }).error.code).toBe('not_found');
  // Only markdown files are pages: the source of a page is not served.
  expect((await fetch(`${t.url}/docs/guide/sending.md`)).status).toBe(404);
});
