/**
 * Beyond one machine, PowerDNS serves the same rows: pdns_server (Debian pdns-server + pdns-backend-pgsql)
 * started with the shipped deploy/powerdns/pdns.conf on this test's database, asked with dig for the same names
 * as apps/dns: the same rcodes and the same answers. scripts/start-services.sh installs pdns.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { goLive, newId, txtContent } from '@boxes/core';
import { rest, signupAccount, startTestServer, waitFor, type TestServer } from '@boxes/testing';
import { dig, rdata } from './dns-helpers';

const PDNS = '/usr/sbin/pdns_server';
let t: TestServer;
let pdns: ChildProcess;
let pdnsPort: number;
let dir: string;
let subDomain: string;
let zone: string;
/** What pdns_server printed, shown when an answer differs. */
let log = '';

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

beforeAll(async () => {
  expect(fs.existsSync(PDNS), `${PDNS} is missing: run scripts/start-services.sh (apt-get install -y pdns-server pdns-backend-pgsql)`).toBe(true);
  t = await startTestServer();
  const a = await signupAccount(t);
  subDomain = a.primaryAddress.split('@')[1]!;
  zone = `pdns-${Date.now().toString(36)}.example`;
  const intent = await rest(t, 'POST', '/signup/agentic', { body: { human_email: 'pdns@example.com', domain_intent: { mode: 'byo_delegated', byo_domain: zone } } });
  await rest(t, 'POST', '/signup/agentic/confirm', { body: { intent_id: intent.body.intent_id } });
  const d = await t.db.domain.findFirstOrThrow({ where: { name: zone } });
  await t.db.$transaction((tx) => goLive(t.svc, tx, d));
  const z = await t.db.dnsZone.findUniqueOrThrow({ where: { name: zone } });
  const rows: [string, string, string][] = [
    [`www.${zone}`, 'A', '192.0.2.10'],
    [`www.${zone}`, 'AAAA', '2001:db8::10'],
    [`alias.${zone}`, 'CNAME', `www.${zone}`],
    [`note.${zone}`, 'TXT', txtContent('site-verification=abc123')],
    [`_sip._tcp.${zone}`, 'SRV', `10 5 5060 sip.${zone}`],
    [zone, 'CAA', '0 issue "letsencrypt.org"'],
  ];
  await t.db.dnsRecord.createMany({ data: rows.map(([name, type, content]) => ({ id: newId('rr'), zoneId: z.id, name, type, ttl: 300, content })) });

  // The shipped configuration, pointed at this test's database and an unprivileged port.
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-pdns-'));
  const db = new URL(t.config.databaseUrl);
  const conf = fs
    .readFileSync(path.resolve(import.meta.dirname, '../../deploy/powerdns/pdns.conf'), 'utf8')
    .replace(/^gpgsql-host=.*$/m, `gpgsql-host=${db.hostname}`)
    .replace(/^gpgsql-port=.*$/m, `gpgsql-port=${db.port || 5432}`)
    .replace(/^gpgsql-dbname=.*$/m, `gpgsql-dbname=${db.pathname.slice(1)}`)
    .replace(/^gpgsql-user=.*$/m, `gpgsql-user=${decodeURIComponent(db.username) || 'postgres'}`);
  fs.writeFileSync(path.join(dir, 'pdns.conf'), conf);
  pdnsPort = await freePort();
  pdns = spawn(
    PDNS,
    [`--config-dir=${dir}`, '--daemon=no', '--guardian=no', '--disable-syslog', '--write-pid=no', `--socket-dir=${dir}`, '--local-address=127.0.0.1', `--local-port=${pdnsPort}`, '--loglevel=4'],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  pdns.stdout!.on('data', (c: Buffer) => (log += c.toString()));
  pdns.stderr!.on('data', (c: Buffer) => (log += c.toString()));
  let last = '';
  try {
    await waitFor('pdns_server to answer', async () => {
      try {
        const r = await dig(pdnsPort, t.config.baseDomain, 'SOA');
        last = r.text;
        return r.rcode === 'NOERROR';
      } catch (err) {
        last = String(err);
        return false;
      }
    }, 20_000);
  } catch (err) {
    throw new Error(`${(err as Error).message}; last answer: ${last}; pdns_server said: ${log}`);
  }
}, 60_000);

afterAll(async () => {
  pdns?.kill('SIGTERM');
  await t?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

it('PowerDNS gives the answers apps/dns gives, for the same names', async () => {
  const questions: [string, string][] = [
    [t.config.baseDomain, 'SOA'],
    [t.config.baseDomain, 'NS'],
    [subDomain, 'MX'],
    [subDomain, 'TXT'],
    [`boxes1._domainkey.${subDomain}`, 'TXT'],
    [`_dmarc.${subDomain}`, 'TXT'],
    [zone, 'SOA'],
    [zone, 'NS'],
    [zone, 'MX'],
    [zone, 'CAA'],
    [`www.${zone}`, 'A'],
    [`www.${zone}`, 'AAAA'],
    [`alias.${zone}`, 'A'],
    [`note.${zone}`, 'TXT'],
    [`_sip._tcp.${zone}`, 'SRV'],
    [`nothing.${zone}`, 'A'],
    [`www.${zone}`, 'MX'],
  ];
  for (const [name, type] of questions) {
    const ours = await dig(t.dnsPort!, name, type, ['+tcp']);
    const theirs = await dig(pdnsPort, name, type, ['+tcp']);
    const label = `${name} ${type} (pdns_server said: ${log.slice(-2000)})`;
    expect(theirs.rcode, label).toBe(ours.rcode);
    expect(theirs.flags.includes('aa'), label).toBe(ours.flags.includes('aa'));
    expect([...theirs.answer].sort(), label).toEqual([...ours.answer].sort());
    // Negative answers carry the zone's SOA (the same record: both take the SOA minimum as its TTL).
    expect(rdata(theirs.authority, 'SOA'), label).toEqual(rdata(ours.authority, 'SOA'));
  }
  // Names in no zone: apps/dns answers REFUSED, as PowerDNS does.
  const ours = await dig(t.dnsPort!, 'www.example.org', 'A');
  const theirs = await dig(pdnsPort, 'www.example.org', 'A');
  expect(theirs.rcode).toBe('REFUSED');
  expect(ours.rcode).toBe('REFUSED');
});

it('a change is served by both at once, with the same serial', async () => {
  const z = await t.db.dnsZone.findUniqueOrThrow({ where: { name: zone } });
  await t.db.$transaction(async (tx) => {
    await tx.dnsRecord.create({ data: { id: newId('rr'), zoneId: z.id, name: `new.${zone}`, type: 'A', ttl: 60, content: '192.0.2.77' } });
    await tx.dnsZone.update({ where: { id: z.id }, data: { serial: { increment: 1 } } });
  });
  for (const port of [t.dnsPort!, pdnsPort]) {
    expect(rdata((await dig(port, `new.${zone}`, 'A', ['+tcp'])).answer)).toEqual(['192.0.2.77']);
    expect(rdata((await dig(port, zone, 'SOA')).answer)[0]!.split(' ')[2]).toBe(String(z.serial + 1));
  }
});
