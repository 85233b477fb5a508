/**
 * Webhook endpoints (POST/GET /webhook-endpoints, GET/PATCH/DELETE /webhook-endpoints/{id}): several push
 * targets per account beside agent_callback_webhook, each with its own URL (the same address checks), event type
 * and box filters, signing secret (shown at creation and rotation only), custom headers (write-only, sealed at
 * rest) and ordered stream. A new or re-enabled endpoint starts at the account's chain head: it receives what
 * happens from then on. Delivery is endpoint-dispatch.ts.
 *
 * Box-restricted keys: they may create endpoints only with a box filter inside their boxes, and see and change
 * only endpoints whose box filter lies inside their boxes (others are 404 to them, as other accounts' are).
 */
import { exec, k, rows, sql } from '@boxes/db';
import type { WebhookEndpoint } from '@boxes/db';
import { EVENT_TYPES, isEventType } from '@boxes/schemas';
import type { BoxScope } from '../boxes/boxes';
import type { Services } from '../shared/context';
import { open, seal } from '../shared/crypto';
import { AppError } from '../shared/errors';
import { newId } from '../shared/ids';
import { generateWebhookSecret, ROTATION_OVERLAP_MS, type SigningSecrets } from './secret';
import { checkCallbackUrl } from './url-guard';

/** Custom headers per endpoint, the longest name and value, and the bytes of all names and values together. */
export const MAX_ENDPOINT_HEADERS = 10;
export const MAX_HEADER_NAME = 64;
export const MAX_HEADER_VALUE = 1024;
export const MAX_HEADERS_BYTES = 4096;

/**
 * Header names an endpoint may not set: hop-by-hop and framing headers (the connection is ours), the content
 * headers of the body we send, and every signature header (a receiver must be able to trust them).
 */
const REFUSED_HEADERS = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'trailers',
  'transfer-encoding',
  'upgrade',
  'host',
  'content-length',
  'content-type',
  'content-encoding',
  'expect',
  'user-agent',
  'x-boxes-signature',
]);
const REFUSED_PREFIXES = ['webhook-', 'x-boxes-', 'proxy-', ':'];
/** RFC 9110 token characters. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** Visible ASCII, space and tab: no CR, LF, NUL or other control characters. */
const FIELD_VALUE = /^[\t\x20-\x7e]*$/;

const invalid = (field: string, message: string) => new AppError('validation_error', `${field}: ${message}`, { fields: [{ path: field, message }] });

/** The event type filter, checked against the catalogue: exact types and prefixes ending in ".*". */
export function checkEventTypes(types: readonly string[]): string[] {
  const out: string[] = [];
  for (const raw of types) {
    const t = raw.trim();
    if (t.endsWith('.*')) {
      const prefix = t.slice(0, -1);
      if (prefix.length < 2 || !EVENT_TYPES.some((e) => e.startsWith(prefix))) {
        throw invalid('event_types', `${t} matches no event type (GET /events lists the types)`);
      }
    } else if (!isEventType(t)) {
      throw invalid('event_types', `unknown event type ${JSON.stringify(t)} (exact types, or prefixes such as message.*)`);
    }
    if (!out.includes(t)) out.push(t);
  }
  return out;
}

/** The custom headers, checked: lower-cased names and their values (sealed by the caller). */
export function checkHeaders(headers: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  const entries = Object.entries(headers);
  if (entries.length > MAX_ENDPOINT_HEADERS) throw invalid('headers', `at most ${MAX_ENDPOINT_HEADERS} custom headers`);
  let bytes = 0;
  for (const [rawName, value] of entries) {
    const name = rawName.toLowerCase();
    if (!name || name.length > MAX_HEADER_NAME || !TOKEN.test(name))
      throw invalid('headers', `${JSON.stringify(rawName)} is not a header name (RFC 9110 token, 1 to ${MAX_HEADER_NAME} characters)`);
    if (REFUSED_HEADERS.has(name) || REFUSED_PREFIXES.some((p) => name.startsWith(p))) {
      throw invalid('headers', `${name} cannot be set (hop-by-hop, content and signature headers are the service's own)`);
    }
    if (Object.hasOwn(out, name)) throw invalid('headers', `${name} is given twice`);
    if (typeof value !== 'string' || value.length > MAX_HEADER_VALUE || !FIELD_VALUE.test(value)) {
      throw invalid('headers', `the value of ${name} must be at most ${MAX_HEADER_VALUE} characters of visible ASCII, spaces and tabs (no CR, LF or NUL)`);
    }
    bytes += Buffer.byteLength(name) + Buffer.byteLength(value);
    out[name] = value.trim();
  }
  if (bytes > MAX_HEADERS_BYTES) throw invalid('headers', `custom headers take at most ${MAX_HEADERS_BYTES} bytes in all`);
  return out;
}

/** The box filter: boxes of the account, inside the key's restriction (which then requires one). */
async function checkBoxes(svc: Services, accountId: string, scope: BoxScope, ids: readonly string[] | undefined): Promise<string[]> {
  const boxIds = [...new Set(ids ?? [])];
  if (scope && !boxIds.length) {
    throw new AppError(
      'box_restricted_key',
      'This key is restricted to some boxes: name them in box_ids (an endpoint without a box filter receives every event)',
    );
  }
  if (!boxIds.length) return [];
  const found = await svc.db.box.findMany({ where: { accountId, id: { in: boxIds } }, select: { id: true } });
  for (const id of boxIds) {
    if (!found.some((b) => b.id === id) || (scope && !scope.includes(id))) throw invalid('box_ids', `box ${id} not found`);
  }
  return boxIds;
}

const visible = (scope: BoxScope, e: Pick<WebhookEndpoint, 'boxIds'>) => scope === null || (e.boxIds.length > 0 && e.boxIds.every((b) => scope.includes(b)));

export function presentEndpoint(e: WebhookEndpoint) {
  const live = e.secretPrevUntil && e.secretPrevUntil.getTime() > Date.now();
  return {
    id: e.id,
    url: e.url,
    description: e.description,
    event_types: e.eventTypes,
    box_ids: e.boxIds,
    enabled: e.enabled,
    header_names: e.headerNames,
    previous_secret_valid_until: live ? e.secretPrevUntil!.toISOString() : null,
    created_at: e.createdAt.toISOString(),
    updated_at: e.updatedAt.toISOString(),
  };
}
export type WebhookEndpointView = ReturnType<typeof presentEndpoint>;

/** The endpoint's live signing secrets. */
export function endpointSecrets(svc: Services, e: { secretEnc: string; secretPrevEnc: string | null; secretPrevUntil: Date | null }): SigningSecrets {
  const live = e.secretPrevUntil && e.secretPrevUntil.getTime() > Date.now();
  return {
    current: open(svc.secretKey, e.secretEnc).toString('utf8'),
    previous: live && e.secretPrevEnc ? open(svc.secretKey, e.secretPrevEnc).toString('utf8') : null,
    previousUntil: live ? e.secretPrevUntil : null,
  };
}

/** The endpoint's custom headers, opened. */
export function endpointHeaders(svc: Services, headersEnc: string | null): Record<string, string> {
  return headersEnc ? (JSON.parse(open(svc.secretKey, headersEnc).toString('utf8')) as Record<string, string>) : {};
}

/** One endpoint of the account that the key may see, or 404. */
export async function findEndpoint(svc: Services, input: { accountId: string; scope: BoxScope; id: string }): Promise<WebhookEndpoint> {
  const e = await svc.db.webhookEndpoint.findFirst({ where: { id: input.id, accountId: input.accountId } });
  if (!e || !visible(input.scope, e)) throw new AppError('not_found', `webhook endpoint ${input.id} not found`);
  return e;
}

export async function createEndpoint(
  svc: Services,
  input: {
    accountId: string;
    scope: BoxScope;
    url: string;
    eventTypes?: string[] | undefined;
    boxIds?: string[] | undefined;
    headers?: Record<string, string> | undefined;
    enabled?: boolean | undefined;
    description?: string | null | undefined;
  },
): Promise<WebhookEndpointView & { signing_secret: string }> {
  const url = await checkCallbackUrl(input.url, { allowPrivate: svc.config.webhook.allowPrivate, field: 'url' });
  const eventTypes = checkEventTypes(input.eventTypes ?? []);
  const boxIds = await checkBoxes(svc, input.accountId, input.scope, input.boxIds);
  const headers = checkHeaders(input.headers ?? {});
  const secret = generateWebhookSecret();
  const max = svc.config.webhook.maxEndpoints;
  const row = await svc.db.$transaction(async (tx) => {
    // Serialises endpoint creation per account, so the cap holds under concurrent calls.
    await rows(tx, sql<{ locked: string }>`SELECT pg_advisory_xact_lock(hashtextextended(${`webhook-endpoints:${input.accountId}`}, 0))::text AS locked`);
    const count = await tx.webhookEndpoint.count({ where: { accountId: input.accountId } });
    if (count >= max) {
      throw new AppError('conflict', `An account has at most ${max} webhook endpoints; delete one first`, { limit: max });
    }
    const head = await tx.account.findUniqueOrThrow({ where: { id: input.accountId }, select: { chainSeq: true } });
    return tx.webhookEndpoint.create({
      data: {
        id: newId('whe'),
        accountId: input.accountId,
        url,
        description: input.description?.trim() || null,
        eventTypes,
        boxIds,
        enabled: input.enabled ?? true,
        secretEnc: seal(svc.secretKey, secret),
        headersEnc: Object.keys(headers).length ? seal(svc.secretKey, JSON.stringify(headers)) : null,
        headerNames: Object.keys(headers),
        cursor: head.chainSeq,
      },
    });
  });
  return { ...presentEndpoint(row), signing_secret: secret };
}

export async function listEndpoints(svc: Services, input: { accountId: string; scope: BoxScope }): Promise<WebhookEndpointView[]> {
  const all = await svc.db.webhookEndpoint.findMany({ where: { accountId: input.accountId }, orderBy: [{ createdAt: 'asc' }, { id: 'asc' }] });
  return all.filter((e) => visible(input.scope, e)).map(presentEndpoint);
}

export async function updateEndpoint(
  svc: Services,
  input: {
    accountId: string;
    scope: BoxScope;
    id: string;
    url?: string | undefined;
    eventTypes?: string[] | undefined;
    boxIds?: string[] | undefined;
    headers?: Record<string, string> | null | undefined;
    enabled?: boolean | undefined;
    description?: string | null | undefined;
  },
): Promise<WebhookEndpointView> {
  const current = await findEndpoint(svc, input);
  const url = input.url === undefined ? undefined : await checkCallbackUrl(input.url, { allowPrivate: svc.config.webhook.allowPrivate, field: 'url' });
  const eventTypes = input.eventTypes === undefined ? undefined : checkEventTypes(input.eventTypes);
  const boxIds = input.boxIds === undefined ? undefined : await checkBoxes(svc, input.accountId, input.scope, input.boxIds);
  const headers = input.headers === undefined ? undefined : checkHeaders(input.headers ?? {});
  const row = await svc.db.$transaction(async (tx) => {
    const restart = (input.enabled === true && !current.enabled) || (url !== undefined && url !== current.url);
    // Re-enabled or moved: the stream starts again at the chain head, with no attempt pending.
    const head = restart ? await tx.account.findUniqueOrThrow({ where: { id: input.accountId }, select: { chainSeq: true } }) : null;
    return tx.webhookEndpoint.update({
      where: { id: current.id },
      data: {
        ...(url !== undefined ? { url } : {}),
        ...(eventTypes !== undefined ? { eventTypes } : {}),
        ...(boxIds !== undefined ? { boxIds } : {}),
        ...(headers !== undefined
          ? { headersEnc: Object.keys(headers).length ? seal(svc.secretKey, JSON.stringify(headers)) : null, headerNames: Object.keys(headers) }
          : {}),
        ...(input.enabled !== undefined ? { enabled: input.enabled } : {}),
        ...(input.description !== undefined ? { description: input.description?.trim() || null } : {}),
        ...(head ? { cursor: head.chainSeq, attempts: 0, nextAttemptAt: null } : {}),
      },
    });
  });
  return presentEndpoint(row);
}

export async function deleteEndpoint(svc: Services, input: { accountId: string; scope: BoxScope; id: string }) {
  const e = await findEndpoint(svc, input);
  await exec(svc.db, k.deleteFrom('webhook_endpoints').where('id', '=', e.id).where('account_id', '=', input.accountId));
  return { id: e.id, deleted: true as const };
}

/** A new secret; the previous one keeps signing (beside it) for 24 hours. */
export async function rotateEndpointSecret(svc: Services, input: { accountId: string; scope: BoxScope; id: string }) {
  const e = await findEndpoint(svc, input);
  const next = generateWebhookSecret();
  const until = new Date(Date.now() + ROTATION_OVERLAP_MS);
  await svc.db.webhookEndpoint.update({
    where: { id: e.id },
    data: { secretEnc: seal(svc.secretKey, next), secretPrevEnc: e.secretEnc, secretPrevUntil: until },
  });
  return { id: e.id, signing_secret: next, previous_secret_valid_until: until.toISOString() };
}
