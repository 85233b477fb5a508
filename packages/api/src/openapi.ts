/**
 * The OpenAPI document, generated from the router; our error shape replaces the generator's, each operation's
 * error responses are those its procedure can answer with (error-contract.ts: the implied codes and meta.errors,
 * mapped to statuses by the one table in packages/core), keyed operations declare the per-key rate limit (429
 * and the RateLimit fields), and the document lints clean with Redocly's recommended rules (redocly.yaml at the
 * repository root says which rules are changed and why).
 */
import { generateOpenApiDocument, type OpenAPIObject } from 'trpc-to-openapi';
import { z } from 'zod';
import { ErrorBody, EVENT_TYPES, eventDescription, eventSchemaName, type EventType } from '@boxes/schemas';
import { appRouter } from './router';
import { byStatus, operationErrorCodes } from './error-contract';
import { addLinePatterns } from './input-patterns';
import type { BoxesMeta, Meta } from './trpc';

/** Bumped whenever a route or a shape changes; platform.updated carries it. */
export const API_VERSION = '1.4.0';

const STATUS_TEXT: Record<string, string> = {
  '400': 'Invalid request: malformed JSON or a field that fails validation (error.fields names each one)',
  '401': 'No API key, or a revoked or unknown one (error.getting_started says how to get one)',
  '402': 'Payment required: not enough credit (error.top_up says how to add some), or a payment that did not go through',
  '403': 'Not allowed: the key lacks the scope or is restricted to other boxes, or the action is refused (error.code says why)',
  '404': 'Not found (also for resources of another account)',
  '409': 'Conflicts with the current state',
  '410': 'Expired',
  '413': 'The body is larger than 30 MiB',
  '415': 'The body is not JSON (Content-Type: application/json)',
  '431': 'The request line and headers are larger than 16 KiB',
  '429': 'Too many calls: wait error.retry_after_seconds (also in Retry-After) and try again',
  '500': 'Internal error (quote error.request_id)',
  '503': 'The database or queue cannot be reached right now; nothing was changed. Try again after Retry-After seconds (service_unavailable)',
};

/** Response fields of the per-key rate limit (draft-ietf-httpapi-ratelimit-headers), declared once. */
const HEADERS = {
  'RateLimit-Policy': {
    description:
      'The per-key quota policy, as a structured field: calls per window (q) and the window in seconds (w). Sent on every response to a call with a valid key while the limit is on (KEY_RATE_LIMIT_PER_MINUTE).',
    schema: { type: 'string' as const, example: '"default";q=600;w=60' },
  },
  RateLimit: {
    description: "The key's current window, as a structured field: calls left (r) and seconds until the window ends and the count starts again (t).",
    schema: { type: 'string' as const, example: '"default";r=599;t=42' },
  },
  'Retry-After': {
    description: 'Seconds to wait before calling again (the same as error.retry_after_seconds).',
    schema: { type: 'integer' as const, minimum: 1, example: 42 },
  },
};
// Fresh objects on every use: a shared one would become a YAML anchor and alias in /openapi.yaml.
const ref = (name: keyof typeof HEADERS) => ({ $ref: `#/components/headers/${name}` });
const rateFields = () => ({ 'RateLimit-Policy': ref('RateLimit-Policy'), RateLimit: ref('RateLimit') });

/** GET /events/stream, as OpenAPI describes it (the error responses are added with every other operation's). */
export const EVENT_STREAM_OPERATION = () => ({
  operationId: 'events-stream',
  summary: 'Follow the event stream (Server-Sent Events)',
  description:
    "The same events, filters and cursor as GET /events, pushed as they are appended, over this port (for agents that cannot receive a webhook). Each event is one SSE message: `id` is its seq, `event` its type, `data` the event as GET /events returns it. A comment line is sent when nothing happened for SSE_HEARTBEAT_MS (15 s) so proxies keep the connection open. Reconnecting with Last-Event-ID (or ?since=) resumes right after the last event seen: nothing missed, nothing repeated. Needs the receive scope; a box-restricted key sees its boxes' events. The SDK's streamEvents() is an async iterator over it that reconnects by itself.",
  tags: ['events'],
  security: [{ bearerAuth: [] }],
  'x-boxes-stream': true,
  parameters: [
    {
      name: 'since',
      in: 'query',
      required: false,
      description: 'Start after this cursor (next_cursor of GET /events) or seq; default: the beginning of the stream.',
      schema: { type: 'string', example: '42' },
    },
    {
      name: 'type',
      in: 'query',
      required: false,
      description: 'Only these event types (comma-separated), as on GET /events.',
      schema: { type: 'string', maxLength: 500, example: 'mail.received,mail.bounced' },
    },
    {
      name: 'Last-Event-ID',
      in: 'header',
      required: false,
      description: 'What a reconnecting EventSource sends: the id (seq) of the last event seen; wins over since.',
      schema: { type: 'string', example: '42' },
    },
  ],
  responses: {
    '200': {
      description: "An endless text/event-stream of the account's events (id: seq, event: type, data: the event JSON).",
      content: {
        'text/event-stream': {
          schema: { type: 'string', example: 'id: 43\nevent: mail.received\ndata: {"id":"evt_...","type":"mail.received","seq":43,...}\n\n' },
        },
      },
    },
  },
});

/** The headers every webhook delivery carries (docs/guide/push.md). */
const WEBHOOK_HEADERS = () => [
  {
    name: 'X-Boxes-Signature',
    in: 'header',
    required: true,
    description:
      't=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>" keyed by the signing secret> (two v1 values during a secret rotation). The stripe package verifies it; so does the SDK\'s verifyWebhook.',
    schema: { type: 'string', example: 't=1764144000,v1=5257a869e7...' },
  },
  {
    name: 'webhook-id',
    in: 'header',
    required: true,
    description: 'Standard Webhooks: the event id (dedupe on it: pushes are at-least-once).',
    schema: { type: 'string', example: 'evt_0a1b2c3d4e5f6g7h8j9k' },
  },
  {
    name: 'webhook-timestamp',
    in: 'header',
    required: true,
    description: 'Standard Webhooks: unix seconds of the signature.',
    schema: { type: 'string', example: '1764144000' },
  },
  {
    name: 'webhook-signature',
    in: 'header',
    required: true,
    description: 'Standard Webhooks: v1,<base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<raw body>"> keyed by the base64 part of the signing secret.',
    schema: { type: 'string', example: 'v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=' },
  },
];

/** One entry of the OpenAPI 3.1 webhooks section: the POST the account's callback URL receives for an event type. */
function webhookOperation(t: EventType) {
  return {
    post: {
      operationId: `webhook-${t.replace(/[._]/g, '-')}`,
      summary: `${t}: ${eventDescription(t)}`,
      description: `POSTed to the account's agent_callback_webhook (https) for each ${t} event, after the change it reports is committed; in order per account, at least once (dedupe on the event id), retried with backoff when the answer is not 2xx. The body is the event exactly as GET /events returns it, so its _chain hash can be checked.${t === 'signup.completed' ? ' This one delivery also carries api_key (the owner key) beside the event fields, once.' : ''} The same JSON is published over MQTT on boxes/accounts/<account_id>/events and streamed by GET /events/stream.`,
      tags: ['events'],
      security: [],
      parameters: WEBHOOK_HEADERS(),
      requestBody: { required: true, content: { 'application/json': { schema: { $ref: `#/components/schemas/${eventSchemaName(t)}` } } } },
      responses: {
        '200': {
          description:
            'Received (any 2xx). Anything else, or no answer within the webhook timeout (10 s unless the operator set WEBHOOK_TIMEOUT_MS), is retried.',
        },
      },
    },
  };
}

/**
 * A send that owner review may hold answers the message (200) or the Review (202): the generator puts the
 * union under 200; each answer goes under its own status here.
 */
function splitReviewAnswer(responses: Record<string, Record<string, unknown>>): void {
  const ok = responses['200'] as { content?: { 'application/json'?: { schema?: { anyOf?: Record<string, unknown>[] } } } } | undefined;
  const branches = ok?.content?.['application/json']?.schema?.anyOf;
  if (!ok || !branches) return;
  const isReview = (b: Record<string, unknown>) => b.$ref === '#/components/schemas/Review';
  const sent = branches.find((b) => !isReview(b));
  if (!sent || !branches.some(isReview)) return;
  ok.content!['application/json']!.schema = sent;
  responses['202'] = {
    description:
      "Held for the owner's review (the box's or the key's review policy): nothing was sent or charged. The owner was emailed a single-use link to a page showing the message with Approve and Deny; GET /reviews/{id} follows it (events review.approved, review.denied, review.expired). Approved, it goes out exactly as written through the send path, credit checked then.",
    content: { 'application/json': { schema: { $ref: '#/components/schemas/Review' } } },
  };
}

interface Operation {
  meta: BoxesMeta & Meta;
  /** Rules over the whole input (MESSAGE_BODY_RULE's anyOf), from its schema's meta: the generator rebuilds the body from its fields and drops them. */
  bodyRules: Record<string, unknown>;
}

/** Each REST operation's meta and input rules, by "METHOD /path". */
function operationsByRoute(): Map<string, Operation> {
  const procedures = (appRouter as unknown as { _def: { procedures: Record<string, { _def: { meta?: BoxesMeta & Meta; inputs: z.ZodType[] } }> } })._def
    .procedures;
  const out = new Map<string, Operation>();
  for (const p of Object.values(procedures)) {
    const meta = p._def.meta;
    if (!meta?.openapi) continue;
    const input = p._def.inputs[0];
    const inputMeta = (input && z.globalRegistry.get(input)) as Record<string, unknown> | undefined;
    const bodyRules = Object.fromEntries(['anyOf', 'oneOf'].filter((k) => inputMeta?.[k] !== undefined).map((k) => [k, structuredClone(inputMeta![k])]));
    out.set(`${meta.openapi.method} ${meta.openapi.path}`, { meta, bodyRules });
  }
  return out;
}

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
  // The generator's own error schemas (error.BAD_REQUEST, ...) are replaced by Error everywhere below.
  const schemas = Object.fromEntries(Object.entries(doc.components?.schemas ?? {}).filter(([name]) => !name.startsWith('error.')));
  doc.components = { ...doc.components, schemas: { ...schemas, Error: errorSchema }, headers: structuredClone(HEADERS) };
  // The event stream is served beside the router (apps/server/src/event-stream.ts: a response that never ends is
  // no procedure), so it is described here by hand; x-boxes-stream marks it for tools that expect an answer.
  doc.paths = { ...doc.paths, '/events/stream': { get: EVENT_STREAM_OPERATION() } } as typeof doc.paths;
  // Every operation needs a key unless it says otherwise (the two signup calls say security: []).
  doc.security = [{ bearerAuth: [] }];
  // What a callback URL receives: one webhook per event type of the catalogue, its body that type's schema.
  (doc as { webhooks?: Record<string, unknown> }).webhooks = Object.fromEntries(EVENT_TYPES.map((t) => [t, webhookOperation(t)]));
  const operations = operationsByRoute();
  // Components met from a request (DomainIntent, BulkMessage), to give their strings the single-line pattern too.
  const requestRefs = new Set<string>();
  const noteRef = (ref: string) => requestRefs.add(ref);
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    for (const [method, op] of Object.entries(item as Record<string, { responses?: Record<string, Record<string, unknown>>; security?: unknown[] }>)) {
      if (!op?.responses) continue;
      const keyed = Boolean(op.security?.length);
      if (!keyed) op.security = [];
      // The stream is keyed with the receive scope, like GET /events.
      const operation = operations.get(`${method.toUpperCase()} ${path}`);
      const meta: BoxesMeta | undefined = path === '/events/stream' ? { scope: 'receive' } : operation?.meta;
      const request = op as { parameters?: { schema?: unknown }[]; requestBody?: { content?: Record<string, { schema?: Record<string, unknown> }> } };
      for (const parameter of request.parameters ?? []) addLinePatterns(parameter.schema, noteRef);
      for (const media of Object.values(request.requestBody?.content ?? {})) {
        if (media.schema && operation) Object.assign(media.schema, operation.bodyRules);
        addLinePatterns(media.schema, noteRef);
      }
      for (const c of Object.keys(op.responses).filter((c) => c === 'default' || Number(c) >= 400)) delete op.responses[c];
      for (const [status, codes] of byStatus(operationErrorCodes({ method: method.toUpperCase(), keyed }, meta))) {
        const c = String(status);
        // A refused key (401) is not counted; any other answer to a keyed call carries the rate-limit fields.
        const headers = {
          ...(c === '429' || c === '503' ? { 'Retry-After': ref('Retry-After') } : {}),
          ...(keyed && c !== '401' && c !== '503' && c !== '431' ? rateFields() : {}),
        };
        op.responses[c] = {
          description: `${STATUS_TEXT[c] ?? 'Error'}. error.code: ${codes.join(', ')}`,
          ...(Object.keys(headers).length ? { headers } : {}),
          content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
          'x-error-codes': codes,
        };
      }
      if (operation?.meta.reviewable) splitReviewAnswer(op.responses);
      if (keyed && op.responses['200']) op.responses['200'].headers = { ...(op.responses['200'].headers as object | undefined), ...rateFields() };
      if (keyed && op.responses['202']) op.responses['202'].headers = rateFields();
    }
  }
  const components = doc.components?.schemas as Record<string, unknown> | undefined;
  const visited = new Set<string>();
  const visit = (ref: string) => {
    const name = /^#\/components\/schemas\/(.+)$/.exec(ref)?.[1];
    if (!name || visited.has(name)) return;
    visited.add(name);
    addLinePatterns(components?.[name], visit);
  };
  for (const ref of requestRefs) visit(ref);
  return doc;
}
