/**
 * apps/dns, the authoritative server, asked with dig over UDP and TCP: AA, SOA and NS at each apex, free
 * subdomains' mail records (the DKIM TXT over 255 bytes split into strings), a live delegated zone, managed
 * A/AAAA/CNAME/MX/TXT/SRV/CAA records, NXDOMAIN versus NODATA with the SOA in authority, REFUSED outside our
 * zones, CNAME chasing, EDNS0, truncation with the answer over TCP, and query counting per zone and month.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { goLive, newId, txtContent } from '@boxes/core';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { dig, rdata } from './dns-helpers';

let t: TestServer;
let port: number;
let sub: TestAccount;
let subDomain: string;
let zone: string;
let zoneId: string;
let domainId: string;

beforeAll(async () => {
  t = await startTestServer();
  port = t.dnsPort!;
  sub = await signupAccount(t);
  subDomain = sub.primaryAddress.split('@')[1]!;
  // A delegated domain made live as the verifier would once its NS are seen (tests/e2e/domains.test.ts proves that).
  zone = `zone-${Date.now().toString(36)}.example`;
  const intent = await rest(t, 'POST', '/signup/agentic', { body: { human_email: 'dns@example.com', domain_intent: { mode: 'byo_delegated', byo_domain: zone } } });
  await rest(t, 'POST', '/signup/agentic/confirm', { body: { intent_id: intent.body.intent_id } });
  const d = await t.db.domain.findFirstOrThrow({ where: { name: zone } });
  await t.db.$transaction((tx) => goLive(t.svc, tx, d));
  domainId = d.id;
  const z = await t.db.dnsZone.findUniqueOrThrow({ where: { name: zone } });
  zoneId = z.id;
  // Managed records (the managed DNS API writes these rows the same way).
  const rows: [string, string, string][] = [
    [`www.${zone}`, 'A', '192.0.2.10'],
    [`www.${zone}`, 'A', '192.0.2.11'],
    [`www.${zone}`, 'AAAA', '2001:db8::10'],
    [`alias.${zone}`, 'CNAME', `www.${zone}`],
    [`outside.${zone}`, 'CNAME', 'www.example.net'],
    [`_sip._tcp.${zone}`, 'SRV', `10 5 5060 sip.${zone}`],
    [zone, 'CAA', '0 issue "letsencrypt.org"'],
    [`note.${zone}`, 'TXT', txtContent('hello "quoted" world')],
    [`deep.a.b.${zone}`, 'A', '192.0.2.20'],
    ...Array.from({ length: 30 }, (_, i) => [`big.${zone}`, 'TXT', txtContent(`record ${i} ${'x'.repeat(60)}`)] as [string, string, string]),
  ];
  await t.db.dnsRecord.createMany({ data: rows.map(([name, type, content]) => ({ id: newId('rr'), zoneId, name, type, ttl: 300, content })) });
});
afterAll(() => t?.stop());

describe('the base zone and free subdomains', () => {
  it('SOA and NS at the apex, authoritative', async () => {
    const soa = await dig(port, t.config.baseDomain, 'SOA');
    expect(soa.rcode).toBe('NOERROR');
    expect(soa.flags).toContain('aa');
    expect(rdata(soa.answer, 'SOA')[0]).toMatch(new RegExp(`^${t.config.nameservers[0]}\\. hostmaster\\.${t.config.baseDomain.replace(/\./g, '\\.')}\\. \\d+ 3600 600 1209600 300$`));
    const ns = await dig(port, t.config.baseDomain, 'NS');
    expect(rdata(ns.answer, 'NS')).toEqual(t.config.nameservers.map((n) => `${n}.`).sort());
  });

  it("a free subdomain's MX, SPF, DMARC and its DKIM key (over 255 bytes, split into strings) are served", async () => {
    expect(rdata((await dig(port, subDomain, 'MX')).answer)).toEqual([`10 ${t.config.mailHost}.`]);
    expect(rdata((await dig(port, subDomain, 'TXT')).answer)).toEqual([`"v=spf1 a:${t.config.mailHost} ~all"`]);
    expect(rdata((await dig(port, `_dmarc.${subDomain}`, 'TXT')).answer)[0]).toContain('v=DMARC1');
    const dkim = await dig(port, `boxes1._domainkey.${subDomain}`, 'TXT');
    const strings = [...rdata(dkim.answer)[0]!.matchAll(/"([^"]*)"/g)].map((m) => m[1]!);
    expect(strings.length).toBeGreaterThan(1);
    expect(strings.every((s) => Buffer.byteLength(s) <= 255)).toBe(true);
    const d = await t.db.domain.findFirstOrThrow({ where: { name: subDomain } });
    expect(strings.join('')).toBe(`v=DKIM1; k=rsa; p=${d.dkimPublicKey}`);
  });
});

describe('a delegated zone with managed records', () => {
  it('answers every type', async () => {
    expect(rdata((await dig(port, `www.${zone}`, 'A')).answer)).toEqual(['192.0.2.10', '192.0.2.11']);
    expect(rdata((await dig(port, `www.${zone}`, 'AAAA')).answer)).toEqual(['2001:db8::10']);
    expect(rdata((await dig(port, `_sip._tcp.${zone}`, 'SRV')).answer)).toEqual([`10 5 5060 sip.${zone}.`]);
    expect(rdata((await dig(port, zone, 'CAA')).answer)).toEqual(['0 issue "letsencrypt.org"']);
    expect(rdata((await dig(port, `note.${zone}`, 'TXT')).answer)).toEqual(['"hello \\"quoted\\" world"']);
    expect(rdata((await dig(port, zone, 'MX')).answer)).toEqual([`10 ${t.config.mailHost}.`]);
    expect(rdata((await dig(port, zone, 'NS')).answer)).toEqual(t.config.nameservers.map((n) => `${n}.`).sort());
    const any = await dig(port, `www.${zone}`, 'ANY');
    expect(rdata(any.answer)).toEqual(['192.0.2.10', '192.0.2.11', '2001:db8::10']);
  });

  it('CNAME: answered and followed inside our zones; a target elsewhere ends the answer', async () => {
    const a = await dig(port, `alias.${zone}`, 'A');
    expect(a.answer.map((l) => l.split(' ')[3])).toEqual(['CNAME', 'A', 'A']);
    expect(rdata(a.answer, 'CNAME')).toEqual([`www.${zone}.`]);
    const out = await dig(port, `outside.${zone}`, 'A');
    expect(out.rcode).toBe('NOERROR');
    expect(rdata(out.answer)).toEqual(['www.example.net.']);
    expect(rdata((await dig(port, `alias.${zone}`, 'CNAME')).answer)).toEqual([`www.${zone}.`]);
  });

  it('NXDOMAIN for a name with nothing at or below it, NODATA for other types and empty non-terminals; both with the SOA', async () => {
    const nx = await dig(port, `nothing.${zone}`, 'A');
    expect(nx.rcode).toBe('NXDOMAIN');
    expect(nx.flags).toContain('aa');
    expect(nx.answer).toEqual([]);
    expect(nx.authority).toHaveLength(1);
    expect(nx.authority[0]).toMatch(new RegExp(`^${zone.replace(/\./g, '\\.')}\\. 300 IN SOA `));
    const nodata = await dig(port, `www.${zone}`, 'MX');
    expect(nodata.rcode).toBe('NOERROR');
    expect(nodata.answer).toEqual([]);
    expect(nodata.authority[0]).toContain(' SOA ');
    const ent = await dig(port, `a.b.${zone}`, 'A');
    expect(ent.rcode).toBe('NOERROR');
    expect(ent.answer).toEqual([]);
    expect(ent.authority[0]).toContain(' SOA ');
  });

  it('REFUSED for a name in no zone served here, without AA', async () => {
    const r = await dig(port, 'www.example.org', 'A');
    expect(r.rcode).toBe('REFUSED');
    expect(r.flags).not.toContain('aa');
  });

  it('EDNS0; an answer too large for UDP comes truncated (TC) and whole over TCP', async () => {
    const edns = await dig(port, `www.${zone}`, 'A', ['+edns=0', '+bufsize=4096']);
    expect(edns.edns).toEqual({ version: 0, udp: 1232 });
    expect((await dig(port, `www.${zone}`, 'A', ['+noedns'])).edns).toBeNull();
    const small = await dig(port, `big.${zone}`, 'TXT', ['+noedns', '+ignore']);
    expect(small.flags).toContain('tc');
    expect(small.answer).toEqual([]);
    const tcp = await dig(port, `big.${zone}`, 'TXT', ['+tcp']);
    expect(tcp.flags).not.toContain('tc');
    expect(tcp.answer).toHaveLength(30);
    // dig without +ignore retries over TCP by itself.
    expect((await dig(port, `big.${zone}`, 'TXT', ['+noedns'])).answer).toHaveLength(30);
  });

  it('a change is served at once, with the SOA serial bumped by the change', async () => {
    const before = Number(rdata((await dig(port, zone, 'SOA')).answer)[0]!.split(' ')[2]);
    await t.db.$transaction(async (tx) => {
      await tx.dnsRecord.create({ data: { id: newId('rr'), zoneId, name: `new.${zone}`, type: 'A', ttl: 60, content: '192.0.2.99' } });
      await tx.dnsZone.update({ where: { id: zoneId }, data: { serial: { increment: 1 } } });
    });
    expect(rdata((await dig(port, `new.${zone}`, 'A', ['+tcp'])).answer)).toEqual(['192.0.2.99']);
    expect(Number(rdata((await dig(port, zone, 'SOA')).answer)[0]!.split(' ')[2])).toBe(before + 1);
  });

  it('queries of the zone are counted per month into dns_query_counts', async () => {
    await t.runtime.dns!.flushCounts();
    const before = (await t.db.dnsQueryCount.findMany({ where: { domainId } })).reduce((n, r) => n + r.queries, 0n);
    for (let i = 0; i < 5; i++) await dig(port, `www.${zone}`, 'A');
    await dig(port, t.config.baseDomain, 'SOA'); // the base zone is not billed
    await t.runtime.dns!.flushCounts();
    const rows = await t.db.dnsQueryCount.findMany({ where: { domainId } });
    expect(rows.map((r) => r.month)).toEqual([new Date().toISOString().slice(0, 7)]);
    expect(rows[0]!.queries - before).toBe(5n);
  });
});
