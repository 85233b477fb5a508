/**
 * The managed DNS API on a live delegated zone: every type created, read back, served by the instance's DNS
 * (dig), replaced and deleted; every refusal with its status and field; reserved records read-only and never
 * shadowed; the zone limit; the serial and the domain.dns.changed events; the zones other modes do not have;
 * another account's zone out of reach; and the same calls through the SDK (tRPC) and MCP.
 *
 * The zones are made live as the verifier does once it sees the delegation (goLive, in dns-helpers.ts): the DNS
 * proof itself is tested in tests/e2e/domains.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createBoxesClient } from '@boxes/sdk';
import { mintKey, rest, signupAccount, startTestServer, type JsonResponse, type TestServer } from '@boxes/testing';
import { delegatedAccount, dig, rdata } from './dns-helpers';

let t: TestServer;
let n = 0;

beforeAll(async () => {
  t = await startTestServer();
});
afterAll(() => t?.stop());

const delegated = (live = true) => delegatedAccount(t, `managed-${Date.now().toString(36)}${n++}.example`, live);

/** A call of /domain/dns; DELETE sends its fields in the query string unless `asBody`. */
const dns = (key: string, method: string, body?: Record<string, unknown>, asBody = false) =>
  rest(t, method, method === 'DELETE' && body && !asBody ? `/domain/dns?${new URLSearchParams(body as Record<string, string>)}` : '/domain/dns', {
    key,
    ...((method === 'DELETE' && !asBody) || !body ? {} : { body }),
  });
const set = (key: string, method: 'POST' | 'PUT', name: string, type: string, values: string[], ttl = 300) =>
  dns(key, method, { terms_of_service: true, name, type, ttl, values });
const del = (key: string, name: string, type: string) => dns(key, 'DELETE', { terms_of_service: 'true', name, type });

const records = async (key: string) =>
  (await dns(key, 'GET')).body.records as { id: string; name: string; type: string; ttl: number; values: string[]; reserved: boolean }[];
const soaSerial = async (zone: string) => Number(rdata((await dig(t.dnsPort!, zone, 'SOA')).answer)[0]!.split(' ')[2]);
const changes = async (key: string) =>
  (await rest(t, 'GET', '/events?type=domain.dns.changed&limit=500', { key })).body.events as { data: Record<string, any> }[];

function expectRefused(r: JsonResponse, status: number, code: string, field: string | null, label: string) {
  expect({ status: r.status, code: r.body?.error?.code }, `${label}: ${JSON.stringify(r.body)}`).toEqual({ status, code });
  if (field)
    expect(
      r.body.error.fields.map((f: { path: string }) => f.path),
      `${label}: ${JSON.stringify(r.body)}`,
    ).toContain(field);
}

describe('a delegated zone', () => {
  it('lists the mail records as reserved; every type is created, read back, served, replaced and deleted; each change bumps the serial once', async () => {
    const { zone, key } = await delegated();
    const listed = await dns(key, 'GET');
    expect(listed.status, JSON.stringify(listed.body)).toBe(200);
    expect(listed.body.zone).toBe(zone);
    expect(listed.body.serial).toBe(await soaSerial(zone));
    const reserved = listed.body.records
      .filter((r: any) => r.reserved)
      .map((r: any) => `${r.name} ${r.type}`)
      .sort();
    expect(reserved).toEqual([`${zone} MX`, `${zone} NS`, `${zone} TXT`, `_dmarc.${zone} TXT`, `boxes1._domainkey.${zone} TXT`].sort());
    expect(listed.body.records.every((r: any) => r.reserved && /^rrs_[0-9a-z]{20}$/.test(r.id))).toBe(true);
    expect(listed.body.records.find((r: any) => r.type === 'MX').values).toEqual([`10 ${t.config.mailHost}`]);

    // [name as given, type, values as given, values as listed (host names without the trailing dot, TXT unquoted), as dig shows them]
    const cases: [string, string, string[], string[], string[]][] = [
      ['www', 'A', ['192.0.2.1', '192.0.2.2'], ['192.0.2.1', '192.0.2.2'], ['192.0.2.1', '192.0.2.2']],
      [`WWW.${zone.toUpperCase()}`, 'AAAA', ['2001:DB8::1'], ['2001:db8::1'], ['2001:db8::1']],
      ['blog', 'CNAME', [`www.${zone}.`], [`www.${zone}`], [`www.${zone}.`]],
      [
        `lists.${zone}.`,
        'MX',
        ['10 mx1.example.net', '20 MX2.example.net.'],
        ['10 mx1.example.net', '20 mx2.example.net'],
        ['10 mx1.example.net.', '20 mx2.example.net.'],
      ],
      ['_sip._tcp', 'SRV', ['10 5 5060 sip.example.net'], ['10 5 5060 sip.example.net'], ['10 5 5060 sip.example.net.']],
      [
        '@',
        'CAA',
        ['0 issue "letsencrypt.org"', '0 iodef "mailto:security@example.net"', '128 issuewild ";"'],
        ['0 iodef "mailto:security@example.net"', '0 issue "letsencrypt.org"', '128 issuewild ";"'],
        ['0 iodef "mailto:security@example.net"', '0 issue "letsencrypt.org"', '128 issuewild ";"'],
      ],
      ['verify', 'TXT', ['token=abc "quoted" \\ back'], ['token=abc "quoted" \\ back'], ['"token=abc \\"quoted\\" \\\\ back"']],
      ['*.preview', 'A', ['192.0.2.77'], ['192.0.2.77'], ['192.0.2.77']],
    ];
    const long = 'k='.padEnd(600, 'x');
    cases.push(['long', 'TXT', [long], [long], [`"${long.slice(0, 255)}" "${long.slice(255, 510)}" "${long.slice(510)}"`]]);
    let serial = listed.body.serial as number;
    const fqdnOf = (name: string) =>
      name === '@' ? zone : name.toLowerCase().replace(/\.$/, '').endsWith(zone) ? name.toLowerCase().replace(/\.$/, '') : `${name}.${zone}`;
    for (const [name, type, values, listedValues, served] of cases) {
      const r = await set(key, 'POST', name, type, values);
      expect(r.status, `${name} ${type}: ${JSON.stringify(r.body)}`).toBe(200);
      expect(r.body).toMatchObject({ zone, action: 'create', serial: serial + 1 });
      serial = r.body.serial;
      const fqdn = fqdnOf(name);
      expect(r.body.record).toMatchObject({ name: fqdn, type, ttl: 300, reserved: false });
      expect([...r.body.record.values].sort()).toEqual([...listedValues].sort());
      const back = (await records(key)).find((x) => x.name === fqdn && x.type === type && !x.reserved)!;
      expect(back, `${fqdn} ${type} listed`).toMatchObject({ id: r.body.record.id, ttl: 300 });
      expect([...back.values].sort()).toEqual([...listedValues].sort());
      // A wildcard stands in for names that do not exist.
      const asked = fqdn.startsWith('*.') ? `anything${fqdn.slice(1)}` : fqdn;
      const answer = await dig(t.dnsPort!, asked, type, ['+tcp']);
      expect(rdata(answer.answer, type), `${asked} ${type}`).toEqual([...served].sort());
    }
    expect(await soaSerial(zone)).toBe(serial);

    // Replace every one (new ttl and values; the id stays), then delete every one.
    const replacements: Record<string, [string[], string[]]> = {
      A: [['192.0.2.9'], ['192.0.2.9']],
      AAAA: [
        ['2001:db8::2', '2001:db8::3'],
        ['2001:db8::2', '2001:db8::3'],
      ],
      CNAME: [['cdn.example.net'], ['cdn.example.net.']],
      MX: [['5 mx3.example.net'], ['5 mx3.example.net.']],
      SRV: [['0 0 5061 sips.example.net'], ['0 0 5061 sips.example.net.']],
      CAA: [['0 issue "pki.goog; validationmethods=dns-01"'], ['0 issue "pki.goog; validationmethods=dns-01"']],
      TXT: [
        ['second', 'first'],
        ['"first"', '"second"'],
      ],
    };
    for (const [name, type] of cases) {
      const [values, served] = replacements[type]!;
      const fqdn = fqdnOf(name);
      const before = (await records(key)).find((x) => x.name === fqdn && x.type === type)!;
      const r = await set(key, 'PUT', name, type, values, 120);
      expect(r.status, `${name} ${type}: ${JSON.stringify(r.body)}`).toBe(200);
      expect(r.body).toMatchObject({ action: 'replace', serial: serial + 1, record: { id: before.id, name: fqdn, ttl: 120 } });
      serial = r.body.serial;
      const asked = fqdn.startsWith('*.') ? `other${fqdn.slice(1)}` : fqdn;
      const answer = await dig(t.dnsPort!, asked, type, ['+tcp']);
      expect(rdata(answer.answer, type), `${asked} ${type}`).toEqual([...served].sort());
      expect(answer.answer[0]!.split(' ')[1]).toBe('120');
    }
    // PUT creates a record that is missing.
    const created = await set(key, 'PUT', 'new', 'A', ['192.0.2.30']);
    expect(created.body).toMatchObject({ action: 'replace', serial: ++serial, record: { name: `new.${zone}`, values: ['192.0.2.30'] } });
    expect(rdata((await dig(t.dnsPort!, `new.${zone}`, 'A')).answer)).toEqual(['192.0.2.30']);

    for (const [name, type] of [...cases, ['new', 'A'] as const]) {
      const fqdn = fqdnOf(name);
      const r = await del(key, name, type);
      expect(r.status, `${name} ${type}: ${JSON.stringify(r.body)}`).toBe(200);
      expect(r.body).toMatchObject({ action: 'delete', serial: ++serial, record: { name: fqdn, type, ttl: null, values: [] } });
      expect(rdata((await dig(t.dnsPort!, fqdn.replace('*.', 'x.'), type)).answer, type), `${fqdn} ${type}`).toEqual([]);
    }
    expectRefused(await del(key, 'www', 'A'), 404, 'not_found', null, 'deleted twice');
    // Only the reserved records are left, as they were.
    expect((await records(key)).map((r) => `${r.name} ${r.type} ${r.reserved}`).sort()).toEqual(
      listed.body.records.map((r: any) => `${r.name} ${r.type} true`).sort(),
    );
    expect(await soaSerial(zone)).toBe(serial);

    // Every change is on the event stream, in order, with what was there before and the serial.
    const events = await changes(key);
    expect(events.map((e) => e.data.action)).toEqual([
      ...cases.map(() => 'create'),
      ...cases.map(() => 'replace'),
      'replace',
      ...cases.map(() => 'delete'),
      'delete',
    ]);
    expect(events.map((e) => e.data.serial)).toEqual(events.map((_, i) => (listed.body.serial as number) + i + 1));
    expect(events[0]!.data).toMatchObject({
      zone,
      action: 'create',
      name: `www.${zone}`,
      type: 'A',
      ttl: 300,
      values: ['192.0.2.1', '192.0.2.2'],
      previous: null,
    });
    expect(events[cases.length]!.data).toMatchObject({
      action: 'replace',
      name: `www.${zone}`,
      type: 'A',
      ttl: 120,
      values: ['192.0.2.9'],
      previous: { ttl: 300 },
    });
    expect(events.at(-1)!.data).toMatchObject({
      zone,
      action: 'delete',
      name: `new.${zone}`,
      type: 'A',
      ttl: null,
      values: [],
      previous: { ttl: 300, values: ['192.0.2.30'] },
    });
    // Which key made each change (the owner key is the account's only key here).
    const keys = (await rest(t, 'GET', '/account/keys', { key })).body.keys as { id: string }[];
    expect(keys).toHaveLength(1);
    expect(new Set(events.map((e) => e.data.by_key_id))).toEqual(new Set([keys[0]!.id]));
    expect((await rest(t, 'GET', '/events/verify', { key })).body.ok).toBe(true);
  });

  it('DELETE takes its fields in the query string or in a JSON body', async () => {
    const { zone, key } = await delegated();
    expect((await set(key, 'POST', 'a', 'A', ['192.0.2.1'])).status).toBe(200);
    expect((await set(key, 'POST', 'b', 'A', ['192.0.2.2'])).status).toBe(200);
    const byBody = await dns(key, 'DELETE', { terms_of_service: true, name: `a.${zone}.`, type: 'A' }, true);
    expect(byBody.status, JSON.stringify(byBody.body)).toBe(200);
    const byQuery = await dns(key, 'DELETE', { terms_of_service: 'true', name: 'b', type: 'A' });
    expect(byQuery.status, JSON.stringify(byQuery.body)).toBe(200);
    expect((await records(key)).filter((r) => !r.reserved)).toEqual([]);
  });

  it('refuses bad values of every type, names outside the zone and TTLs out of bounds with 400 naming the field', async () => {
    const { zone, key } = await delegated();
    const refusals: [Record<string, unknown>, string][] = [
      [{ name: 'a', type: 'A', values: ['300.1.1.1'] }, 'values.0'],
      [{ name: 'a', type: 'A', values: ['192.0.2'] }, 'values.0'],
      [{ name: 'a', type: 'A', values: ['192.0.2.1', '2001:db8::1'] }, 'values.1'],
      [{ name: 'a', type: 'AAAA', values: ['192.0.2.1'] }, 'values.0'],
      [{ name: 'a', type: 'AAAA', values: ['2001:db8::g'] }, 'values.0'],
      [{ name: 'a', type: 'CNAME', values: ['not a host'] }, 'values.0'],
      [{ name: 'a', type: 'CNAME', values: ['localhost'] }, 'values.0'],
      [{ name: 'a', type: 'CNAME', values: ['x.example.net', 'y.example.net'] }, 'values'],
      [{ name: 'a', type: 'CNAME', values: [`a.${zone}`] }, 'values.0'],
      [{ name: 'a', type: 'MX', values: ['mail.example.net'] }, 'values.0'],
      [{ name: 'a', type: 'MX', values: ['70000 mail.example.net'] }, 'values.0'],
      [{ name: 'a', type: 'MX', values: ['10 -bad-.example.net'] }, 'values.0'],
      [{ name: 'a', type: 'SRV', values: ['10 5 sip.example.net'] }, 'values.0'],
      [{ name: 'a', type: 'SRV', values: ['10 5 70000 sip.example.net'] }, 'values.0'],
      [{ name: 'a', type: 'SRV', values: ['10 5 5060 sip'] }, 'values.0'],
      [{ name: 'a', type: 'CAA', values: ['0 policy "x"'] }, 'values.0'],
      [{ name: 'a', type: 'CAA', values: ['256 issue "letsencrypt.org"'] }, 'values.0'],
      [{ name: 'a', type: 'CAA', values: ['0 issue "letsencrypt.org'] }, 'values.0'],
      [{ name: 'a', type: 'CAA', values: ['0 issue "not a domain"'] }, 'values.0'],
      [{ name: 'a', type: 'CAA', values: ['0 iodef "security@example.net"'] }, 'values.0'],
      [{ name: 'a', type: 'TXT', values: ['x'.repeat(2049)] }, 'values.0'],
      [{ name: 'a', type: 'TXT', values: ['two\nlines'] }, 'values.0'],
      [{ name: 'a', type: 'TXT', values: [''] }, 'values.0'],
      [{ name: 'a', type: 'A', values: Array.from({ length: 21 }, (_, i) => `192.0.2.${i}`) }, 'values'],
      [{ name: 'a', type: 'A', values: [] }, 'values'],
      [{ name: 'www.other.example.', type: 'A', values: ['192.0.2.1'] }, 'name'],
      [{ name: '.', type: 'A', values: ['192.0.2.1'] }, 'name'],
      [{ name: 'bad name!', type: 'A', values: ['192.0.2.1'] }, 'name'],
      [{ name: 'a.*.b', type: 'A', values: ['192.0.2.1'] }, 'name'],
      [{ name: `${'x'.repeat(64)}`, type: 'A', values: ['192.0.2.1'] }, 'name'],
      [{ name: 'a', type: 'A', ttl: 59, values: ['192.0.2.1'] }, 'ttl'],
      [{ name: 'a', type: 'A', ttl: 86_401, values: ['192.0.2.1'] }, 'ttl'],
      [{ name: 'a', type: 'A', ttl: 300.5, values: ['192.0.2.1'] }, 'ttl'],
      [{ name: 'a', type: 'PTR', values: ['x.example.net'] }, 'type'],
      [{ name: 'a', type: 'SOA', values: ['x'] }, 'type'],
      [{ name: 'a', type: 'NS', values: ['ns.example.net'] }, 'type'],
      [{ name: '@', type: 'CNAME', values: ['x.example.net'] }, 'type'],
    ];
    for (const method of ['POST', 'PUT'] as const) {
      for (const [record, field] of refusals) {
        expectRefused(
          await dns(key, method, { terms_of_service: true, ttl: 300, ...record }),
          400,
          'validation_error',
          field,
          `${method} ${JSON.stringify(record).slice(0, 120)}`,
        );
      }
    }
    expectRefused(
      await dns(key, 'POST', { terms_of_service: true, name: 'a', type: 'A', values: ['192.0.2.1'], priority: 1 }),
      400,
      'validation_error',
      null,
      'an unknown field',
    );
    // Nothing of that reached the zone.
    expect((await records(key)).filter((r) => !r.reserved)).toEqual([]);
    expect(await changes(key)).toEqual([]);
  });

  it('terms_of_service: true is required on every change', async () => {
    const { key } = await delegated();
    for (const method of ['POST', 'PUT'] as const) {
      for (const terms of [undefined, false, 'yes', 'true', 1]) {
        const r = await dns(key, method, { ...(terms === undefined ? {} : { terms_of_service: terms }), name: 'a', type: 'A', values: ['192.0.2.1'] });
        expectRefused(r, 400, 'validation_error', 'terms_of_service', `${method} terms_of_service ${String(terms)}`);
      }
    }
    for (const terms of [undefined, 'false', 'yes', '1']) {
      const r = await dns(key, 'DELETE', { ...(terms === undefined ? {} : { terms_of_service: terms }), name: 'a', type: 'A' });
      expectRefused(r, 400, 'validation_error', 'terms_of_service', `DELETE terms_of_service ${String(terms)}`);
    }
    expectRefused(
      await dns(key, 'DELETE', { terms_of_service: false, name: 'a', type: 'A' }, true),
      400,
      'validation_error',
      'terms_of_service',
      'DELETE body false',
    );
  });

  it('no CNAME beside other data (either way); a second create is 409; changes to one name and type are serialised', async () => {
    const { key } = await delegated();
    expect((await set(key, 'POST', 'host', 'A', ['192.0.2.1'])).status).toBe(200);
    const cnameBeside = await set(key, 'POST', 'host', 'CNAME', ['x.example.net']);
    expectRefused(cnameBeside, 400, 'validation_error', 'type', 'CNAME beside A');
    expect(cnameBeside.body.error.message).toMatch(/cannot stand beside/);
    expectRefused(await set(key, 'PUT', 'host', 'CNAME', ['x.example.net']), 400, 'validation_error', 'type', 'PUT CNAME beside A');
    expect((await set(key, 'POST', 'alias', 'CNAME', ['x.example.net'])).status).toBe(200);
    for (const type of ['TXT', 'A', 'MX']) {
      const r = await set(key, 'PUT', 'alias', type, [type === 'A' ? '192.0.2.1' : type === 'MX' ? '10 mx.example.net' : 'x']);
      expectRefused(r, 400, 'validation_error', 'type', `${type} beside CNAME`);
      expect(r.body.error.message).toMatch(/is a CNAME/);
    }
    // A CNAME may be replaced by another target.
    expect((await set(key, 'PUT', 'alias', 'CNAME', ['y.example.net'])).body.record.values).toEqual(['y.example.net']);
    // Deleting a type that is not there is 404, whatever else stands at the name.
    expectRefused(await del(key, 'host', 'CNAME'), 404, 'not_found', null, 'DELETE CNAME where an A is');
    expectRefused(await del(key, 'alias', 'A'), 404, 'not_found', null, 'DELETE A where a CNAME is');

    const dup = await set(key, 'POST', 'host', 'A', ['192.0.2.2']);
    expectRefused(dup, 409, 'dns_record_exists', null, 'a second create');
    expect(dup.body.error.message).toMatch(/PUT/);
    // Two creates at once: one wins, the other is 409; the set is the winner's.
    const race = await Promise.all([set(key, 'POST', 'race', 'A', ['192.0.2.41']), set(key, 'POST', 'race', 'A', ['192.0.2.42'])]);
    expect(race.map((r) => r.status).sort()).toEqual([200, 409]);
    const winner = race.find((r) => r.status === 200)!.body.record.values;
    expect((await records(key)).find((r) => r.name.startsWith('race.'))!.values).toEqual(winner);
  });

  it('reserved records are read-only and cannot be shadowed; other TXT may stand beside the SPF record', async () => {
    const { zone, key, zoneId } = await delegated();
    const reservedRows = async () =>
      (await t.db.dnsRecord.findMany({ where: { zoneId, reserved: true }, orderBy: { id: 'asc' } })).map(
        (r) => `${r.id} ${r.name} ${r.type} ${r.ttl} ${r.content}`,
      );
    const before = await reservedRows();
    const serial = (await dns(key, 'GET')).body.serial;
    const tries: [string, string, string, string[], RegExp][] = [
      ['POST', '@', 'MX', ['10 evil.example.net'], /MX .* read-only/],
      ['PUT', '@', 'MX', ['10 evil.example.net'], /read-only/],
      ['PUT', `${zone}.`, 'MX', ['20 backup.example.net'], /read-only/],
      ['PUT', 'boxes1._domainkey', 'TXT', ['v=DKIM1; p=evil'], /read-only/],
      ['POST', 'boxes1._domainkey', 'CNAME', ['evil.example.net'], /shadow/],
      ['PUT', '_dmarc', 'TXT', ['v=DMARC1; p=none'], /read-only/],
      ['POST', '_dmarc', 'CNAME', ['evil.example.net'], /shadow/],
      ['POST', '@', 'TXT', ['v=spf1 include:evil.example.net ~all'], /SPF/],
      ['PUT', '@', 'TXT', ['site-verification=ok', 'V=SPF1 -all'], /SPF/],
      ['PUT', '@', 'NS', ['ns.evil.example.net'], /delegation/],
    ];
    for (const [method, name, type, values, message] of tries) {
      const r = await set(key, method as 'POST', name, type, values);
      expectRefused(r, 403, 'dns_record_reserved', null, `${method} ${name} ${type}`);
      expect(r.body.error.message).toMatch(message);
    }
    for (const [name, type] of [
      ['@', 'MX'],
      ['_dmarc', 'TXT'],
      ['boxes1._domainkey', 'TXT'],
      ['@', 'NS'],
      ['@', 'TXT'],
    ] as const) {
      expectRefused(await del(key, name, type), 403, 'dns_record_reserved', null, `DELETE ${name} ${type}`);
    }
    expect(await reservedRows()).toEqual(before);
    expect((await dns(key, 'GET')).body.serial).toBe(serial);

    // A site-verification TXT at the apex stands beside the SPF record, listed as a record of its own.
    const added = await set(key, 'POST', '@', 'TXT', ['google-site-verification=xyz']);
    expect(added.status, JSON.stringify(added.body)).toBe(200);
    const apexTxt = (await records(key)).filter((r) => r.name === zone && r.type === 'TXT');
    expect(apexTxt.map((r) => ({ reserved: r.reserved, values: r.values }))).toEqual([
      { reserved: true, values: [`v=spf1 a:${t.config.mailHost} ~all`] },
      { reserved: false, values: ['google-site-verification=xyz'] },
    ]);
    expect(apexTxt[0]!.id).not.toBe(apexTxt[1]!.id);
    const spf = `"v=spf1 a:${t.config.mailHost} ~all"`;
    expect(rdata((await dig(t.dnsPort!, zone, 'TXT')).answer)).toEqual([`"google-site-verification=xyz"`, spf].sort());
    expect((await set(key, 'POST', '@', 'TXT', ['again'])).status).toBe(409);
    expect((await set(key, 'PUT', '@', 'TXT', ['ms=123', 'apple-domain-verification=abc'])).status).toBe(200);
    expect(rdata((await dig(t.dnsPort!, zone, 'TXT')).answer)).toEqual(['"apple-domain-verification=abc"', '"ms=123"', spf].sort());
    expect((await del(key, '@', 'TXT')).status).toBe(200);
    expect(rdata((await dig(t.dnsPort!, zone, 'TXT')).answer)).toEqual([spf]);
    // Other names around the mail records stay the account's own: another DKIM selector, a record below _dmarc.
    expect((await set(key, 'POST', 'google._domainkey', 'TXT', ['v=DKIM1; k=rsa; p=other'])).status).toBe(200);
    expect((await set(key, 'POST', 'mail', 'MX', ['10 mx.example.net'])).status).toBe(200);
    // The mail still resolves as before.
    expect(await reservedRows()).toEqual(before);
    expect(rdata((await dig(t.dnsPort!, zone, 'MX')).answer)).toEqual([`10 ${t.config.mailHost}.`]);
    expect(rdata((await dig(t.dnsPort!, `_dmarc.${zone}`, 'TXT')).answer)).toHaveLength(1);
    expect(rdata((await dig(t.dnsPort!, `boxes1._domainkey.${zone}`, 'TXT')).answer)).toHaveLength(1);
  });

  it('a zone holds at most 500 records (values), reserved ones included', async () => {
    const { key } = await delegated();
    const have = (await records(key)).reduce((sum, r) => sum + r.values.length, 0);
    let left = 500 - have;
    for (let i = 0; left > 0; i++) {
      const count = Math.min(20, left);
      const r = await set(
        key,
        'POST',
        `fill${i}`,
        'A',
        Array.from({ length: count }, (_, j) => `198.51.${i}.${j}`),
      );
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      left -= count;
    }
    const full = await set(key, 'POST', 'one-more', 'A', ['192.0.2.1']);
    expectRefused(full, 400, 'validation_error', 'values', 'the 501st record');
    expect(full.body.error).toMatchObject({ limit: 500, records_in_zone: 500 });
    expect(full.body.error.message).toMatch(/at most 500/);
    // Replacing a set with as many values is fine at the limit; one more value is not.
    expect(
      (
        await set(
          key,
          'PUT',
          'fill0',
          'A',
          Array.from({ length: 20 }, (_, j) => `203.0.113.${j}`),
        )
      ).status,
    ).toBe(200);
    expectRefused(
      await set(
        key,
        'PUT',
        'fill1',
        'A',
        Array.from({ length: 21 }, (_, j) => `203.0.113.${j}`),
      ),
      400,
      'validation_error',
      'values',
      'more values than a set holds',
    );
    expect((await del(key, 'fill0', 'A')).status).toBe(200);
    expect((await set(key, 'POST', 'one-more', 'A', ['192.0.2.1'])).status).toBe(200);
  });
});

describe('accounts without a managed zone', () => {
  const calls = (key: string) => [
    dns(key, 'GET'),
    set(key, 'POST', 'www', 'A', ['192.0.2.1']),
    set(key, 'PUT', 'www', 'A', ['192.0.2.1']),
    del(key, 'www', 'A'),
  ];

  it('byo_manual: 409 dns_not_managed pointing to GET /events?type=domain.dns_required', async () => {
    const intent = await rest(t, 'POST', '/signup/agentic', {
      body: { human_email: 'm@example.com', domain_intent: { mode: 'byo_manual', byo_domain: `manual-${Date.now()}.example` } },
    });
    const key = (await rest(t, 'POST', '/signup/agentic/confirm', { body: { intent_id: intent.body.intent_id } })).body.api_key;
    for (const r of await Promise.all(calls(key))) {
      expectRefused(r, 409, 'dns_not_managed', null, 'byo_manual');
      expect(r.body.error.message).toContain('/events?type=domain.dns_required');
      expect(r.body.error.message).toMatch(/your own DNS/);
      expect(r.body.error.see).toBe(`${t.apiBase}/events?type=domain.dns_required`);
    }
    // The event it points to is there, with the records to publish.
    const required = await rest(t, 'GET', '/events?type=domain.dns_required', { key });
    expect(required.body.events).toHaveLength(1);
  });

  it("a free subdomain: 409, its zone is the instance's; a delegation not yet verified: 409 until it is live", async () => {
    const sub = await signupAccount(t);
    for (const r of await Promise.all(calls(sub.apiKey))) {
      expectRefused(r, 409, 'dns_not_managed', null, 'free subdomain');
      expect(r.body.error.message).toMatch(/free subdomain .* zone belongs to this instance/);
      expect(r.body.error.message).toMatch(/POST \/account\/domain/);
    }
    const pending = await delegated(false);
    for (const r of await Promise.all(calls(pending.key))) {
      expectRefused(r, 409, 'dns_not_managed', null, 'pending delegation');
      expect(r.body.error.message).toMatch(/not live yet \(pending_delegation\): its zone becomes editable once the delegation is verified/);
      expect(r.body.error.domain_status).toBe('pending_delegation');
    }
  });

  it("another account's zone is out of reach: its names are outside the caller's zone", async () => {
    const a = await delegated();
    const b = await delegated();
    expect((await set(a.key, 'POST', 'www', 'A', ['192.0.2.1'])).status).toBe(200);
    const serialA = (await dns(a.key, 'GET')).body.serial;
    for (const name of [`www.${a.zone}.`, `${a.zone}.`]) {
      expectRefused(await set(b.key, 'PUT', name, 'A', ['192.0.2.66']), 400, 'validation_error', 'name', `B writes ${name}`);
      expectRefused(await del(b.key, name, 'A'), 400, 'validation_error', 'name', `B deletes ${name}`);
    }
    // Without the trailing dot, a name that does not end with the caller's zone is relative to it.
    const relative = await set(b.key, 'POST', `www.${a.zone}`, 'A', ['192.0.2.66']);
    expect(relative.body.record.name).toBe(`www.${a.zone}.${b.zone}`);
    const listedB = (await dns(b.key, 'GET')).body;
    expect(listedB.zone).toBe(b.zone);
    expect(listedB.records.every((r: any) => r.name === b.zone || r.name.endsWith(`.${b.zone}`))).toBe(true);
    expect((await dns(a.key, 'GET')).body.serial).toBe(serialA);
    expect(rdata((await dig(t.dnsPort!, `www.${a.zone}`, 'A')).answer)).toEqual(['192.0.2.1']);
    expect((await changes(a.key)).length).toBe(1);
  });
});

describe('the same calls through the SDK and MCP', () => {
  it('tRPC (the SDK) and MCP tools read and change the zone like REST', async () => {
    const { zone, key } = await delegated();
    const sdk = createBoxesClient({ baseUrl: t.url, apiKey: key });
    const created = await sdk.dns.create.mutate({ terms_of_service: true, name: 'sdk', type: 'A', values: ['192.0.2.50'] });
    expect(created).toMatchObject({ action: 'create', record: { name: `sdk.${zone}`, ttl: 3600, values: ['192.0.2.50'], reserved: false } });
    expect((await sdk.dns.list.query()).records.find((r) => r.name === `sdk.${zone}`)?.id).toBe(created.record.id);
    const replaced = await sdk.dns.replace.mutate({ terms_of_service: true, name: 'sdk', type: 'A', ttl: 60, values: ['192.0.2.51'] });
    expect(replaced.serial).toBe(created.serial + 1);
    await expect(sdk.dns.replace.mutate({ terms_of_service: true, name: '@', type: 'MX', values: ['10 evil.example.net'] })).rejects.toMatchObject({
      data: { code: 'FORBIDDEN' },
    });
    expect((await sdk.dns.delete.mutate({ terms_of_service: true, name: 'sdk', type: 'A' })).action).toBe('delete');
    expect(rdata((await dig(t.dnsPort!, `sdk.${zone}`, 'A')).answer)).toEqual([]);

    const mcp = new Client({ name: 'managed-dns-test', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${key}` } } }));
    try {
      const r = await mcp.callTool({ name: 'dns_create', arguments: { terms_of_service: true, name: 'mcp', type: 'TXT', values: ['via mcp'] } });
      expect(r.isError, JSON.stringify(r.content)).toBeFalsy();
      expect(rdata((await dig(t.dnsPort!, `mcp.${zone}`, 'TXT')).answer)).toEqual(['"via mcp"']);
      const listed = await mcp.callTool({ name: 'dns_list', arguments: {} });
      expect(JSON.stringify(listed.structuredContent)).toContain(`mcp.${zone}`);
      const refused = await mcp.callTool({
        name: 'dns_create',
        arguments: { terms_of_service: true, name: '_dmarc', type: 'CNAME', values: ['evil.example.net'] },
      });
      expect(refused.isError).toBe(true);
      expect(JSON.stringify(refused.content)).toContain('dns_record_reserved');
      const gone = await mcp.callTool({ name: 'dns_delete', arguments: { terms_of_service: true, name: 'mcp', type: 'TXT' } });
      expect(gone.isError, JSON.stringify(gone.content)).toBeFalsy();
    } finally {
      await mcp.close();
    }
    expect((await changes(key)).map((e) => e.data.action)).toEqual(['create', 'replace', 'delete', 'create', 'delete']);

    // A receive-only key may read but not change; a box-restricted admin key may read but not change.
    const reader = await mintKey(t, key, ['receive']);
    expect((await dns(reader.api_key, 'GET')).status).toBe(200);
    expectRefused(await set(reader.api_key, 'POST', 'x', 'A', ['192.0.2.1']), 403, 'insufficient_scope', null, 'receive-only key');
    const restricted = await mintKey(t, key, ['send', 'receive', 'admin'], { allowed_boxes: ['agent'] });
    expect((await dns(restricted.api_key, 'GET')).status).toBe(200);
    expectRefused(await set(restricted.api_key, 'POST', 'x', 'A', ['192.0.2.1']), 403, 'box_restricted_key', null, 'box-restricted key');
  });
});
