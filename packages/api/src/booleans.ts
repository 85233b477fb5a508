/**
 * Booleans in procedure inputs, on every face alike. Input booleans never coerce (no-coercion.ts pins them:
 * trpc-to-openapi would make "false", like any non-empty string, read as true); on REST the query-string words
 * "true" and "false" (the only way a GET or DELETE carries a boolean) become booleans before zod parses the
 * input; any other value is zod's to refuse.
 */
import type { z } from 'zod';

/** A zod schema's definition, as the pinning and the field walk read it. */
export type Def = { type: string; coerce?: boolean; [k: string]: unknown };
export const defOf = (s: z.ZodType): Def => (s as unknown as { _zod: { def: Def } })._zod.def;

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
