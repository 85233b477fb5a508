/**
 * Booleans in procedure inputs, on every face alike. Before each REST call trpc-to-openapi marks each boolean of
 * the input schema as coercing (Boolean(value)), so "false", like any other non-empty string, would read as
 * true; and the mark stays on the shared schema, so tRPC and MCP would then take strings too. Every input
 * boolean is pinned as non-coercing when the router is built, and on REST the query-string words "true" and
 * "false" (the only way a GET or DELETE carries a boolean) become booleans before zod parses the input; any
 * other value is zod's to refuse.
 */
import type { z } from 'zod';

type Def = { type: string; coerce?: boolean; [k: string]: unknown };
const defOf = (s: z.ZodType): Def => (s as unknown as { _zod: { def: Def } })._zod.def;

/** Every schema reachable from this one, each once (wrappers, objects, arrays, unions, pipes). */
function reachable(root: z.ZodType): Def[] {
  const seen = new Set<Def>();
  const visit = (s: unknown) => {
    if (!s || typeof s !== 'object' || !('_zod' in s)) return;
    const d = defOf(s as z.ZodType);
    if (seen.has(d)) return;
    seen.add(d);
    for (const key of ['innerType', 'in', 'out', 'element', 'left', 'right', 'keyType', 'valueType', 'catchall']) visit(d[key]);
    for (const option of (d.options as unknown[] | undefined) ?? []) visit(option);
    for (const item of (d.items as unknown[] | undefined) ?? []) visit(item);
    for (const field of Object.values((d.shape as Record<string, unknown> | undefined) ?? {})) visit(field);
  };
  visit(root);
  return [...seen];
}

const pinned = new WeakSet<Def>();

/**
 * Makes every boolean of an input schema refuse coercion for good (assignments to coerce are ignored). A schema
 * shared by several inputs is pinned once; a boolean declared coercing (z.coerce.boolean()) is left as it is.
 */
export function pinBooleans(input: z.ZodType | undefined): void {
  if (!input) return;
  for (const d of reachable(input)) {
    if (d.type !== 'boolean' || d.coerce || pinned.has(d)) continue;
    Object.defineProperty(d, 'coerce', { get: () => false, set: () => undefined, configurable: false });
    pinned.add(d);
  }
}

/** The top-level fields of an object input that take a boolean (through optional, nullable and default). */
export function booleanFields(input: z.ZodType | undefined): string[] {
  if (!input) return [];
  let s = defOf(input);
  while (['optional', 'nullable', 'default', 'prefault', 'pipe'].includes(s.type)) s = defOf((s.innerType ?? s.in) as z.ZodType);
  if (s.type !== 'object') return [];
  return Object.entries(s.shape as Record<string, z.ZodType>)
    .filter(([, field]) => {
      let d = defOf(field);
      while (['optional', 'nullable', 'default', 'prefault'].includes(d.type)) d = defOf(d.innerType as z.ZodType);
      return d.type === 'boolean';
    })
    .map(([name]) => name);
}

/** A query-string input with its boolean fields' "true" and "false" turned into booleans. */
export function queryBooleans(input: unknown, fields: string[]): unknown {
  if (!fields.length || input === null || typeof input !== 'object' || Array.isArray(input)) return input;
  const out: Record<string, unknown> = { ...(input as Record<string, unknown>) };
  for (const f of fields) {
    if (out[f] === 'true') out[f] = true;
    else if (out[f] === 'false') out[f] = false;
  }
  return out;
}
