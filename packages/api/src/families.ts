/**
 * The router's REST operations grouped by family: one family per resource router (messages, boxes, credit, ...),
 * named after its key in the router in kebab-case. The discovery manifest and the served skill file list them
 * from here, so a route added to the router is announced there at once.
 */
import type { Scope } from '@boxes/schemas';
import { EVENT_STREAM_OPERATION } from './openapi';
import { appRouter } from './router';
import type { BoxesMeta } from './trpc';

export interface RouteOperation {
  method: string;
  /** Below the API base, as in the OpenAPI document: /messages/{id}. */
  path: string;
  summary: string;
  /** The scope a key needs; null: any key (or none, when not keyed). */
  scope: Scope | null;
  keyed: boolean;
}

export interface RouteFamily {
  name: string;
  operations: RouteOperation[];
}

interface ProcedureDef {
  _def: { meta?: BoxesMeta & { openapi?: { method: string; path: string; summary?: string; protect?: boolean } } };
}

const kebab = (s: string) => s.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

let cache: RouteFamily[] | null = null;

export function routeFamilies(): RouteFamily[] {
  if (cache) return cache;
  const procedures = (appRouter as unknown as { _def: { procedures: Record<string, ProcedureDef> } })._def.procedures;
  const families = new Map<string, RouteOperation[]>();
  for (const [path, p] of Object.entries(procedures)) {
    const o = p._def.meta?.openapi;
    if (!o) continue;
    const name = kebab(path.split('.')[0]!);
    const ops = families.get(name) ?? [];
    ops.push({ method: o.method, path: o.path, summary: o.summary ?? '', scope: p._def.meta?.scope ?? null, keyed: o.protect !== false });
    families.set(name, ops);
  }
  // Served beside the router (a response that never ends is no procedure), documented with the rest.
  families.get('events')?.push({ method: 'GET', path: '/events/stream', summary: EVENT_STREAM_OPERATION().summary, scope: 'receive', keyed: true });
  cache = [...families].map(([name, operations]) => ({ name, operations }));
  return cache;
}
