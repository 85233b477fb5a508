// MCP at /mcp: the official SDK client and
// the MCP Inspector CLI against a real server. Same keys, scopes, billing and box restrictions as REST; every
// keyed REST procedure is a tool with the same input fields; access can be disabled and enabled per account.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { appRouter } from '@boxes/api';
import { EVENT_TYPES, eventSchemaName } from '@boxes/schemas';
import { mintKey, rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { allEvents } from './push-helpers';

// No worker: a send's hold stays in place, so free_messages_left moves by exactly one per accepted message.
let t: TestServer;
let owner: TestAccount;
beforeAll(async () => {
  t = await startTestServer();
  owner = await signupAccount(t);
});
afterAll(() => t?.stop());

const clients: Client[] = [];
afterAll(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
});

async function connect(key: string): Promise<Client> {
  const client = new Client({ name: 'boxes-e2e', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${key}` } } }));
  clients.push(client);
  return client;
}

type ToolResult = Awaited<ReturnType<Client['callTool']>>;

/** The JSON a tool answered with (its first text content; mail content comes inside the untrusted block). */
function textJson(r: ToolResult): any {
  const content = r.content as { type: string; text: string }[];
  expect(content[0]?.type).toBe('text');
  const text = content[0]!.text;
  const block = /\n<untrusted-mail-content sender_verified="(?:true|false|mixed)">\n(.*)\n<\/untrusted-mail-content>$/s.exec(text);
  return JSON.parse(block ? block[1]! : text);
}

/** A tool call that must succeed: its structured result. */
async function call(client: Client, name: string, args: Record<string, unknown> = {}): Promise<any> {
  const r = await client.callTool({ name, arguments: args });
  expect(r.isError, `${name}: ${JSON.stringify(r.content)}`).toBeFalsy();
  expect(r.structuredContent).toEqual(textJson(r));
  return r.structuredContent;
}

/** A tool call that must be refused: its error object ({code, message, request_id, ...}). */
async function refused(client: Client, name: string, args: Record<string, unknown> = {}): Promise<any> {
  const r = await client.callTool({ name, arguments: args });
  expect(r.isError, `${name} should be refused: ${JSON.stringify(r.content)}`).toBe(true);
  const body = textJson(r);
  expect(body.error.request_id).toMatch(/^req_/);
  return body.error;
}

/** An MCP initialize request over plain fetch (to see the HTTP status and body the SDK hides). */
async function rawInitialize(authorization?: string): Promise<{ status: number; headers: Headers; body: any }> {
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
  if (authorization !== undefined) headers.authorization = authorization;
  const res = await fetch(`${t.url}/mcp`, {
    method: 'POST',
    headers,
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
    }),
  });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* keep the text */
  }
  return { status: res.status, headers: res.headers, body };
}

interface ProcDef {
  _def: { type: string; meta?: { scope?: string; openapi?: { method: string; path: string; protect?: boolean } } };
}
/** Every REST procedure that needs a key, from the router itself. */
const keyedProcedures = Object.entries((appRouter as unknown as { _def: { procedures: Record<string, ProcDef> } })._def.procedures)
  .filter(([, p]) => p._def.meta?.openapi && p._def.meta.openapi.protect !== false)
  .map(([name, p]) => ({
    name,
    tool: name.replace(/\./g, '_'),
    scope: p._def.meta!.scope ?? null,
    method: p._def.meta!.openapi!.method,
    path: p._def.meta!.openapi!.path,
  }));

describe('tools and scopes', () => {
  it('a send+receive key lists the tools it may use, sends with messages_send and reads the send back from events_list', async () => {
    const key = await mintKey(t, owner.apiKey, ['send', 'receive']);
    const client = await connect(key.api_key);
    expect(client.getServerVersion()?.name).toBe('boxes');
    const { tools } = await client.listTools();
    const names = tools.map((x) => x.name);
    expect(names).toEqual(expect.arrayContaining(['messages_send', 'events_list', 'messages_list', 'boxes_list', 'support_ask']));
    // Admin tools are not offered to a key without admin.
    for (const p of keyedProcedures.filter((p) => p.scope === 'admin')) expect(names, p.tool).not.toContain(p.tool);
    const send = tools.find((x) => x.name === 'messages_send')!;
    expect(send.description).toContain('POST /api/v1/messages/send');
    expect(send.inputSchema.required).toEqual(expect.arrayContaining(['to']));

    const sent = await call(client, 'messages_send', { to: 'carol@example.net', subject: 'via mcp', text: 'hello over MCP', context: { task: 'mcp-e2e' } });
    expect(sent.message_id).toMatch(/^msg_/);
    expect(sent.from).toBe(owner.primaryAddress);
    const page = await call(client, 'events_list', { type: 'mail.sent' });
    // The tool declares its output: the event catalogue's union, one schema per type, as in the OpenAPI document
    // (the SDK client checks structuredContent against it).
    const list = tools.find((x) => x.name === 'events_list')!;
    const defs = (list.outputSchema as unknown as { $defs: Record<string, { oneOf?: { $ref: string }[] }> }).$defs;
    expect(defs.Event!.oneOf!.map((r) => r.$ref.replace('#/$defs/', '')).sort()).toEqual(EVENT_TYPES.map(eventSchemaName).sort());
    expect(defs.MailSentEvent).toMatchObject({ properties: { type: { const: 'mail.sent' } } });
    const ev = page.events.find((e: any) => e.data.message_id === sent.message_id);
    expect(ev, JSON.stringify(page.events)).toBeDefined();
    expect(ev.data).toMatchObject({ subject: 'via mcp', to: ['carol@example.net'], context: { task: 'mcp-e2e' } });
    // The same message is visible through REST with the same key.
    const one = await rest(t, 'GET', `/messages/${sent.message_id}`, { key: key.api_key });
    expect(one.status, JSON.stringify(one.body)).toBe(200);
    expect(one.body).toMatchObject({ direction: 'sent', subject: 'via mcp' });
  });

  it('a receive-only key does not see messages_send and is refused with insufficient_scope if it calls it anyway', async () => {
    const key = await mintKey(t, owner.apiKey, ['receive']);
    const client = await connect(key.api_key);
    const names = (await client.listTools()).tools.map((x) => x.name);
    expect(names).toContain('events_list');
    expect(names).not.toContain('messages_send');
    const err = await refused(client, 'messages_send', { to: owner.primaryAddress, subject: 'no', text: 'must not go' });
    expect(err.code).toBe('insufficient_scope');
    expect(err.required_scope).toBe('send');
    // Nothing was sent.
    const sent = await rest(t, 'GET', '/events?type=mail.sent&limit=200', { key: owner.apiKey });
    expect(sent.body.events.filter((e: any) => e.data.subject === 'no')).toHaveLength(0);
  });

  it('an unknown tool and invalid input are refused with the REST error codes', async () => {
    const client = await connect(owner.apiKey);
    expect((await refused(client, 'no_such_tool')).code).toBe('not_found');
    const bad = await refused(client, 'features_create', { title: 'abc', description: 'long enough description here' });
    expect(bad.code).toBe('validation_error');
    expect(bad.fields.map((f: any) => f.path)).toEqual(['title']);
  });
});

describe('authentication', () => {
  it('no key and a bad key get HTTP 401 with getting_started', async () => {
    for (const authorization of [undefined, 'Bearer bxs_live_not_a_real_key_0000000000', 'Basic dXNlcjpwYXNz']) {
      const r = await rawInitialize(authorization);
      expect(r.status, `${authorization}: ${JSON.stringify(r.body)}`).toBe(401);
      expect(r.body.error.code).toBe('unauthorized');
      expect(r.body.error.getting_started).toMatchObject({ signup: `${t.apiBase}/signup/agentic`, confirm: `${t.apiBase}/signup/agentic/confirm` });
      expect(r.headers.get('www-authenticate')).toMatch(/^Bearer/);
    }
    // A revoked key is a bad key.
    const k = await mintKey(t, owner.apiKey, ['receive']);
    expect((await rest(t, 'DELETE', `/account/keys/${k.id}`, { key: owner.apiKey })).status).toBe(200);
    expect((await rawInitialize(`Bearer ${k.api_key}`)).status).toBe(401);
    // The SDK client surfaces it as an HTTP 401 error.
    await expect(connect('bxs_live_not_a_real_key_0000000000')).rejects.toMatchObject({ code: 401 });
  });
});

describe('MCP access: disable and enable', () => {
  it('disable refuses MCP with 403 mcp_disabled, stamps disabled_at and keeps enrolled_at; enable clears it and MCP works again', async () => {
    const a = await signupAccount(t);
    const before = await rest(t, 'GET', '/account/mcp/status', { key: a.apiKey });
    expect(before.status).toBe(200);
    expect(before.body).toMatchObject({ enabled: true, disabled_at: null });
    expect(Date.parse(before.body.enrolled_at)).not.toBeNaN();
    expect((await (await connect(a.apiKey)).listTools()).tools.length).toBeGreaterThan(0);

    // Only admin keys toggle it.
    const sendOnly = await mintKey(t, a.apiKey, ['send', 'receive']);
    expect((await rest(t, 'POST', '/account/mcp/disable', { key: sendOnly.api_key })).body.error.code).toBe('insufficient_scope');

    const off = await rest(t, 'POST', '/account/mcp/disable', { key: a.apiKey });
    expect(off.status, JSON.stringify(off.body)).toBe(200);
    expect(off.body.enabled).toBe(false);
    expect(off.body.enrolled_at).toBe(before.body.enrolled_at);
    expect(Date.parse(off.body.disabled_at)).not.toBeNaN();
    expect((await rest(t, 'GET', '/account/mcp/status', { key: a.apiKey })).body).toEqual(off.body);

    // Every key of the account is refused, with a clear error that says how to enable it again.
    for (const key of [a.apiKey, sendOnly.api_key]) {
      const r = await rawInitialize(`Bearer ${key}`);
      expect(r.status, JSON.stringify(r.body)).toBe(403);
      expect(r.body.error.code).toBe('mcp_disabled');
      expect(r.body.error.message).toContain('/account/mcp/enable');
    }
    await expect(connect(a.apiKey)).rejects.toMatchObject({ code: 403, message: expect.stringContaining('mcp_disabled') });
    // Other accounts are not affected, and REST goes on working for this one.
    expect((await (await connect(owner.apiKey)).listTools()).tools.length).toBeGreaterThan(0);
    expect((await rest(t, 'GET', '/boxes', { key: a.apiKey })).status).toBe(200);

    // Disabling again changes nothing (same stamp, no second event).
    const again = await rest(t, 'POST', '/account/mcp/disable', { key: a.apiKey });
    expect(again.body).toEqual(off.body);

    const on = await rest(t, 'POST', '/account/mcp/enable', { key: a.apiKey });
    expect(on.status, JSON.stringify(on.body)).toBe(200);
    expect(on.body).toEqual({ enabled: true, enrolled_at: before.body.enrolled_at, disabled_at: null });
    const client = await connect(a.apiKey);
    expect(await call(client, 'mcp_status')).toEqual(on.body);

    const types = (await allEvents(t, a.apiKey)).filter((e) => e.type.startsWith('account.mcp.'));
    expect(types.map((e) => e.type)).toEqual(['account.mcp.disabled', 'account.mcp.enabled']);
    expect(types[0]!.data).toMatchObject({ enabled: false, enrolled_at: before.body.enrolled_at, disabled_at: off.body.disabled_at });
    expect(types[1]!.data).toMatchObject({ enabled: true, enrolled_at: before.body.enrolled_at, disabled_at: null });
  });
});

describe('same billing and box restrictions as REST', () => {
  it('a send through MCP uses the free allowance exactly like a REST send', async () => {
    const a = await signupAccount(t);
    const balance = async () => {
      const r = await rest(t, 'GET', '/account/credit/balance', { key: a.apiKey });
      expect(r.status).toBe(200);
      return r.body;
    };
    const start = await balance();
    expect(start.free_messages_left).toBe(250);

    const viaRest = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: 'dave@example.net', subject: 'rest', text: 'one' } });
    expect(viaRest.status, JSON.stringify(viaRest.body)).toBe(200);
    const afterRest = await balance();
    expect(afterRest.free_messages_left).toBe(249);

    const client = await connect(a.apiKey);
    const viaMcp = await call(client, 'messages_send', { to: 'dave@example.net', subject: 'mcp', text: 'two' });
    const afterMcp = await balance();
    expect(afterMcp.free_messages_left).toBe(248);
    expect(afterMcp.credit_balance_cents).toBe(afterRest.credit_balance_cents);
    // The send answers carry the same billing breakdown.
    expect(viaRest.body.billing).toMatchObject({ messages: 1, free_messages_used: 1, paid_messages: 0, free_messages_left: 249 });
    expect(viaMcp.billing).toEqual({ ...viaRest.body.billing, free_messages_left: 248 });
    // The MCP balance tool reads the same numbers as REST.
    expect(await call(client, 'credit_balance')).toEqual(afterMcp);

    // An idempotency_key used over REST replays over MCP (one pipeline), and costs nothing more.
    const first = await rest(t, 'POST', '/messages/send', {
      key: a.apiKey,
      body: { to: 'dave@example.net', subject: 'idem', text: 'three', idempotency_key: 'cross-1' },
    });
    expect(first.status).toBe(200);
    const replay = await call(client, 'messages_send', { to: 'dave@example.net', subject: 'idem', text: 'three', idempotency_key: 'cross-1' });
    expect(replay.message_id).toBe(first.body.message_id);
    expect((await balance()).free_messages_left).toBe(247);
    const different = await refused(client, 'messages_send', { to: 'dave@example.net', subject: 'idem', text: 'not three', idempotency_key: 'cross-1' });
    expect(different.code).toBe('idempotency_key_reused');
  });

  it('a box-restricted key sees and sends from its boxes only, over MCP as over REST', async () => {
    const a = await signupAccount(t);
    const box = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'ops' } });
    expect(box.status, JSON.stringify(box.body)).toBe(200);
    const opsAddress = `ops@${a.domain}`;
    const key = await mintKey(t, a.apiKey, ['send', 'receive', 'admin'], { allowed_boxes: [opsAddress] });
    const client = await connect(key.api_key);

    const listed = await call(client, 'boxes_list');
    expect(listed.boxes.map((b: any) => b.address)).toEqual([opsAddress]);
    expect((await rest(t, 'GET', '/boxes', { key: key.api_key })).body).toEqual(listed);

    const viaMcp = await refused(client, 'messages_send', { from: a.primaryAddress, to: 'erin@example.net', subject: 'x', text: 'from primary' });
    const viaRest = await rest(t, 'POST', '/messages/send', {
      key: key.api_key,
      body: { from: a.primaryAddress, to: 'erin@example.net', subject: 'x', text: 'from primary' },
    });
    expect(viaRest.status).toBe(403);
    expect(viaMcp.code).toBe(viaRest.body.error.code);
    expect(viaMcp.code).toBe('box_restricted_key');

    const ok = await call(client, 'messages_send', { from: opsAddress, to: 'erin@example.net', subject: 'from ops', text: 'allowed' });
    expect(ok.from).toBe(opsAddress);
    // Account-wide changes are refused to a restricted key on both faces, even with admin.
    const boxViaRest = await rest(t, 'POST', '/boxes', { key: key.api_key, body: { address: 'other' } });
    expect(boxViaRest.status).toBe(403);
    expect((await refused(client, 'boxes_create', { address: 'other' })).code).toBe(boxViaRest.body.error.code);
    expect((await refused(client, 'mcp_disable')).code).toBe('box_restricted_key');
    const events = await call(client, 'events_list', { type: 'mail.sent' });
    expect(events.events.map((e: any) => e.data.from)).toEqual([opsAddress]);
  });
});

describe('every REST procedure is a tool', () => {
  it('each keyed procedure appears in tools/list for an all-scopes key, with the input fields of its REST operation', async () => {
    const keys = await rest(t, 'GET', '/account/keys', { key: owner.apiKey });
    const ownerKey = keys.body.keys.find((k: any) => k.is_owner);
    expect([...ownerKey.scopes].sort()).toEqual(['admin', 'receive', 'send']);
    const client = await connect(owner.apiKey);
    const tools = new Map((await client.listTools()).tools.map((x) => [x.name, x]));
    const openapi = (await (await fetch(`${t.url}/openapi.json`)).json()) as any;
    const deref = (s: any): any => (s?.$ref ? deref(openapi.components.schemas[s.$ref.split('/').pop()]) : s);

    expect(keyedProcedures.length).toBeGreaterThan(30);
    const problems: string[] = [];
    for (const p of keyedProcedures) {
      const tool = tools.get(p.tool);
      if (!tool) {
        problems.push(`${p.name} (${p.method} ${p.path}): no tool ${p.tool}`);
        continue;
      }
      const op = openapi.paths[p.path]?.[p.method.toLowerCase()];
      if (!op) {
        problems.push(`${p.name}: no ${p.method} ${p.path} in openapi.json`);
        continue;
      }
      const params = (op.parameters ?? []).map((x: any) => deref(x).name as string);
      const body = deref(op.requestBody?.content?.['application/json']?.schema);
      const fields = [...params, ...Object.keys(body?.properties ?? {})].sort();
      const toolFields = Object.keys(tool.inputSchema.properties ?? {}).sort();
      if (JSON.stringify(fields) !== JSON.stringify(toolFields)) problems.push(`${p.tool}: tool fields [${toolFields}] != REST fields [${fields}]`);
      if (!tool.description?.includes(`${p.method} /api/v1${p.path}`)) problems.push(`${p.tool}: description does not name ${p.method} /api/v1${p.path}`);
      // Required fields agree too.
      const required = [...(op.parameters ?? []).filter((x: any) => deref(x).required).map((x: any) => deref(x).name), ...(body?.required ?? [])].sort();
      const toolRequired = [...(tool.inputSchema.required ?? [])].sort();
      if (JSON.stringify(required) !== JSON.stringify(toolRequired)) problems.push(`${p.tool}: tool required [${toolRequired}] != REST required [${required}]`);
    }
    expect(problems).toEqual([]);
    // And nothing else: every tool is a keyed REST procedure.
    expect([...tools.keys()].sort()).toEqual(keyedProcedures.map((p) => p.tool).sort());
  });
});

describe('MCP Inspector CLI', () => {
  it('lists the tools over Streamable HTTP with the Bearer key', async () => {
    // The full @modelcontextprotocol/inspector, through its own launcher (the `mcp-inspector` bin) in CLI mode.
    // Run asynchronously: the server answering it lives in this process.
    const pkg = fs.realpathSync(path.resolve(import.meta.dirname, '../node_modules/@modelcontextprotocol/inspector'));
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [
        path.join(pkg, 'clients/launcher/build/index.js'),
        '--cli',
        `${t.url}/mcp`,
        '--transport',
        'http',
        '--header',
        `Authorization: Bearer ${owner.apiKey}`,
        '--method',
        'tools/list',
      ],
      // The tool list with its schemas is over a mebibyte (execFile's default buffer).
      { encoding: 'utf8', timeout: 25_000, maxBuffer: 16 * 1024 * 1024, env: { ...process.env, NO_COLOR: '1' } },
    );
    const out = JSON.parse(stdout) as { tools: { name: string; inputSchema: unknown }[] };
    const names = out.tools.map((x) => x.name);
    expect(names).toContain('messages_send');
    expect(names.length).toBe(keyedProcedures.length);
  });
});

describe('/beta/mcp/* (moved paths answer 308)', () => {
  it('POST /beta/mcp/opt-in (admin) and GET /beta/mcp/status answer with the status and change nothing', async () => {
    const a = await signupAccount(t);
    const status = (await rest(t, 'GET', '/account/mcp/status', { key: a.apiKey })).body;
    const optIn = await rest(t, 'POST', '/beta/mcp/opt-in', { key: a.apiKey });
    expect(optIn.status, JSON.stringify(optIn.body)).toBe(200);
    expect(optIn.body).toEqual(status);
    const beta = await rest(t, 'GET', '/beta/mcp/status', { key: a.apiKey });
    expect(beta.status).toBe(200);
    expect(beta.body).toEqual(status);
    // opt-in needs admin; status any key.
    const receiveOnly = await mintKey(t, a.apiKey, ['receive']);
    expect((await rest(t, 'POST', '/beta/mcp/opt-in', { key: receiveOnly.api_key })).body.error.code).toBe('insufficient_scope');
    expect((await rest(t, 'GET', '/beta/mcp/status', { key: receiveOnly.api_key })).body).toEqual(status);

    // A no-op even while disabled: opting in does not enable it again.
    const off = (await rest(t, 'POST', '/account/mcp/disable', { key: a.apiKey })).body;
    const optInOff = await rest(t, 'POST', '/beta/mcp/opt-in', { key: a.apiKey });
    expect(optInOff.body).toEqual(off);
    expect((await rest(t, 'GET', '/beta/mcp/status', { key: a.apiKey })).body).toEqual(off);
    expect((await rawInitialize(`Bearer ${a.apiKey}`)).status).toBe(403);
    const types = (await allEvents(t, a.apiKey)).map((e) => e.type).filter((x) => x.startsWith('account.mcp.'));
    expect(types).toEqual(['account.mcp.disabled']);
  });

  it('other /beta/mcp/* paths redirect with 308 to /account/mcp/*, keeping the method; followed, POST /beta/mcp/disable disables', async () => {
    const a = await signupAccount(t);
    const auth = { authorization: `Bearer ${a.apiKey}` };
    for (const [method, from, to] of [
      ['POST', '/beta/mcp/disable', '/account/mcp/disable'],
      ['POST', '/beta/mcp/enable', '/account/mcp/enable'],
      ['GET', '/beta/mcp/status/extra?x=1', '/account/mcp/status/extra?x=1'],
      ['POST', '/beta/mcp/disable?reason=test', '/account/mcp/disable?reason=test'],
    ] as const) {
      const r = await fetch(`${t.apiBase}${from}`, { method, headers: auth, redirect: 'manual' });
      expect(r.status, `${method} ${from}`).toBe(308);
      expect(new URL(r.headers.get('location')!, `${t.apiBase}${from}`).toString(), `${method} ${from}`).toBe(`${t.apiBase}${to}`);
    }
    // Not followed: nothing changed.
    expect((await rest(t, 'GET', '/account/mcp/status', { key: a.apiKey })).body.enabled).toBe(true);

    // Followed (a 308 keeps the method and the body): the account is really disabled, then enabled again.
    const disabled = await fetch(`${t.apiBase}/beta/mcp/disable`, { method: 'POST', headers: auth });
    expect(disabled.status).toBe(200);
    expect(disabled.redirected).toBe(true);
    expect(disabled.url).toBe(`${t.apiBase}/account/mcp/disable`);
    expect(((await disabled.json()) as { enabled: boolean }).enabled).toBe(false);
    expect((await rest(t, 'GET', '/account/mcp/status', { key: a.apiKey })).body.enabled).toBe(false);
    expect((await rawInitialize(`Bearer ${a.apiKey}`)).status).toBe(403);
    const enabled = await fetch(`${t.apiBase}/beta/mcp/enable`, { method: 'POST', headers: auth });
    expect(enabled.status).toBe(200);
    expect(((await enabled.json()) as { enabled: boolean; disabled_at: string | null }).disabled_at).toBeNull();
    expect((await rawInitialize(`Bearer ${a.apiKey}`)).status).toBe(200);
    const types = (await allEvents(t, a.apiKey)).map((e) => e.type).filter((x) => x.startsWith('account.mcp.'));
    expect(types).toEqual(['account.mcp.disabled', 'account.mcp.enabled']);
  });

  it('POST /beta/mcp/feedback takes free-form notes and returns a receipt', async () => {
    const a = await signupAccount(t);
    const notes = {
      notes: 'tool descriptions are clear; want a tool for threads',
      client: 'my-agent/1.0',
      rating: 4,
      tools_used: ['messages_send'],
      nested: { ok: true },
    };
    const r = await rest(t, 'POST', '/beta/mcp/feedback', { key: a.apiKey, body: notes });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.receipt_id).toMatch(/^fb_/);
    expect(Date.parse(r.body.received_at)).not.toBeNaN();
    const stored = await t.db.mcpFeedback.findUnique({ where: { id: r.body.receipt_id } });
    expect(stored?.notes).toEqual(notes);
    expect(stored?.accountId).toBe(a.accountId);
    // Any key may send it (it is not redirected); without a key it is 401.
    const receiveOnly = await mintKey(t, a.apiKey, ['receive']);
    const second = await rest(t, 'POST', '/beta/mcp/feedback', { key: receiveOnly.api_key, body: { notes: 'again' } });
    expect(second.status).toBe(200);
    expect(second.body.receipt_id).not.toBe(r.body.receipt_id);
    expect((await rest(t, 'POST', '/beta/mcp/feedback', { body: { notes: 'anonymous' } })).status).toBe(401);
    // Over MCP too.
    const client = await connect(a.apiKey);
    expect((await call(client, 'mcp_feedback', { notes: 'via mcp' })).receipt_id).toMatch(/^fb_/);
  });
});
