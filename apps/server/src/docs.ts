/** GET /docs: the interactive API reference (Swagger UI from the swagger-ui-dist package, served locally, no CDN). */
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import type { Hono } from 'hono';

const require = createRequire(import.meta.url);
const dist = path.dirname(require.resolve('swagger-ui-dist/package.json'));
const ASSETS: Record<string, string> = {
  'swagger-ui.css': 'text/css; charset=utf-8',
  'swagger-ui-bundle.js': 'text/javascript; charset=utf-8',
  'favicon-32x32.png': 'image/png',
};

const PAGE = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Boxes API reference</title>
  <link rel="stylesheet" href="/docs/assets/swagger-ui.css">
  <link rel="icon" href="/docs/assets/favicon-32x32.png">
</head>
<body>
  <div id="reference"></div>
  <script src="/docs/assets/swagger-ui-bundle.js"></script>
  <script src="/docs/init.js"></script>
</body>
</html>`;

// A separate script (not inline) so a strict Content-Security-Policy can forbid inline scripts. Tags start
// collapsed (docExpansion: none): with every tag open, Swagger UI 5.35 stops rendering operations part-way once
// the document passes about 110 of them (no error; the rest of the tags never appear). A click on a tag, or a
// deep link (#/messages/messages-send), opens it.
const INIT = `window.ui = SwaggerUIBundle({ url: '/openapi.json', dom_id: '#reference', deepLinking: true, docExpansion: 'none', tryItOutEnabled: false, persistAuthorization: false });`;

export function mountDocs(app: Hono): void {
  const cache = new Map<string, Buffer>();
  app.get('/docs', (c) => c.html(PAGE));
  app.get('/docs/init.js', (c) => c.body(INIT, 200, { 'content-type': 'text/javascript; charset=utf-8' }));
  app.get('/docs/assets/:file', (c) => {
    const file = c.req.param('file');
    const type = ASSETS[file];
    if (!type) return c.notFound();
    let body = cache.get(file);
    if (!body) {
      body = fs.readFileSync(path.join(dist, file));
      cache.set(file, body);
    }
    return c.body(new Uint8Array(body), 200, { 'content-type': type, 'cache-control': 'public, max-age=86400' });
  });
}
