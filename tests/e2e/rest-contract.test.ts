/**
 * The REST error contract of /api/v1 over real HTTP: malformed or non-object JSON, unknown fields, wrong
 * methods, unknown paths, non-JSON and oversized bodies, and the one error shape
 * {"error": {"code", "message", "request_id", ...}} that never carries a stack trace. Also the tRPC face's
 * error data (data.boxes.code).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';

let t: TestServer;
let a: TestAccount;
beforeAll(async () => {
  t = await startTestServer();
  a = await signupAccount(t);
});
afterAll(() => t?.stop());

interface Raw {
  status: number;
  headers: Headers;
  text: string;
  json: any;
}

async function call(
  method: string,
  path: string,
  init: { key?: string | null; body?: RequestInit['body']; headers?: Record<string, string> } = {},
): Promise<Raw> {
  const headers: Record<string, string> = { ...init.headers };
  const key = init.key === undefined ? a.apiKey : init.key;
  if (key) headers.authorization = `Bearer ${key}`;
  const res = await fetch(`${t.apiBase}${path}`, { method, headers, ...(init.body !== undefined ? { body: init.body } : {}) });
  const text = await res.text();
  if (res.status >= 400) errorsMet.push({ method, path: new URL(res.url).pathname.slice(new URL(t.apiBase).pathname.length), status: res.status, text });
  let json: unknown = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

const JSON_CT = { 'content-type': 'application/json' };
/** Every error answer this file meets through call(), checked against the document at the end. */
const errorsMet: { method: string; path: string; status: number; text: string }[] = [];

/** Asserts the one REST error shape and returns error. */
function expectErrorShape(r: Raw, status: number, code: string) {
  expect(r.status).toBe(status);
  expect(r.headers.get('content-type')).toMatch(/^application\/json/);
  expect(r.json).toBeTypeOf('object');
  expect(Object.keys(r.json)).toEqual(['error']);
  const e = r.json.error;
  expect(e.code).toBe(code);
  expect(typeof e.message).toBe('string');
  expect(e.message.length).toBeGreaterThan(0);
  expect(e.request_id).toMatch(/^req_[0-9a-z]+$/);
  expect(r.headers.get('x-request-id')).toBe(e.request_id);
  expectNoStack(r.text);
  return e as { code: string; message: string; request_id: string; [k: string]: unknown };
}

function expectNoStack(text: string) {
  expect(text).not.toMatch(/\bat [^\n"]*\(?[^\s"()]+:\d+:\d+\)?/); // "at fn (file:line:col)" frames
  expect(text).not.toContain('node_modules');
  expect(text).not.toMatch(/\.(ts|js|mjs):\d+/);
  expect(text).not.toMatch(/"stack"\s*:/);
  expect(text).not.toMatch(/prisma|invocation/i);
}

describe('bodies', () => {
  it('malformed JSON -> 400 invalid_json', async () => {
    for (const body of ['{"address":', '{address: "x"}', "{'address':'x'}", '{"address":"x",}']) {
      const r = await call('POST', '/boxes', { body, headers: JSON_CT });
      const e = expectErrorShape(r, 400, 'invalid_json');
      expect(e.message).toMatch(/JSON/);
    }
  });

  it('a JSON array, string, number or null body -> 400 naming the body', async () => {
    for (const body of ['[{"address":"x"}]', '"x"', '42', 'null', 'true']) {
      const r = await call('POST', '/boxes', { body, headers: JSON_CT });
      const e = expectErrorShape(r, 400, 'validation_error');
      expect(e.message).toMatch(/object/);
      expect(e.fields).toEqual([{ path: '(body)', message: expect.stringMatching(/object/) }]);
    }
  });

  it('an unknown body field -> 400 naming it, and nothing is created', async () => {
    const r = await call('POST', '/boxes', { body: JSON.stringify({ address: 'unk', colour: 'red' }), headers: JSON_CT });
    const e = expectErrorShape(r, 400, 'validation_error');
    expect(e.message).toContain('colour');
    expect(JSON.stringify(e.fields)).toContain('colour');
    const boxes = await call('GET', '/boxes');
    expect(boxes.json.boxes.map((b: { local_part: string }) => b.local_part)).not.toContain('unk');
  });

  it('an unknown query parameter -> 400 naming it', async () => {
    const r = await call('GET', '/events?colour=red');
    const e = expectErrorShape(r, 400, 'validation_error');
    expect(e.message).toContain('colour');
  });

  it('a query parameter or DELETE body member named like a method of Object -> 400 naming it, not a 500', async () => {
    for (const name of ['toString', 'constructor', 'valueOf', 'hasOwnProperty', '__proto__']) {
      const listed = await call('GET', `/boxes?${name}=1`);
      expect(expectErrorShape(listed, 400, 'validation_error').message).toContain(name);
      const twice = await call('GET', `/events?${name}=1&${name}=2`);
      expect(expectErrorShape(twice, 400, 'validation_error').message).toContain(name);
      const removed = await call('DELETE', `/boxes/${a.keyId}`, { body: `{"${name}": 1.5}`, headers: JSON_CT });
      expect(expectErrorShape(removed, 400, 'validation_error').message).toContain(name);
    }
    // A parameter given several times is a list, as before: where one value belongs, a 400 naming it.
    const r = await call('GET', '/events?limit=1&limit=2');
    expect(expectErrorShape(r, 400, 'validation_error').message).toContain('limit');
    expect((await call('GET', '/events?limit=1')).status).toBe(200);
  });

  it('the key "__proto__" in custom headers or a context object -> 400 naming it; keys named like other members of Object are kept', async () => {
    const send = (extra: string) => call('POST', '/messages/send', { body: `{"to":"proto@example.net","subject":"s","text":"t",${extra}}`, headers: JSON_CT });
    for (const [extra, path] of [
      ['"headers":{"__proto__":"v"}', 'headers.__proto__'],
      ['"context":{"__proto__":{"polluted":true}}', 'context.__proto__'],
      ['"context":{"ok":[{"__proto__":1}]}', 'context.ok.0.__proto__'],
    ] as const) {
      const e = expectErrorShape(await send(extra), 400, 'validation_error');
      expect(e.fields).toEqual([{ path, message: expect.stringContaining('"__proto__" is not accepted') }]);
    }
    const ok = await send('"headers":{"toString":"v"},"context":{"constructor":1,"valueOf":{"hasOwnProperty":"x"}}');
    expect(ok.status, JSON.stringify(ok.json)).toBe(200);
    const m = await call('GET', `/messages/${ok.json.message_id}`);
    expect(m.json.body.headers).toEqual({ toString: 'v' });
    expect(m.json.context).toEqual({ constructor: 1, valueOf: { hasOwnProperty: 'x' } });
  });

  it('a field of the wrong type -> 400 naming the field', async () => {
    const box = await call('POST', '/boxes', { body: JSON.stringify({ address: 'typed' }), headers: JSON_CT });
    expect(box.status).toBe(200);
    const r = await call('PUT', `/boxes/${box.json.id}/signature`, { body: JSON.stringify({ signature: 5 }), headers: JSON_CT });
    const e = expectErrorShape(r, 400, 'validation_error');
    expect(e.fields).toEqual([{ path: 'signature', message: expect.any(String) }]);
    expect(e.message).toMatch(/^signature: /);
  });

  it('an out-of-range or malformed cursor is a 400, never a 500', async () => {
    for (const since of ['abc', '-1', '1.5', '2147483648', '999999999999']) {
      const r = await call('GET', `/events?since=${since}`);
      expectErrorShape(r, 400, 'invalid_cursor');
    }
  });

  it('a non-JSON content type with a body -> 415', async () => {
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/xml']) {
      const r = await call('POST', '/boxes', { body: 'address=ct', headers: { 'content-type': type } });
      const e = expectErrorShape(r, 415, 'unsupported_media_type');
      expect(e.message).toContain('application/json');
    }
    // fetch labels a bare string body text/plain: also 415, even when the text is JSON.
    const bare = await call('POST', '/boxes', { body: '{"address":"ct"}' });
    expectErrorShape(bare, 415, 'unsupported_media_type');
  });

  it('JSON content types with parameters or a +json suffix are accepted', async () => {
    const r1 = await call('POST', '/boxes', { body: '{"address":"cs1"}', headers: { 'content-type': 'application/json; charset=utf-8' } });
    expect([r1.status, r1.json.local_part]).toEqual([200, 'cs1']);
    const r2 = await call('POST', '/boxes', { body: '{"address":"cs2"}', headers: { 'content-type': 'application/merge-patch+json' } });
    expect([r2.status, r2.json.local_part]).toEqual([200, 'cs2']);
  });

  it('a body over 30 MiB -> 413, with and without a Content-Length', async () => {
    const size = 30 * 1024 * 1024 + 1024;
    const big = new Uint8Array(size).fill(0x20); // JSON whitespace: only the size is wrong
    const withLength = await call('POST', '/boxes', { body: big, headers: JSON_CT });
    expectErrorShape(withLength, 413, 'payload_too_large');

    const chunk = 1024 * 1024;
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        for (let off = 0; off < size; off += chunk) c.enqueue(big.subarray(off, Math.min(size, off + chunk)));
        c.close();
      },
    });
    const res = await fetch(`${t.apiBase}/boxes`, {
      method: 'POST',
      headers: { ...JSON_CT, authorization: `Bearer ${a.apiKey}` },
      body: stream,
      duplex: 'half',
    } as RequestInit & { duplex: 'half' });
    const text = await res.text();
    expectErrorShape({ status: res.status, headers: res.headers, text, json: JSON.parse(text) }, 413, 'payload_too_large');
  });

  it('a JSON body is not coerced: a string where a number belongs is a 400, on REST and then on tRPC', async () => {
    const put = (body: unknown) => call('PUT', '/account/credit/alert-thresholds', { body: JSON.stringify(body), headers: JSON_CT });
    for (const value of ['', '12', 'true']) {
      const e = expectErrorShape(await put({ first_cents: value, second_cents: null }), 400, 'validation_error');
      expect(e.fields).toEqual([{ path: 'first_cents', message: expect.any(String) }]);
    }
    const ok = await put({ first_cents: 12, second_cents: null });
    expect([ok.status, ok.json.first_cents]).toEqual([200, 12]);
    // The same schema on the tRPC face, after REST calls have been made with it.
    const res = await fetch(`${t.url}/trpc/credit.setAlertThresholds`, {
      method: 'POST',
      headers: { ...JSON_CT, authorization: `Bearer ${a.apiKey}` },
      body: JSON.stringify({ first_cents: '7', second_cents: null }),
    });
    expect(res.status).toBe(400);
    // A query string is text by nature: there numbers are read from it.
    expect((await call('GET', '/events?limit=2')).status).toBe(200);
  });

  it('an empty POST body counts as {} (a validation error for the missing field, not a parse error)', async () => {
    const r = await call('POST', '/boxes', { body: '', headers: JSON_CT });
    const e = expectErrorShape(r, 400, 'validation_error');
    expect(e.message).toMatch(/^address: /);
  });
});

describe('routes and methods', () => {
  it('an unknown path -> 404, with or without a key; without a working key it points at the signup (getting_started)', async () => {
    for (const path of ['/nope', '/boxes/x/nope', '/v1/boxes', '/', '']) {
      // The API base itself (/api/v1 and /api/v1/) is no route either.
      expect(expectErrorShape(await call('GET', path), 404, 'not_found').getting_started, path).toBeUndefined();
      for (const key of [null, 'bxs_live_not-a-key']) {
        const e = expectErrorShape(await call('GET', path, { key }), 404, 'not_found');
        expect(e.getting_started, `${path} with key ${key}`).toMatchObject({ signup: `${t.apiBase}/signup/agentic`, openapi: `${t.url}/openapi.json` });
      }
    }
    expectErrorShape(await call('POST', '/nope', { body: '{}', headers: JSON_CT }), 404, 'not_found');
    expect(expectErrorShape(await call('POST', '/nope', { key: null, body: '{}', headers: JSON_CT }), 404, 'not_found').getting_started).toBeDefined();
  });

  it('a wrong method on a known path -> 405 with an Allow header', async () => {
    const cases: [string, string, string[]][] = [
      ['PATCH', '/boxes', ['GET', 'POST']],
      ['DELETE', '/boxes', ['GET', 'POST']],
      ['GET', '/boxes/box_123', ['DELETE', 'PATCH']],
      ['POST', '/events', ['GET']],
      ['GET', '/signup/agentic', ['POST']],
      ['OPTIONS', '/events/verify', ['GET']],
    ];
    for (const [method, path, allow] of cases) {
      const r = await call(method, path, { key: null });
      const e = expectErrorShape(r, 405, 'method_not_allowed');
      const header = r.headers.get('allow');
      expect(header, `${method} ${path}`).not.toBeNull();
      expect(
        header!
          .split(',')
          .map((s) => s.trim())
          .sort(),
      ).toEqual(allow);
      expect([...(e.allow as string[])].sort()).toEqual(allow);
    }
  });

  it('a literal path is its own route for every method: 405 with the methods that exist there', async () => {
    // /messages/send also fits GET and DELETE /messages/{id}, and /account/credit/topup/mpp GET /topup/{id}.
    const cases: [string, string, string[]][] = [
      ['GET', '/messages/send', ['POST']],
      ['PATCH', '/messages/send', ['POST']],
      ['DELETE', '/messages/send', ['POST']],
      ['GET', '/account/credit/topup/mpp', ['POST']],
    ];
    for (const [method, path, allow] of cases) {
      const r = await call(method, path);
      const e = expectErrorShape(r, 405, 'method_not_allowed');
      expect(r.headers.get('allow'), `${method} ${path}`).toBe(allow.join(', '));
      expect(e.allow).toEqual(allow);
    }
    // The parameterised route still answers for every other id.
    expectErrorShape(await call('GET', '/messages/msg_sendx'), 404, 'not_found');
  });

  it('path parameters are percent-decoded once, as UTF-8', async () => {
    for (const [raw, decoded] of [
      ['box_%C3%A9', 'box_é'],
      ['box_%20x', 'box_ x'],
      ['box_%41', 'box_A'],
      ['box_%2540', 'box_%40'],
    ]) {
      const e = expectErrorShape(await call('GET', `/boxes/${raw}/policy`), 404, 'not_found');
      expect(e.message).toBe(`box ${decoded} not found`);
    }
    // 14 characters (64 once encoded) against the id's limit of 40: a lookup, not a length error.
    expectErrorShape(await call('GET', `/boxes/box_${'%C3%A9'.repeat(10)}/policy`), 404, 'not_found');
    expectErrorShape(await call('GET', `/boxes/box_${'%C3%A9'.repeat(40)}/policy`), 400, 'validation_error');
    // Not UTF-8, or a control character once decoded: refused, naming the parameter.
    const bad = expectErrorShape(await call('GET', '/boxes/box_%C3/policy'), 400, 'validation_error');
    expect(bad.fields).toEqual([{ path: 'id', message: expect.stringMatching(/UTF-8/) }]);
    expectErrorShape(await call('GET', '/boxes/box_%0A/policy'), 400, 'validation_error');
  });

  it('a request line over the header limit -> 431 with the error body and a request id', async () => {
    const r = await call('GET', `/boxes?x=${'a'.repeat(20_000)}`);
    const e = expectErrorShape(r, 431, 'headers_too_large');
    expect(e.message).toMatch(/bytes/);
  });

  it('HEAD on a GET route answers like GET without a body', async () => {
    const get = await call('GET', '/boxes');
    expect(get.status).toBe(200);
    const res = await fetch(`${t.apiBase}/boxes`, { method: 'HEAD', headers: { authorization: `Bearer ${a.apiKey}` } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.headers.get('x-request-id')).toMatch(/^req_/);
    expect(await res.text()).toBe('');

    const unauth = await fetch(`${t.apiBase}/boxes`, { method: 'HEAD' });
    expect(unauth.status).toBe(401);
    expect(unauth.headers.get('x-request-id')).toMatch(/^req_/);
    expect(await unauth.text()).toBe('');
  });

  it('DELETE without a body and without a content type works', async () => {
    const box = await call('POST', '/boxes', { body: JSON.stringify({ address: 'gone' }), headers: JSON_CT });
    expect(box.status).toBe(200);
    const res = await fetch(`${t.apiBase}/boxes/${box.json.id}`, { method: 'DELETE', headers: { authorization: `Bearer ${a.apiKey}` } });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ id: box.json.id, deleted: true });
    const again = await call('DELETE', `/boxes/${box.json.id}`);
    expectErrorShape(again, 404, 'not_found');
  });

  it('successful responses carry x-request-id too, and ids differ per request', async () => {
    const r1 = await call('GET', '/boxes');
    const r2 = await call('GET', '/boxes');
    expect(r1.headers.get('x-request-id')).toMatch(/^req_/);
    expect(r2.headers.get('x-request-id')).toMatch(/^req_/);
    expect(r1.headers.get('x-request-id')).not.toBe(r2.headers.get('x-request-id'));
  });
});

describe('auth errors keep the shape', () => {
  it('no key -> 401 with getting_started; a bad key -> 401; a wrong scope -> 403', async () => {
    const none = expectErrorShape(await call('GET', '/events', { key: null }), 401, 'unauthorized');
    expect(none.getting_started).toMatchObject({ signup: `${t.apiBase}/signup/agentic` });
    const bad = expectErrorShape(await call('GET', '/events', { key: 'bxs_live_nope' }), 401, 'unauthorized');
    expect(bad.getting_started).toBeDefined();
    const malformed = expectErrorShape(await call('GET', '/events', { key: null, headers: { authorization: 'Basic abc' } }), 401, 'unauthorized');
    expect(malformed.message).toContain('Bearer');

    const send = await fetch(`${t.apiBase}/account/keys`, {
      method: 'POST',
      headers: { ...JSON_CT, authorization: `Bearer ${a.apiKey}` },
      body: JSON.stringify({ label: 'send-only', scopes: ['send'] }),
    });
    const sendKey = ((await send.json()) as { api_key: string }).api_key;
    const scoped = expectErrorShape(await call('GET', '/events', { key: sendKey }), 403, 'insufficient_scope');
    expect(scoped.required_scope).toBe('receive');
  });
});

describe('tRPC errors', () => {
  async function trpc(path: string, init: RequestInit = {}) {
    const res = await fetch(`${t.url}/trpc/${path}`, init);
    const text = await res.text();
    expectNoStack(text);
    const body = JSON.parse(text) as {
      error: { message: string; data: { boxes: { code: string; status: number; request_id: string; details: Record<string, unknown> } } };
    };
    return { res, body, boxes: body.error.data.boxes };
  }

  it('no key: data.boxes.code unauthorized with getting_started and the request id', async () => {
    const { res, body, boxes } = await trpc('boxes.list');
    expect(res.status).toBe(401);
    expect(boxes).toMatchObject({ code: 'unauthorized', status: 401 });
    expect(boxes.request_id).toBe(res.headers.get('x-request-id'));
    expect(boxes.details.getting_started).toMatchObject({ signup: `${t.apiBase}/signup/agentic` });
    expect(body.error.data).not.toHaveProperty('stack');
  });

  it('unknown input field: data.boxes.code validation_error naming it', async () => {
    const { res, body, boxes } = await trpc('boxes.create', {
      method: 'POST',
      headers: { ...JSON_CT, authorization: `Bearer ${a.apiKey}` },
      body: JSON.stringify({ address: 'x', colour: 'red' }),
    });
    expect(res.status).toBe(400);
    expect(boxes.code).toBe('validation_error');
    expect(body.error.message).toContain('colour');
    expect(boxes.request_id).toBe(res.headers.get('x-request-id'));
  });

  it('a core AppError keeps its code: invalid_cursor, box_exists, not_found', async () => {
    const key = { authorization: `Bearer ${a.apiKey}` };
    const cursor = await trpc(`events.list?input=${encodeURIComponent(JSON.stringify({ since: 'zz' }))}`, { headers: key });
    expect([cursor.res.status, cursor.boxes.code, cursor.boxes.details.field]).toEqual([400, 'invalid_cursor', 'since']);

    const create = () => fetch(`${t.url}/trpc/boxes.create`, { method: 'POST', headers: { ...JSON_CT, ...key }, body: JSON.stringify({ address: 'dup' }) });
    expect((await create()).status).toBe(200);
    const dup = await trpc('boxes.create', { method: 'POST', headers: { ...JSON_CT, ...key }, body: JSON.stringify({ address: 'dup' }) });
    expect([dup.res.status, dup.boxes.code]).toEqual([409, 'box_exists']);

    const missing = await trpc('boxes.delete', { method: 'POST', headers: { ...JSON_CT, ...key }, body: JSON.stringify({ id: 'box_nope' }) });
    expect([missing.res.status, missing.boxes.code]).toEqual([404, 'not_found']);
  });

  it('transport errors are mapped too: unknown procedure, wrong method, malformed JSON', async () => {
    const unknown = await trpc('nope.nothing');
    expect([unknown.res.status, unknown.boxes.code]).toEqual([404, 'not_found']);

    const wrongMethod = await trpc('boxes.create', { headers: { authorization: `Bearer ${a.apiKey}` } });
    expect([wrongMethod.res.status, wrongMethod.boxes.code]).toEqual([405, 'method_not_allowed']);

    const malformed = await trpc('boxes.create', { method: 'POST', headers: { ...JSON_CT, authorization: `Bearer ${a.apiKey}` }, body: '{"address":' });
    expect(malformed.res.status).toBe(400);
    expect(malformed.boxes.code).toBe('invalid_json');
    expect(malformed.boxes.request_id).toBe(malformed.res.headers.get('x-request-id'));
  });
});

describe('every error is documented for its operation', () => {
  let doc: Record<string, any>;
  beforeAll(async () => {
    doc = (await (await fetch(`${t.url}/openapi.json`)).json()) as Record<string, any>;
  });

  /** The answer's status is listed for the operation, and its error.code among that status's x-error-codes. */
  function expectDocumented(method: string, template: string, r: Raw, status: number, code: string) {
    expectErrorShape(r, status, code);
    const response = doc.paths[template]?.[method.toLowerCase()]?.responses?.[String(status)];
    expect(response, `${method} ${template} ${status} is not in the document`).toBeDefined();
    expect(response['x-error-codes'], `${method} ${template} ${status}`).toContain(code);
    expect(response.description).toContain(code);
  }

  it('404 on POST routes with an id, 409 with their codes, 402 where credit or a wallet is missing', async () => {
    const post = (path: string, body: unknown = {}) => call('POST', path, { body: JSON.stringify(body), headers: JSON_CT });
    expectDocumented('POST', '/messages/{id}/reply', await post('/messages/msg_nope/reply', { text: 'hi' }), 404, 'not_found');
    expectDocumented('POST', '/messages/{id}/cancel', await post('/messages/msg_nope/cancel'), 404, 'not_found');
    expectDocumented('POST', '/reviews/{id}/withdraw', await post('/reviews/rev_nope/withdraw'), 404, 'not_found');
    expectDocumented('POST', '/boxes/{id}/forwards', await post('/boxes/box_nope/forwards', { to: 'owner@example.com' }), 404, 'not_found');

    expect((await post('/boxes', { address: 'twice' })).status).toBe(200);
    expectDocumented('POST', '/boxes', await post('/boxes', { address: 'twice' }), 409, 'box_exists');
    const primary = (await call('GET', '/boxes')).json.boxes.find((b: { is_primary: boolean }) => b.is_primary);
    expectDocumented('DELETE', '/boxes/{id}', await call('DELETE', `/boxes/${primary.id}`), 409, 'primary_box');
    // A free subdomain has no editable zone.
    expectDocumented('GET', '/domain/dns', await call('GET', '/domain/dns'), 409, 'dns_not_managed');

    expectDocumented('POST', '/account/trailer/buyout', await post('/account/trailer/buyout'), 402, 'payment_required');
    expectDocumented('POST', '/account/credit/topup/mpp', await post('/account/credit/topup/mpp', { amount_cents: 500 }), 402, 'wallet_not_enrolled');
  });

  it('the transport errors too: 413, 415, 400 invalid_json and 431 are listed where they can happen', async () => {
    expectDocumented('POST', '/boxes', await call('POST', '/boxes', { body: '{"address":', headers: JSON_CT }), 400, 'invalid_json');
    expectDocumented(
      'POST',
      '/boxes',
      await call('POST', '/boxes', { body: 'address=x', headers: { 'content-type': 'text/plain' } }),
      415,
      'unsupported_media_type',
    );
    expectDocumented('GET', '/boxes', await call('GET', `/boxes?x=${'a'.repeat(20_000)}`), 431, 'headers_too_large');
  });

  it('every error answer met in this file is listed for its operation, status and code', () => {
    // The document's path a request reaches: of those it fits, the one literal furthest from the left.
    const templateOf = (path: string) => {
      const fits = Object.keys(doc.paths).filter((p) => new RegExp(`^${p.replace(/\{[^}]+\}/g, '[^/]+')}$`).test(path));
      const rank = (p: string) =>
        p
          .split('/')
          .map((seg) => (seg.startsWith('{') ? '1' : '0'))
          .join('');
      return fits.sort((x, y) => rank(x).localeCompare(rank(y)))[0];
    };
    let checked = 0;
    for (const e of errorsMet) {
      const template = templateOf(e.path.replace(/\/$/, ''));
      const op = template && doc.paths[template][e.method.toLowerCase()];
      // An unknown path (404) or a method the path does not have (405) is no operation's answer.
      if (!op) continue;
      const code = (JSON.parse(e.text) as { error: { code: string } }).error.code;
      const response = op.responses[String(e.status)];
      expect(response, `${e.method} ${template} answered ${e.status} ${code}, not in the document`).toBeDefined();
      expect(response['x-error-codes'], `${e.method} ${template} ${e.status}`).toContain(code);
      checked++;
    }
    expect(checked).toBeGreaterThan(30);
  });
});
