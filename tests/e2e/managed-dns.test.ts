/**
 * The managed DNS API on a live delegated zone: every type created, read, replaced, deleted and served by the
 * instance's DNS (dig); every refusal with its status and field; reserved records read-only and never
 * shadowed; the serial and the domain.dns.changed events; the zones other modes do not have; and the same calls
 * through the SDK (tRPC) and MCP.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createBoxesClient } from '@boxes/sdk';
import { mintKey, rest, signupAccount, startTestServer, type TestServer } from '@boxes/testing';
import { delegatedAccount, dig, rdata } from './dns-helpers';

let t: TestServer;
let n = 0;

beforeAll(async () => {
  t = await startTestServer();
});
afterAll(() => t?.stop());

const delegated = (live = true) => delegatedAccount(t, `managed-${Date.now().toString(36)}${n++}.example`, live);

const dns = (key: string, method: string, body?: Record<string, unknown>) =>
  rest(t, method, method === 'DELETE' ? `/domain/dns?${new URLSearchParams(body as Record<string, string>)}` : '/domain/dns', { key, ...(method === 'DELETE' || !body ? {} : { body }) });
const set = (key: string, method: 'POST' | 'PUT', name: string, type: string, values: string[], ttl = 300) => dns(key, method, { terms_of_service: true, name, type, ttl, values });

describe('a delegated zone', () => {
  it('lists the mail records as reserved; every type is created, served, replaced and deleted', async () => {
    const { zone, key } = await delegated();
    const listed = await dns(key, 'GET');
    expect(listed.status, JSON.stringify(listed.body)).toBe(200);
    expect(listed.body.zone).toBe(zone);
    const reserved = listed.body.records.filter((r: any) => r.reserved).map((r: any) => `${r.name} ${r.type}`).sort();
    expect(reserved).toEqual([`${zone} MX`, `${zone} NS`, `${zone} TXT`, `_dmarc.${zone} TXT`, `boxes1._domainkey.${zone} TXT`].sort());

    const cases: [string, string, string[], string[]][] = [
      ['www', 'A', ['192.0.2.1', '192.0.2.2'], ['192.0.2.1', '192.0.2.2']],
      ['www', 'AAAA', ['2001:DB8::1'], ['2001:db8::1']],
      ['blog', 'CNAME', [`www.${zone}.`], [`www.${zone}.`]],
      ['lists', 'MX', ['10 mx1.example.net', '20 mx2.example.net.'], ['10 mx1.example.net.', '20 mx2.example.net.']],
      ['_sip._tcp', 'SRV', ['10 5 5060 sip.example.net'], ['10 5 5060 sip.example.net.']],
      ['@', 'CAA', ['0 issue "letsencrypt.org"'], ['0 issue "letsencrypt.org"']],
      ['verify', 'TXT', ['token=abc "quoted"'], ['"token=abc \\"quoted\\""']],
    ];
    let serial = listed.body.serial as number;
    for (const [name, type, values, served] of cases) {
      const r = await set(key, 'POST', name, type, values);
      expect(r.status, `${name} ${type}: ${JSON.stringify(r.body)}`).toBe(200);
      expect(r.body.action).toBe('create');
      expect(r.body.serial).toBe(serial + 1);
      serial = r.body.serial;
      const fqdn = name === '@' ? zone : `${name}.${zone}`;
      expect(r.body.record).toMatchObject({ name: fqdn, type, ttl: 300, reserved: false });
      const answer = await dig(t.dnsPort!, fqdn, type, ['+tcp']);
      expect(rdata(answer.answer, type), `${fqdn} ${type}`).toEqual([...served].sort());
    }
    // TXT values are listed unquoted; the set as a whole.
    const after = (await dns(key, 'GET')).body.records;
    expect(after.find((r: any) => r.name === `verify.${zone}`)).toMatchObject({ type: 'TXT', values: ['token=abc "quoted"'] });
    expect(after.find((r: any) => r.name === `www.${zone}` && r.type === 'A').values.sort()).toEqual(['192.0.2.1', '192.0.2.2']);

    // Replace, then delete.
    const put = await set(key, 'PUT', 'www', 'A', ['192.0.2.9'], 120);
    expect(put.body).toMatchObject({ action: 'replace', record: { values: ['192.0.2.9'], ttl: 120 } });
    expect(rdata((await dig(t.dnsPort!, `www.${zone}`, 'A')).answer)).toEqual(['192.0.2.9']);
    const created = await set(key, 'PUT', 'new', 'A', ['192.0.2.30']);
    expect(created.status).toBe(200);
    const del = await dns(key, 'DELETE', { terms_of_service: 'true', name: 'www', type: 'A' });
    expect(del.status, JSON.stringify(del.body)).toBe(200);
    expect(del.body.action).toBe('delete');
    expect((await dig(t.dnsPort!, `www.${zone}`, 'A')).answer).toEqual([]);
    const gone = await dns(key, 'DELETE', { terms_of_service: 'true', name: 'www', type: 'A' });
    expect(gone.status).toBe(404);

    // Every change is on the event stream, with the serial.
    const events = (await rest(t, 'GET', '/events?type=domain.dns.changed&limit=100', { key })).body.events;
    expect(events.map((e: any) => e.data.action)).toEqual([...cases.map(() => 'create'), 'replace', 'replace', 'delete']);
    expect(events.at(-1).data).toMatchObject({ zone, name: `www.${zone}`, type: 'A', values: [] });
  });

  it('refuses bad input with 400 naming the field, and duplicates with 409', async () => {
    const { zone, key } = await delegated();
    const refusals: [Record<string, unknown>, string][] = [
      [{ name: 'a', type: 'A', values: ['300.1.1.1'] }, 'values.0'],
      [{ name: 'a', type: 'A', values: ['2001:db8::1'] }, 'values.0'],
      [{ name: 'a', type: 'AAAA', values: ['192.0.2.1'] }, 'values.0'],
      [{ name: 'a', type: 'MX', values: ['mail.example.net'] }, 'values.0'],
      [{ name: 'a', type: 'MX', values: ['70000 mail.example.net'] }, 'values.0'],
      [{ name: 'a', type: 'SRV', values: ['10 5 sip.example.net'] }, 'values.0'],
      [{ name: 'a', type: 'CAA', values: ['0 policy "x"'] }, 'values.0'],
      [{ name: 'a', type: 'CNAME', values: ['not a host'] }, 'values.0'],
      [{ name: 'a', type: 'CNAME', values: ['x.example.net', 'y.example.net'] }, 'values'],
      [{ name: 'a', type: 'TXT', values: ['x'.repeat(2049)] }, 'values.0'],
      [{ name: 'a', type: 'A', values: Array.from({ length: 21 }, (_, i) => `192.0.2.${i}`) }, 'values'],
      [{ name: 'www.other.example.', type: 'A', values: ['192.0.2.1'] }, 'name'],
      [{ name: 'bad name!', type: 'A', values: ['192.0.2.1'] }, 'name'],
      [{ name: '@', type: 'CNAME', values: ['x.example.net'] }, 'type'],
      [{ name: 'a', type: 'A', ttl: 59, values: ['192.0.2.1'] }, 'ttl'],
      [{ name: 'a', type: 'A', ttl: 86_401, values: ['192.0.2.1'] }, 'ttl'],
      [{ name: 'a', type: 'NS', values: ['ns.example.net'] }, 'type'],
      [{ name: 'a', type: 'A', values: [] }, 'values'],
    ];
    for (const [record, field] of refusals) {
      const r = await dns(key, 'POST', { terms_of_service: true, ttl: 300, ...record });
      expect(r.status, JSON.stringify(record)).toBe(400);
      expect(r.body.error.code).toBe('validation_error');
      expect(r.body.error.fields.map((f: any) => f.path), JSON.stringify(r.body)).toContain(field);
    }
    for (const terms of [undefined, false, 'yes']) {
      const r = await dns(key, 'POST', { ...(terms === undefined ? {} : { terms_of_service: terms }), name: 'a', type: 'A', values: ['192.0.2.1'] });
      expect(r.status).toBe(400);
      expect(r.body.error.fields.map((f: any) => f.path)).toContain('terms_of_service');
    }
    expect((await dns(key, 'DELETE', { name: 'a', type: 'A' })).status).toBe(400);
    // CNAME beside other data, either way; duplicates.
    expect((await set(key, 'POST', 'host', 'A', ['192.0.2.1'])).status).toBe(200);
    const cnameBeside = await set(key, 'POST', 'host', 'CNAME', ['x.example.net']);
    expect(cnameBeside.status).toBe(400);
    expect(cnameBeside.body.error.message).toMatch(/cannot stand beside/);
    expect((await set(key, 'POST', 'alias', 'CNAME', ['x.example.net'])).status).toBe(200);
    expect((await set(key, 'POST', 'alias', 'TXT', ['x'])).status).toBe(400);
    const dup = await set(key, 'POST', 'host', 'A', ['192.0.2.2']);
    expect(dup.status).toBe(409);
    expect(dup.body.error.code).toBe('dns_record_exists');
    expect(zone).toBeTruthy();
  });

  it('reserved records are read-only and cannot be shadowed; other TXT may stand beside the SPF record', async () => {
    const { zone, key } = await delegated();
    const tries: [string, string, string, string[]][] = [
      ['POST', '@', 'MX', ['10 evil.example.net']],
      ['PUT', '@', 'MX', ['10 evil.example.net']],
      ['PUT', 'boxes1._domainkey', 'TXT', ['v=DKIM1; p=evil']],
      ['PUT', '_dmarc', 'TXT', ['v=DMARC1; p=none']],
      ['POST', '_dmarc', 'CNAME', ['evil.example.net']],
      ['POST', '@', 'TXT', ['v=spf1 include:evil.example.net ~all']],
    ];
    for (const [method, name, type, values] of tries) {
      const r = await set(key, method as 'POST', name, type, values);
      expect(r.status, `${method} ${name} ${type}: ${JSON.stringify(r.body)}`).toBe(403);
      expect(r.body.error.code).toBe('dns_record_reserved');
    }
    for (const [name, type] of [['@', 'MX'], ['_dmarc', 'TXT'], ['@', 'NS']] as const) {
      const r = await dns(key, 'DELETE', { terms_of_service: 'true', name, type });
      expect(r.status, `${name} ${type}`).toBe(type === 'NS' ? 400 : 403);
    }
    // A site-verification TXT at the apex stands beside the SPF record, which stays.
    expect((await set(key, 'POST', '@', 'TXT', ['google-site-verification=xyz'])).status).toBe(200);
    const txt = rdata((await dig(t.dnsPort!, zone, 'TXT')).answer);
    expect(txt).toEqual([`"google-site-verification=xyz"`, `"v=spf1 a:${t.config.mailHost} ~all"`].sort());
    expect((await dns(key, 'DELETE', { terms_of_service: 'true', name: '@', type: 'TXT' })).status).toBe(200);
    expect(rdata((await dig(t.dnsPort!, zone, 'TXT')).answer)).toEqual([`"v=spf1 a:${t.config.mailHost} ~all"`]);
    // The mail still resolves as before.
    expect(rdata((await dig(t.dnsPort!, zone, 'MX')).answer)).toEqual([`10 ${t.config.mailHost}.`]);
  });
});

describe('accounts without a managed zone', () => {
  it('byo_manual: 409 pointing to domain.dns_required; a free subdomain and a pending delegation: 409', async () => {
    const manualIntent = await rest(t, 'POST', '/signup/agentic', { body: { human_email: 'm@example.com', domain_intent: { mode: 'byo_manual', byo_domain: `manual-${Date.now()}.example` } } });
    const manual = (await rest(t, 'POST', '/signup/agentic/confirm', { body: { intent_id: manualIntent.body.intent_id } })).body.api_key;
    for (const r of [await dns(manual, 'GET'), await set(manual, 'POST', 'www', 'A', ['192.0.2.1'])]) {
      expect(r.status).toBe(409);
      expect(r.body.error.code).toBe('dns_not_managed');
      expect(r.body.error.message).toContain('/events?type=domain.dns_required');
      expect(r.body.error.see).toMatch(/\/events\?type=domain\.dns_required$/);
    }
    const sub = await signupAccount(t);
    const subR = await dns(sub.apiKey, 'GET');
    expect(subR.status).toBe(409);
    expect(subR.body.error.message).toMatch(/free subdomain/);
    const pending = await delegated(false);
    const pendingR = await dns(pending.key, 'GET');
    expect(pendingR.status).toBe(409);
    expect(pendingR.body.error.message).toMatch(/not live yet/);
  });
});

describe('the same calls through the SDK and MCP', () => {
  it('tRPC (the SDK) and an MCP tool change the zone like REST', async () => {
    const { zone, key } = await delegated();
    const sdk = createBoxesClient({ baseUrl: t.url, apiKey: key });
    const created = await sdk.dns.create.mutate({ terms_of_service: true, name: 'sdk', type: 'A', values: ['192.0.2.50'] });
    expect(created.record.name).toBe(`sdk.${zone}`);
    expect((await sdk.dns.list.query()).records.some((r) => r.name === `sdk.${zone}`)).toBe(true);
    const mcp = new Client({ name: 'managed-dns-test', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${key}` } } }));
    try {
      const r = await mcp.callTool({ name: 'dns_create', arguments: { terms_of_service: true, name: 'mcp', type: 'TXT', values: ['via mcp'] } });
      expect(r.isError, JSON.stringify(r.content)).toBeFalsy();
      expect(rdata((await dig(t.dnsPort!, `mcp.${zone}`, 'TXT')).answer)).toEqual(['"via mcp"']);
    } finally {
      await mcp.close();
    }
    // A receive-only key may read but not change.
    const reader = await mintKey(t, key, ['receive']);
    expect((await dns(reader.api_key, 'GET')).status).toBe(200);
    expect((await set(reader.api_key, 'POST', 'x', 'A', ['192.0.2.1'])).status).toBe(403);
  });
});
