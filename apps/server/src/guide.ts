/**
 * The guide beside the API reference: every markdown file of docs/ (and the README) rendered to a static HTML
 * page with marked, read from the checkout once and kept. A file's page is /docs/<path without .md>, lower case,
 * an index.md standing for its folder: docs/guide/index.md is /docs/guide, docs/guide/sending.md
 * /docs/guide/sending, docs/ARCHITECTURE.md /docs/architecture, docs/index.md /docs/index, README.md
 * /docs/readme. Relative links between the files become links between the pages.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { MiddlewareHandler } from 'hono';
import { Marked, type Tokens } from 'marked';

/** The checkout's root: src/ and the bundle's dist/ are at the same depth. */
export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const DOCS = 'docs';

export interface DocFile {
  /** Path from the repository root, with forward slashes (docs/guide/sending.md, README.md). */
  file: string;
  /** The page that serves it (/docs/guide/sending). */
  url: string;
}

/** Every markdown file the instance serves: docs/ (recursively) and the README. */
export function docFiles(root = REPO_ROOT): DocFile[] {
  const out: DocFile[] = [];
  const walk = (dir: string) => {
    const full = path.join(root, dir);
    if (!fs.existsSync(full)) return;
    for (const entry of fs.readdirSync(full, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const rel = `${dir}/${entry.name}`;
      if (entry.isDirectory()) walk(rel);
      else if (entry.name.endsWith('.md')) out.push({ file: rel, url: pageUrl(rel) });
    }
  };
  walk(DOCS);
  if (fs.existsSync(path.join(root, 'README.md'))) out.push({ file: 'README.md', url: pageUrl('README.md') });
  return out;
}

/** The page of a markdown file (a path from the repository root). */
export function pageUrl(file: string): string {
  if (file === 'README.md') return '/docs/readme';
  const rel = file
    .slice(DOCS.length + 1)
    .replace(/\.md$/, '')
    .toLowerCase();
  if (rel === 'index') return '/docs/index';
  return `/docs/${rel.replace(/(^|\/)index$/, '')}`;
}

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens (duplicates get -1, -2, ...). */
export function slugger(): (text: string) => string {
  const seen = new Map<string, number>();
  return (text) => {
    const base = text
      .toLowerCase()
      .trim()
      .replace(/<[^>]*>/g, '')
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(base);
    seen.set(base, (n ?? -1) + 1);
    return n === undefined ? base : `${base}-${n + 1}`;
  };
}

/** The anchors of a markdown file's headings, as GitHub and these pages make them. */
export function headingAnchors(markdown: string): Set<string> {
  const slug = slugger();
  const anchors = new Set<string>();
  new Marked().walkTokens(new Marked().lexer(markdown), (t) => {
    if (t.type === 'heading') anchors.add(slug((t as Tokens.Heading).text.replace(/`/g, '')));
  });
  return anchors;
}

/** Every link of a markdown file that is relative: no scheme, not absolute (a fragment alone is one within the file). */
export function relativeLinks(markdown: string): string[] {
  const hrefs: string[] = [];
  const m = new Marked();
  m.walkTokens(m.lexer(markdown), (t) => {
    if (t.type === 'link' || t.type === 'image') {
      const href = (t as Tokens.Link).href;
      if (!/^[a-z][a-z0-9+.-]*:/i.test(href) && !href.startsWith('/')) hrefs.push(href);
    }
  });
  return hrefs;
}

/** A relative link of `from` (a path from the repository root) as a path from the root and a fragment. */
export function resolveLink(from: string, href: string): { target: string; fragment: string | null } {
  const [p = '', fragment] = href.split('#', 2) as [string, string | undefined];
  const target = p === '' ? from : path.posix.normalize(path.posix.join(path.posix.dirname(from), decodeURI(p)));
  return { target, fragment: fragment ?? null };
}

const escapeHtml = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

const STYLE = `body{font:16px/1.55 system-ui,sans-serif;max-width:52rem;margin:0 auto;padding:1rem 1.25rem 4rem;color:#1f2328}
nav{font-size:.9rem;border-bottom:1px solid #d0d7de;padding-bottom:.5rem;margin-bottom:1rem}nav a{margin-right:1rem}
code{font:.875em ui-monospace,monospace;background:#f2f4f6;padding:.1em .3em;border-radius:4px}
pre{background:#f6f8fa;padding:.8rem;overflow:auto;border-radius:6px}pre code{background:none;padding:0}
table{border-collapse:collapse;display:block;overflow:auto}th,td{border:1px solid #d0d7de;padding:.3rem .6rem;vertical-align:top}
a{color:#0969da}h1,h2,h3,h4{line-height:1.25;margin-top:1.6em}`;

/** One markdown file as an HTML page; its relative links to served files point at their pages. */
export function renderPage(doc: DocFile, markdown: string, served: Map<string, string>): string {
  const slug = slugger();
  const marked = new Marked({
    gfm: true,
    walkTokens(t) {
      if (t.type !== 'link') return;
      const link = t as Tokens.Link;
      if (/^[a-z][a-z0-9+.-]*:/i.test(link.href) || link.href.startsWith('/') || link.href.startsWith('#')) return;
      const { target, fragment } = resolveLink(doc.file, link.href);
      const page = served.get(target);
      // A link to a file the instance does not serve (source code) leads to its text, unlinked.
      link.href = page ? `${page}${fragment ? `#${fragment}` : ''}` : '';
    },
    renderer: {
      heading({ tokens, depth, text }) {
        const id = slug(text.replace(/`/g, ''));
        return `<h${depth} id="${escapeHtml(id)}">${this.parser.parseInline(tokens)}</h${depth}>\n`;
      },
      link({ href, title, tokens }) {
        const inner = this.parser.parseInline(tokens);
        if (!href) return inner;
        return `<a href="${escapeHtml(href)}"${title ? ` title="${escapeHtml(title)}"` : ''}>${inner}</a>`;
      },
    },
  });
  const body = marked.parse(markdown, { async: false });
  const title = /^#\s+(.+)$/m.exec(markdown)?.[1]?.replace(/`/g, '') ?? doc.file;
  return `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>${escapeHtml(title)} · Boxes</title>
  <style>${STYLE}</style>
</head>
<body>
<nav><a href="/docs/index">Documentation</a><a href="/docs/guide">Guide</a><a href="/docs/operator">Operators</a><a href="/docs">API reference</a><a href="/docs/events">Events</a></nav>
<main>
${body}</main>
</body>
</html>`;
}

/** Serves every page of docFiles() under /docs/... (the app mounts it on GET /docs/*). */
export function guideHandler(root = REPO_ROOT): MiddlewareHandler {
  let pages: Map<string, { doc: DocFile; html: string | null }> | null = null;
  const load = () => {
    if (!pages) {
      const files = docFiles(root);
      const served = new Map(files.map((d) => [d.file, d.url]));
      pages = new Map(files.map((d) => [d.url, { doc: d, html: null }]));
      return { pages, served };
    }
    return { pages, served: new Map([...pages.values()].map((p) => [p.doc.file, p.doc.url])) };
  };
  return async (c, next) => {
    const url = c.req.path.replace(/\/+$/, '');
    const { pages: all, served } = load();
    const page = all.get(url);
    if (!page) return next();
    page.html ??= renderPage(page.doc, fs.readFileSync(path.join(root, page.doc.file), 'utf8'), served);
    return c.html(page.html, 200, { 'cache-control': 'public, max-age=300', 'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'" });
  };
}
