/**
 * The input guard: before a procedure's zod schema parses its input, on every face (REST, tRPC, MCP), every
 * string in the input is checked against what the store can hold and what a caller can mean. The walk follows
 * the procedure's input schema, so the rule for each string comes from the kind of field it fills:
 *
 * - everywhere (values and object keys, at any depth, free-form JSON included): no NUL (PostgreSQL refuses it
 *   in text and jsonb) and no unpaired UTF-16 surrogate (not Unicode: it cannot be stored as UTF-8);
 * - single-line fields (the default: names, labels, addresses, header names and values, ids, URLs, cursors):
 *   no C0 control character (U+0001 to U+001F, line breaks and tabs included) and no DEL;
 * - text fields (marked with text() in @boxes/schemas: bodies, signatures, descriptions): anything but NUL;
 * - free-form JSON (context, feedback): at most MAX_LENGTH.freeFormBytes of JSON, nested at most
 *   MAX_LENGTH.freeFormDepth deep;
 * - keys a caller chooses (custom header names, free-form JSON at any depth, the members an open object takes):
 *   not "__proto__". JSON.parse keeps it as a key like any other, but zod drops it from a record or a catch-all
 *   without a word (assigning it sets the built object's prototype), so a header or a context member of that name
 *   would vanish; it is refused by name instead (PROTO_KEY in @boxes/schemas).
 *
 * Lengths of declared fields are the schemas' own .max() (zod checks them right after). The answer is 400
 * validation_error with `fields` naming each offending field, as zod's own errors do.
 */
import type { z } from 'zod';
import { isText, MAX_LENGTH, PROTO_KEY, PROTO_KEY_REFUSED } from '@boxes/schemas';
import { booleanFields } from './booleans';

export interface GuardIssue {
  path: string;
  message: string;
}

type Kind = 'line' | 'text' | 'free';

const MAX_ISSUES = 20;

function hex(code: number): string {
  return `U+${code.toString(16).toUpperCase().padStart(4, '0')}`;
}

/** What is wrong with a string of this kind, or null. */
export function stringProblem(s: string, kind: Kind): string | null {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0) return `must not contain NUL (U+0000), found at position ${i}`;
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = s.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        i++;
        continue;
      }
      return `must be valid Unicode: an unpaired surrogate (${hex(c)}) at position ${i}`;
    }
    if (c >= 0xdc00 && c <= 0xdfff) return `must be valid Unicode: an unpaired surrogate (${hex(c)}) at position ${i}`;
    if (kind === 'line' && (c < 0x20 || c === 0x7f)) {
      return `must not contain control characters (${hex(c)} at position ${i}); only bodies may span lines`;
    }
  }
  return null;
}

/** A path segment as shown in `fields` (a key with control characters is shown escaped). */
function segment(key: string | number): string {
  return String(key).replace(/[\u0000-\u001f\u007f\ud800-\udfff]/g, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

function join(path: string, key: string | number): string {
  return path ? `${path}.${segment(key)}` : segment(key);
}

type Def = { type: string; [k: string]: unknown };
const defOf = (s: z.ZodType): Def => (s as unknown as { _zod: { def: Def } })._zod.def;

/** Strips wrappers that do not change what a value looks like (optional, nullable, default, pipe, ...). */
function unwrap(schema: z.ZodType): z.ZodType {
  let s = schema;
  for (let i = 0; i < 20; i++) {
    const d = defOf(s);
    if (['optional', 'nullable', 'default', 'prefault', 'catch', 'readonly', 'nonoptional', 'success'].includes(d.type)) s = d.innerType as z.ZodType;
    else if (d.type === 'pipe') s = d.in as z.ZodType;
    else if (d.type === 'lazy') s = (d.getter as () => z.ZodType)();
    else return s;
  }
  return s;
}

function jsonType(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v;
}

const SCHEMA_TYPES: Record<string, string[]> = {
  string: ['string'],
  object: ['object'],
  record: ['object'],
  array: ['array'],
  tuple: ['array'],
  unknown: ['string', 'object', 'array', 'number', 'boolean', 'null'],
  any: ['string', 'object', 'array', 'number', 'boolean', 'null'],
};

class Walker {
  readonly issues: GuardIssue[] = [];

  add(path: string, message: string): void {
    if (this.issues.length < MAX_ISSUES) this.issues.push({ path: path || '(body)', message });
  }

  /** Whether the key is "__proto__", refused (recorded as an issue at its path; see the rules above). */
  refusedKey(path: string, key: string): boolean {
    if (key !== PROTO_KEY) return false;
    this.add(join(path, key), PROTO_KEY_REFUSED);
    return true;
  }

  checkString(path: string, s: string, kind: Kind): void {
    const problem = stringProblem(s, kind);
    if (problem) this.add(path, problem);
  }

  /** Free-form JSON: NUL and surrogates only, keys included; bounded depth (walked before anything recurses on it). */
  free(path: string, value: unknown, depth: number): void {
    if (this.issues.length >= MAX_ISSUES) return;
    if (depth > MAX_LENGTH.freeFormDepth) {
      this.add(path, `nested too deeply (at most ${MAX_LENGTH.freeFormDepth} levels of free-form JSON)`);
      return;
    }
    if (typeof value === 'string') this.checkString(path, value, 'free');
    else if (Array.isArray(value))
      value.forEach((v, i) => {
        this.free(join(path, i), v, depth + 1);
      });
    else if (value !== null && typeof value === 'object') {
      for (const [k, v] of Object.entries(value)) {
        if (this.refusedKey(path, k)) continue;
        const problem = stringProblem(k, 'free');
        if (problem) this.add(join(path, k), `key ${problem}`);
        this.free(join(path, k), v, depth + 1);
      }
    }
  }

  freeRoot(path: string, value: unknown): void {
    const before = this.issues.length;
    this.free(path, value, 0);
    if (this.issues.length !== before || value === null || typeof value !== 'object') return;
    const bytes = Buffer.byteLength(JSON.stringify(value));
    if (bytes > MAX_LENGTH.freeFormBytes) this.add(path, `at most ${MAX_LENGTH.freeFormBytes} bytes of JSON (this is ${bytes})`);
  }

  walk(path: string, value: unknown, schema: z.ZodType, depth: number): void {
    if (this.issues.length >= MAX_ISSUES || value === undefined || depth > 64) return;
    const s = unwrap(schema);
    const d = defOf(s);
    switch (d.type) {
      case 'string':
        if (typeof value === 'string') this.checkString(path, value, isText(s) ? 'text' : 'line');
        return;
      case 'unknown':
      case 'any':
        this.freeRoot(path, value);
        return;
      case 'object': {
        if (jsonType(value) !== 'object') return;
        const shape = d.shape as Record<string, z.ZodType>;
        const catchall = d.catchall as z.ZodType | undefined;
        const catchallOpen = catchall && !['never', 'unknown', 'any'].includes(defOf(catchall).type) ? catchall : undefined;
        const freeRest = catchall && ['unknown', 'any'].includes(defOf(catchall).type);
        // Without a prototype: assigning "__proto__" to a plain {} would set its prototype instead of the key.
        const rest: Record<string, unknown> = Object.create(null);
        for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
          if (Object.hasOwn(shape, k)) this.walk(join(path, k), v, shape[k]!, depth + 1);
          else if (catchallOpen) {
            if (!this.refusedKey(path, k)) this.walk(join(path, k), v, catchallOpen, depth + 1);
          } else if (freeRest) rest[k] = v;
          // Unknown members of a strict object: zod names them (unknown field).
        }
        if (freeRest && Object.keys(rest).length) this.freeRoot(path, rest);
        return;
      }
      case 'record': {
        if (jsonType(value) !== 'object') return;
        const keyType = d.keyType as z.ZodType;
        const valueType = d.valueType as z.ZodType;
        const freeValues = ['unknown', 'any'].includes(defOf(unwrap(valueType)).type);
        if (freeValues) {
          this.freeRoot(path, value);
          return;
        }
        for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
          if (this.refusedKey(path, k)) continue;
          const kd = unwrap(keyType);
          if (defOf(kd).type === 'string') {
            const problem = stringProblem(k, isText(kd) ? 'text' : 'line');
            if (problem) this.add(join(path, k), `name ${problem}`);
          }
          this.walk(join(path, k), v, valueType, depth + 1);
        }
        return;
      }
      case 'array':
        if (Array.isArray(value))
          value.forEach((v, i) => {
            this.walk(join(path, i), v, d.element as z.ZodType, depth + 1);
          });
        return;
      case 'tuple':
        if (Array.isArray(value))
          (d.items as z.ZodType[]).forEach((item, i) => {
            this.walk(join(path, i), value[i], item, depth + 1);
          });
        return;
      case 'union': {
        // The first option that takes this JSON type decides (string | string[] and the like); for a string,
        // text wins if any string option is text.
        const options = (d.options as z.ZodType[]).map(unwrap);
        const t = jsonType(value);
        if (t === 'string') {
          const strings = options.filter((o) => defOf(o).type === 'string');
          if (strings.length) this.checkString(path, value as string, strings.some(isText) ? 'text' : 'line');
          else if (options.some((o) => ['unknown', 'any'].includes(defOf(o).type))) this.freeRoot(path, value);
          return;
        }
        const option = options.find((o) => (SCHEMA_TYPES[defOf(o).type] ?? []).includes(t));
        if (option) this.walk(path, value, option, depth);
        return;
      }
      case 'intersection':
        this.walk(path, value, d.left as z.ZodType, depth);
        this.walk(path, value, d.right as z.ZodType, depth);
        return;
      default:
        // Numbers, booleans, enums, literals, void: zod's own checks say all there is to say. A string where
        // one of those is expected (a REST query value) is still refused NUL and controls.
        if (typeof value === 'string') this.checkString(path, value, 'line');
    }
  }
}

/** The guard's findings for one input against its procedure's input schema (empty when it may go on to zod). */
export function guardInput(schema: z.ZodType | undefined, input: unknown): GuardIssue[] {
  const w = new Walker();
  if (schema) w.walk('', input, schema, 0);
  else w.freeRoot('', input);
  return w.issues;
}

/** Procedure path -> its input schema; filled by router.ts once the router exists (trpc.ts cannot import it). */
const inputs = new Map<string, z.ZodType | undefined>();
/** Procedure path -> the top-level boolean fields of its input (booleans.ts). */
const booleans = new Map<string, string[]>();

export function registerProcedureInputs(procedures: Record<string, { _def: { inputs: z.ZodType[] } }>): void {
  for (const [path, p] of Object.entries(procedures)) {
    const input = p._def.inputs[0];
    inputs.set(path, input);
    booleans.set(path, booleanFields(input));
  }
}

export function booleanFieldsOf(path: string): string[] {
  return booleans.get(path) ?? [];
}

export function inputSchemaOf(path: string): z.ZodType | undefined {
  return inputs.get(path);
}
