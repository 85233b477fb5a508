/**
 * The router as MCP tools: every keyed procedure becomes a tool with its input schema (JSON Schema from the
 * procedure's zod input) and its OpenAPI summary and description. A procedure added later is a tool at once.
 */
import { z } from 'zod';
import { addLinePatterns } from './input-patterns';
import type { Scope } from '@boxes/schemas';
import { appRouter } from './router';
import type { BoxesMeta } from './trpc';

interface ProcedureDef {
  _def: {
    type: 'query' | 'mutation' | 'subscription';
    meta?: BoxesMeta & { openapi?: { method: string; path: string; summary?: string; description?: string; protect?: boolean; deprecated?: boolean } };
    inputs: z.ZodType[];
  };
}

export interface ProcedureTool {
  /** Tool name: the procedure path with _ for . (messages_send). */
  name: string;
  procedure: string;
  type: 'query' | 'mutation';
  scope: Scope | null;
  description: string;
  inputSchema: { type: 'object'; properties?: Record<string, unknown>; required?: string[]; [k: string]: unknown };
  /**
   * How a call's arguments become the procedure's input: 'none' (no input), 'object' (the arguments as they are,
   * even when the schema declares no properties, as for free-form objects) or 'wrapped' (arguments.input).
   */
  input: 'none' | 'object' | 'wrapped';
  rest: { method: string; path: string };
}

function inputOf(inputs: z.ZodType[]): Pick<ProcedureTool, 'inputSchema' | 'input'> {
  const input = inputs[0];
  if (!input || input instanceof z.ZodVoid) return { inputSchema: { type: 'object', properties: {} }, input: 'none' };
  let schema = z.toJSONSchema(input, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
  delete schema.$schema;
  // An input with an id (.meta({ id })) converts to {$ref: '#/$defs/<id>', $defs}: the tool's schema is that
  // definition itself (the fields are passed flat, as over REST), keeping any other definitions it refers to.
  const rootRef = typeof schema.$ref === 'string' ? /^#\/\$defs\/([^/]+)$/.exec(schema.$ref)?.[1] : undefined;
  const defs = schema.$defs as Record<string, Record<string, unknown>> | undefined;
  if (rootRef && defs?.[rootRef]) {
    const { [rootRef]: root, ...others } = defs;
    const kept = JSON.stringify([root, others]).includes(`"#/$defs/${rootRef}"`) ? defs : others;
    schema = { ...root, ...(Object.keys(kept).length ? { $defs: kept } : {}) };
  }
  addLinePatterns(schema);
  if (schema.type !== 'object') return { inputSchema: { type: 'object', properties: { input: schema }, required: ['input'] }, input: 'wrapped' };
  return { inputSchema: schema as ProcedureTool['inputSchema'], input: 'object' };
}

let cache: ProcedureTool[] | null = null;

export function procedureTools(): ProcedureTool[] {
  if (cache) return cache;
  const procedures = (appRouter as unknown as { _def: { procedures: Record<string, ProcedureDef> } })._def.procedures;
  cache = Object.entries(procedures)
    .filter(([, p]) => p._def.meta?.openapi && p._def.meta.openapi.protect !== false && p._def.type !== 'subscription')
    .map(([path, p]) => {
      const meta = p._def.meta!;
      const o = meta.openapi!;
      return {
        name: path.replace(/\./g, '_'),
        procedure: path,
        type: p._def.type as 'query' | 'mutation',
        scope: meta.scope ?? null,
        description: [o.summary, o.description, `REST: ${o.method} /api/v1${o.path}${meta.scope ? `; needs the ${meta.scope} scope` : ''}.`].filter(Boolean).join('. ').replace(/\.\./g, '.'),
        ...inputOf(p._def.inputs),
        rest: { method: o.method, path: o.path },
      };
    });
  return cache;
}
