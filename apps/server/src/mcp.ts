/**
 * {mcp_url}/mcp: MCP over Streamable HTTP (stateless: a server and transport per request). Authenticated by an
 * API key as Bearer, with the same scopes, billing and reputation as REST, because every tool call runs the
 * router's procedure. Tools whose scope the key lacks are not listed (and are refused if called anyway).
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { API_VERSION, appRouter, createCallerFactory, gettingStarted, procedureTools, toAppError, type Context } from '@boxes/api';
import { AppError, authenticateKey, newId, type Services } from '@boxes/core';
import type { Logger } from './logger';
import { errorResponse } from './rest';

const createCaller = createCallerFactory(appRouter);

export function createMcpHandler(svc: Services, log: Logger) {
  return async function handleMcp(req: Request): Promise<Response> {
    const requestId = newId('req');
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
    if (key.account.mcpDisabledAt) {
      return errorResponse(
        new AppError('mcp_disabled', `MCP access is disabled for this account since ${key.account.mcpDisabledAt.toISOString()}; enable it with POST /api/v1/account/mcp/enable (admin) or use the REST API`),
        requestId,
      );
    }
    const scopes = new Set(key.scopes);
    const tools = procedureTools().filter((t) => !t.scope || scopes.has(t.scope));
    const server = new Server({ name: 'boxes', version: API_VERSION }, { capabilities: { tools: {} } });
    server.setRequestHandler(ListToolsRequestSchema, async () => ({
      tools: tools.map((t) => ({ name: t.name, description: t.description, inputSchema: t.inputSchema })),
    }));
    server.setRequestHandler(CallToolRequestSchema, async (request) => {
      const tool = procedureTools().find((t) => t.name === request.params.name);
      const callId = newId('req');
      if (!tool) {
        return { isError: true, content: [{ type: 'text' as const, text: JSON.stringify({ error: { code: 'not_found', message: `No tool ${request.params.name}`, request_id: callId } }) }] };
      }
      const ctx: Context = { svc, requestId: callId, transport: 'mcp', authorization: header };
      try {
        const fn = tool.procedure.split('.').reduce<unknown>((acc, part) => (acc as Record<string, unknown>)[part], createCaller(ctx)) as (input: unknown) => Promise<unknown>;
        const args = request.params.arguments ?? {};
        const result = await fn(tool.input === 'none' ? undefined : tool.input === 'wrapped' ? args.input : args);
        return { content: [{ type: 'text' as const, text: JSON.stringify(result) }], structuredContent: result as Record<string, unknown> };
      } catch (err) {
        const app = toAppError(err);
        if (app.status >= 500) log.error({ err, requestId: callId, tool: tool.name }, 'mcp tool failed');
        return { isError: true, content: [{ type: 'text' as const, text: JSON.stringify({ error: { code: app.code, message: app.message, request_id: callId, ...app.details } }) }] };
      }
    });
    const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    await server.connect(transport);
    try {
      const res = await transport.handleRequest(req);
      res.headers.set('x-request-id', requestId);
      return res;
    } finally {
      void server.close();
    }
  };
}
