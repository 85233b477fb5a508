/**
 * apps/dns, the authoritative server, asked with dig over UDP and TCP: AA, SOA and NS at each apex, free
 * subdomains' mail records (the DKIM TXT over 255 bytes split into strings, verifying as the domain's key), a
 * live delegated zone, managed A/AAAA/CNAME/MX/TXT/SRV/CAA records, NXDOMAIN versus NODATA with the SOA in
 * authority, REFUSED outside our zones, CNAME chasing, wildcards, referrals below an apex, EDNS0, truncation with
 * the answer over TCP, and query counting per zone and month.
 */
import { createPublicKey, sign, verify } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newId, open, txtContent } from '@boxes/core';
import { signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { addRecords, dig, liveDelegatedZone, rdata } from './dns-helpers';

let t: TestServer;
let port: number;
let sub: TestAccount;
let subDomain: string;
let zone: string;
let zoneId: string;
let domainId: string;

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

beforeAll(async () => {
  t = await startTestServer();
  port = t.dnsPort!;
  sub = await signupAccount(t);
  subDomain = sub.primaryAddress.split('@')[1]!;
  zone = `zone-${Date.now().toString(36)}.example`;
  ({ domainId, zoneId } = await liveDelegatedZone(t, zone));
  await addRecords(t, zoneId, [
    [`www.${zone}`, 'A', '192.0.2.10'],
    [`www.${zone}`, 'A', '192.0.2.11'],
    [`www.${zone}`, 'AAAA', '2001:db8::10'],
    [`alias.${zone}`, 'CNAME', `www.${zone}`],
    [`chain.${zone}`, 'CNAME', `alias.${zone}`],
    [`dangling.${zone}`, 'CNAME', `missing.${zone}`],
    [`outside.${zone}`, 'CNAME', 'www.example.net'],
    [`tobase.${zone}`, 'CNAME', subDomain],
    [`_sip._tcp.${zone}`, 'SRV', `10 5 5060 sip.${zone}`],
    [zone, 'CAA', '0 issue "letsencrypt.org"'],
    [`note.${zone}`, 'TXT', txtContent('hello "quoted" world')],
    [`deep.a.b.${zone}`, 'A', '192.0.2.20'],
    [`*.wild.${zone}`, 'A', '192.0.2.40'],
    [`sub.${zone}`, 'NS', `ns1.sub.${zone}`],
    [`sub.${zone}`, 'NS', 'ns.example.net'],
    [`ns1.sub.${zone}`, 'A', '192.0.2.53'],
    ...Array.from({ length: 30 }, (_, i) => [`big.${zone}`, 'TXT', txtContent(`record ${i} ${'x'.repeat(60)}`)] as [string, string, string]),
  ]);
});
afterAll(() => t?.stop());

describe('the base zone and free subdomains', () => {
  it('SOA and NS at the apex, authoritative', async () => {
    const soa = await dig(port, t.config.baseDomain, 'SOA');
    expect(soa.rcode).toBe('NOERROR');
    expect(soa.flags).toContain('aa');
    expect(rdata(soa.answer, 'SOA')[0]).toMatch(
      new RegExp(`^${escapeRegExp(t.config.nameservers[0]!)}\\. hostmaster\\.${escapeRegExp(t.config.baseDomain)}\\. \\d+ 3600 600 1209600 300$`),
    );
    expect(soa.answer[0]).toMatch(/ 3600 IN SOA /);
    const ns = await dig(port, t.config.baseDomain, 'NS');
    expect(ns.flags).toContain('aa');
    expect(rdata(ns.answer, 'NS')).toEqual(t.config.nameservers.map((n) => `${n}.`).sort());
  });

  it("a free subdomain's MX, SPF and DMARC are served", async () => {
    expect(rdata((await dig(port, subDomain, 'MX')).answer)).toEqual([`10 ${t.config.mailHost}.`]);
    expect(rdata((await dig(port, subDomain, 'TXT')).answer)).toEqual([`"v=spf1 a:${t.config.mailHost} ~all"`]);
    expect(rdata((await dig(port, `_dmarc.${subDomain}`, 'TXT')).answer)[0]).toContain('v=DMARC1');
  });

  it('its DKIM record (over 255 bytes) comes as strings of at most 255 bytes and verifies signatures of its key', async () => {
    for (const transport of [[], ['+tcp']]) {
      const dkim = await dig(port, `boxes1._domainkey.${subDomain}`, 'TXT', transport);
      expect(dkim.flags).toContain('aa');
      const strings = [...rdata(dkim.answer)[0]!.matchAll(/"([^"]*)"/g)].map((m) => m[1]!);
      expect(strings.length).toBeGreaterThan(1);
      expect(strings.every((s) => Buffer.byteLength(s) <= 255)).toBe(true);
      const record = strings.join('');
      expect(record).toMatch(/^v=DKIM1; k=rsa; p=[A-Za-z0-9+/=]+$/);
      // The key served is the one the domain signs with: a signature by its private key verifies with it.
      const d = await t.db.domain.findFirstOrThrow({ where: { name: subDomain } });
      const privateKey = open(t.svc.secretKey, d.dkimPrivateKeyEnc).toString('utf8');
      const served = createPublicKey({ key: Buffer.from(record.split('p=')[1]!, 'base64'), format: 'der', type: 'spki' });
      const data = Buffer.from(`signed by ${subDomain}`);
      expect(verify('sha256', data, served, sign('sha256', data, privateKey))).toBe(true);
    }
  });

  it('_domainkey is an empty non-terminal: NODATA, not NXDOMAIN', async () => {
    const ent = await dig(port, `_domainkey.${subDomain}`, 'TXT');
    expect(ent.rcode).toBe('NOERROR');
    expect(ent.answer).toEqual([]);
    expect(ent.authority[0]).toMatch(new RegExp(`^${escapeRegExp(t.config.baseDomain)}\\. 300 IN SOA `));
  });
});

describe('a delegated zone with managed records', () => {
  it('answers every type, authoritatively', async () => {
    const a = await dig(port, `www.${zone}`, 'A');
    expect(a.flags).toContain('aa');
    expect(rdata(a.answer)).toEqual(['192.0.2.10', '192.0.2.11']);
    expect(a.answer[0]).toMatch(/ 300 IN A /);
    expect(rdata((await dig(port, `www.${zone}`, 'AAAA')).answer)).toEqual(['2001:db8::10']);
    expect(rdata((await dig(port, `_sip._tcp.${zone}`, 'SRV')).answer)).toEqual([`10 5 5060 sip.${zone}.`]);
    expect(rdata((await dig(port, zone, 'CAA')).answer)).toEqual(['0 issue "letsencrypt.org"']);
    expect(rdata((await dig(port, `note.${zone}`, 'TXT')).answer)).toEqual(['"hello \\"quoted\\" world"']);
    expect(rdata((await dig(port, zone, 'MX')).answer)).toEqual([`10 ${t.config.mailHost}.`]);
    expect(rdata((await dig(port, zone, 'NS')).answer)).toEqual(t.config.nameservers.map((n) => `${n}.`).sort());
    expect(rdata((await dig(port, zone, 'SOA')).answer)[0]).toMatch(/ \d+ 3600 600 1209600 300$/);
  });

  it('ANY is answered with every record at the name (not minimally)', async () => {
    expect(rdata((await dig(port, `www.${zone}`, 'ANY')).answer)).toEqual(['192.0.2.10', '192.0.2.11', '2001:db8::10']);
    const apex = await dig(port, zone, 'ANY', ['+tcp']);
    expect(new Set(apex.answer.map((l) => l.split(' ')[3]))).toEqual(new Set(['SOA', 'NS', 'MX', 'TXT', 'CAA']));
  });

  it('the name is answered as asked (mixed case)', async () => {
    const a = await dig(port, `WwW.${zone.toUpperCase()}`, 'A');
    expect(a.answer[0]!.startsWith(`WwW.${zone.toUpperCase()}. `)).toBe(true);
  });

  it("CNAME: answered and followed inside our zones; the rcode is the last name's; a target elsewhere ends the answer", async () => {
    const a = await dig(port, `alias.${zone}`, 'A');
    expect(a.answer.map((l) => l.split(' ')[3])).toEqual(['CNAME', 'A', 'A']);
    expect(rdata(a.answer, 'CNAME')).toEqual([`www.${zone}.`]);
    const chain = await dig(port, `chain.${zone}`, 'AAAA');
    expect(chain.answer.map((l) => l.split(' ')[3])).toEqual(['CNAME', 'CNAME', 'AAAA']);
    const toBase = await dig(port, `tobase.${zone}`, 'MX');
    expect(rdata(toBase.answer, 'MX')).toEqual([`10 ${t.config.mailHost}.`]);
    const dangling = await dig(port, `dangling.${zone}`, 'A');
    expect(dangling.rcode).toBe('NXDOMAIN');
    expect(rdata(dangling.answer)).toEqual([`missing.${zone}.`]);
    expect(dangling.authority[0]).toContain(' SOA ');
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
    // The SOA's TTL is min(SOA TTL 3600, minimum 300) (RFC 2308).
    expect(nx.authority[0]).toMatch(new RegExp(`^${escapeRegExp(zone)}\\. 300 IN SOA `));
    const nodata = await dig(port, `www.${zone}`, 'MX');
    expect(nodata.rcode).toBe('NOERROR');
    expect(nodata.flags).toContain('aa');
    expect(nodata.answer).toEqual([]);
    expect(nodata.authority[0]).toMatch(new RegExp(`^${escapeRegExp(zone)}\\. 300 IN SOA `));
    for (const ent of [`a.b.${zone}`, `b.${zone}`]) {
      const r = await dig(port, ent, 'A');
      expect(r.rcode).toBe('NOERROR');
      expect(r.answer).toEqual([]);
      expect(r.authority[0]).toContain(' SOA ');
    }
    expect((await dig(port, `x.deep.a.b.${zone}`, 'A')).rcode).toBe('NXDOMAIN');
  });

  it('a wildcard stands in for names that do not exist below it', async () => {
    const w = await dig(port, `anything.wild.${zone}`, 'A');
    expect(w.flags).toContain('aa');
    expect(w.answer).toEqual([`anything.wild.${zone}. 300 IN A 192.0.2.40`]);
    expect(rdata((await dig(port, `a.b.wild.${zone}`, 'A')).answer)).toEqual(['192.0.2.40']);
    const nodata = await dig(port, `anything.wild.${zone}`, 'MX');
    expect([nodata.rcode, nodata.answer]).toEqual(['NOERROR', []]);
    // The wildcard's parent is an empty non-terminal, not covered by the wildcard.
    expect((await dig(port, `wild.${zone}`, 'A')).answer).toEqual([]);
  });

  it('NS below the apex delegate: a referral without AA, with glue', async () => {
    for (const name of [`sub.${zone}`, `www.sub.${zone}`]) {
      const r = await dig(port, name, 'A');
      expect(r.rcode).toBe('NOERROR');
      expect(r.flags).not.toContain('aa');
      expect(r.answer).toEqual([]);
      expect(rdata(r.authority, 'NS')).toEqual([`ns.example.net.`, `ns1.sub.${zone}.`]);
      expect(r.additional.filter((l) => !l.includes('OPT'))).toEqual([`ns1.sub.${zone}. 300 IN A 192.0.2.53`]);
    }
  });

  it('REFUSED for a name in no zone served here and for other classes, without AA', async () => {
    for (const [name, opts] of [
      ['www.example.org', []],
      ['example', []],
      [`www.${zone}`, ['-c', 'CH']],
    ] as [string, string[]][]) {
      const r = await dig(port, name, 'A', opts);
      expect(r.rcode).toBe('REFUSED');
      expect(r.flags).not.toContain('aa');
      expect(r.answer).toEqual([]);
    }
  });

  it('EDNS0: OPT answered, the advertised size honoured (up to 1232), BADVERS for other versions', async () => {
    const edns = await dig(port, `www.${zone}`, 'A', ['+edns=0', '+bufsize=4096']);
    expect(edns.edns).toEqual({ version: 0, udp: 1232 });
    expect((await dig(port, `www.${zone}`, 'A', ['+noedns'])).edns).toBeNull();
    const v1 = await dig(port, `www.${zone}`, 'A', ['+edns=1', '+noednsnegotiation']);
    expect(v1.rcode).toBe('BADVERS');
    expect(v1.edns?.version).toBe(0);
    // 30 TXT records of ~70 bytes: over 512 and 1232 bytes, under 4096.
    const at512 = await dig(port, `big.${zone}`, 'TXT', ['+notcp', '+ignore', '+bufsize=512']);
    expect(at512.flags).toContain('tc');
    expect(at512.answer).toEqual([]);
    expect(at512.edns).toEqual({ version: 0, udp: 1232 });
    expect((await dig(port, `big.${zone}`, 'TXT', ['+notcp', '+ignore', '+bufsize=4096'])).flags).toContain('tc');
    const fits = await dig(port, `www.${zone}`, 'ANY', ['+notcp', '+ignore', '+bufsize=512']);
    expect(fits.flags).not.toContain('tc');
    expect(fits.answer).toHaveLength(3);
  });

  it('an answer too large for UDP comes truncated (TC) and whole over TCP', async () => {
    const small = await dig(port, `big.${zone}`, 'TXT', ['+noedns', '+ignore']);
    expect(small.flags).toContain('tc');
    expect(small.answer).toEqual([]);
    const tcp = await dig(port, `big.${zone}`, 'TXT', ['+tcp']);
    expect(tcp.flags).not.toContain('tc');
    expect(tcp.flags).toContain('aa');
    expect(tcp.answer).toHaveLength(30);
    // dig without +ignore retries over TCP by itself.
    expect((await dig(port, `big.${zone}`, 'TXT', ['+noedns'])).answer).toHaveLength(30);
  });

  it('a change is served at once, with the SOA serial bumped by the change', async () => {
    const before = Number(rdata((await dig(port, zone, 'SOA')).answer)[0]!.split(' ')[2]);
    expect((await dig(port, `new.${zone}`, 'A')).rcode).toBe('NXDOMAIN');
    await t.db.$transaction(async (tx) => {
      await tx.dnsRecord.create({ data: { id: newId('rr'), zoneId, name: `new.${zone}`, type: 'A', ttl: 60, content: '192.0.2.99' } });
      await tx.dnsZone.update({ where: { id: zoneId }, data: { serial: { increment: 1 } } });
    });
    expect(rdata((await dig(port, `new.${zone}`, 'A', ['+tcp'])).answer)).toEqual(['192.0.2.99']);
    expect(Number(rdata((await dig(port, zone, 'SOA')).answer)[0]!.split(' ')[2])).toBe(before + 1);
  });

  it('queries of the zone are counted per month into dns_query_counts; the base zone and REFUSED are not', async () => {
    await t.runtime.dns!.flushCounts();
    const total = async () => (await t.db.dnsQueryCount.findMany({ where: { domainId } })).reduce((n, r) => n + r.queries, 0n);
    const before = await total();
    for (let i = 0; i < 5; i++) await dig(port, `www.${zone}`, 'A');
    await dig(port, `nothing.${zone}`, 'A', ['+tcp']); // NXDOMAIN in the zone: counted
    await dig(port, t.config.baseDomain, 'SOA'); // the base zone is not billed
    await dig(port, 'www.example.org', 'A'); // not ours
    // Counts are batched in memory and written every few seconds (or now, by flushCounts): the total is read after.
    await t.runtime.dns!.flushCounts();
    const rows = await t.db.dnsQueryCount.findMany({ where: { domainId } });
    expect(rows.map((r) => r.month)).toEqual([new Date().toISOString().slice(0, 7)]);
    expect((await total()) - before).toBe(6n);
    expect(await t.db.dnsQueryCount.count({ where: { NOT: { domainId } } })).toBe(0);
  });
});
