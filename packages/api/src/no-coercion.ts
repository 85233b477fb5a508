/**
 * trpc-to-openapi's REST handler marks every number, boolean, bigint and date schema of a procedure's input as
 * coercing (it sets def.coerce on the shared schema objects, on the first REST call, for JSON bodies as much
 * as for query strings), so "" became 0 and "12" became 12 in a JSON body, and on tRPC and MCP too once the
 * schema had been touched. Coercion belongs to query strings, and the schemas of query inputs say so with
 * z.coerce; every other such schema is pinned here as not coercing, before the generator can mark it.
 */
import type { z } from 'zod';

import { defOf, type Def } from './booleans';
const COERCIBLE = new Set(['number', 'boolean', 'bigint', 'date']);

/** Definitions pinned already: pinning is idempotent (a schema shared by several inputs, or a second call). */
const pinned = new WeakSet<Def>();

const isSchema = (v: unknown): v is z.ZodType => typeof v === 'object' && v !== null && '_zod' in v;

function walk(v: unknown, seen: Set<object>): void {
  if (typeof v !== 'object' || v === null || seen.has(v)) return;
  seen.add(v);
  if (isSchema(v)) {
    const def = defOf(v);
    if (COERCIBLE.has(def.type) && !def.coerce && !pinned.has(def)) {
      Object.defineProperty(def, 'coerce', { get: () => false, set: () => {}, enumerable: true, configurable: false });
      pinned.add(def);
    }
    for (const value of Object.values(def)) walk(value, seen);
    return;
  }
  if (Array.isArray(v))
    v.forEach((x) => {
      walk(x, seen);
    });
  else if (Object.getPrototypeOf(v) === Object.prototype)
    Object.values(v).forEach((x) => {
      walk(x, seen);
    });
}

/** Pins every schema reachable from these inputs that does not coerce by its own declaration. */
export function pinCoercion(schemas: Iterable<unknown>): void {
  const seen = new Set<object>();
  for (const s of schemas) walk(s, seen);
}
