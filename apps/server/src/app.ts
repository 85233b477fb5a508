/**
 * The HTTP app: tRPC at /trpc, REST at /api/v1, the OpenAPI document, the discovery manifest and a small
 * index. Framework: Hono, so every face works on Fetch Requests and the context is built one way.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Hono, type Context as HonoContext, type MiddlewareHandler } from 'hono';
import { getConnInfo } from '@hono/node-server/conninfo';
import { fetchRequestHandler } from '@trpc/server/adapters/fetch';
import { appRouter, buildOpenApiDocument, gettingStarted, toAppError, type Context, type Transport } from '@boxes/api';
import { AppError, newId, publicKeys, type Services } from '@boxes/core';
import { logFailure, type Logger } from './logger';
import { mountDocs } from './docs';
import { discoveryManifest, renderSkill } from './discovery';
import { mountOwnerPages } from './owner';
import { mountExports } from './exports';
import { mountAttachmentContent } from './attachments';
import { mountForwardConfirmation } from './forwards';
import { createEventStreamHandler } from './event-stream';
import { mountOps } from './ops';
import { createRestHandler, errorResponse, matchRoute, REST_PREFIX, retryAfterOf, routeTable } from './rest';

export function createApp(svc: Services, log: Logger): Hono {
  const app = new Hono();
  // Built on first use, from the configuration as it is then (a server on an ephemeral port learns its URL
  // only after it listens).
  let docs: { json: string; routes: ReturnType<typeof routeTable> } | null = null;
  const getDocs = () => {
    if (!docs) {
      const openapi = buildOpenApiDocument({ apiBaseUrl: svc.config.apiBaseUrl, siteUrl: svc.config.siteUrl });
      docs = {
        json: JSON.stringify(openapi, null, 2),
        routes: routeTable(openapi.paths as Record<string, Record<string, unknown>>),
      };
    }
    return docs;
  };
  // Each request's Hono context, so the client address is looked up only by the calls that need it (signup).
  const honoOf = new WeakMap<Request, HonoContext>();
  const noteClient = (c: HonoContext) => {
    honoOf.set(c.req.raw, c);
    return c.req.raw;
  };
  const clientIp = (req: Request): string | null => {
    const c = honoOf.get(req);
    if (!c) return null;
    const forwarded = svc.config.trustProxy ? c.req.header('x-forwarded-for')?.split(',')[0]?.trim() : undefined;
    if (forwarded) return forwarded;
    try {
      return getConnInfo(c).remote.address ?? null;
    } catch {
      return null;
    }
  };
  // Operators' endpoints, and a request counter by bounded route label.
  const routeOf = (method: string, p: string): string => {
    if (p.startsWith(`${REST_PREFIX}/`)) {
      const sub = p.slice(REST_PREFIX.length);
      if (sub === '/events/stream') return p;
      if (/^\/messages\/[^/]+\/attachments\/[^/]+\/content$/.test(sub)) return `${REST_PREFIX}/messages/{id}/attachments/{attachment_id}/content`;
      const match = matchRoute(getDocs().routes, method, sub);
      return `${REST_PREFIX}${match && 'route' in match ? match.route.path : '/(unknown)'}`;
    }
    if (p.startsWith('/trpc/')) return '/trpc';
    if (p.startsWith('/owner') || p.startsWith('/pay/')) return p.startsWith('/pay/') ? '/pay/{id}' : '/owner/*';
    if (p.startsWith('/exports/')) return '/exports/{token}';
    if (p.startsWith('/forwards/confirm/')) return '/forwards/confirm/{token}';
    return ['/', '/mcp', '/openapi.json', '/openapi.yaml', '/skill.md', '/.well-known/agentic.json', '/healthz', '/readyz', '/metrics'].includes(p) ||
      p.startsWith('/docs')
      ? p.split('/').slice(0, 2).join('/') || '/'
      : '(other)';
  };
  mountOps(app, svc, routeOf);

  const context =
    (transport: Transport) =>
    (req: Request, requestId: string): Context => ({
      svc,
      requestId,
      transport,
      authorization: req.headers.get('authorization'),
      clientIp: () => clientIp(req),
      responseHeaders: new Headers(),
    });

  const rest = createRestHandler({
    routes: () => getDocs().routes,
    context: context('rest'),
    newRequestId: () => newId('req'),
    log,
  });
  // Moved paths keep their method: /beta/mcp/<x> -> /account/mcp/<x> (opt-in, status and feedback stay).
  app.all(`${REST_PREFIX}/beta/mcp/:rest{.+}`, async (c, next) => {
    const rest = c.req.param('rest');
    if (['opt-in', 'status', 'feedback'].includes(rest)) return next();
    const url = new URL(c.req.url);
    return c.redirect(`${REST_PREFIX}/account/mcp/${rest}${url.search}`, 308);
  });

  // The audit public key as a bare PEM file for clients that ask for one (openssl reads it as is); JSON otherwise.
  const pemRoute = async (c: HonoContext, next: () => Promise<void>) => {
    if (!(c.req.header('accept') ?? '').includes('application/x-pem-file')) return next();
    const keyId = c.req.query('key_id');
    if (keyId !== undefined && !/^ask_[0-9a-z]{20}$/.test(keyId))
      return errorResponse(new AppError('not_found', `No signing key ${keyId.slice(0, 40)} on this instance`), newId('req'));
    const { chosen } = await publicKeys(svc, keyId);
    if (!chosen) return errorResponse(new AppError('not_found', `No signing key ${keyId} on this instance`), newId('req'));
    return c.body(chosen.public_key_pem, 200, { 'content-type': 'application/x-pem-file', 'x-audit-key-id': chosen.key_id });
  };
  app.get(`${REST_PREFIX}/audit/public-key`, pemRoute);
  // Server-Sent Events: a long-lived response, served beside the router (docs/guide/push.md).
  const eventStream = createEventStreamHandler(svc, log);
  app.get(`${REST_PREFIX}/events/stream`, (c) => eventStream(c.req.raw));
  // Attachment bytes: a file beside the router (its metadata and signed URL are the router's).
  mountAttachmentContent(app, svc, log);
  app.all(`${REST_PREFIX}`, (c) => rest(noteClient(c)));
  app.all(`${REST_PREFIX}/*`, (c) => rest(noteClient(c)));

  app.all('/trpc/*', (c) => {
    const requestId = newId('req');
    return fetchRequestHandler({
      endpoint: '/trpc',
      req: c.req.raw,
      router: appRouter,
      createContext: () => context('trpc')(noteClient(c), requestId),
      onError: ({ error, path }) => {
        logFailure(log, toAppError(error), error, { requestId, path });
      },
      responseMeta: ({ ctx, errors, paths }) => {
        const headers = new Headers(ctx?.responseHeaders);
        // A single call that says how long to wait (the signup limit) says it in Retry-After too, as on REST.
        const only = paths?.length === 1 && errors[0] ? retryAfterOf(toAppError(errors[0])) : {};
        for (const [name, value] of Object.entries(only)) if (!headers.has(name)) headers.set(name, value);
        headers.set('x-request-id', requestId);
        return { headers };
      },
    });
  });

  // MCP (its SDK, schemas and the tool list) is loaded with the first /mcp request, once: an idle service keeps
  // none of it in memory. A failed load is retried by the next request.
  let mcp: Promise<(req: Request) => Promise<Response>> | null = null;
  const loadMcp = () => {
    if (!mcp)
      mcp = import('./mcp').then(
        (m) => m.createMcpHandler(svc, log),
        (err) => {
          mcp = null;
          throw err;
        },
      );
    return mcp;
  };
  app.all('/mcp', async (c) => (await loadMcp())(c.req.raw));
  app.get('/openapi.json', (c) => c.body(getDocs().json, 200, { 'content-type': 'application/json' }));
  // YAML only for the clients that ask for it: the library and the text are made on the first request.
  let yaml: string | null = null;
  app.get('/openapi.yaml', async (c) => {
    yaml ??= (await import('yaml')).stringify(JSON.parse(getDocs().json));
    return c.body(yaml, 200, { 'content-type': 'application/yaml' });
  });

  // Built on first use, as the OpenAPI document is (the URLs and ports are known once everything listens).
  const skillTemplate = readFileSync(path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../SKILL.md'), 'utf8');
  let skill: string | null = null;
  app.get('/skill.md', (c) => {
    skill ??= renderSkill(skillTemplate, svc);
    return c.body(skill, 200, { 'content-type': 'text/markdown; charset=utf-8' });
  });
  app.get('/.well-known/agentic.json', (c) => c.json(discoveryManifest(svc)));

  app.get('/', (c) =>
    c.json({
      name: 'Boxes',
      description: 'Email for software agents',
      api_base_url: svc.config.apiBaseUrl,
      openapi: `${svc.config.siteUrl}/openapi.json`,
      discovery: `${svc.config.siteUrl}/.well-known/agentic.json`,
      getting_started: gettingStarted(svc),
    }),
  );
  mountDocs(app);
  // The guide's pages need marked: loaded with the first page asked for.
  let guide: Promise<MiddlewareHandler> | null = null;
  app.get('/docs/*', async (c, next) => {
    if (!guide)
      guide = import('./guide').then(
        (m) => m.guideHandler(),
        (err) => {
          guide = null;
          throw err;
        },
      );
    const handler = await guide;
    return handler(c, next);
  });
  mountOwnerPages(app, svc, log);
  mountExports(app, svc, log);
  mountForwardConfirmation(app, svc, log);

  app.notFound((c) => errorResponse(new AppError('not_found', `No page ${c.req.method} ${new URL(c.req.url).pathname}`), newId('req')));
  app.onError((err, c) => {
    const requestId = newId('req');
    // An unreachable PostgreSQL or Redis (owner pages) is 503, as on the API's routes.
    const known = toAppError(err);
    logFailure(log, known.code === 'service_unavailable' ? known : { status: 500, code: 'internal' }, err, { requestId, path: c.req.path }, 'unhandled error');
    return errorResponse(
      known.code === 'service_unavailable' ? known : new AppError('internal', 'Internal error; quote the request_id if you contact support.'),
      requestId,
    );
  });
  return app;
}
