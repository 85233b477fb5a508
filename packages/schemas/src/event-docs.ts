/**
 * docs/events.md, written from the event catalogue: each type with its description and the fields of its data.
 * `pnpm docs:events` writes the file; a test fails when the file and the catalogue disagree.
 */
import type { z } from 'zod';
import { EVENT_CATALOGUE, EVENT_TYPES, eventDescription } from './event-catalogue';

interface Def {
  type: string;
  innerType?: z.ZodType;
  shape?: Record<string, z.ZodType>;
  element?: z.ZodType;
  options?: z.ZodType[];
  values?: unknown[];
  entries?: Record<string, unknown>;
  valueType?: z.ZodType;
  in?: z.ZodType;
}

const defOf = (s: z.ZodType): Def => (s as unknown as { _zod: { def: Def } })._zod.def;
const descriptionOf = (s: z.ZodType): string => (s.meta() as { description?: string } | undefined)?.description ?? '';

/** A short type name: string, integer, "a" or "b", array of string, object, ... (nullable and optional apart). */
function typeName(s: z.ZodType): string {
  const def = defOf(s);
  switch (def.type) {
    case 'optional':
    case 'nullable':
    case 'default':
    case 'readonly':
      return typeName(def.innerType!);
    case 'pipe':
      return typeName(def.in!);
    case 'number':
      return (s as unknown as { isInt?: boolean }).isInt ? 'integer' : 'number';
    case 'literal':
      return def.values!.map((v) => JSON.stringify(v)).join(' or ');
    case 'enum':
      return Object.values(def.entries!)
        .map((v) => JSON.stringify(v))
        .join(', ');
    case 'array':
      return `array of ${typeName(def.element!)}`;
    case 'record':
      return 'object';
    case 'union':
      return def.options!.map(typeName).join(' or ');
    default:
      return def.type;
  }
}

/** Unwraps optional/nullable and says which it was. */
function unwrap(s: z.ZodType): { inner: z.ZodType; optional: boolean; nullable: boolean } {
  let inner = s;
  let optional = false;
  let nullable = false;
  for (;;) {
    const def = defOf(inner);
    if (def.type === 'optional') optional = true;
    else if (def.type === 'nullable') nullable = true;
    else if (def.type !== 'default' && def.type !== 'readonly') return { inner, optional, nullable };
    inner = def.innerType!;
  }
}

/** A table cell: pipes escaped, one line, and angle brackets (agent@<domain>) as entities so markdown does not read them as HTML. */
const cell = (t: string) => t.replace(/\|/g, '\\|').replace(/\n/g, ' ').replace(/</g, '&lt;').replace(/>/g, '&gt;');

function rows(shape: Record<string, z.ZodType>, prefix: string): string[] {
  return Object.entries(shape).flatMap(([name, field]) => {
    const { inner, optional, nullable } = unwrap(field);
    const path = `${prefix}${name}`;
    const def = defOf(inner);
    const type = `${def.type === 'object' ? 'object' : typeName(inner)}${nullable ? ' or null' : ''}`;
    const description = descriptionOf(field) || descriptionOf(inner);
    const row = `| \`${path}\` | ${cell(type)} | ${optional ? 'no' : 'yes'} | ${cell(description)} |`;
    if (def.type === 'object') return [row, ...rows(def.shape!, `${path}.`)];
    if (def.type === 'array' && defOf(defOf(inner).element!).type === 'object') return [row, ...rows(defOf(def.element!).shape!, `${path}[].`)];
    return [row];
  });
}

export function renderEventDocs(): string {
  const out = [
    '# Event types',
    '',
    '<!-- Written by `pnpm docs:events` from packages/schemas/src/event-catalogue.ts; a test keeps the two in step. -->',
    '',
    'Every event of an account stream has `id`, `seq`, `type`, `account_id`, `created_at`, `data` and `_chain` (see',
    '[Verifying the event log](guide/audit.md#verifying-the-event-log)). The same JSON is returned by `GET /events`, streamed by `GET /events/stream`, POSTed to the',
    'callback webhook and published over MQTT. `data` depends on `type`, as listed here; the OpenAPI document has one schema per',
    'type (`components.schemas.Event` is their union, and its `webhooks` section names each POST), and the SDK narrows on',
    '`type`. Fields marked "no" under "always" may be absent; readers should ignore fields they do not know.',
    '',
    `${EVENT_TYPES.length} types:`,
    '',
    ...EVENT_TYPES.map((t) => `- [\`${t}\`](#${t.replace(/\./g, '')}): ${eventDescription(t)}`),
  ];
  for (const t of EVENT_TYPES) {
    out.push('', `## ${t}`, '', eventDescription(t), '', '| field | type | always | description |', '|---|---|---|---|');
    out.push(...rows(defOf(EVENT_CATALOGUE[t] as z.ZodType).shape!, ''));
  }
  return `${out.join('\n')}\n`;
}
