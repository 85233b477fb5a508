/**
 * REST face of the router under /api/v1 (trpc-to-openapi), with the parts of the HTTP contract the generator
 * does not own: 404 for unknown paths and 405 (with Allow) for known paths with another method, 400 for
 * malformed JSON, 415 for non-JSON bodies, 413 for oversized ones, and every error as
 * {"error": {"code", "message", "request_id", ...details}} without a stack trace.
 */
import { callTRPCProcedure, TRPCError, type AnyTRPCProcedure, type AnyTRPCRouter } from '@trpc/server';
import {
  coerceSchema,
  forEachOpenApiProcedure,
  generateOpenApiDocument,
  getErrorFromUnknown,
  getInputOutputParsers,
  getPathRegExp,
  instanceofZodTypeKind,
  instanceofZodTypeLikeVoid,
  instanceofZodTypeObject,
  instanceofZodTypeOptional,
  normalizePath,
  unwrapZodType,
  TRPC_ERROR_CODE_HTTP_STATUS,
  zodSupportsCoerce,
} from 'trpc-to-openapi';
import { appRouter, gettingStarted, stringProblem, toAppError, type Context } from '@boxes/api';
import { AppError, authenticateKey } from '@boxes/core';
import { logFailure, type Logger } from './logger';

export const REST_PREFIX = '/api/v1';
export const MAX_BODY_BYTES = 30 * 1024 * 1024;

interface Route {
  method: string;
  pattern: RegExp;
  /** Names of the path parameters, in the order of the pattern's groups. */
  params: string[];
  /** The OpenAPI path template, e.g. /messages/{id}. */
  path: string;
}

/** The routes of the OpenAPI document, as patterns over the path below /api/v1. */
export function routeTable(paths: Record<string, Record<string, unknown>>): Route[] {
  return Object.entries(paths).flatMap(([path, ops]) => {
    const params = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]!);
    const pattern = new RegExp(`^${path.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '([^/]+)')}/?$`);
    return Object.keys(ops).map((m) => ({ method: m.toUpperCase(), pattern, params, path }));
  });
}

/**
 * Which template a path means: the one whose segments are literal furthest from the left, so /messages/send is
 * the send route for every method, never GET /messages/{id} with id "send". Undefined for an unknown path.
 */
export function templateFor(routes: Route[], path: string): Route['path'] | undefined {
  // Every request asks twice (the REST face, the request counter's label) and most paths repeat: the answer for
  // a path is kept, a bounded number of them per table.
  let known = templatesFound.get(routes);
  if (!known) {
    known = new Map();
    templatesFound.set(routes, known);
  }
  if (known.has(path)) return known.get(path);
  const found = findTemplate(routes, path);
  if (known.size >= TEMPLATES_KEPT) known.clear();
  known.set(path, found);
  return found;
}

const TEMPLATES_KEPT = 2000;
const templatesFound = new WeakMap<Route[], Map<string, Route['path'] | undefined>>();

function findTemplate(routes: Route[], path: string): Route['path'] | undefined {
  const score = (template: string) => template.split('/').map((seg) => (seg.startsWith('{') ? 1 : 0));
  let best: { path: string; score: number[] } | undefined;
  for (const r of routes) {
    if (!r.pattern.test(path)) continue;
    const s = score(r.path);
    if (!best) best = { path: r.path, score: s };
    else {
      const i = s.findIndex((v, k) => v !== best!.score[k]);
      if (i !== -1 && s[i]! < best.score[i]!) best = { path: r.path, score: s };
    }
  }
  return best?.path;
}

/** The route a request takes, or the methods its path allows when the method is not one of them. */
export function matchRoute(routes: Route[], method: string, path: string): { route: Route } | { allow: string[] } | null {
  const template = templateFor(routes, path);
  if (template === undefined) return null;
  // The answer depends only on the template and the method, a bounded set: it is worked out once for each.
  let byTemplate = routesFound.get(routes);
  if (!byTemplate) {
    byTemplate = new Map();
    routesFound.set(routes, byTemplate);
  }
  const key = `${method} ${template}`;
  let found = byTemplate.get(key);
  if (!found) {
    const same = routes.filter((r) => r.path === template);
    const route = same.find((r) => r.method === method);
    found = route ? { route } : { allow: [...new Set(same.map((r) => r.method))] };
    byTemplate.set(key, found);
  }
  return 'route' in found ? found : { allow: [...found.allow] };
}

const routesFound = new WeakMap<Route[], Map<string, { route: Route } | { allow: string[] }>>();

/**
 * Path parameters are decoded here, once, as UTF-8 (trpc-to-openapi would hand them over still
 * percent-encoded), and checked by the input guard's rule for single-line values.
 */
function decodePathParams(route: Route, path: string): { values: Record<string, string>; problems: { path: string; message: string }[] } {
  const raw = route.pattern.exec(path)?.slice(1) ?? [];
  const values: Record<string, string> = {};
  const problems: { path: string; message: string }[] = [];
  raw.forEach((segment, i) => {
    const name = route.params[i] ?? `param${i}`;
    let value: string;
    try {
      value = decodeURIComponent(segment);
    } catch {
      problems.push({ path: name, message: 'must be valid percent-encoded UTF-8' });
      return;
    }
    const problem = stringProblem(value, 'line');
    if (problem) problems.push({ path: name, message: problem });
    values[name] = value;
  });
  return { values, problems };
}

/** Retry-After for an error that says how long to wait (retry_after_seconds), as its body does. */
export function retryAfterOf(err: AppError): Record<string, string> {
  const seconds = err.details.retry_after_seconds;
  return typeof seconds === 'number' && Number.isFinite(seconds) ? { 'retry-after': String(Math.max(1, Math.ceil(seconds))) } : {};
}

export function errorResponse(err: AppError, requestId: string, headers: Record<string, string> = {}): Response {
  return Response.json(
    { error: { code: err.code, message: err.message, request_id: requestId, ...err.details } },
    { status: err.status, headers: { 'x-request-id': requestId, ...retryAfterOf(err), ...headers } },
  );
}

const WITH_BODY = new Set(['POST', 'PUT', 'PATCH']);

/**
 * The query string as input, as trpc-to-openapi's getQuery reads it (a parameter given once is a value, given
 * several times a list), into an object without a prototype: getQuery's own plain object took a parameter named
 * like one of Object's methods (?toString=1, ?constructor=x) for a list it already had and threw, a 500 where
 * the unknown field is a 400. Spread into the input, each parameter is an own property of it.
 */
function queryInput(url: URL): Record<string, unknown> {
  const query: Record<string, string | string[]> = Object.create(null);
  url.searchParams.forEach((value, key) => {
    const had = query[key];
    if (had === undefined) query[key] = value;
    else if (Array.isArray(had)) had.push(value);
    else query[key] = [had, value];
  });
  return query;
}

/**
 * trpc-to-openapi reads DELETE input from the query string only; a DELETE with a JSON object body (e.g.
 * DELETE /messages/{id} with {"purge": true}) has its scalar members moved there.
 */
async function deleteBodyToQuery(req: Request, url: URL): Promise<AppError | null> {
  const text = await req.text();
  if (text.trim() === '') return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    return new AppError('invalid_json', `The request body is not valid JSON: ${(err as Error).message}`);
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    return new AppError('validation_error', 'The request body must be a JSON object', { fields: [{ path: '(body)', message: 'expected an object' }] });
  }
  for (const [k, v] of Object.entries(parsed)) {
    if (v === null || typeof v === 'object') {
      return new AppError('validation_error', `${k}: must be a string, number or boolean`, { fields: [{ path: k, message: 'expected a scalar' }] });
    }
    url.searchParams.set(k, String(v));
  }
  return null;
}

interface PendingCall {
  context: () => Context;
  onError: (error: unknown) => void;
}

/** What the procedure answered: the status and JSON text the generator's handler would have sent. */
interface AdapterResult {
  status: number;
  body: string | undefined;
}

/** A procedure of the REST face, with what trpc-to-openapi's handler works out of it on every request. */
interface RestProcedure {
  /** The procedure's path in the router, e.g. messages.send. */
  path: string;
  type: 'query' | 'mutation';
  regExp: RegExp;
  /** The input, unwrapped as the handler unwraps it (several inputs merged into one object). */
  input: unknown;
  /** The input is void-like: the procedure gets no input. */
  noInput: boolean;
  /** The input is an object: its coercion is set and, from a query string, its arrays are wrapped. */
  objectInput: boolean;
  /** Members of an object input that are arrays (or optional arrays): one query value becomes a list of one. */
  arrayKeys: string[];
  /** coerceSchema has been run on the input. */
  coerced: boolean;
}

const PROCEDURES_KEPT = 2000;

/**
 * The request handling of trpc-to-openapi's Node handler (createOpenApiNodeHttpHandler), step for step, with the
 * work that depends only on the procedure done once: its route pattern, its unwrapped input (the handler merged
 * a procedure's several inputs into a new schema on every request), which members are arrays, and the coercion
 * the handler sets on the input's schema objects (coerceSchema walked the input on every request; it now runs
 * on a procedure's first REST call, where the handler ran it first). The procedure is called as the router's
 * caller calls it (callTRPCProcedure, without a caller proxy built per request), with the URL the REST face
 * has already parsed, the body it has already read and parsed, and its result sent as JSON text.
 * The answers are the handler's: 200 with the procedure's JSON, or the error it reported.
 */
function createOpenApiDispatch() {
  const router = appRouter as unknown as AnyTRPCRouter;
  // The handler validates the router by generating its document when it is built, outside production.
  if (process.env.NODE_ENV !== 'production') generateOpenApiDocument(router as never, { title: '', version: '', baseUrl: '' });
  const byMethod = new Map<string, RestProcedure[]>();
  forEachOpenApiProcedure(router._def.procedures as never, ({ path, procedure, meta }) => {
    const type = (procedure as AnyTRPCProcedure)._def.type;
    if (type === 'subscription') return;
    const { method, path: template } = meta.openapi as { method: string; path: string };
    const input = unwrapZodType(getInputOutputParsers(procedure as never).inputParser as never, true);
    const objectInput = zodSupportsCoerce && instanceofZodTypeObject(input);
    const shape = objectInput ? (input as unknown as { shape: Record<string, unknown> }).shape : {};
    const arrayKeys = Object.entries(shape)
      .filter(
        ([, member]) =>
          instanceofZodTypeKind(member as never, 'array') ||
          (instanceofZodTypeOptional(member as never) && instanceofZodTypeKind((member as { unwrap(): never }).unwrap(), 'array')),
      )
      .map(([key]) => key);
    const list = byMethod.get(method) ?? [];
    byMethod.set(method, list);
    list.push({
      path,
      type,
      regExp: getPathRegExp(normalizePath(template)),
      input,
      noInput: instanceofZodTypeLikeVoid(input),
      objectInput,
      arrayKeys,
      coerced: false,
    });
  });

  // The first procedure of the method whose pattern matches, as the handler looks it up; most paths repeat, and
  // the answer for a path is kept, a bounded number of them.
  const found = new Map<string, { procedure: RestProcedure; pathInput: Record<string, string> } | null>();
  const lookup = (method: string, path: string) => {
    const key = `${method} ${path}`;
    let hit = found.get(key);
    if (hit === undefined) {
      hit = null;
      for (const procedure of byMethod.get(method) ?? []) {
        const m = procedure.regExp.exec(path);
        if (m) {
          hit = { procedure, pathInput: { ...m.groups } };
          break;
        }
      }
      if (found.size >= PROCEDURES_KEPT) found.clear();
      found.set(key, hit);
    }
    return hit;
  };

  return async (forward: { url: URL; path: string; method: string; headers: Headers; body: unknown }, call: PendingCall): Promise<AdapterResult> => {
    const { method, url } = forward;
    const hit = lookup(method, normalizePath(forward.path));
    try {
      if (!hit) throw new TRPCError({ message: 'Not found', code: 'NOT_FOUND' });
      const { procedure, pathInput } = hit;
      const useBody = method !== 'GET' && method !== 'DELETE';
      const contentType = forward.headers.get('content-type') ?? undefined;
      if (useBody && !contentType?.startsWith('application/json')) {
        throw new TRPCError({
          code: 'UNSUPPORTED_MEDIA_TYPE',
          message: contentType ? `Unsupported content-type "${contentType}` : 'Missing content-type header',
        });
      }
      let input: Record<string, unknown> | undefined;
      if (!procedure.noInput) input = { ...(useBody ? (forward.body as Record<string, unknown>) : queryInput(url)), ...pathInput };
      if (procedure.objectInput) {
        if (!useBody && input) {
          for (const key of procedure.arrayKeys) {
            if (input[key] !== undefined && !Array.isArray(input[key])) input[key] = [input[key]];
          }
        }
        if (!procedure.coerced) {
          coerceSchema(procedure.input as never);
          procedure.coerced = true;
        }
      }
      const ctx = call.context();
      const data = await callTRPCProcedure({
        router,
        path: procedure.path,
        getRawInput: async () => input,
        ctx,
        type: procedure.type,
        signal: undefined,
        batchIndex: 0,
      });
      return { status: 200, body: JSON.stringify(data) };
    } catch (cause) {
      const error = getErrorFromUnknown(cause);
      call.onError(error);
      return { status: TRPC_ERROR_CODE_HTTP_STATUS[error.code] ?? 500, body: undefined };
    }
  };
}

export function createRestHandler(opts: {
  routes: () => Route[];
  context: (req: Request, requestId: string) => Context;
  newRequestId: () => string;
  log: Logger;
}) {
  const openApi = createOpenApiDispatch();
  return async function handleRest(req: Request): Promise<Response> {
    const requestId = opts.newRequestId();
    const url = new URL(req.url);
    const path = url.pathname.slice(REST_PREFIX.length) || '/';
    const method = req.method === 'HEAD' ? 'GET' : req.method;
    const match = matchRoute(opts.routes(), method, path);
    if (!match) {
      // A caller without a working key who guessed a path is most likely new here: point it at the signup,
      // as every other unauthenticated answer does. A caller with a key only mistyped a path.
      const { svc } = opts.context(req, requestId);
      const raw = /^Bearer\s+(\S+)$/i.exec(req.headers.get('authorization')?.trim() ?? '')?.[1];
      const known = raw ? await authenticateKey({ db: svc.db, raw }) : null;
      return errorResponse(
        new AppError(
          'not_found',
          `No route ${req.method} ${REST_PREFIX}${path}. Every route is listed in ${svc.config.siteUrl}/openapi.json.`,
          known ? {} : { getting_started: gettingStarted(svc) },
        ),
        requestId,
      );
    }
    if ('allow' in match) {
      const allow = match.allow.join(', ');
      return errorResponse(
        new AppError('method_not_allowed', `${req.method} is not allowed on ${REST_PREFIX}${path}; use ${allow}`, { allow: match.allow }),
        requestId,
        { allow },
      );
    }
    const { route } = match;

    // trpc-to-openapi collects the query into a plain object: a name such as __proto__ or constructor would
    // reach Object.prototype (500). No parameter of ours has such a name.
    const inherited = url.search ? [...new Set(url.searchParams.keys())].filter((k) => k in Object.prototype) : [];
    const pathParams = decodePathParams(route, path);
    const badParams = [...inherited.map((k) => ({ path: k, message: 'not a parameter of this route' })), ...pathParams.problems];
    if (badParams.length) {
      return errorResponse(new AppError('validation_error', badParams.map((f) => `${f.path}: ${f.message}`).join('; '), { fields: badParams }), requestId);
    }

    let body: unknown = null;
    if (WITH_BODY.has(method)) {
      const declared = Number(req.headers.get('content-length') ?? 0);
      if (declared > MAX_BODY_BYTES) {
        return errorResponse(new AppError('payload_too_large', `The body is larger than ${MAX_BODY_BYTES} bytes`), requestId);
      }
      const text = await req.text();
      if (Buffer.byteLength(text) > MAX_BODY_BYTES) {
        return errorResponse(new AppError('payload_too_large', `The body is larger than ${MAX_BODY_BYTES} bytes`), requestId);
      }
      const type = req.headers.get('content-type');
      if (text.trim() === '') {
        body = {};
      } else if (type && !/^application\/([\w.+-]+\+)?json\b/i.test(type)) {
        return errorResponse(new AppError('unsupported_media_type', `The body must be JSON (Content-Type: application/json), not ${type}`), requestId);
      } else {
        let parsed: unknown;
        try {
          parsed = JSON.parse(text);
        } catch (err) {
          return errorResponse(new AppError('invalid_json', `The request body is not valid JSON: ${(err as Error).message}`), requestId);
        }
        if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
          return errorResponse(
            new AppError('validation_error', 'The request body must be a JSON object', { fields: [{ path: '(body)', message: 'expected an object' }] }),
            requestId,
          );
        }
        body = parsed;
      }
    }

    if (method === 'DELETE') {
      const bad = await deleteBodyToQuery(req, url);
      if (bad) return errorResponse(bad, requestId);
    }
    // A body goes on as JSON whatever its declared type (+json suffixes, none for an empty body): copy the
    // header fields only when that changes what they say.
    let headers = req.headers;
    if (WITH_BODY.has(method) && !req.headers.get('content-type')?.startsWith('application/json')) {
      headers = new Headers(req.headers);
      headers.set('content-type', 'application/json');
    }
    let failure: unknown;
    let ctx: Context | undefined;
    const response: { status?: number } = {};
    const res = await openApi(
      { url, path, method, headers, body },
      {
        context: () => (ctx ??= { ...opts.context(req, requestId), pathInput: pathParams.values, response }),
        onError: (error) => {
          failure = error;
        },
      },
    );
    // What the procedure set for the response (the rate-limit fields), on success and error alike.
    const fields = Object.fromEntries(ctx?.responseHeaders ?? []);
    if (res.status < 400) {
      // The header fields as a plain record (names in lower case, as Headers has them): the Node server writes
      // them as they are, with no Headers object to build, validate and convert back.
      const out: Record<string, string> = { 'content-type': 'application/json', ...fields, 'x-request-id': requestId };
      return new Response(req.method === 'HEAD' ? null : res.body, { status: response.status ?? res.status, headers: out });
    }
    const app = toAppError(failure);
    logFailure(opts.log, app, failure, { requestId, path, method });
    return errorResponse(app, requestId, fields);
  };
}
