/**
 * The input guard's single-line rule (input-guard.ts) written into JSON Schema: every string of an input gets
 * LINE_PATTERN (no control character, no DEL) as its pattern, or beside a pattern of its own (allOf), so a
 * generated client refuses what the server refuses. Text fields carry TEXT_PATTERN from text() (as pattern, or
 * in allOf beside their own) and are left as they are, as are enums and constants.
 */
import { LINE_PATTERN, TEXT_PATTERN } from '@boxes/schemas';

type Node = Record<string, unknown>;
const isNode = (v: unknown): v is Node => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Adds the pattern in place, through nested schemas; calls onRef with each $ref met (components to visit too). */
export function addLinePatterns(schema: unknown, onRef: (ref: string) => void = () => {}): void {
  if (!isNode(schema)) return;
  if (typeof schema.$ref === 'string') onRef(schema.$ref);
  const types = Array.isArray(schema.type) ? schema.type : [schema.type];
  const text = schema.pattern === TEXT_PATTERN || (Array.isArray(schema.allOf) && schema.allOf.some((s) => isNode(s) && s.pattern === TEXT_PATTERN));
  if (types.includes('string') && !text && schema.enum === undefined && schema.const === undefined) {
    if (schema.pattern === undefined) schema.pattern = LINE_PATTERN;
    else if (schema.pattern !== LINE_PATTERN) schema.allOf = [...(Array.isArray(schema.allOf) ? schema.allOf : []), { pattern: LINE_PATTERN }];
  }
  for (const key of ['items', 'additionalProperties']) addLinePatterns(schema[key], onRef);
  for (const key of ['properties', '$defs']) if (isNode(schema[key])) for (const v of Object.values(schema[key])) addLinePatterns(v, onRef);
  for (const key of ['anyOf', 'oneOf', 'allOf', 'prefixItems']) if (Array.isArray(schema[key])) for (const v of schema[key]) addLinePatterns(v, onRef);
}
