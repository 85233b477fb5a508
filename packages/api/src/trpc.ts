/**
 * tRPC setup: the context, the error formatter and the procedure builders. publicProcedure needs no key;
 * keyProcedure authenticates the Bearer key on every transport, counts the call against the key's rate limit,
 * checks meta.scope, and narrows ctx.account and ctx.key. Errors thrown by core (AppError) keep their code on
 * both transports.
 */
import { initTRPC, TRPCError } from '@trpc/server';
import type { OpenApiMeta } from 'trpc-to-openapi';
import { ZodError } from 'zod';
import {
  AppError,
  assertKeyLive,
  authenticateKey,
  ERROR_CODES,
  type ErrorCode,
  heldForReview,
  isServiceUnavailable,
  keyRateLimited,
  serviceUnavailable,
  takeKeyRate,
  type BoxScope,
  type Services,
} from '@boxes/core';
import type { Scope } from '@boxes/schemas';
import type { Account, ApiKey } from '@boxes/db';
import { setRateLimitFields } from './rate-limit';
import { booleanFieldsOf, guardInput, inputSchemaOf } from './input-guard';
import { queryBooleans } from './booleans';
import { redisLost } from './dependencies';

export type Transport = 'rest' | 'trpc' | 'mcp';

export interface Context {
  svc: Services;
  requestId: string;
  transport: Transport;
  /** Raw Authorization header value, or null. */
  authorization: string | null;
  /** The client's address (the proxy's X-Forwarded-For only with TRUST_PROXY), when known; looked up on call. */
  clientIp?: () => string | null;
  /** Fields for the HTTP response (the rate-limit fields), set by procedures; each face copies them onto it. */
  responseHeaders: Headers;
  /** The face has already counted this call against the key's rate limit (MCP counts tool calls as they arrive). */
  rateCounted?: boolean;
  /** REST: the path parameters, percent-decoded once by the REST face; they replace the generator's raw ones. */
  pathInput?: Record<string, string>;
  /**
   * A success status other than 200, set by the procedure (202 for a send held for the owner's review). An
   * object the face lends (as responseHeaders): middlewares pass copies of the context on, not the context.
   */
  response?: { status?: number };
}

// A type alias, not an interface: trpc-to-openapi needs meta to have an implicit index signature.
export type BoxesMeta = {
  /** Scope the key needs; omit for "any valid key". */
  scope?: Scope;
  /** Account-wide changes (keys, callback URL, new boxes) are refused to box-restricted keys. */
  accountWide?: boolean;
  /**
   * The AppError codes the procedure's own work can throw, beyond those every call can meet
   * (error-contract.ts); its OpenAPI error responses are generated from them.
   */
  errors?: readonly ErrorCode[];
  /**
   * The procedure sends mail that owner review may hold: its output is the sent message or, with status 202, the
   * Review (schemas/reviews.ts); OpenAPI documents the two answers apart, and keyChecks sets the 202.
   */
  reviewable?: true;
};
export type Meta = OpenApiMeta<BoxesMeta>;

export interface ErrorData {
  boxes: { code: string; status: number; request_id: string; details: Record<string, unknown> } | null;
}

/** Turns a zod error into the `fields` list and a one-line message naming each offending field. */
export function describeZodError(err: ZodError): { message: string; fields: { path: string; message: string }[] } {
  const fields = err.issues.map((i) => {
    const path = i.path.map(String).join('.');
    if (i.code === 'unrecognized_keys') {
      return { path: path || '(body)', message: `unknown field${i.keys.length > 1 ? 's' : ''}: ${i.keys.join(', ')}` };
    }
    return { path: path || '(body)', message: i.message };
  });
  return { message: fields.map((f) => `${f.path}: ${f.message}`).join('; '), fields };
}

export { serviceUnavailable, UNAVAILABLE_RETRY_SECONDS } from '@boxes/core';

/**
 * The AppError behind any error thrown in a procedure (validation errors become validation_error; an
 * unreachable PostgreSQL or Redis becomes service_unavailable).
 */
export function toAppError(error: unknown): AppError {
  const cause = error instanceof TRPCError ? (error.cause ?? error) : error;
  if (cause instanceof AppError) return cause;
  if (isServiceUnavailable(cause)) return serviceUnavailable();
  if (cause instanceof ZodError) {
    const { message, fields } = describeZodError(cause);
    return new AppError('validation_error', message, { fields });
  }
  if (error instanceof TRPCError) {
    const byTrpc = Object.entries(ERROR_CODES).find(([, v]) => v.trpc === error.code && v.status < 500);
    // tRPC reports an unparsable body as BAD_REQUEST caused by a SyntaxError (PARSE_ERROR in older versions).
    if (error.code === 'PARSE_ERROR' || error.cause instanceof SyntaxError) return new AppError('invalid_json', 'The request body is not valid JSON');
    if (byTrpc) return new AppError(byTrpc[0] as keyof typeof ERROR_CODES, error.message);
  }
  return new AppError('internal', 'Internal error. It has been logged; quote the request_id if you contact support.');
}

const t = initTRPC
  .context<Context>()
  .meta<Meta>()
  .create({
    errorFormatter({ shape, error, ctx }) {
      const app = toAppError(error);
      return {
        ...shape,
        message: app.message,
        data: {
          ...shape.data,
          stack: undefined,
          boxes: { code: app.code, status: app.status, request_id: ctx?.requestId ?? 'req_unknown', details: app.details },
        },
      };
    },
  });

export const router = t.router;
export const createCallerFactory = t.createCallerFactory;

/**
 * Converts AppError into a TRPCError with the mapped code, keeping the AppError as cause; an unreachable
 * dependency becomes service_unavailable (503 on both transports, not 500).
 */
const appErrors = t.middleware(async ({ next }) => {
  const result = await next();
  if (!result.ok && (result.error.cause instanceof AppError || isServiceUnavailable(result.error.cause))) {
    const app = result.error.cause instanceof AppError ? result.error.cause : serviceUnavailable();
    (result as { error: TRPCError }).error = new TRPCError({ code: ERROR_CODES[app.code].trpc, message: app.message, cause: app });
  }
  return result;
});

/**
 * While the connection to Redis is lost, every call is 503 at once (no round trip, no wait): the rate limits and
 * the queues live there, and the keyed calls' count would refuse anyway (redisLost says when it is lost).
 */
function assertDependencies(ctx: Context): void {
  if (redisLost(ctx.svc.redis)) throw serviceUnavailable();
}

/**
 * The raw input as the procedure's parser gets it, checked:
 * - trpc-to-openapi puts path parameters into the input as they appear in the URL, percent-encoded
 *   (box_%C3%A9); the REST face has decoded them as UTF-8, and those values are the ones the procedure sees.
 * - REST carries the input of a GET or DELETE in the query string, where a boolean can only be the word "true" or
 *   "false": those words become booleans for the input's boolean fields (booleans.ts). tRPC and MCP send JSON,
 *   where a boolean is a boolean and a string is refused.
 * - The input guard (input-guard.ts) on the raw input, before zod parses it: NUL, unpaired surrogates, control
 *   characters outside bodies and oversized free-form JSON are a 400 validation_error naming each field, on every
 *   face, instead of reaching the store.
 * Returns the getRawInput to hand on (the one given when nothing changes it).
 */
async function checkedRawInput(ctx: Context, meta: Meta | undefined, path: string, getRawInput: () => Promise<unknown>): Promise<() => Promise<unknown>> {
  let rawInput = getRawInput;
  const pathInput = ctx.pathInput;
  if (pathInput && Object.keys(pathInput).length > 0) {
    rawInput = async () => {
      const raw = await getRawInput();
      return raw !== null && typeof raw === 'object' ? { ...raw, ...pathInput } : raw;
    };
  }
  const method = meta?.openapi?.method;
  if (ctx.transport === 'rest' && (method === 'GET' || method === 'DELETE')) {
    const fields = booleanFieldsOf(path);
    if (fields.length) {
      const input = queryBooleans(await rawInput(), fields);
      rawInput = async () => input;
    }
  }
  const schema = inputSchemaOf(path);
  if (schema) {
    const issues = guardInput(schema, await rawInput());
    if (issues.length) {
      throw new AppError('validation_error', issues.map((f) => `${f.path}: ${f.message}`).join('; '), { fields: issues });
    }
  }
  return rawInput;
}

/**
 * The checks of an unkeyed call in one middleware (each tRPC middleware level copies the call's options, and a
 * chain of them cost about as much as the rest of the request's routing): Redis reachable, then the input.
 */
const publicChecks = t.middleware(async ({ ctx, meta, path, getRawInput, next }) => {
  assertDependencies(ctx);
  const rawInput = await checkedRawInput(ctx, meta, path, getRawInput);
  return rawInput === getRawInput ? next() : next({ getRawInput: rawInput });
});

const base = t.procedure.use(appErrors);

export const publicProcedure = base.use(publicChecks);

export function gettingStarted(svc: Services) {
  return {
    signup: `${svc.config.apiBaseUrl}/signup/agentic`,
    confirm: `${svc.config.apiBaseUrl}/signup/agentic/confirm`,
    docs: `${svc.config.siteUrl}/docs`,
    openapi: `${svc.config.siteUrl}/openapi.json`,
    claim: `${svc.config.apiBaseUrl}/signup/agentic/claim`,
    how: 'POST /signup/agentic with human_email and domain_intent {mode: "subdomain"}, then POST /signup/agentic/confirm with the intent_id; send the api_key as Authorization: Bearer <api_key>. A funded or register signup has no confirm: once the owner pays, POST /signup/agentic/claim with intent_id and claim_secret answers with the api_key.',
  };
}

/**
 * The key check of every keyed call: the Bearer key, its rate limit, the scope and the box restriction. Also
 * used by the faces served outside the router (GET /events/stream), so they authenticate the same way.
 */
export async function authenticateCall(ctx: Pick<Context, 'svc' | 'authorization' | 'responseHeaders' | 'rateCounted'>, meta: BoxesMeta | undefined) {
  const header = ctx.authorization?.trim() ?? '';
  const match = /^Bearer\s+(\S+)$/i.exec(header);
  if (!match) {
    throw new AppError(
      'unauthorized',
      header ? 'The Authorization header must be "Bearer <api_key>"' : 'This call needs an API key: send Authorization: Bearer <api_key>',
      { getting_started: gettingStarted(ctx.svc) },
    );
  }
  const key = await authenticateKey({ db: ctx.svc.db, raw: match[1]! });
  if (!key) {
    throw new AppError('unauthorized', 'The API key is not valid or has been revoked', { getting_started: gettingStarted(ctx.svc) });
  }
  assertKeyLive(key, ctx.svc.clock.now());
  // Counted once the key is known (unknown keys tell nothing about anyone's quota) and before the scope checks
  // (a key hammering calls it may not make is still hammering).
  if (!ctx.rateCounted) {
    const window = await takeKeyRate(ctx.svc, key.id);
    if (window) {
      setRateLimitFields(ctx.responseHeaders, window);
      if (window.limited) throw keyRateLimited(window);
    }
  }
  if (meta?.scope && !key.scopes.includes(meta.scope)) {
    throw new AppError('insufficient_scope', `This call needs a key with the ${meta.scope} scope; this key has ${key.scopes.join(', ')}`, {
      required_scope: meta.scope,
      key_scopes: key.scopes,
    });
  }
  const boxScope: BoxScope = key.allowedBoxIds.length ? key.allowedBoxIds : null;
  if (meta?.accountWide && boxScope) {
    throw new AppError('box_restricted_key', 'This key is restricted to some boxes and cannot make account-wide changes; use an unrestricted key');
  }
  const { account, ...apiKey } = key;
  return { account: account as Account, key: apiKey as ApiKey, boxScope };
}

/**
 * The checks of a keyed call in one middleware: Redis reachable, then the key (authenticated, then guarded: an
 * unkeyed call is 401 before anything about its input is said), then the input.
 */
const keyChecks = t.middleware(async ({ ctx, meta, path, getRawInput, next }) => {
  assertDependencies(ctx);
  const auth = await authenticateCall(ctx, meta);
  const rawInput = await checkedRawInput(ctx, meta, path, getRawInput);
  // tRPC's next takes the context and the raw input together (its types offer them apart).
  const result = await next({ ctx: auth, getRawInput: rawInput } as { ctx: typeof auth });
  // A send that owner review held answers its Review with 202, on every face that has a status.
  if (meta?.reviewable && result.ok && ctx.response && heldForReview(result.data as never)) ctx.response.status = 202;
  return result;
});

export const keyProcedure = base.use(keyChecks);
