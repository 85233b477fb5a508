// Reading and deleting mail that arrived over real SMTP: GET /messages filters (direction, box by id or
// address, since/before), cursor paging without duplicates or skips, box-restricted keys, and DELETE
// /messages/{id} reclaiming the body, with purge (JSON body or query) removing subject, from, to and cc.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { BoxesError, createBoxesClient } from '@boxes/sdk';
import { mintKey, rest, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { accountPool, eventsOf, rawMessage, sendRaw, waitForEvent } from './mail-receive-helpers';
import { k, rows as sqlRows } from '@boxes/db';

let t: TestServer;
let port: number;
const accounts = accountPool(() => t, 4);

beforeAll(async () => {
  t = await startTestServer({ mail: true });
  port = t.smtpPort!;
  accounts.fill();
});
afterAll(async () => {
  await t?.stop();
});

const tag = () => randomBytes(6).toString('hex');

/** Mails the given boxes (one SMTP transaction) and returns the message ids, one per box. */
async function mail(a: TestAccount, to: string[], subject: string, extra: Record<string, string> = {}): Promise<string[]> {
  const r = await sendRaw(
    port,
    { from: 'sender@outside.test', to },
    rawMessage(
      { From: 'Sender <sender@outside.test>', To: to.join(', '), Subject: subject, 'Message-ID': `<${tag()}@outside.test>`, ...extra },
      `Body of ${subject}`,
    ),
  );
  expect(r.accepted.sort()).toEqual([...to].sort());
  const events = await waitForEvent(t, a.apiKey, 'mail.received', (e) => e.data.message.subject === subject).then(() => eventsOf(t, a.apiKey, 'mail.received'));
  return events.filter((e) => e.data.message.subject === subject).map((e) => e.data.message.id as string);
}

/** Every page of GET /messages with the given query, following next_cursor. */
async function allPages(key: string, query: string, limit: number): Promise<{ ids: string[]; pages: number }> {
  const ids: string[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const q: string = `/messages?${query}${query ? '&' : ''}limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
    const r = await rest(t, 'GET', q, { key });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.messages.length).toBeLessThanOrEqual(limit);
    ids.push(...r.body.messages.map((m: any) => m.id));
    cursor = r.body.next_cursor;
    pages++;
    if (pages > 100) throw new Error('paging does not end');
  } while (cursor);
  return { ids, pages };
}

describe('GET /messages', () => {
  let a: TestAccount;
  let sales: { id: string; address: string };
  let support: { id: string; address: string };
  const agentIds: string[] = [];
  const salesIds: string[] = [];
  const supportIds: string[] = [];
  const sentIds: string[] = [];

  beforeAll(async () => {
    a = await accounts.take();
    for (const local of ['sales', 'support']) {
      const r = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: local } });
      expect(r.status).toBe(200);
      if (local === 'sales') sales = r.body;
      else support = r.body;
    }
    for (let i = 0; i < 4; i++) agentIds.push(...(await mail(a, [a.primaryAddress], `agent ${i} ${tag()}`)));
    for (let i = 0; i < 3; i++) salesIds.push(...(await mail(a, [sales.address], `sales ${i} ${tag()}`)));
    // One transaction to three boxes: three messages stored together (possibly with the same recorded_at).
    const trio = await mail(a, [a.primaryAddress, sales.address, support.address], `to all three ${tag()}`);
    expect(trio).toHaveLength(3);
    const byBox = await Promise.all(trio.map(async (id) => (await rest(t, 'GET', `/messages/${id}`, { key: a.apiKey })).body.box_id as string));
    trio.forEach((id, i) => {
      (byBox[i] === sales.id ? salesIds : byBox[i] === support.id ? supportIds : agentIds).push(id);
    });
    for (let i = 0; i < 2; i++) {
      const s = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: 'someone@outside.test', subject: `sent ${i}`, text: 'out' } });
      expect(s.status).toBe(200);
      sentIds.push(s.body.message_id);
    }
  });

  it('lists every message newest first; direction filters received and sent', async () => {
    const all = await rest(t, 'GET', '/messages?limit=200', { key: a.apiKey });
    expect(all.status).toBe(200);
    const ids = all.body.messages.map((m: any) => m.id);
    expect(ids.sort()).toEqual([...agentIds, ...salesIds, ...supportIds, ...sentIds].sort());
    const times = all.body.messages.map((m: any) => m.recorded_at);
    expect([...times].sort().reverse()).toEqual(times);
    expect(all.body.next_cursor).toBeNull();

    const received = await rest(t, 'GET', '/messages?direction=received&limit=200', { key: a.apiKey });
    expect(received.body.messages.map((m: any) => m.id).sort()).toEqual([...agentIds, ...salesIds, ...supportIds].sort());
    expect(received.body.messages.every((m: any) => m.direction === 'received')).toBe(true);
    const sent = await rest(t, 'GET', '/messages?direction=sent&limit=200', { key: a.apiKey });
    expect(sent.body.messages.map((m: any) => m.id).sort()).toEqual([...sentIds].sort());
    expect(sent.body.messages.every((m: any) => m.direction === 'sent')).toBe(true);
  });

  it('box filters by box id or by address; a box of another account or no box is 404', async () => {
    const byId = await rest(t, 'GET', `/messages?box=${sales.id}`, { key: a.apiKey });
    expect(byId.status).toBe(200);
    expect(byId.body.messages.map((m: any) => m.id).sort()).toEqual([...salesIds].sort());
    expect(byId.body.messages.every((m: any) => m.box_id === sales.id)).toBe(true);
    const byAddress = await rest(t, 'GET', `/messages?box=${encodeURIComponent(sales.address)}`, { key: a.apiKey });
    expect(byAddress.body.messages.map((m: any) => m.id)).toEqual(byId.body.messages.map((m: any) => m.id));
    const supportOnly = await rest(t, 'GET', `/messages?box=${encodeURIComponent(support.address)}&direction=received`, { key: a.apiKey });
    expect(supportOnly.body.messages.map((m: any) => m.id)).toEqual(supportIds);

    const other = await accounts.take();
    expect((await rest(t, 'GET', `/messages?box=${encodeURIComponent(sales.address)}`, { key: other.apiKey })).status).toBe(404);
    expect((await rest(t, 'GET', `/messages?box=${sales.id}`, { key: other.apiKey })).status).toBe(404);
    expect((await rest(t, 'GET', `/messages?box=${encodeURIComponent(`nobox@${a.domain}`)}`, { key: a.apiKey })).status).toBe(404);
  });

  it('since (inclusive) and before (exclusive) window by recorded_at', async () => {
    const all = (await rest(t, 'GET', '/messages?limit=200', { key: a.apiKey })).body.messages as any[];
    const times = [...new Set(all.map((m) => m.recorded_at as string))].sort();
    expect(times.length).toBeGreaterThanOrEqual(4);
    const lo = times[1]!;
    const hi = times[times.length - 2]!;
    const idsWhere = (pred: (at: string) => boolean) =>
      all
        .filter((m) => pred(m.recorded_at))
        .map((m) => m.id)
        .sort();

    const since = await rest(t, 'GET', `/messages?limit=200&since=${encodeURIComponent(lo)}`, { key: a.apiKey });
    expect(since.body.messages.map((m: any) => m.id).sort()).toEqual(idsWhere((at) => at >= lo));
    const before = await rest(t, 'GET', `/messages?limit=200&before=${encodeURIComponent(hi)}`, { key: a.apiKey });
    expect(before.body.messages.map((m: any) => m.id).sort()).toEqual(idsWhere((at) => at < hi));
    const window = await rest(t, 'GET', `/messages?limit=200&since=${encodeURIComponent(lo)}&before=${encodeURIComponent(hi)}`, { key: a.apiKey });
    expect(window.body.messages.map((m: any) => m.id).sort()).toEqual(idsWhere((at) => at >= lo && at < hi));
    expect(window.body.messages.length).toBeGreaterThan(0);
    expect(window.body.messages.length).toBeLessThan(all.length);

    // Far future and far past.
    expect((await rest(t, 'GET', `/messages?since=2999-01-01T00:00:00Z`, { key: a.apiKey })).body.messages).toEqual([]);
    expect((await rest(t, 'GET', `/messages?before=2000-01-01T00:00:00Z`, { key: a.apiKey })).body.messages).toEqual([]);
  });

  it('limit and cursor page through everything once, in order, for every page size and with filters', async () => {
    const full = (await rest(t, 'GET', '/messages?limit=200', { key: a.apiKey })).body.messages.map((m: any) => m.id);
    for (const limit of [1, 2, 3, 5]) {
      const { ids, pages } = await allPages(a.apiKey, '', limit);
      expect(ids, `limit=${limit}`).toEqual(full);
      expect(new Set(ids).size).toBe(ids.length);
      expect(pages).toBe(Math.ceil(full.length / limit));
    }
    const received = (await rest(t, 'GET', '/messages?direction=received&limit=200', { key: a.apiKey })).body.messages.map((m: any) => m.id);
    expect((await allPages(a.apiKey, 'direction=received', 2)).ids).toEqual(received);
    expect((await allPages(a.apiKey, `box=${sales.id}`, 1)).ids.sort()).toEqual([...salesIds].sort());
  });

  it('paging is stable while new mail arrives: newer messages do not shift later pages', async () => {
    const full = (await rest(t, 'GET', '/messages?limit=200', { key: a.apiKey })).body.messages.map((m: any) => m.id);
    const first = await rest(t, 'GET', '/messages?limit=4', { key: a.apiKey });
    expect(first.body.messages.map((m: any) => m.id)).toEqual(full.slice(0, 4));
    const arrived = await mail(a, [a.primaryAddress], `arrives while paging ${tag()}`);
    const ids = first.body.messages.map((m: any) => m.id);
    let cursor: string | null = first.body.next_cursor;
    while (cursor) {
      const r = await rest(t, 'GET', `/messages?limit=4&cursor=${encodeURIComponent(cursor)}`, { key: a.apiKey });
      ids.push(...r.body.messages.map((m: any) => m.id));
      cursor = r.body.next_cursor;
    }
    expect(ids).toEqual(full);
    // The new message is at the top of a fresh listing.
    const fresh = await rest(t, 'GET', '/messages?limit=1', { key: a.apiKey });
    expect(fresh.body.messages[0].id).toBe(arrived[0]);
    agentIds.push(...arrived);
  });

  it('a box-restricted key sees only the messages of its boxes', async () => {
    const key = await mintKey(t, a.apiKey, ['receive'], { allowed_boxes: [sales.address] });
    const list = await rest(t, 'GET', '/messages?limit=200&include=body', { key: key.api_key });
    expect(list.status).toBe(200);
    expect(list.body.messages.map((m: any) => m.id).sort()).toEqual([...salesIds].sort());
    expect(list.body.messages.every((m: any) => m.body && m.box_id === sales.id)).toBe(true);
    expect((await allPages(key.api_key, '', 2)).ids.sort()).toEqual([...salesIds].sort());
    expect((await rest(t, 'GET', `/messages?box=${sales.id}`, { key: key.api_key })).body.messages).toHaveLength(salesIds.length);
    // Other boxes: not listed, not readable, not deletable.
    expect((await rest(t, 'GET', `/messages?box=${encodeURIComponent(a.primaryAddress)}`, { key: key.api_key })).status).toBe(404);
    expect((await rest(t, 'GET', `/messages/${agentIds[0]}`, { key: key.api_key })).status).toBe(404);
    expect((await rest(t, 'GET', `/messages/${sentIds[0]}`, { key: key.api_key })).status).toBe(404);
    expect((await rest(t, 'DELETE', `/messages/${agentIds[0]}`, { key: key.api_key })).status).toBe(404);
    const still = await rest(t, 'GET', `/messages/${agentIds[0]}`, { key: a.apiKey });
    expect(still.body.body_state).toBe('available');
    expect(still.body.body).not.toBeNull();
    // Its own box's message is readable in full.
    expect((await rest(t, 'GET', `/messages/${salesIds[0]}`, { key: key.api_key })).body.body.text).toContain('Body of sales');
    // And its event feed shows only its box's mail.
    const events = await eventsOf(t, key.api_key, 'mail.received');
    expect(events.map((e) => e.data.message.id).sort()).toEqual([...salesIds].sort());
  });
});

describe('DELETE /messages/{id}', () => {
  let a: TestAccount;
  beforeAll(async () => {
    a = await accounts.take();
  });

  async function fresh(label: string): Promise<{ id: string; before: any }> {
    const [id] = await mail(a, [a.primaryAddress], `${label} ${tag()}`, { Cc: 'Copy <copy@outside.test>' });
    const before = (await rest(t, 'GET', `/messages/${id}`, { key: a.apiKey })).body;
    expect(before).toMatchObject({ from: 'sender@outside.test', to: [a.primaryAddress], cc: ['copy@outside.test'], body_state: 'available' });
    expect(before.subject).toMatch(new RegExp(`^${label}`));
    expect(before.body.text).toContain('Body of');
    return { id: id!, before };
  }

  const KEPT = ['id', 'direction', 'provider_message_id', 'rfc_message_id', 'recorded_at'] as const;

  it('reclaims the body: GET shows body null and body_state reclaimed, metadata stays, message.deleted is appended, the sealed columns are gone', async () => {
    const { id, before } = await fresh('reclaim me');
    const del = await rest(t, 'DELETE', `/messages/${id}`, { key: a.apiKey });
    expect(del.status, JSON.stringify(del.body)).toBe(200);
    expect(del.body).toMatchObject({ id, purged: false, body_state: { reclaimed_at_utc: expect.any(String) } });
    expect(Number.isNaN(Date.parse(del.body.body_state.reclaimed_at_utc))).toBe(false);

    const after = (await rest(t, 'GET', `/messages/${id}`, { key: a.apiKey })).body;
    expect(after.body).toBeNull();
    expect(after.body_state).toBe('reclaimed');
    for (const f of [...KEPT, 'subject', 'from', 'to', 'cc'] as const) expect(after[f], f).toEqual(before[f]);
    const listed = (await rest(t, 'GET', '/messages?include=body&limit=200', { key: a.apiKey })).body.messages.find((m: any) => m.id === id);
    expect(listed.body).toBeNull();
    expect(listed.body_state).toBe('reclaimed');

    const ev = await waitForEvent(t, a.apiKey, 'message.deleted', (e) => e.data.message_id === id);
    expect(ev.data.purged).toBe(false);
    const rows = await sqlRows(t.db, k.selectFrom('messages').select(['body_enc', 'raw_enc']).where('id', '=', id));
    expect(rows[0]).toEqual({ body_enc: null, raw_enc: null });
  });

  it('purge via JSON body {"purge": true} also removes subject, from, to and cc; id, provider_message_id, rfc_message_id, recorded_at, direction stay', async () => {
    const { id, before } = await fresh('purge by body');
    const del = await rest(t, 'DELETE', `/messages/${id}`, { key: a.apiKey, body: { purge: true } });
    expect(del.status, JSON.stringify(del.body)).toBe(200);
    expect(del.body).toMatchObject({ id, purged: true });
    const after = (await rest(t, 'GET', `/messages/${id}`, { key: a.apiKey })).body;
    expect(after).toMatchObject({ subject: null, from: null, to: [], cc: [], body: null, body_state: 'reclaimed' });
    for (const f of KEPT) expect(after[f], f).toEqual(before[f]);
    const ev = await waitForEvent(t, a.apiKey, 'message.deleted', (e) => e.data.message_id === id);
    expect(ev.data.purged).toBe(true);
  });

  it('purge via ?purge=true does the same', async () => {
    const { id, before } = await fresh('purge by query');
    const del = await rest(t, 'DELETE', `/messages/${id}?purge=true`, { key: a.apiKey });
    expect(del.status, JSON.stringify(del.body)).toBe(200);
    expect(del.body).toMatchObject({ id, purged: true });
    const after = (await rest(t, 'GET', `/messages/${id}`, { key: a.apiKey })).body;
    expect(after).toMatchObject({ subject: null, from: null, to: [], cc: [], body: null, body_state: 'reclaimed' });
    for (const f of KEPT) expect(after[f], f).toEqual(before[f]);
    // Gone from the stored row too, not only from the view.
    const rows = await sqlRows(t.db, k.selectFrom('messages').select(['subject', 'from_address', 'to_addresses', 'cc_addresses']).where('id', '=', id));
    expect(rows[0]).toEqual({ subject: null, from_address: null, to_addresses: [], cc_addresses: [] });
  });

  it('purge false (JSON body or query) keeps subject, from, to and cc', async () => {
    for (const how of ['body', 'query'] as const) {
      const { id, before } = await fresh(`keep via ${how}`);
      const del =
        how === 'body'
          ? await rest(t, 'DELETE', `/messages/${id}`, { key: a.apiKey, body: { purge: false } })
          : await rest(t, 'DELETE', `/messages/${id}?purge=false`, { key: a.apiKey });
      expect(del.status, JSON.stringify(del.body)).toBe(200);
      expect(del.body).toMatchObject({ id, purged: false });
      const after = (await rest(t, 'GET', `/messages/${id}`, { key: a.apiKey })).body;
      expect(after.body).toBeNull();
      expect(after.body_state).toBe('reclaimed');
      for (const f of [...KEPT, 'subject', 'from', 'to', 'cc'] as const) expect(after[f], `${how}: ${f}`).toEqual(before[f]);
    }
  });

  it('purge is a boolean on tRPC and MCP too: true purges, false keeps, a string is refused (also after REST calls)', async () => {
    // REST has taken purge as a query string above; the same schema must not take strings on the other faces.
    expect((await rest(t, 'DELETE', `/messages/${(await fresh('rest first'))!.id}?purge=false`, { key: a.apiKey })).status).toBe(200);
    const trpc = createBoxesClient({ baseUrl: t.url, apiKey: a.apiKey });
    const mcp = new Client({ name: 'purge-test', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${a.apiKey}` } } }));
    try {
      const viaTrpc = (input: { id: string; purge?: unknown }) => trpc.messages.delete.mutate(input as { id: string; purge?: boolean });
      const viaMcp = async (args: Record<string, unknown>) => {
        const r = await mcp.callTool({ name: 'messages_delete', arguments: args });
        const body = JSON.parse((r.content as { text: string }[])[0]!.text);
        return r.isError ? Promise.reject(body.error) : body;
      };
      for (const [face, del] of [
        ['trpc', viaTrpc],
        ['mcp', viaMcp],
      ] as const) {
        for (const purge of ['true', 'false', 1] as const) {
          const { id } = await fresh(`${face} refuses ${purge}`);
          const err = await del({ id, purge }).then(
            () => null,
            (e: unknown) => e,
          );
          const code = err instanceof BoxesError ? err.code : (err as { code?: string } | null)?.code;
          expect(code, `${face} purge ${JSON.stringify(purge)}`).toBe('validation_error');
          expect((await rest(t, 'GET', `/messages/${id}`, { key: a.apiKey })).body.body_state, `${face}: nothing deleted`).toBe('available');
        }
        const kept = await fresh(`${face} keeps`);
        expect(await del({ id: kept.id, purge: false })).toMatchObject({ id: kept.id, purged: false });
        expect((await rest(t, 'GET', `/messages/${kept.id}`, { key: a.apiKey })).body.subject).toBe(kept.before.subject);
        const purged = await fresh(`${face} purges`);
        expect(await del({ id: purged.id, purge: true })).toMatchObject({ id: purged.id, purged: true });
        expect((await rest(t, 'GET', `/messages/${purged.id}`, { key: a.apiKey })).body).toMatchObject({ subject: null, from: null, to: [], cc: [] });
      }
    } finally {
      await mcp.close();
    }
    // REST: the query string says true or false; anything else is refused.
    const { id } = await fresh('rest refuses yes');
    const bad = await rest(t, 'DELETE', `/messages/${id}?purge=yes`, { key: a.apiKey });
    expect(bad.status, JSON.stringify(bad.body)).toBe(400);
    expect(bad.body.error.fields).toEqual([expect.objectContaining({ path: 'purge' })]);
  });

  it('purging a sent message removes its subject and addresses too, and keeps its identifiers', async () => {
    const s = await rest(t, 'POST', '/messages/send', {
      key: a.apiKey,
      body: { to: 'x@outside.test', cc: 'y@outside.test', subject: 'sent then purged', text: 'secret' },
    });
    expect(s.status).toBe(200);
    const before = (await rest(t, 'GET', `/messages/${s.body.message_id}`, { key: a.apiKey })).body;
    const del = await rest(t, 'DELETE', `/messages/${s.body.message_id}`, { key: a.apiKey, body: { purge: true } });
    expect(del.status).toBe(200);
    const after = (await rest(t, 'GET', `/messages/${s.body.message_id}`, { key: a.apiKey })).body;
    expect(after).toMatchObject({ subject: null, from: null, to: [], cc: [], body: null, body_state: 'reclaimed', direction: 'sent' });
    for (const f of KEPT) expect(after[f], f).toEqual(before[f]);
  });

  it("another account's key cannot delete the message", async () => {
    const { id } = await fresh('not yours');
    const other = await accounts.take();
    const del = await rest(t, 'DELETE', `/messages/${id}`, { key: other.apiKey, body: { purge: true } });
    expect(del.status).toBe(404);
    const after = (await rest(t, 'GET', `/messages/${id}`, { key: a.apiKey })).body;
    expect(after.body_state).toBe('available');
    expect(after.subject).toMatch(/^not yours/);
    expect((await eventsOf(t, a.apiKey, 'message.deleted')).some((e) => e.data.message_id === id)).toBe(false);
  });
});
