/**
 * PowerDNS (Debian pdns-server + pdns-backend-pgsql, installed by scripts/start-services.sh) with the shipped
 * deploy/powerdns/pdns.conf on this test's database gives the same answers as apps/dns: a free subdomain's mail
 * records (the DKIM key split into strings), a delegated zone's SOA/NS/MX and managed records, a pending
 * delegated zone (SOA and NS only), NXDOMAIN versus NODATA (an empty non-terminal too), CNAME chains, referrals
 * below the apex, wildcards, and REFUSED outside every zone.
 *
 * Compared, over UDP and TCP: the rcode, the AA and TC flags, and the answer and authority sections (sorted;
 * owner, TTL, class, type and data). What differs by design is left out of the comparison: PowerDNS adds the A/AAAA of in-zone MX/SRV targets to the additional section (apps/dns does no
 * additional processing but the glue of referrals), so additional sections are compared for referrals only. The
 * SOA serial is the same number in both (dns_zones.serial, bumped by every change).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { txtContent } from '@boxes/core';
import { freePort, rest, signupAccount, startTestServer, waitFor, type TestServer } from '@boxes/testing';
import { addRecords, dig, liveDelegatedZone, rdata, type DigResult } from './dns-helpers';

const PDNS = ['/usr/sbin/pdns_server', '/usr/bin/pdns_server'].find((p) => fs.existsSync(p));
const CONF = path.resolve(import.meta.dirname, '../../deploy/powerdns/pdns.conf');

if (!PDNS)
  console.warn('dns-powerdns.test.ts skipped: pdns_server is not installed (bash scripts/start-services.sh installs pdns-server and pdns-backend-pgsql)');

interface PowerDns {
  port: number;
  log(): string;
  stop(): Promise<void>;
}

/**
 * pdns_server in the foreground with the shipped configuration in a directory of its own (control socket there
 * too), on the given database and a free port of 127.0.0.1. Only where it listens and which database it reads
 * are given on the command line, over the shipped file.
 */
async function startPowerDns(databaseUrl: string, attempt = 1): Promise<PowerDns> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-pdns-'));
  fs.copyFileSync(CONF, path.join(dir, 'pdns.conf'));
  const db = new URL(databaseUrl);
  // Free for TCP; PowerDNS fails to start if UDP has it, and then another one is tried.
  const port = await freePort();
  let output = '';
  const child: ChildProcess = spawn(
    PDNS!,
    [
      `--config-dir=${dir}`,
      '--daemon=no',
      '--guardian=no',
      '--disable-syslog',
      '--write-pid=no',
      `--socket-dir=${dir}`,
      '--local-address=127.0.0.1',
      `--local-port=${port}`,
      '--setuid=',
      '--setgid=',
      `--gpgsql-host=${db.hostname}`,
      `--gpgsql-port=${db.port || '5432'}`,
      `--gpgsql-dbname=${decodeURIComponent(db.pathname.slice(1))}`,
      `--gpgsql-user=${decodeURIComponent(db.username) || 'postgres'}`,
      `--gpgsql-password=${decodeURIComponent(db.password)}`,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  child.stdout!.on('data', (b: Buffer) => (output += b.toString()));
  child.stderr!.on('data', (b: Buffer) => (output += b.toString()));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (child.exitCode !== null) {
      await stop();
      if (/unable to bind/i.test(output) && attempt < 3) return startPowerDns(databaseUrl, attempt + 1);
      throw new Error(`pdns_server exited (${child.exitCode}):\n${output}`);
    }
    // Any answer means it listens (a name outside its zones is REFUSED).
    if (
      await dig(port, 'ready.invalid', 'SOA', ['+time=1']).then(
        () => true,
        () => false,
      )
    )
      break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`pdns_server did not answer within 15 s:\n${output}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return { port, log: () => output, stop };
}

let t: TestServer;
let pdns: PowerDns | undefined;
let sub: string;
let zone: string;
let pending: string;

describe.skipIf(!PDNS)('PowerDNS on the same rows as apps/dns', () => {
  beforeAll(async () => {
    t = await startTestServer();
    sub = (await signupAccount(t)).domain;
    zone = `pdns-${Date.now().toString(36)}.example`;
    const { zoneId } = await liveDelegatedZone(t, zone);
    await addRecords(t, zoneId, [
      [`www.${zone}`, 'A', '192.0.2.10'],
      [`www.${zone}`, 'A', '192.0.2.11'],
      [`www.${zone}`, 'AAAA', '2001:db8::10'],
      [`alias.${zone}`, 'CNAME', `www.${zone}`],
      [`chain.${zone}`, 'CNAME', `alias.${zone}`],
      [`dangling.${zone}`, 'CNAME', `missing.${zone}`],
      [`outside.${zone}`, 'CNAME', 'www.example.net'],
      [`tobase.${zone}`, 'CNAME', sub],
      [`note.${zone}`, 'TXT', txtContent('hello "quoted" world')],
      [`long.${zone}`, 'TXT', txtContent('x'.repeat(600))],
      [`_sip._tcp.${zone}`, 'SRV', `10 5 5060 sip.${zone}`],
      [`sip.${zone}`, 'A', '192.0.2.30'],
      [zone, 'CAA', '0 issue "letsencrypt.org"'],
      [`deep.a.b.${zone}`, 'A', '192.0.2.20'],
      [`*.wild.${zone}`, 'A', '192.0.2.40'],
      [`*.wild.${zone}`, 'TXT', txtContent('wildcard')],
      [`sub.${zone}`, 'NS', `ns1.sub.${zone}`],
      [`ns1.sub.${zone}`, 'A', '192.0.2.53'],
    ]);
    // A pending delegated claim: its zone holds the SOA and NS only.
    pending = `pending-${Date.now().toString(36)}.example`;
    const intent = await rest(t, 'POST', '/signup/agentic', {
      body: { human_email: 'p@example.com', domain_intent: { mode: 'byo_delegated', byo_domain: pending } },
    });
    await rest(t, 'POST', '/signup/agentic/confirm', { body: { intent_id: intent.body.intent_id } });
    await t.db.dnsZone.findUniqueOrThrow({ where: { name: pending } });
    pdns = await startPowerDns(t.config.databaseUrl);
  });
  afterAll(async () => {
    await pdns?.stop();
    await t?.stop();
  });

  /** Questions: name, type, and whether the additional section is compared too (referrals: the glue). */
  const questions = (): [string, string, 'additional'?][] => [
    // The base zone and a free subdomain.
    [t.config.baseDomain, 'SOA'],
    [t.config.baseDomain, 'NS'],
    [sub, 'MX'],
    [sub, 'TXT'],
    [`boxes1._domainkey.${sub}`, 'TXT'],
    [`_dmarc.${sub}`, 'TXT'],
    [`_domainkey.${sub}`, 'TXT'], // empty non-terminal: NODATA
    [`nothing.${sub}`, 'A'], // NXDOMAIN
    [sub, 'A'], // NODATA
    // A live delegated zone.
    [zone, 'SOA'],
    [zone, 'NS'],
    [zone, 'MX'],
    [zone, 'TXT'],
    [zone, 'CAA'],
    [`_dmarc.${zone}`, 'TXT'],
    [`boxes1._domainkey.${zone}`, 'TXT'],
    [`www.${zone}`, 'A'],
    [`WwW.${zone.toUpperCase()}`, 'A'], // the name as asked
    [`www.${zone}`, 'AAAA'],
    [`www.${zone}`, 'MX'], // NODATA
    [`www.${zone}`, 'ANY'], // every record at the name, from both
    [zone, 'ANY'],
    [`alias.${zone}`, 'A'],
    [`alias.${zone}`, 'CNAME'],
    [`chain.${zone}`, 'AAAA'],
    [`dangling.${zone}`, 'A'], // NXDOMAIN after the CNAME (RFC 6604)
    [`outside.${zone}`, 'A'],
    [`tobase.${zone}`, 'MX'], // followed into the base zone
    [`note.${zone}`, 'TXT'],
    [`long.${zone}`, 'TXT'],
    [`_sip._tcp.${zone}`, 'SRV'],
    [`a.b.${zone}`, 'A'], // empty non-terminals
    [`b.${zone}`, 'TXT'],
    [`deep.a.b.${zone}`, 'A'],
    [`nothing.${zone}`, 'A'], // NXDOMAIN
    [`x.nothing.${zone}`, 'TXT'], // NXDOMAIN
    [`host.wild.${zone}`, 'A'], // wildcard
    [`a.host.wild.${zone}`, 'TXT'], // wildcard, deeper
    [`host.wild.${zone}`, 'MX'], // wildcard, NODATA
    [`wild.${zone}`, 'A'], // empty non-terminal above the wildcard
    [`www.sub.${zone}`, 'A', 'additional'], // referral with glue
    [`sub.${zone}`, 'NS', 'additional'],
    // A pending delegated claim.
    [pending, 'SOA'],
    [pending, 'NS'],
    [pending, 'MX'], // NODATA
    [`www.${pending}`, 'A'], // NXDOMAIN
    // Outside every zone.
    ['www.example.org', 'A'],
    ['example', 'NS'],
  ];

  /** What is compared of an answer (see the top of the file). */
  const comparable = (r: DigResult, additional: boolean) => ({
    rcode: r.rcode,
    aa: r.flags.includes('aa'),
    tc: r.flags.includes('tc'),
    answer: [...r.answer].sort(),
    authority: [...r.authority].sort(),
    ...(additional ? { additional: [...r.additional].sort() } : {}),
  });

  it('gives the answers apps/dns gives, over UDP and TCP', async () => {
    const differences: string[] = [];
    for (const transport of [[], ['+tcp']]) {
      for (const [name, type, extra] of questions()) {
        const ask = (port: number) =>
          dig(port, name, type, transport).then(
            (r) => comparable(r, extra === 'additional'),
            (err: Error) => ({ error: err.message }),
          );
        const [ours, theirs] = await Promise.all([ask(t.dnsPort!), ask(pdns!.port)]);
        if (JSON.stringify(ours) !== JSON.stringify(theirs))
          differences.push(`${name} ${type} ${transport.join(' ')}\n  apps/dns: ${JSON.stringify(ours)}\n  PowerDNS: ${JSON.stringify(theirs)}`);
      }
    }
    expect(differences.join('\n'), pdns!.log()).toBe('');
    // Not two servers failing alike: PowerDNS itself serves the records.
    const dkim = await dig(pdns!.port, `boxes1._domainkey.${sub}`, 'TXT');
    expect([dkim.rcode, dkim.flags.includes('aa')]).toEqual(['NOERROR', true]);
    const d = await t.db.domain.findFirstOrThrow({ where: { name: sub } });
    expect([...dkim.answer[0]!.matchAll(/"([^"]*)"/g)].map((m) => m[1]).join('')).toBe(`v=DKIM1; k=rsa; p=${d.dkimPublicKey}`);
    expect((await dig(pdns!.port, `www.${zone}`, 'A')).answer).toHaveLength(2);
  }, 120_000); // some 170 runs of dig

  it('serves changes within a second (its caches last one), new zones too, with the serial apps/dns serves', async () => {
    const z = await t.db.dnsZone.findUniqueOrThrow({ where: { name: zone } });
    await addRecords(t, z.id, [[`later.${zone}`, 'A', '192.0.2.77']]);
    const other = `later-${Date.now().toString(36)}.example`;
    const { zoneId } = await liveDelegatedZone(t, other);
    await addRecords(t, zoneId, [[`www.${other}`, 'TXT', txtContent('new zone')]]);
    const started = Date.now();
    await waitFor(
      'PowerDNS to serve the new rows',
      async () => {
        const a = await dig(pdns!.port, `later.${zone}`, 'A');
        const b = await dig(pdns!.port, `www.${other}`, 'TXT');
        return a.answer.length === 1 && b.answer.length === 1;
      },
      5000,
    );
    expect(Date.now() - started).toBeLessThan(3000); // a 1-second cache, and the runs of dig
    const serial = async (port: number) => rdata((await dig(port, zone, 'SOA')).answer)[0]!.split(' ')[2];
    await waitFor('PowerDNS to serve the new serial', async () => (await serial(pdns!.port)) === String(z.serial + 1), 3000);
    expect(await serial(t.dnsPort!)).toBe(String(z.serial + 1));
  });
});
