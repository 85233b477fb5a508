// MCP over Streamable HTTP with the official SDK client: tools come from the router and obey the key's scopes.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { mintKey, signupAccount, startTestServer, type TestServer } from '@boxes/testing';

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer({ worker: true });
});
afterAll(() => t?.stop());

async function connect(key: string) {
  const client = new Client({ name: 'boxes-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${key}` } } }));
  return client;
}

it('lists tools, sends a message and reads events; a receive-only key sees no send tool', async () => {
  const a = await signupAccount(t);
  const client = await connect(a.apiKey);
  const { tools } = await client.listTools();
  expect(tools.map((x) => x.name)).toEqual(expect.arrayContaining(['messages_send', 'events_list', 'boxes_create']));
  const sent = await client.callTool({ name: 'messages_send', arguments: { to: a.primaryAddress, subject: 'via mcp', text: 'hello' } });
  expect(sent.isError, JSON.stringify(sent)).toBeFalsy();
  const events = await client.callTool({ name: 'events_list', arguments: { type: 'mail.sent' } });
  // Events can carry mail content: the text is the untrusted block, structuredContent the plain result.
  expect((events.content as { text: string }[])[0]!.text).toContain('<untrusted-mail-content sender_verified=');
  expect((events.structuredContent as { events: unknown[] }).events).toHaveLength(1);
  await client.close();

  const receiveOnly = await mintKey(t, a.apiKey, ['receive']);
  const rc = await connect(receiveOnly.api_key);
  const names = (await rc.listTools()).tools.map((x) => x.name);
  expect(names).toContain('events_list');
  expect(names).not.toContain('messages_send');
  const refused = await rc.callTool({ name: 'messages_send', arguments: { to: a.primaryAddress, text: 'x' } });
  expect(refused.isError).toBe(true);
  expect(JSON.parse((refused.content as { text: string }[])[0]!.text).error.code).toBe('insufficient_scope');
  await rc.close();
});
