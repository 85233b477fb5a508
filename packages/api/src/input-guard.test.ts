import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { appRouter } from './router';
import { guardInput, inputSchemaOf, stringProblem } from './input-guard';

type Procedures = Record<string, { _def: { inputs: z.ZodType[]; meta?: { openapi?: unknown } } }>;
const procedures = (appRouter as unknown as { _def: { procedures: Procedures } })._def.procedures;

describe('stringProblem', () => {
  it('refuses NUL and unpaired surrogates in every kind, controls only in single-line fields', () => {
    for (const kind of ['line', 'text', 'free'] as const) {
      expect(stringProblem('a\u0000b', kind)).toMatch(/NUL/);
      expect(stringProblem('a\ud800b', kind)).toMatch(/surrogate/);
      expect(stringProblem('a\udc00', kind)).toMatch(/surrogate/);
      expect(stringProblem('emoji \ud83d\ude00 ok', kind)).toBeNull();
    }
    expect(stringProblem('two\nlines', 'line')).toMatch(/control characters \(U\+000A/);
    expect(stringProblem('tab\there', 'line')).toMatch(/U\+0009/);
    expect(stringProblem('del\u007f', 'line')).toMatch(/U\+007F/);
    expect(stringProblem('two\r\nlines\tand a tab \u001b[0m', 'text')).toBeNull();
    expect(stringProblem('ünïcödé, 日本語', 'line')).toBeNull();
  });
});

describe('guardInput against the procedures', () => {
  it('names the field, in bodies, queries, record keys and free-form JSON', () => {
    const send = inputSchemaOf('messages.send');
    expect(guardInput(send, { to: 'a@b.example', subject: 'hi\u0000', text: 'line 1\nline 2' })).toEqual([
      { path: 'subject', message: expect.stringMatching(/NUL/) },
    ]);
    expect(guardInput(send, { to: ['a@b.example', 'c\n@d.example'], text: 'ok\n' })).toEqual([{ path: 'to.1', message: expect.stringMatching(/control/) }]);
    expect(guardInput(send, { to: 'a@b.example', headers: { 'X-A': 'v\r\nBcc: x@y.example' } })[0]?.path).toBe('headers.X-A');
    expect(guardInput(send, { to: 'a@b.example', headers: { 'X-\u0001': 'v' } })[0]).toEqual({
      path: 'headers.X-\\u0001',
      message: expect.stringMatching(/^name /),
    });
    expect(guardInput(send, { to: 'a@b.example', context: { deep: [{ k: 'v\u0000' }] } })[0]?.path).toBe('context.deep.0.k');
    expect(guardInput(send, { to: 'a@b.example', context: { ['k\u0000']: 1 } })[0]?.message).toMatch(/^key /);
    expect(guardInput(send, { to: 'a@b.example', html: '<p>\u0000</p>' })[0]?.path).toBe('html');
    expect(guardInput(send, { to: 'a@b.example', text: 'a\nb\tc', html: '<p>\r\n</p>' })).toEqual([]);
    expect(guardInput(inputSchemaOf('keys.create'), { label: 'x\u0000', scopes: ['send'] })[0]?.path).toBe('label');
    expect(guardInput(inputSchemaOf('features.create'), { title: 'T', description: 'many\nlines\u0000' })[0]?.path).toBe('description');
    expect(guardInput(inputSchemaOf('boxes.setSignature'), { id: 'box_1', signature: '-- \nme' })).toEqual([]);
    expect(guardInput(inputSchemaOf('events.list'), { limit: '5\u0000' })[0]?.path).toBe('limit');
  });

  it('refuses the key "__proto__" in records and free-form JSON, which zod would drop without a word', () => {
    const send = inputSchemaOf('messages.send');
    // As JSON.parse gives them: "__proto__" an own key like any other.
    const parsed = (json: string) => JSON.parse(json) as Record<string, unknown>;
    const refused = { message: expect.stringMatching(/"__proto__" is not accepted/) };
    expect(guardInput(send, parsed('{"to":"a@b.example","headers":{"__proto__":"v","X-A":"w"}}'))).toEqual([{ path: 'headers.__proto__', ...refused }]);
    expect(guardInput(send, parsed('{"to":"a@b.example","context":{"__proto__":{"polluted":true}}}'))).toEqual([{ path: 'context.__proto__', ...refused }]);
    expect(guardInput(send, parsed('{"to":"a@b.example","context":{"deep":[{"__proto__":1}]}}'))).toEqual([{ path: 'context.deep.0.__proto__', ...refused }]);
    expect(guardInput(inputSchemaOf('webhookEndpoints.create'), parsed('{"url":"https://x.example/h","headers":{"__proto__":"v"}}'))).toEqual([
      { path: 'headers.__proto__', ...refused },
    ]);
    // An open object's own members (MCP feedback takes any): copied key by key, where the key would be lost.
    expect(guardInput(inputSchemaOf('mcp.feedback'), parsed('{"notes":"n","__proto__":{"a":1}}'))).toEqual([{ path: '__proto__', ...refused }]);
    // A typed catch-all (none of the procedures has one today) refuses it too.
    expect(guardInput(z.object({}).catchall(z.string().max(10)), parsed('{"__proto__":"x","ok":"y"}'))).toEqual([{ path: '__proto__', ...refused }]);
    // Other names Object's prototype carries are ordinary keys, and so is __proto__ inside a string.
    expect(
      guardInput(send, parsed('{"to":"a@b.example","headers":{"toString":"v","constructor":"w"},"context":{"valueOf":{"__proto__x":"__proto__"}}}')),
    ).toEqual([]);
  });

  it('bounds free-form JSON in depth and size', () => {
    let deep: unknown = 'x';
    for (let i = 0; i < 100; i++) deep = { d: deep };
    expect(guardInput(inputSchemaOf('messages.send'), { to: 'a@b.example', context: deep })[0]?.message).toMatch(/nested too deeply/);
    expect(guardInput(inputSchemaOf('mcp.feedback'), { notes: 'x'.repeat(70_000) })[0]?.message).toMatch(/bytes of JSON/);
  });
});

/** Every string a procedure takes, as the OpenAPI document and MCP describe it (JSON Schema of the input). */
function inputStrings(schema: unknown, path: string, out: { path: string; node: Record<string, unknown> }[]): void {
  if (!schema || typeof schema !== 'object') return;
  const node = schema as Record<string, unknown>;
  if (node.type === 'string' && !node.enum && node.const === undefined) out.push({ path, node });
  for (const [k, v] of Object.entries(node.properties ?? {})) inputStrings(v, `${path}.${k}`, out);
  for (const key of ['items', 'additionalProperties', 'propertyNames'] as const)
    if (node[key] && typeof node[key] === 'object') inputStrings(node[key], `${path}[${key}]`, out);
  for (const key of ['anyOf', 'oneOf', 'allOf'] as const)
    ((node[key] as unknown[]) ?? []).forEach((v, i) => {
      inputStrings(v, `${path}|${i}`, out);
    });
  for (const [k, v] of Object.entries((node.$defs as Record<string, unknown>) ?? {})) inputStrings(v, `$defs.${k}`, out);
}

describe('every input string has a documented maximum', () => {
  it('declares maxLength on each string field of each procedure', () => {
    const missing: string[] = [];
    for (const [name, p] of Object.entries(procedures)) {
      const input = p._def.inputs[0];
      if (!input) continue;
      const json = z.toJSONSchema(input, { io: 'input', unrepresentable: 'any' });
      const strings: { path: string; node: Record<string, unknown> }[] = [];
      inputStrings(json, name, strings);
      for (const s of strings) if (typeof s.node.maxLength !== 'number') missing.push(s.path);
    }
    expect(missing).toEqual([]);
  });
});
