/**
 * String kinds, for the input guard of packages/api (input-guard.ts). Every string a procedure takes is a
 * single-line value (a name, label, address, header, id, URL, cursor) unless its schema is marked as text with
 * text(): only text may span lines and carry other control characters. NUL and unpaired surrogates are refused
 * in every string, and each string field declares its maximum length (the OpenAPI document shows it as
 * maxLength; a test fails when an input string has none).
 */
import { z } from 'zod';

/** Maximum lengths by field kind (docs/guide/api.md, "Input rules"). */
export const MAX_LENGTH = {
  /** Resource ids in paths and bodies (box_..., key_..., msg_...). */
  id: 40,
  /** Local parts and full addresses (RFC 5321: 64 + 1 + 255, with a display name). */
  address: 320,
  /** Domain names (RFC 1035). */
  domain: 253,
  /** Labels, titles, subjects of support questions. */
  label: 100,
  title: 200,
  /** The Subject header (RFC 5322 line limit). */
  subject: 998,
  /** Header names and values. */
  headerName: 100,
  headerValue: 2000,
  /** URLs. */
  url: 2048,
  /** ISO 8601 times and cursors. */
  timestamp: 64,
  cursor: 200,
  /** Message bodies (text, html). */
  body: 5_000_000,
  /** Free-form JSON objects (context, feedback) as serialized JSON, and their nesting depth. */
  freeFormBytes: 64 * 1024,
  freeFormDepth: 32,
} as const;

/**
 * The input guard's rules as JSON Schema patterns, so the OpenAPI document and the MCP tool schemas say what the
 * server refuses: a single-line value has no C0 control character and no DEL; text has no NUL.
 */
export const LINE_PATTERN = '^[^\\u0000-\\u001F\\u007F]*$';
export const TEXT_PATTERN = '^[^\\u0000]*$';

/**
 * A key refused in objects given as input: JSON.parse keeps "__proto__" as an ordinary key, but an object built key
 * by key (zod's records and catch-alls, any `obj[key] = value`) takes the assignment for its prototype, so the
 * member would vanish without a word, or its value become what the object inherits. Inputs refuse it by name
 * instead, at any depth (packages/api's input guard; MCP tool arguments; the SMTP submission's header names).
 */
export const PROTO_KEY = '__proto__';
export const PROTO_KEY_REFUSED = 'the key "__proto__" is not accepted (JavaScript drops it from objects built key by key)';

/** Schemas whose strings may span lines (bodies); see text(). */
const textRegistry = z.registry<{ text: true }>();

/**
 * Marks a string schema as text (a body): the input guard lets it carry line breaks and other control
 * characters, never NUL. Apply it after the checks (.trim(), .min(), .max() make new schemas) and before
 * .meta(), .optional() or .nullable(), which keep the mark.
 */
export function text<T extends z.ZodString>(schema: T): T {
  textRegistry.add(schema, { text: true });
  // Its JSON Schema says no NUL: as its pattern, or beside a pattern of its own (base64), which the meta would
  // otherwise replace.
  const ownPattern = (schema._zod.def.checks ?? []).some((c) => (c._zod.def as { pattern?: RegExp }).pattern);
  z.globalRegistry.add(schema, { ...z.globalRegistry.get(schema), ...(ownPattern ? { allOf: [{ pattern: TEXT_PATTERN }] } : { pattern: TEXT_PATTERN }) });
  return schema;
}

/** Whether a string schema (or the schema it was derived from by .meta() or .describe()) was marked with text(). */
export function isText(schema: z.ZodType): boolean {
  for (let s: z.ZodType | undefined = schema; s; s = (s._zod as { parent?: z.ZodType }).parent) {
    if (textRegistry.has(s)) return true;
  }
  return false;
}
