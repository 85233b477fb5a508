/**
 * The hash chain. An event's hash is
 *
 *   hash = hex(SHA-256(UTF-8(prev_hash + "\n" + JCS(body))))
 *
 * where prev_hash is the previous event's hash (64 zeros before the first event), JCS is RFC 8785 canonical
 * JSON, and body is the event exactly as the API shows it without its `_chain` member:
 * { id, seq, type, account_id, created_at, data }. docs/guide/audit.md documents the same bytes for outside verifiers.
 */
import canonicalize from 'canonicalize';
import { sha256Hex } from '../shared/crypto';

export const GENESIS_HASH = '0'.repeat(64);

export interface ChainBody {
  id: string;
  seq: number;
  type: string;
  account_id: string;
  created_at: string;
  data: unknown;
}

export function canonicalBody(body: ChainBody): string {
  const out = canonicalize(body);
  if (out === undefined) throw new Error('event body cannot be canonicalized');
  return out;
}

/** JCS of a string (a JSON string literal with RFC 8785's escaping, which is JSON.stringify's). */
export const canonicalString = (s: string): string => JSON.stringify(s);

/** JCS of an event's data. */
export function canonicalData(data: unknown): string {
  const out = canonicalize(data);
  if (out === undefined) throw new Error('event data cannot be canonicalized');
  return out;
}

export function chainHash(prevHash: string, body: ChainBody): string {
  return sha256Hex(`${prevHash}\n${canonicalBody(body)}`);
}
