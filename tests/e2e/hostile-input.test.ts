// Strings the store cannot hold or that no caller means (NUL, control characters outside bodies, unpaired
// surrogates, over-long values) are 400 validation_error naming the field, on REST, tRPC and MCP alike.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';

let t: TestServer;
let a: TestAccount;
let boxId: string;
beforeAll(async () => {
  t = await startTestServer();
  a = await signupAccount(t);
  boxId = (await rest(t, 'GET', '/boxes', { key: a.apiKey })).body.boxes[0].id;
});
afterAll(() => t?.stop());

const NUL = '\u0000';

function expectRefused(r: { status: number; body: any }, path: string, pattern: RegExp) {
  expect(r.status, JSON.stringify(r.body)).toBe(400);
  expect(r.body.error.code).toBe('validation_error');
  expect(r.body.error.fields).toEqual(expect.arrayContaining([{ path, message: expect.stringMatching(pattern) }]));
  expect(JSON.stringify(r.body)).not.toMatch(/stack|at \//);
}

describe('REST', () => {
  it('refuses NUL in every field the first report named (500 before)', async () => {
    expectRefused(await rest(t, 'POST', '/account/keys', { key: a.apiKey, body: { label: `bot${NUL}`, scopes: ['send'] } }), 'label', /NUL/);
    expectRefused(
      await rest(t, 'POST', '/feature-requests', {
        key: a.apiKey,
        body: { title: `Scheduled ${NUL}sends`, description: 'Let me give send_at so a message goes out later.' },
      }),
      'title',
      /NUL/,
    );
    for (const [field, body] of [
      ['subject', { to: a.primaryAddress, subject: `hi${NUL}`, text: 'x' }],
      ['text', { to: a.primaryAddress, text: `body${NUL}` }],
      ['context.ticket', { to: a.primaryAddress, text: 'x', context: { ticket: `4${NUL}2` } }],
    ] as const) {
      expectRefused(await rest(t, 'POST', '/messages/send', { key: a.apiKey, body }), field, /NUL/);
    }
    expectRefused(await rest(t, 'PUT', `/boxes/${boxId}/signature`, { key: a.apiKey, body: { signature: `-- ${NUL}` } }), 'signature', /NUL/);
    expectRefused(await rest(t, 'POST', '/support/questions', { key: a.apiKey, body: { subject: 'Help', body: `a${NUL}b` } }), 'body', /NUL/);
    expectRefused(
      await rest(t, 'POST', '/support/questions', { key: a.apiKey, body: { subject: 'Help', body: 'ok', context: { [`k${NUL}`]: 1 } } }),
      `context.k\\u0000`,
      /key .*NUL/,
    );
    // Nothing was stored or announced.
    const events = await rest(t, 'GET', '/events', { key: a.apiKey });
    expect(events.body.events.map((e: { type: string }) => e.type)).not.toContain('mail.sent');
  });

  it('refuses control characters in names, labels, addresses and headers, and keeps them in bodies', async () => {
    expectRefused(
      await rest(t, 'POST', '/account/keys', { key: a.apiKey, body: { label: 'two\nlines', scopes: ['send'] } }),
      'label',
      /control characters \(U\+000A/,
    );
    expectRefused(await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'bill\ting' } }), 'address', /U\+0009/);
    expectRefused(
      await rest(t, 'POST', '/messages/send', {
        key: a.apiKey,
        body: { to: a.primaryAddress, text: 'x', headers: { 'X-Campaign': 'a\r\nBcc: x@example.com' } },
      }),
      'headers.X-Campaign',
      /U\+000D/,
    );
    expectRefused(
      await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: [a.primaryAddress, `b\u001b@example.com`], text: 'x' } }),
      'to.1',
      /U\+001B/,
    );
    const sent = await rest(t, 'POST', '/messages/send', {
      key: a.apiKey,
      body: { to: a.primaryAddress, subject: 'Ünïcödé 日本語 \ud83d\ude00', text: 'line 1\r\nline 2\n\tindented\f', html: '<p>\n</p>' },
    });
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    const sig = await rest(t, 'PUT', `/boxes/${boxId}/signature`, { key: a.apiKey, body: { signature: '-- \nBilling bot\n' } });
    expect(sig.status).toBe(200);
  });

  it('refuses unpaired surrogates (as JSON escapes) and over-long strings, in bodies, queries and paths', async () => {
    const lone = await rest(t, 'POST', '/account/keys', {
      key: a.apiKey,
      rawBody: '{"label":"bot\\ud800","scopes":["send"]}',
      headers: { 'content-type': 'application/json' },
    });
    expectRefused(lone, 'label', /surrogate/);
    expectRefused(await rest(t, 'POST', '/account/keys', { key: a.apiKey, body: { label: 'x'.repeat(101), scopes: ['send'] } }), 'label', /100/);
    expectRefused(await rest(t, 'GET', `/events?type=mail.sent%00`, { key: a.apiKey }), 'type', /NUL/);
    expectRefused(await rest(t, 'GET', `/events?limit=5%0A`, { key: a.apiKey }), 'limit', /control/);
    expectRefused(await rest(t, 'GET', `/messages/msg_${'%00'}x`, { key: a.apiKey }), 'id', /NUL/);
    expectRefused(await rest(t, 'GET', `/suppression/a%0Ab@example.com`, { key: a.apiKey }), 'address', /control/);
    expectRefused(await rest(t, 'GET', `/messages?since=${'9'.repeat(65)}`, { key: a.apiKey }), 'since', /64/);
  });

  it('refuses query parameters named after Object.prototype members (500 before)', async () => {
    for (const name of ['__proto__', 'constructor', 'toString']) {
      expectRefused(await rest(t, 'GET', `/account/credit/usage?${name}=x`, { key: a.apiKey }), name, /not a parameter/);
    }
  });

  it('says nothing about the input of a call without a key (401 first)', async () => {
    const r = await rest(t, 'POST', '/account/keys', { body: { label: `bot${NUL}`, scopes: ['send'] } });
    expect(r.status).toBe(401);
    const s = await rest(t, 'POST', '/signup/agentic', { body: { human_email: `a${NUL}@example.com`, domain_intent: { mode: 'subdomain' } } });
    expectRefused(s, 'human_email', /NUL/);
  });
});

describe('tRPC and MCP', () => {
  it('answers the same validation_error over tRPC', async () => {
    const res = await fetch(`${t.url}/trpc/keys.create`, {
      method: 'POST',
      headers: { authorization: `Bearer ${a.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ label: `bot${NUL}`, scopes: ['send'] }),
    });
    const body = (await res.json()) as any;
    expect(res.status).toBe(400);
    expect(body.error.data.boxes.code).toBe('validation_error');
    expect(body.error.data.boxes.details.fields).toEqual([{ path: 'label', message: expect.stringMatching(/NUL/) }]);
  });

  it('answers the same validation_error to an MCP tool call', async () => {
    const client = new Client({ name: 'boxes-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${a.apiKey}` } } }));
    const r = await client.callTool({ name: 'messages_send', arguments: { to: a.primaryAddress, subject: `x${NUL}`, text: 'x' } });
    expect(r.isError).toBe(true);
    const err = JSON.parse((r.content as { text: string }[])[0]!.text).error;
    expect(err.code).toBe('validation_error');
    expect(err.fields).toEqual([{ path: 'subject', message: expect.stringMatching(/NUL/) }]);
    await client.close();
    // Arguments that are not an object: invalid params (-32602), not the SDK's internal error (-32603).
    const res = await fetch(`${t.url}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${a.apiKey}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'messages_send', arguments: 'to=a@b' } }),
    });
    expect(await res.json()).toEqual({ jsonrpc: '2.0', id: 7, error: { code: -32602, message: expect.stringMatching(/arguments must be an object/) } });
  });

  it('refuses the key "__proto__" over MCP and tRPC too, where it would be dropped without a word', async () => {
    const mcp = (args: string) =>
      fetch(`${t.url}/mcp`, {
        method: 'POST',
        headers: { authorization: `Bearer ${a.apiKey}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"messages_send","arguments":${args}}}`,
      });
    // At the top of the arguments, the MCP SDK's own parsing would drop it before any tool saw it: invalid params.
    expect(await (await mcp(`{"to":"${a.primaryAddress}","text":"x","__proto__":{"subject":"y"}}`)).json()).toEqual({
      jsonrpc: '2.0',
      id: 8,
      error: { code: -32602, message: expect.stringMatching(/params\.arguments\.__proto__: the key "__proto__" is not accepted/) },
    });
    // In a batch, one such member stops the whole batch: nothing runs, and every request in it is answered.
    const subject = `batch-${Date.now()}`;
    const send = (id: number, extra: string) =>
      `{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":{"name":"messages_send","arguments":{"to":"${a.primaryAddress}","subject":"${subject}","text":"x"${extra}}}}`;
    const batch = await fetch(`${t.url}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${a.apiKey}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: `[${send(1, '')},${send(2, ',"__proto__":{"cc":"x@example.net"}')}]`,
    });
    expect(await batch.json()).toEqual([
      { jsonrpc: '2.0', id: 1, error: { code: -32602, message: expect.stringMatching(/not run, as request 2 of the batch has invalid params/) } },
      { jsonrpc: '2.0', id: 2, error: { code: -32602, message: expect.stringMatching(/params\.arguments\.__proto__/) } },
    ]);
    const sent = await rest(t, 'GET', '/events?type=mail.sent&limit=200', { key: a.apiKey });
    expect(sent.body.events.filter((e: { data: { subject?: string } }) => e.data.subject === subject)).toHaveLength(0);
    // Deeper down, the input guard names it, as over REST.
    const client = new Client({ name: 'boxes-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${a.apiKey}` } } }));
    const r = await client.callTool({ name: 'messages_send', arguments: JSON.parse(`{"to":"${a.primaryAddress}","text":"x","headers":{"__proto__":"v"}}`) });
    await client.close();
    expect(r.isError).toBe(true);
    expect(JSON.parse((r.content as { text: string }[])[0]!.text).error.fields).toEqual([
      { path: 'headers.__proto__', message: expect.stringMatching(/not accepted/) },
    ]);
    const res = await fetch(`${t.url}/trpc/messages.send`, {
      method: 'POST',
      headers: { authorization: `Bearer ${a.apiKey}`, 'content-type': 'application/json' },
      body: `{"to":"${a.primaryAddress}","text":"x","context":{"__proto__":{"a":1}}}`,
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error.data.boxes.details.fields).toEqual([
      { path: 'context.__proto__', message: expect.stringMatching(/not accepted/) },
    ]);
  });
});
