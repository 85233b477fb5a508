/**
 * An OpenAPI-driven request generator (fast-check) for the fuzz test: every operation of the served document,
 * with path ids, query values and JSON bodies drawn from each parameter's and body's JSON Schema, mixed with
 * hostile values (NUL and other controls, unpaired surrogates, header injection, over-long and huge strings),
 * wrong types, missing and unknown members, deep nesting, malformed JSON and wrong content types. The same
 * input also goes, now and then, to the procedure over tRPC and as an MCP tool call.
 */
import fc from 'fast-check';

type Schema = Record<string, any>;

export interface Operation {
  method: string;
  path: string;
  /** The procedure path (messages.send) and MCP tool name (messages_send). */
  procedure: string;
  tool: string;
  kind: 'query' | 'mutation';
  keyed: boolean;
  params: { name: string; in: 'path' | 'query'; required: boolean; schema: Schema }[];
  body: Schema | null;
}

/** Values the account really has, so that generated requests reach past the lookups. */
export interface Pools {
  ids: string[];
  addresses: string[];
  domains: string[];
}

export interface FuzzRequest {
  op: Operation;
  transport: 'rest' | 'trpc' | 'mcp';
  key: 'owner' | 'receive' | 'restricted' | 'none' | 'garbage';
  pathValues: Record<string, { raw: string }>;
  query: [string, string][];
  body: { kind: 'json'; value: unknown } | { kind: 'raw'; text: string; contentType: string | null } | { kind: 'none' };
}

export function operationsOf(doc: Schema): Operation[] {
  const ops: Operation[] = [];
  for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, Schema>>)) {
    for (const [method, op] of Object.entries(item)) {
      // The event stream never ends: it is no request-and-answer operation to fuzz (events-stream.test.ts tests it).
      if (op['x-boxes-stream']) continue;
      const procedure = String(op.operationId).replace(/-/g, '.');
      ops.push({
        method: method.toUpperCase(),
        path,
        procedure,
        tool: procedure.replace(/\./g, '_'),
        kind: method === 'get' ? 'query' : 'mutation',
        keyed: Boolean(op.security?.length),
        params: (op.parameters ?? []).map((p: Schema) => ({ name: p.name, in: p.in, required: Boolean(p.required), schema: p.schema ?? {} })),
        body: op.requestBody?.content?.['application/json']?.schema ?? null,
      });
    }
  }
  return ops;
}

// ---- hostile values ----------------------------------------------------------------------------------------

const NASTY = [
  '\u0000',
  'a\u0000b',
  '\u0000'.repeat(10),
  '\r\n',
  'x\r\nBcc: victim@example.com',
  'x\nSubject: injected',
  '\t',
  '\u0007\u0008\u001b[31m',
  '\u007f',
  '\ud800',
  'a\udfffb',
  '\udbff\udbff',
  '\ud83d',
  '\u202eevil',
  '\ufeff',
  '\u00a0',
  '\u2028\u2029',
  '🙂👩‍👩‍👧‍👦',
  'ｆｕｌｌ',
  'Ω≈ç√∫˜µ≤≥÷',
  '%00',
  '%',
  '%zz',
  '..',
  '../../etc/passwd',
  "' OR 1=1 --",
  '"; DROP TABLE accounts; --',
  '${jndi:ldap://x}',
  '{{7*7}}',
  '<script>alert(1)</script>',
  '__proto__',
  'constructor',
  'prototype',
  'toString',
  '',
  ' ',
  'null',
  'undefined',
  'true',
  'NaN',
  'Infinity',
  '-Infinity',
  '-1',
  '-0',
  '0',
  '1e309',
  '0x10',
  '9'.repeat(40),
  '1.5',
  '2026-13-45T99:99:99Z',
  '0000-00-00',
  '@',
  'a@',
  '@b',
  'a@b',
  'a@@b.example',
  'user@[127.0.0.1]',
  '"quoted local"@example.com',
  'Name <a@b.example',
  'Name <<a@b.example>>',
  'a@xn--',
  'a@-bad-.example',
  'x'.repeat(64) + '@example.com',
  'a@' + 'b'.repeat(250) + '.example',
  'https://',
  'https://127.0.0.1/x',
  'https://[::1]/',
  'https://user:pass@example.com/',
  'http://example.com/',
  'javascript:alert(1)',
  'int_' + 'a'.repeat(20),
  'box_',
  'msg_0',
  'key_' + '\u0000'.repeat(3),
];

/** Any UTF-16 code unit, lone surrogates included. */
const anyCodeUnits = fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)), maxLength: 30 });

export const hostileString: fc.Arbitrary<string> = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(...NASTY) },
  { weight: 3, arbitrary: anyCodeUnits },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
  { weight: 1, arbitrary: fc.constantFrom(101, 201, 255, 256, 321, 999, 2049, 4001, 20_001).map((n) => 'x'.repeat(n)) },
  { weight: 1, arbitrary: fc.constantFrom(70_000, 300_000).map((n) => 'é'.repeat(n)) },
  { weight: 1, arbitrary: fc.tuple(fc.string({ maxLength: 10 }), fc.constantFrom(...NASTY), fc.string({ maxLength: 10 })).map(([a, b, c]) => a + b + c) },
);

const deepNest: fc.Arbitrary<unknown> = fc.tuple(fc.integer({ min: 20, max: 3000 }), fc.boolean()).map(([n, arrays]) => {
  let v: unknown = 'x';
  for (let i = 0; i < n; i++) v = arrays ? [v] : { a: v };
  return v;
});

export const wrongType: fc.Arbitrary<unknown> = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer(),
  fc.constantFrom(0, -1, -0, 0.5, 1e308, -1e308, 2 ** 53 + 2, 2 ** 31, -(2 ** 31) - 1, Number.MAX_SAFE_INTEGER, 1e-300),
  fc.double({ noNaN: true }),
  fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 4 }),
  fc.dictionary(fc.oneof(fc.string({ maxLength: 8 }), fc.constantFrom('__proto__', 'constructor', 'toString')), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }),
  { arbitrary: deepNest, weight: 1 },
);

/** Percent-encodes as UTF-8; a lone surrogate (which has no UTF-8 form) goes as the bytes WTF-8 would give it. */
export function encode(v: string): string {
  try {
    return encodeURIComponent(v);
  } catch {
    return v.replace(/[\s\S]/g, (ch) => {
      const c = ch.charCodeAt(0);
      if (c >= 0xd800 && c <= 0xdfff)
        return `%${(0xe0 | (c >> 12)).toString(16)}%${(0x80 | ((c >> 6) & 0x3f)).toString(16)}%${(0x80 | (c & 0x3f)).toString(16)}`;
      return encodeURIComponent(ch);
    });
  }
}

// ---- values from the schemas --------------------------------------------------------------------------------

const iso = fc.date({ min: new Date('1970-01-01T00:00:00Z'), max: new Date('2100-01-01T00:00:00Z'), noInvalidDate: true }).map((d) => d.toISOString());

export class Generator {
  constructor(
    private readonly doc: Schema,
    private readonly pools: Pools,
  ) {}

  private resolve(schema: Schema): Schema {
    let s = schema;
    for (let i = 0; i < 10 && s?.$ref; i++)
      s = s.$ref
        .replace(/^#\/components\/schemas\//, '')
        .split('/')
        .reduce((acc: Schema, k: string) => acc?.[k], this.doc.components.schemas);
    return s ?? {};
  }

  /** A string a careful caller might send for this field, by its name and schema. */
  private goodString(name: string, s: Schema): fc.Arbitrary<string> {
    const { ids, addresses, domains } = this.pools;
    const min = s.minLength ?? 0;
    const max = Math.min(s.maxLength ?? 60, 60);
    const plain = fc.string({ minLength: min, maxLength: Math.max(min, max) });
    const options: fc.Arbitrary<string>[] = [plain];
    if (s.example !== undefined && typeof s.example === 'string') options.push(fc.constant(s.example));
    const n = name.toLowerCase();
    if (/^(id|intent_id|address|box)$/.test(n) || n.endsWith('_id')) options.push(fc.constantFrom(...ids, ...addresses));
    if (/^(to|cc|bcc|from|reply_to|address|human_email|email|allowed_boxes)$/.test(n)) {
      options.push(fc.constantFrom(...addresses), fc.emailAddress(), addresses.length ? fc.constantFrom(...addresses).map((a) => `Agent <${a}>`) : plain);
    }
    if (/domain/.test(n)) options.push(fc.constantFrom(...domains), fc.domain());
    if (/^(since|before)$/.test(n)) options.push(iso, fc.nat({ max: 500 }).map(String));
    if (/^cursor$/.test(n)) options.push(fc.nat().map(String));
    if (/url|webhook/.test(n)) options.push(fc.webUrl({ validSchemes: ['https'] }));
    if (n === 'content_b64') options.push(fc.base64String({ maxLength: 200 }));
    if (n === 'content_type') options.push(fc.constantFrom('text/plain', 'application/pdf', 'image/png'));
    if (n === 'type') options.push(fc.constantFrom('mail.sent', 'mail.received,box.created', 'nope'));
    return fc.oneof(...options);
  }

  /** A value that satisfies the schema (as far as a generator can tell). */
  valid(schema: Schema, name: string, depth = 0): fc.Arbitrary<unknown> {
    const s = this.resolve(schema);
    if (s.enum) return fc.constantFrom(...s.enum);
    if (s.const !== undefined) return fc.constant(s.const);
    const union = s.anyOf ?? s.oneOf;
    // An object with alternatives of required members (a message: text, html or attachments): one of them.
    if (union && s.type === 'object') {
      return fc.oneof(
        ...union.map((u: Schema) =>
          this.object({ ...s, anyOf: undefined, oneOf: undefined, required: [...(s.required ?? []), ...(u.required ?? [])] }, depth, 0),
        ),
      );
    }
    if (union) return fc.oneof(...union.map((u: Schema) => this.valid(u, name, depth + 1)));
    if (s.allOf) return this.valid(Object.assign({}, ...s.allOf.map((x: Schema) => this.resolve(x))), name, depth + 1);
    switch (s.type) {
      case 'string':
        return this.goodString(name, s);
      case 'integer':
        return fc.integer({ min: Math.max(s.minimum ?? -1000, -(2 ** 31)), max: Math.min(s.maximum ?? 100_000, 2 ** 31 - 1) });
      case 'number':
        return fc.double({ min: s.minimum ?? -1e6, max: s.maximum ?? 1e6, noNaN: true });
      case 'boolean':
        return fc.boolean();
      case 'null':
        return fc.constant(null);
      case 'array':
        return fc.array(this.valid(s.items ?? {}, name, depth + 1), { minLength: s.minItems ?? 0, maxLength: Math.min(s.maxItems ?? 4, 4) });
      case 'object':
        return this.object(s, depth, 0);
      default:
        if (Array.isArray(s.type)) return fc.oneof(...s.type.map((t: string) => this.valid({ ...s, type: t }, name, depth + 1)));
        return fc.jsonValue({ maxDepth: 2 });
    }
  }

  /** A member value: valid, or (with odds `chaos`) hostile or of the wrong type. */
  member(schema: Schema, name: string, chaos: number, depth: number): fc.Arbitrary<unknown> {
    const s = this.resolve(schema);
    const inner =
      s.type === 'object' || (s.type === 'array' && this.resolve(s.items ?? {}).type === 'object')
        ? s.type === 'object'
          ? this.object(s, depth + 1, chaos)
          : fc.array(this.object(this.resolve(s.items), depth + 1, chaos), { maxLength: 3 })
        : this.valid(s, name, depth);
    if (chaos === 0) return inner;
    const good = Math.max(1, Math.round((1 - chaos) * 10));
    const bad = Math.max(1, Math.round(chaos * 10));
    return fc.oneof({ weight: good, arbitrary: inner }, { weight: bad, arbitrary: hostileString }, { weight: Math.max(1, bad >> 1), arbitrary: wrongType });
  }

  object(s: Schema, depth: number, chaos: number): fc.Arbitrary<Record<string, unknown>> {
    if (depth > 4) return fc.constant({});
    const props = (s.properties ?? {}) as Record<string, Schema>;
    const required: string[] = s.required ?? [];
    const model: Record<string, fc.Arbitrary<unknown>> = {};
    for (const [k, v] of Object.entries(props)) model[k] = this.member(v, k, chaos, depth);
    const base =
      chaos === 0
        ? fc.record(model, { requiredKeys: required })
        : // Hostile objects may also miss required members.
          fc.record(model, { requiredKeys: [] });
    const free = s.additionalProperties && typeof s.additionalProperties === 'object' && !Object.keys(s.additionalProperties).length;
    const extras: fc.Arbitrary<Record<string, unknown>> = free
      ? fc.dictionary(
          chaos ? fc.oneof(fc.string({ maxLength: 12 }), hostileString) : fc.string({ minLength: 1, maxLength: 12 }),
          chaos ? fc.oneof(fc.jsonValue({ maxDepth: 3 }), hostileString, deepNest) : fc.jsonValue({ maxDepth: 3 }),
          { maxKeys: 4 },
        )
      : chaos
        ? fc.oneof(
            { weight: 4, arbitrary: fc.constant({}) },
            {
              weight: 1,
              arbitrary: fc.dictionary(
                fc.oneof(fc.string({ maxLength: 12 }), fc.constantFrom('__proto__', 'constructor', 'toString', 'id')),
                fc.jsonValue({ maxDepth: 2 }),
                { maxKeys: 3 },
              ),
            },
          )
        : fc.constant({});
    return fc.tuple(base, extras).map(([b, e]) => {
      const out: Record<string, unknown> = {};
      // Own members even for __proto__ (JSON.stringify sends them as written).
      for (const [k, v] of [...Object.entries(e), ...Object.entries(b)])
        Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
      return out;
    });
  }

  /** A path segment: a real id, a plausible one, or something hostile; returned as it goes on the wire. */
  private pathValue(schema: Schema, name: string, chaos: number): fc.Arbitrary<{ raw: string }> {
    const good = this.valid(schema, name).map((v) => ({ raw: encode(String(v)) }));
    if (chaos === 0) return good;
    return fc.oneof(
      { weight: 3, arbitrary: good },
      { weight: 2, arbitrary: hostileString.filter((v) => v.length > 0).map((v) => ({ raw: encode(v) })) },
      { weight: 1, arbitrary: fc.constantFrom('%', '%zz', '%00', '%2F', '%2e%2e', '%ED%A0%80', '%C0%80', '%FF', 'a%0Ab', '..', '.').map((raw) => ({ raw })) },
    );
  }

  private queryValues(op: Operation, chaos: number): fc.Arbitrary<[string, string][]> {
    const params = op.params.filter((p) => p.in === 'query');
    const each = params.map((p) =>
      fc.option(
        (chaos
          ? fc.oneof({ weight: 3, arbitrary: this.valid(p.schema, p.name) }, { weight: 2, arbitrary: hostileString }, { weight: 1, arbitrary: wrongType })
          : this.valid(p.schema, p.name)
        ).map((v) => [p.name, typeof v === 'string' ? v : JSON.stringify(v)] as [string, string]),
        { freq: 2 },
      ),
    );
    const extra = chaos
      ? fc.array(
          fc.tuple(
            fc.oneof(fc.string({ maxLength: 8 }), fc.constantFrom(...params.map((p) => p.name), 'input', '__proto__')),
            fc.oneof(fc.string({ maxLength: 12 }), hostileString),
          ),
          { maxLength: 2 },
        )
      : fc.constant([]);
    return fc.tuple(fc.tuple(...each), extra).map(([vals, ex]) => [...vals.filter((v): v is [string, string] => v !== null), ...ex]);
  }

  private bodyOf(op: Operation, chaos: number): fc.Arbitrary<FuzzRequest['body']> {
    if (!op.body) {
      return chaos
        ? fc.oneof(
            { weight: 5, arbitrary: fc.constant({ kind: 'none' as const }) },
            { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }).map((value) => ({ kind: 'json' as const, value })) },
          )
        : fc.constant({ kind: 'none' as const });
    }
    const json = this.object(this.resolve(op.body), 0, chaos).map((value) => ({ kind: 'json' as const, value }));
    if (!chaos) return json;
    const malformed = fc.oneof(
      fc.constantFrom(
        '{',
        '{"a":',
        '[1,2',
        'nul',
        '{"to": "a@b.example",}',
        "{'a': 1}",
        '\u0000',
        '{"a":"\\u0000"}',
        '{"a":"\\ud800"}',
        '{"__proto__":{"x":1}}',
        '1e999',
        '"str"',
        '[]',
        'null',
        '9'.repeat(400),
      ),
      fc.string({ maxLength: 40 }),
      deepNest.map((v) => JSON.stringify(v)),
    );
    return fc.oneof(
      { weight: 8, arbitrary: json },
      { weight: 1, arbitrary: wrongType.map((value) => ({ kind: 'json' as const, value })) },
      {
        weight: 1,
        arbitrary: fc
          .tuple(
            malformed,
            fc.constantFrom<string | null>(
              'application/json',
              'application/json; charset=utf-8',
              'text/plain',
              'application/x-www-form-urlencoded',
              'multipart/form-data; boundary=x',
              null,
            ),
          )
          .map(([text, contentType]) => ({ kind: 'raw' as const, text, contentType })),
      },
    );
  }

  request(ops: Operation[]): fc.Arbitrary<FuzzRequest> {
    return fc
      .tuple(
        fc.constantFrom(...ops),
        // How hostile this request is: most are valid, many have a few bad members, some are chaos.
        fc.constantFrom(0, 0, 0.1, 0.1, 0.25, 0.6),
        fc.constantFrom<FuzzRequest['transport']>('rest', 'rest', 'rest', 'rest', 'rest', 'rest', 'trpc', 'trpc', 'mcp'),
        fc.constantFrom<FuzzRequest['key']>(...(Array(16).fill('owner') as 'owner'[]), 'receive', 'restricted', 'none', 'garbage'),
      )
      .chain(([op, chaos, transport, key]) =>
        fc.record({
          op: fc.constant(op),
          transport: fc.constant(transport),
          key: fc.constant(key),
          pathValues: fc.record(
            Object.fromEntries(op.params.filter((p) => p.in === 'path').map((p) => [p.name, this.pathValue(p.schema, p.name, chaos)])),
          ) as fc.Arbitrary<Record<string, { raw: string }>>,
          query: this.queryValues(op, chaos),
          body: this.bodyOf(op, chaos),
        }),
      );
  }
}

/** The procedure input the REST request stands for (path and query values merged into the body). */
export function procedureInput(r: FuzzRequest): unknown {
  const fromPath: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(r.pathValues)) {
    try {
      fromPath[k] = decodeURIComponent(v.raw);
    } catch {
      fromPath[k] = v.raw;
    }
  }
  const fromQuery = Object.fromEntries(r.query);
  const body = r.body.kind === 'json' ? r.body.value : r.body.kind === 'raw' ? r.body.text : undefined;
  if (body !== undefined && (body === null || typeof body !== 'object' || Array.isArray(body))) {
    return Object.keys(fromPath).length || Object.keys(fromQuery).length ? { ...fromPath, ...fromQuery, input: body } : body;
  }
  const merged = { ...fromQuery, ...(body as object | undefined), ...fromPath };
  return Object.keys(merged).length ? merged : undefined;
}
