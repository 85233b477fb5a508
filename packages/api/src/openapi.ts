/** The OpenAPI document, generated from the router; our error shape replaces the generator's. */
import { generateOpenApiDocument, type OpenAPIObject } from 'trpc-to-openapi';
import { z } from 'zod';
import { ErrorBody } from '@boxes/schemas';
import { appRouter } from './router';

/** Bumped whenever a route or a shape changes; platform.updated carries it. */
export const API_VERSION = '1.0.0';

const STATUS_TEXT: Record<string, string> = {
  '400': 'Invalid request: malformed JSON or a field that fails validation (error.fields names each one)',
  '401': 'No API key, or a revoked or unknown one (error.getting_started says how to get one)',
  '402': 'Not enough credit',
  '403': 'The key lacks the scope, or is restricted to other boxes',
  '404': 'Not found (also for resources of another account)',
  '409': 'Conflicts with the current state',
  '410': 'Expired',
  '500': 'Internal error (quote error.request_id)',
  '501': 'Not available on this instance yet',
};

export function buildOpenApiDocument(opts: { apiBaseUrl: string; siteUrl: string }): OpenAPIObject {
  const doc = generateOpenApiDocument(appRouter, {
    title: 'Boxes API',
    version: API_VERSION,
    description:
      'Email for software agents. Sign up with two calls, then send, receive and follow the hash-chained event log. Authenticate with Authorization: Bearer <api_key>. Every error body is {"error": {"code", "message", "request_id", ...}}.',
    baseUrl: opts.apiBaseUrl,
    docsUrl: `${opts.siteUrl}/docs`,
    securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer', description: 'An API key: bxs_live_...' } },
  });
  // ErrorBody has an id, so the converter puts it under $defs and answers with a $ref to it: take the definition.
  const converted = z.toJSONSchema(ErrorBody, { target: 'draft-2020-12', io: 'output' }) as { $defs?: Record<string, Record<string, unknown>> };
  const errorSchema = converted.$defs?.Error ?? (converted as Record<string, unknown>);
  delete errorSchema.$schema;
  doc.components = { ...doc.components, schemas: { ...(doc.components?.schemas ?? {}), Error: errorSchema } };
  for (const item of Object.values(doc.paths ?? {})) {
    for (const op of Object.values(item as Record<string, { responses?: Record<string, unknown>; security?: unknown[] }>)) {
      if (!op?.responses) continue;
      const codes = new Set(Object.keys(op.responses).filter((c) => c !== '200'));
      if (op.security?.length) ['401', '403'].forEach((c) => codes.add(c));
      for (const c of [...codes].filter((c) => c === 'default' || Number(c) >= 400)) delete op.responses[c];
      for (const c of [...codes].filter((c) => Number(c) >= 400).sort()) {
        op.responses[c] = { description: STATUS_TEXT[c] ?? 'Error', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } };
      }
    }
  }
  return doc;
}
