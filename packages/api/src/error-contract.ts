/**
 * Which errors an operation can answer with. Every call can meet some of them whatever it does (the REST face's
 * checks, the key check, an unreachable database); the rest are the AppError codes its core functions throw,
 * which each procedure declares in meta.errors (error-codes.test.ts follows the calls from each resolver into
 * packages/core and fails when a declaration misses a code they throw, or names one they cannot). The OpenAPI
 * responses are generated from these codes through the one table in packages/core, so they cannot drift.
 */
import { ERROR_CODES, type ErrorCode } from '@boxes/core';
import type { BoxesMeta } from './trpc';

/** The codes a call can meet before or around its procedure, from what it is (method, key, scope). */
export function impliedErrorCodes(op: { method: string; keyed: boolean; scope?: boolean; accountWide?: boolean }): ErrorCode[] {
  const codes: ErrorCode[] = ['validation_error', 'headers_too_large', 'internal', 'service_unavailable'];
  // POST, PUT and PATCH read a JSON body; DELETE reads one too (its members become query parameters).
  if (['POST', 'PUT', 'PATCH', 'DELETE'].includes(op.method)) codes.push('invalid_json');
  if (['POST', 'PUT', 'PATCH'].includes(op.method)) codes.push('payload_too_large', 'unsupported_media_type');
  if (op.keyed) codes.push('unauthorized', 'key_expired', 'rate_limited');
  if (op.keyed && op.scope) codes.push('insufficient_scope');
  if (op.keyed && op.accountWide) codes.push('box_restricted_key');
  return codes;
}

/** Every code an operation can answer with: the implied ones and its procedure's own, each once. */
export function operationErrorCodes(op: { method: string; keyed: boolean }, meta: BoxesMeta | undefined): ErrorCode[] {
  const implied = impliedErrorCodes({ ...op, scope: Boolean(meta?.scope), accountWide: Boolean(meta?.accountWide) });
  return [...new Set([...implied, ...(meta?.errors ?? [])])];
}

/** The codes grouped by HTTP status, as OpenAPI lists responses. */
export function byStatus(codes: ErrorCode[]): Map<number, ErrorCode[]> {
  const out = new Map<number, ErrorCode[]>();
  for (const code of codes) {
    const status = ERROR_CODES[code].status;
    out.set(status, [...(out.get(status) ?? []), code].sort());
  }
  return new Map([...out].sort(([a], [b]) => a - b));
}
