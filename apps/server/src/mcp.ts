/**
 * {mcp_url}/mcp: MCP over Streamable HTTP (stateless: a server and transport per request). Authenticated by an
 * API key as Bearer, with the same scopes, billing and reputation as REST, because every tool call runs the
 * router's procedure. Tools whose scope the key lacks are not listed (and are refused if called anyway).
 * Each tool call counts against the key's rate limit like a REST call; the protocol's own messages (initialize,
 * tools/list, notifications) do not. The count is taken here, before the transport answers, so a call over the
 * limit is an HTTP 429 with Retry-After as on the other faces, and every keyed response has the RateLimit fields.
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import {
  API_VERSION,
  appRouter,
  createCallerFactory,
  gettingStarted,
  procedureTools,
  rateLimitFields,
  toAppError,
  untrustedMailText,
  type Context,
} from '@boxes/api';
import { AppError, assertKeyLive, authenticateKey, keyRateLimited, newId, takeKeyRate, type Services } from '@boxes/core';
import { PROTO_KEY, PROTO_KEY_REFUSED } from '@boxes/schemas';
import { MCP_INSTRUCTIONS } from './discovery';
import { logFailure, type Logger } from './logger';
import { errorResponse } from './rest';

const createCaller = createCallerFactory(appRouter);

/** The transport's own cap on a POST body (its default), kept now that the body is read here. */
const MAX_MCP_BODY_BYTES = 4 * 1024 * 1024;

/** Reads at most max bytes of the body; null when it is longer. */
async function readCapped(req: Request, max: number): Promise<string | null> {
  if (Number(req.headers.get('content-length') ?? 0) > max) return null;
  if (!req.body) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of req.body as unknown as AsyncIterable<Uint8Array>) {
    size += chunk.byteLength;
    if (size > max) return null;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** How many tools/call requests a JSON-RPC message (or batch) carries. */
function toolCalls(message: unknown): number {
  const all = Array.isArray(message) ? message : [message];
  return all.filter((m) => m !== null && typeof m === 'object' && (m as { method?: unknown }).method === 'tools/call').length;
}

/** A single tools/call request whose params are not {name: string, arguments?: object}: its id and what is wrong. */
function invalidToolCall(message: unknown): { id: unknown; message: string } | null {
  if (message === null || typeof message !== 'object' || Array.isArray(message)) return null;
  const m = message as { method?: unknown; id?: unknown; params?: unknown };
  if (m.method !== 'tools/call') return null;
  const id = typeof m.id === 'string' || typeof m.id === 'number' ? m.id : null;
  const params = m.params as { name?: unknown; arguments?: unknown } | undefined;
  if (params === null || typeof params !== 'object' || Array.isArray(params)) return { id, message: 'params must be an object' };
  if (typeof params.name !== 'string') return { id, message: 'params.name must be a string' };
  const args = params.arguments;
  if (args !== undefined && (args === null || typeof args !== 'object' || Array.isArray(args))) return { id, message: 'params.arguments must be an object' };
  // The SDK parses the arguments into a record, which drops this key without a word: refused by name, as the input
  // guard refuses it deeper down.
  if (args !== undefined && Object.hasOwn(args, PROTO_KEY)) return { id, message: `params.arguments.${PROTO_KEY}: ${PROTO_KEY_REFUSED}` };
  return null;
}

export function createMcpHandler(svc: Services, log: Logger) {
  return async function handleMcp(req: Request): Promise<Response> {
    const requestId = newId('req');
    try {
      return await serve(req, requestId);
    } catch (err) {
      // The key check and the rate count run here, outside any procedure: their failures get the same answers.
      const app = toAppError(err);
      logFailure(log, app, err, { requestId }, 'mcp request failed');
      return errorResponse(
        app.code === 'service_unavailable' ? app : new AppError('internal', 'Internal error; quote the request_id if you contact support.'),
        requestId,
      );
    }
  };

  async function serve(req: Request, requestId: string): Promise<Response> {
    const header = req.headers.get('authorization') ?? '';
    const raw = /^Bearer\s+(\S+)$/i.exec(header.trim())?.[1];
    const key = raw ? await authenticateKey({ db: svc.db, raw }) : null;
    if (!key) {
      return errorResponse(
        new AppError('unauthorized', raw ? 'The API key is not valid or has been revoked' : 'MCP needs an API key: send Authorization: Bearer <api_key>', {
          getting_started: gettingStarted(svc),
        }),
        requestId,
        { 'www-authenticate': 'Bearer' },
      );
    }
    try {
      assertKeyLive(key, svc.clock.now());
    } catch (err) {
      return errorResponse(err as AppError, requestId, { 'www-authenticate': 'Bearer error="invalid_token"' });
    }
    // POST bodies are read here to count their tool calls, then handed to the transport already parsed.
    let parsedBody: unknown;
    let forward = req;
    if (req.method === 'POST') {
      const text = await readCapped(req, MAX_MCP_BODY_BYTES);
      if (text === null) return errorResponse(new AppError('payload_too_large', `The body is larger than ${MAX_MCP_BODY_BYTES} bytes`), requestId);
      try {
        parsedBody = JSON.parse(text);
      } catch {
        // Not JSON: the transport answers with its JSON-RPC parse error.
        const headers = new Headers(req.headers);
        headers.delete('content-length');
        forward = new Request(req.url, { method: req.method, headers, body: text });
      }
    }
    // The SDK answers tools/call params of the wrong shape with -32603 (internal error); they are the
    // caller's mistake: -32602 (invalid params), as the input guard answers a bad argument. In a batch, each
    // member is checked, and one bad member stops the whole batch: nothing of it runs, and each request in it
    // is answered (the bad ones with what is wrong, the others as not run).
    const members: unknown[] = Array.isArray(parsedBody) ? parsedBody : [parsedBody];
    const bad = members.map(invalidToolCall);
    const first = bad.findIndex((b) => b !== null);
    if (first >= 0) {
      const answers = members.flatMap((m, i) => {
        const b = bad[i];
        if (b) return [{ jsonrpc: '2.0', id: b.id, error: { code: -32602, message: `Invalid params: ${b.message}` } }];
        const id = (m as { id?: unknown } | null)?.id;
        if (typeof id !== 'string' && typeof id !== 'number') return [];
        return [{ jsonrpc: '2.0', id, error: { code: -32602, message: `Invalid params: not run, as request ${first + 1} of the batch has invalid params` } }];
      });
      const res = Response.json(Array.isArray(parsedBody) ? answers : answers[0]);
      res.headers.set('x-request-id', requestId);
      return res;
    }
    const window = await takeKeyRate(svc, key.id, toolCalls(parsedBody));
    const fields = window ? rateLimitFields(window) : {};
    if (window?.limited) return errorResponse(keyRateLimited(window), requestId, fields);
    if (key.account.mcpDisabledAt) {
      return errorResponse(
        new AppError(
          'mcp_disabled',
          `MCP access is disabled for this account since ${key.account.mcpDisabledAt.toISOString()}; enable it with POST /api/v1/account/mcp/enable (admin) or use the REST API`,
        ),
        requestId,
        fields,
      );
    }
    const scopes = new Set(key.scopes);
    const tools = procedureTools().filter((t) => !t.scope || scopes.has(t.scope));
    const server = new Server({ name: 'boxes', version: API_VERSION }, { capabilities: { tools: {} }, instructions: MCP_INSTRUCTIONS });
    server.setRequestHandler(ListToolsRequestSchema, async () => ({
      tools: tools.map((t) => ({
        name: t.name,
        description: t.description,
        inputSchema: t.inputSchema,
        ...(t.outputSchema ? { outputSchema: t.outputSchema } : {}),
      })),
    }));
    server.setRequestHandler(CallToolRequestSchema, async (request) => {
      const tool = procedureTools().find((t) => t.name === request.params.name);
      const callId = newId('req');
      if (!tool) {
        return {
          isError: true,
          content: [
            { type: 'text' as const, text: JSON.stringify({ error: { code: 'not_found', message: `No tool ${request.params.name}`, request_id: callId } }) },
          ],
        };
      }
      const ctx: Context = { svc, requestId: callId, transport: 'mcp', authorization: header, responseHeaders: new Headers(), rateCounted: true };
      try {
        const fn = tool.procedure.split('.').reduce<unknown>((acc, part) => (acc as Record<string, unknown>)[part], createCaller(ctx)) as (
          input: unknown,
        ) => Promise<unknown>;
        const args = request.params.arguments ?? {};
        const result = await fn(tool.input === 'none' ? undefined : tool.input === 'wrapped' ? args.input : args);
        // Mail content is the senders' text: inside a delimited block marked untrusted (see untrusted.ts).
        const text = tool.mailContent ? untrustedMailText(result) : JSON.stringify(result);
        return { content: [{ type: 'text' as const, text }], structuredContent: result as Record<string, unknown> };
      } catch (err) {
        const app = toAppError(err);
        logFailure(log, app, err, { requestId: callId, tool: tool.name }, 'mcp tool failed');
        return {
          isError: true,
          content: [{ type: 'text' as const, text: JSON.stringify({ error: { code: app.code, message: app.message, request_id: callId, ...app.details } }) }],
        };
      }
    });
    const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    await server.connect(transport);
    try {
      const res = await transport.handleRequest(forward, parsedBody === undefined ? undefined : { parsedBody });
      for (const [name, value] of Object.entries(fields)) res.headers.set(name, value);
      res.headers.set('x-request-id', requestId);
      return res;
    } finally {
      void server.close();
    }
  }
}
