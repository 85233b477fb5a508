/**
 * The OpenAPI document and the discovery manifest as the running server serves them: a valid OpenAPI 3.1
 * document (checked by an independent validator) that lints clean with the Redocly CLI (redocly.yaml), listing
 * every REST route of the router, with bearer security, the shared Error schema and the rate-limit fields on
 * keyed operations.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Validator } from '@seriousme/openapi-schema-validator';
import { parse as parseYaml } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appRouter } from '@boxes/api';
import { rest, signupAccount, startTestServer, type TestServer } from '@boxes/testing';

type Operation = {
  operationId?: string;
  summary?: string;
  security?: Record<string, string[]>[];
  parameters?: { name: string; in: string; required?: boolean }[];
  requestBody?: { content?: Record<string, unknown> };
  responses: Record<string, { description?: string; content?: Record<string, { schema?: Record<string, unknown> }> }>;
  'x-boxes-stream'?: boolean;
};
type Doc = {
  openapi: string;
  info: { title: string; version: string };
  servers: { url: string }[];
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, any>; securitySchemes: Record<string, any> };
};

interface RouteMeta {
  procedure: string;
  method: string;
  path: string;
  protect: boolean;
  scope: string | undefined;
  accountWide: boolean;
}

/** Every procedure of the router that has REST meta, read from the router itself. */
function routerRoutes(): RouteMeta[] {
  const procedures = (appRouter as unknown as { _def: { procedures: Record<string, { _def: { meta?: any } }> } })._def.procedures;
  return Object.entries(procedures)
    .filter(([, p]) => p._def.meta?.openapi)
    .map(([name, p]) => {
      const o = p._def.meta.openapi;
      return {
        procedure: name,
        method: String(o.method).toLowerCase(),
        path: String(o.path),
        protect: o.protect !== false,
        scope: p._def.meta.scope as string | undefined,
        accountWide: Boolean(p._def.meta.accountWide),
      };
    });
}

/** The value a local $ref (#/a/b) points at from the document root, or undefined. */
function resolvePointer(ref: string): any {
  if (!ref.startsWith('#/')) return undefined;
  let node: any = doc;
  for (const raw of ref.slice(2).split('/')) {
    const key = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    if (node === null || typeof node !== 'object' || !(key in node)) return undefined;
    node = node[key];
  }
  return node;
}

/** Follows $ref chains from the document root, as an OpenAPI 3.1 reader does. */
function deref(schema: any): any {
  let s = schema;
  for (let i = 0; s && typeof s === 'object' && typeof s.$ref === 'string'; i++) {
    const target = resolvePointer(s.$ref);
    if (target === undefined) throw new Error(`unresolvable $ref ${s.$ref}`);
    if (i > 10) throw new Error('$ref cycle');
    s = target;
  }
  return s;
}

const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options', 'trace'];

let t: TestServer;
let doc: Doc;
let jsonText: string;
beforeAll(async () => {
  t = await startTestServer();
  const r = await fetch(`${t.url}/openapi.json`);
  expect(r.status).toBe(200);
  expect(r.headers.get('content-type')).toMatch(/^application\/json/);
  jsonText = await r.text();
  doc = JSON.parse(jsonText) as Doc;
});
afterAll(() => t?.stop());

/** The router's operations (the event stream, served beside the router and marked x-boxes-stream, left out). */
function operations(): { method: string; path: string; op: Operation }[] {
  return Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.entries(item)
      .filter(([m, op]) => HTTP_METHODS.includes(m) && !op['x-boxes-stream'])
      .map(([method, op]) => ({ method, path, op })),
  );
}

describe('GET /openapi.json and /openapi.yaml', () => {
  it('is a valid OpenAPI 3.1 document (independent validator)', async () => {
    expect(doc.openapi).toMatch(/^3\.1\./);
    const v = new Validator();
    const res = await v.validate(JSON.parse(jsonText) as Record<string, unknown>);
    expect(res.errors ?? []).toEqual([]);
    expect(res.valid).toBe(true);
    expect(v.version).toBe('3.1');
  });

  it('serves the same document as YAML, and it validates too', async () => {
    const r = await fetch(`${t.url}/openapi.yaml`);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/yaml/);
    const text = await r.text();
    expect(parseYaml(text)).toEqual(doc);
    const res = await new Validator().validate(parseYaml(text) as Record<string, unknown>);
    expect(res.errors ?? []).toEqual([]);
    expect(res.valid).toBe(true);
  });

  it('has info and a server URL that already ends in /api/v1 (and only once)', () => {
    expect(doc.info.title).toBe('Boxes API');
    expect(doc.info.version).toMatch(/^\d+\.\d+\.\d+$/);
    expect(doc.servers).toHaveLength(1);
    expect(doc.servers[0]!.url).toBe(t.apiBase);
    expect(doc.servers[0]!.url.endsWith('/api/v1')).toBe(true);
    expect(doc.servers[0]!.url).not.toMatch(/\/v1\/.*v1/);
  });

  it('lists every REST route of the router, and nothing else', () => {
    const routes = routerRoutes();
    expect(routes.length).toBeGreaterThanOrEqual(14);
    const fromRouter = routes.map((r) => `${r.method.toUpperCase()} ${r.path}`).sort();
    const fromDoc = operations()
      .map((o) => `${o.method.toUpperCase()} ${o.path}`)
      .sort();
    expect(fromDoc).toEqual(fromRouter);
    // ... and the one stream served beside the router, described by hand.
    const streams = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.entries(item)
        .filter(([, op]) => op['x-boxes-stream'])
        .map(([m]) => `${m.toUpperCase()} ${path}`),
    );
    expect(streams).toEqual(['GET /events/stream']);
    const stream = doc.paths['/events/stream']!.get!;
    expect(Object.keys(stream.responses['200']!.content ?? {})).toEqual(['text/event-stream']);
    expect(Object.keys(stream.responses).sort()).toEqual(['200', '400', '401', '403', '429', '431', '500', '503']);
    // Spot-check the documented paths are there under their documented names.
    for (const want of [
      'POST /signup/agentic',
      'POST /signup/agentic/confirm',
      'POST /boxes',
      'GET /boxes',
      'DELETE /boxes/{id}',
      'PUT /boxes/{id}/signature',
      'GET /events',
      'GET /events/verify',
      'POST /account/keys',
      'GET /account/keys',
      'DELETE /account/keys/{id}',
    ]) {
      expect(fromDoc).toContain(want);
    }
    // No path carries the base path again.
    expect(Object.keys(doc.paths).filter((p) => p.startsWith('/api/') || p.startsWith('/v1'))).toEqual([]);
  });

  it('gives every operation a unique operationId and a summary', () => {
    const ops = operations();
    const ids = ops.map((o) => o.op.operationId);
    expect(ids.every((id) => typeof id === 'string' && id.length > 0)).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ops.filter((o) => !o.op.summary).map((o) => `${o.method} ${o.path}`)).toEqual([]);
  });

  it('declares path parameters for every {param} in a path', () => {
    for (const { method, path, op } of operations()) {
      const inPath = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]).sort();
      const declared = (op.parameters ?? [])
        .filter((p) => p.in === 'path')
        .map((p) => p.name)
        .sort();
      expect(declared, `${method} ${path}`).toEqual(inPath);
      for (const p of (op.parameters ?? []).filter((x) => x.in === 'path')) expect(p.required, `${method} ${path} ${p.name}`).toBe(true);
    }
    const events = doc.paths['/events']!.get!;
    expect(
      (events.parameters ?? [])
        .filter((p) => p.in === 'query')
        .map((p) => p.name)
        .sort(),
    ).toEqual(['limit', 'since', 'type']);
  });

  it('keyed operations declare bearer security and the Error schema for 401 and 403; public ones declare none', () => {
    expect(doc.components.securitySchemes.bearerAuth).toMatchObject({ type: 'http', scheme: 'bearer' });
    const byKey = new Map(routerRoutes().map((r) => [`${r.method} ${r.path}`, r]));
    const keyed = operations().filter((o) => byKey.get(`${o.method} ${o.path}`)!.protect);
    const open = operations().filter((o) => !byKey.get(`${o.method} ${o.path}`)!.protect);
    expect(keyed.length).toBeGreaterThanOrEqual(12);
    // Only these need no key.
    const keyless = ['POST /signup/agentic', 'POST /signup/agentic/confirm', 'POST /signup/agentic/claim', 'GET /audit/public-key'];
    const openNames = open.map((o) => `${o.method.toUpperCase()} ${o.path}`);
    expect(openNames).toContain('POST /signup/agentic');
    expect(openNames).toContain('POST /signup/agentic/confirm');
    expect(openNames.filter((n) => !keyless.includes(n))).toEqual([]);

    for (const { method, path, op } of keyed) {
      const where = `${method.toUpperCase()} ${path}`;
      expect(op.security, where).toEqual([{ bearerAuth: [] }]);
      // 403 only where a key can be refused: a scope to lack, or an account-wide change a box-restricted key may not make.
      const meta = byKey.get(`${method} ${path}`)!;
      for (const status of meta.scope || meta.accountWide ? ['401', '403'] : ['401']) {
        expect(op.responses[status]?.content?.['application/json']?.schema, `${where} ${status}`).toEqual({ $ref: '#/components/schemas/Error' });
      }
    }
    for (const { method, path, op } of open) {
      expect(op.security ?? [], `${method} ${path}`).toEqual([]);
    }
  });

  it('every 4xx/5xx response of every operation is the shared Error schema, and every operation has a 200', () => {
    for (const { method, path, op } of operations()) {
      const where = `${method.toUpperCase()} ${path}`;
      expect(op.responses['200'], where).toBeDefined();
      // Besides 200, only the sends owner review may hold answer a success: 202 with the Review.
      const held = ['POST /messages/send', 'POST /messages/{id}/reply', 'POST /drafts/{id}/send'].includes(where);
      expect(
        Object.keys(op.responses).filter((c) => c !== '200' && !/^[45]\d\d$/.test(c)),
        where,
      ).toEqual(held ? ['202'] : []);
      if (held) expect(op.responses['202']!.content?.['application/json']?.schema, where).toEqual({ $ref: '#/components/schemas/Review' });
      for (const [code, res] of Object.entries(op.responses).filter(([c]) => /^[45]/.test(c))) {
        expect(res.content?.['application/json']?.schema, `${where} ${code}`).toEqual({ $ref: '#/components/schemas/Error' });
        expect(res.description, `${where} ${code}`).toBeTruthy();
      }
    }
  });

  it('declares 501 on no operation: every call it lists is implemented on every instance', () => {
    const with501 = operations()
      .filter(({ op }) => op.responses['501'])
      .map(({ method, path }) => `${method.toUpperCase()} ${path}`);
    expect(with501).toEqual([]);
  });

  it('lints clean with the Redocly CLI (recommended rules, as redocly.yaml adjusts them): no error, no warning', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-openapi-'));
    try {
      const json = path.join(dir, 'openapi.json');
      const yaml = path.join(dir, 'openapi.yaml');
      fs.writeFileSync(json, jsonText);
      // The checks before this one parse the document in this process, which also runs the server: a keep-alive
      // socket can be closed by the server just as it is reused (ECONNRESET). A new connection is made then.
      const yamlText = await fetch(`${t.url}/openapi.yaml`)
        .catch(() => fetch(`${t.url}/openapi.yaml`))
        .then((r) => r.text());
      fs.writeFileSync(yaml, yamlText);
      const cli = path.join(path.dirname(createRequire(import.meta.url).resolve('@redocly/cli/package.json')), 'bin', 'cli.js');
      const config = path.resolve(import.meta.dirname, '../../redocly.yaml');
      for (const file of [json, yaml]) {
        // Exits non-zero on errors: keep its report either way.
        const run = await promisify(execFile)(process.execPath, [cli, 'lint', '--config', config, '--format', 'json', file], {
          encoding: 'utf8',
          timeout: 60_000,
          env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', NO_COLOR: '1' },
        }).catch((err: { stdout?: string; stderr?: string }) => ({ stdout: err.stdout ?? '', stderr: err.stderr ?? '' }));
        const report = JSON.parse(run.stdout) as {
          totals: { errors: number; warnings: number };
          problems: { ruleId: string; message: string; location: { pointer?: string }[] }[];
        };
        const problems = report.problems.map((p) => `${p.ruleId}: ${p.message} at ${p.location[0]?.pointer ?? '?'}`);
        expect(problems, `${path.basename(file)}: ${run.stderr}`).toEqual([]);
        expect(report.totals).toMatchObject({ errors: 0, warnings: 0 });
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('keyed operations declare the per-key rate limit: 429 with Retry-After, and the RateLimit fields', () => {
    expect(Object.keys((doc.components as any).headers).sort()).toEqual(['RateLimit', 'RateLimit-Policy', 'Retry-After']);
    const fields = { 'RateLimit-Policy': { $ref: '#/components/headers/RateLimit-Policy' }, RateLimit: { $ref: '#/components/headers/RateLimit' } };
    for (const { method, path, op } of operations()) {
      const where = `${method.toUpperCase()} ${path}`;
      const res = op.responses as Record<string, { headers?: Record<string, unknown> }>;
      if (!op.security?.length) {
        expect(res['200']!.headers ?? {}, where).toEqual({});
        continue;
      }
      expect(res['429']?.headers, where).toEqual({ 'Retry-After': { $ref: '#/components/headers/Retry-After' }, ...fields });
      expect(res['200']!.headers, where).toEqual(fields);
      // A refused key is not counted, so its 401 has no fields.
      expect(res['401']!.headers, where).toBeUndefined();
    }
    // The signup limit (per client address) answers 429 with Retry-After.
    expect((doc.paths['/signup/agentic']!.post!.responses['429'] as { headers?: unknown }).headers).toEqual({
      'Retry-After': { $ref: '#/components/headers/Retry-After' },
    });
  });

  it('every $ref in the document resolves within it', () => {
    const refs = [...jsonText.matchAll(/"\$ref":\s*"([^"]+)"/g)].map((m) => m[1]!);
    expect(refs.length).toBeGreaterThan(0);
    expect([...new Set(refs)].filter((r) => resolvePointer(r) === undefined)).toEqual([]);
  });

  it('the Error schema describes {"error": {code, message, request_id, ...}}', () => {
    const e = deref(doc.components.schemas.Error);
    expect(e.type).toBe('object');
    expect(e.required).toEqual(['error']);
    const inner = deref(e.properties.error);
    expect(inner.type).toBe('object');
    expect([...inner.required].sort()).toEqual(['code', 'message', 'request_id']);
    for (const f of ['code', 'message', 'request_id']) expect(inner.properties[f].type).toBe('string');
    // Extra members (fields, getting_started, ...) are allowed.
    expect(inner.additionalProperties).not.toBe(false);
  });

  it('every keyed operation really answers 401 without a key, with getting_started', async () => {
    const byKey = new Map(routerRoutes().map((r) => [`${r.method} ${r.path}`, r]));
    for (const { method, path } of operations()) {
      if (!byKey.get(`${method} ${path}`)!.protect) continue;
      const url = `${doc.servers[0]!.url}${path.replace(/\{[^}]+\}/g, 'x_123')}`;
      const hasBody = ['post', 'put', 'patch'].includes(method);
      const r = await fetch(url, { method: method.toUpperCase(), ...(hasBody ? { headers: { 'content-type': 'application/json' }, body: '{}' } : {}) });
      const body = (await r.json()) as { error: { code: string; getting_started?: { signup?: string } } };
      expect([r.status, body.error.code], `${method.toUpperCase()} ${path}`).toEqual([401, 'unauthorized']);
      expect(body.error.getting_started?.signup).toBe(`${t.apiBase}/signup/agentic`);
    }
  });
});

describe('request schemas say what the server enforces', () => {
  /** Every string schema of every request (parameters and bodies, through $ref), with where it is. */
  function requestStrings(): { where: string; schema: Record<string, any> }[] {
    const out: { where: string; schema: Record<string, any> }[] = [];
    const walk = (node: unknown, where: string, seen: Set<string>): void => {
      if (!node || typeof node !== 'object') return;
      const s = node as Record<string, any>;
      if (typeof s.$ref === 'string') {
        if (seen.has(s.$ref)) return;
        walk(resolvePointer(s.$ref), where, new Set([...seen, s.$ref]));
        return;
      }
      if (s.type === 'string' && !s.enum && s.const === undefined) out.push({ where, schema: s });
      walk(s.items, `${where}[]`, seen);
      for (const [k, v] of Object.entries((s.properties ?? {}) as Record<string, unknown>)) walk(v, `${where}.${k}`, seen);
      for (const v of [...(s.anyOf ?? []), ...(s.oneOf ?? []), ...(s.allOf ?? [])]) walk(v, where, seen);
    };
    for (const { method, path, op } of operations()) {
      for (const p of (op.parameters ?? []) as { name: string; schema?: unknown }[]) walk(p.schema, `${method.toUpperCase()} ${path} ${p.name}`, new Set());
      walk((op.requestBody?.content?.['application/json'] as { schema?: unknown } | undefined)?.schema, `${method.toUpperCase()} ${path} body`, new Set());
    }
    return out;
  }

  /** Whether a value passes every pattern of a string schema (its own and those in allOf). */
  const accepts = (schema: Record<string, any>, value: string) =>
    [schema.pattern, ...((schema.allOf ?? []) as { pattern?: string }[]).map((s) => s.pattern)]
      .filter((p) => p !== undefined)
      .every((p) => new RegExp(p, 'u').test(value));

  it('every request string has a pattern: no NUL anywhere, no control character outside text', () => {
    const strings = requestStrings();
    expect(strings.length).toBeGreaterThan(100);
    for (const { where, schema } of strings) {
      expect(schema.pattern, where).toBeTypeOf('string');
      expect(accepts(schema, 'a\u0000b'), where).toBe(false);
    }
    const send = (field: string) => strings.find((s) => s.where === `POST /messages/send body.${field}`)!.schema;
    expect(accepts(send('subject'), 'a\u0001b')).toBe(false);
    expect(accepts(send('from'), 'a\nb')).toBe(false);
    expect(accepts(send('attachments[].content_id'), 'logo\u0001')).toBe(false);
    expect(accepts(send('attachments[].content_id'), 'logo')).toBe(true);
    expect(accepts(send('text'), 'line one\nline two\t')).toBe(true);
    expect(accepts(send('attachments[].content_b64'), 'JVBE\r\nRi0x')).toBe(true);
    const policy = strings.find((s) => s.where === 'GET /boxes/{id}/policy id')!.schema;
    expect(accepts(policy, 'box_\u007f')).toBe(false);
  });

  it('a message has at least one recipient and a body', () => {
    const body = doc.paths['/messages/send']!.post!.requestBody!.content!['application/json'] as { schema: Record<string, any> };
    const toList = body.schema.properties.to.anyOf.find((o: { type?: string }) => o.type === 'array');
    expect(toList.minItems).toBe(1);
    expect(body.schema.anyOf).toEqual([
      { required: ['text'] },
      { required: ['html'] },
      { required: ['attachments'], properties: { attachments: { minItems: 1 } } },
    ]);
    const bulk = doc.components.schemas.BulkMessage;
    expect(bulk.anyOf).toEqual(body.schema.anyOf);
    expect(bulk.properties.to.anyOf.find((o: { type?: string }) => o.type === 'array').minItems).toBe(1);
  });

  it('and the server refuses what the schemas refuse, and takes what they allow', async () => {
    const a = await signupAccount(t);
    const send = (body: Record<string, unknown>) => rest(t, 'POST', '/messages/send', { key: a.apiKey, body });
    const refused: [Record<string, unknown>, string][] = [
      [{ to: [], text: 'x' }, 'to'],
      [{ to: a.primaryAddress }, 'text'],
      [{ to: a.primaryAddress, attachments: [] }, 'text'],
      [{ to: a.primaryAddress, text: 'x', subject: 'a\u0001b' }, 'subject'],
      [{ to: a.primaryAddress, text: 'a\u0000b' }, 'text'],
    ];
    for (const [body, field] of refused) {
      const r = await send(body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(
        r.body.error.fields.map((f: { path: string }) => f.path),
        JSON.stringify(body),
      ).toContain(field);
    }
    const ok = await send({ to: [a.primaryAddress], subject: 'two lines', text: 'line one\nline two\t' });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
  });
});

describe('GET /.well-known/agentic.json', () => {
  it('points at the OpenAPI document, signup, pricing and skills', async () => {
    const r = await fetch(`${t.url}/.well-known/agentic.json`);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^application\/json/);
    const m = (await r.json()) as any;

    expect(m.api_base_url).toBe(t.apiBase);
    expect(m.openapi_url).toBe(`${t.url}/openapi.json`);
    expect(m.version).toBe(doc.info.version);
    const spec = await fetch(m.openapi_url);
    expect(spec.status).toBe(200);
    expect(await spec.json()).toEqual(doc);
    const yaml = await fetch(m.openapi_yaml_url);
    expect(yaml.status).toBe(200);

    expect(m.signup.url).toBe(`${t.apiBase}/signup/agentic`);
    expect(m.signup.confirm_url).toBe(`${t.apiBase}/signup/agentic/confirm`);
    expect(m.signup.modes).toContain('subdomain');
    // The example body is accepted by the signup route it advertises.
    const signup = await fetch(m.signup.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(m.signup.example) });
    expect(signup.status).toBe(200);
    expect(((await signup.json()) as { intent_id: string }).intent_id).toMatch(/^int_/);

    expect(m.auth).toMatchObject({ type: 'bearer', key_prefix: 'bxs_live_' });
    expect([...m.auth.scopes].sort()).toEqual(['admin', 'receive', 'send']);

    expect(m.pricing).toMatchObject({ currency: 'USD', free_messages: 250, per_message_usd: '0.0016', attachments_per_mb_usd: '0.0012' });

    expect(Array.isArray(m.skills)).toBe(true);
    expect(m.skills.length).toBeGreaterThan(0);
    const documented = new Set(operations().map((o) => `${o.method.toUpperCase()} ${o.path}`));
    for (const s of m.skills as { name: string; description: string; operations: string[] }[]) {
      expect(s.name).toMatch(/^[a-z_]+$/);
      expect(s.description.length).toBeGreaterThan(0);
      expect(s.operations.length).toBeGreaterThan(0);
      // Every operation a skill names exists in the OpenAPI document.
      for (const op of s.operations) expect(documented.has(op), `${s.name}: ${op}`).toBe(true);
    }
  });
});
