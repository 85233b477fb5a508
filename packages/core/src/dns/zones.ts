/**
 * The zones this instance serves authoritatively, kept as rows (dns_zones, dns_records) that apps/dns and
 * PowerDNS both read: the base domain (NS, the instance's own hosts, and every free subdomain's mail records),
 * delegated and registered domains (their mail records plus managed records). Every change bumps the zone's
 * SOA serial in the same transaction.
 */
import type { Config } from '@boxes/config';
import type { Db, Tx } from '@boxes/db';
import { exec, sql } from '@boxes/db';
import { newId } from '../shared/ids';
import { hostContent, txtContent } from './content';

type DbOrTx = Db | Tx;

export const DEFAULT_TTL = 3600;

/** A record to store: owner name and content as in dns_records (see content.ts). */
export interface StoredRecord {
  name: string;
  type: string;
  ttl: number;
  content: string;
}

interface MailDomain {
  id: string;
  name: string;
  dkimSelector: string;
  dkimPublicKey: string;
}

/** The records that carry a domain's mail: MX, SPF, DKIM, DMARC (reserved in its zone). */
export function mailRecordContents(config: Config, d: MailDomain): StoredRecord[] {
  return [
    { name: d.name, type: 'MX', ttl: DEFAULT_TTL, content: `10 ${hostContent(config.mailHost)}` },
    { name: d.name, type: 'TXT', ttl: DEFAULT_TTL, content: txtContent(spfValue(config)) },
    { name: `${d.dkimSelector}._domainkey.${d.name}`, type: 'TXT', ttl: DEFAULT_TTL, content: txtContent(dkimValue(d.dkimPublicKey)) },
    { name: `_dmarc.${d.name}`, type: 'TXT', ttl: DEFAULT_TTL, content: txtContent(DMARC_VALUE) },
  ];
}

export const spfValue = (config: Config): string => `v=spf1 a:${config.mailHost} ~all`;
export const dkimValue = (publicKey: string): string => `v=DKIM1; k=rsa; p=${publicKey}`;
export const DMARC_VALUE = 'v=DMARC1; p=quarantine; adkim=r; aspf=r';

const nsRecords = (config: Config, zone: string): StoredRecord[] =>
  config.nameservers.map((ns) => ({ name: zone, type: 'NS', ttl: DEFAULT_TTL * 24, content: hostContent(ns) }));

/** A/AAAA of the instance's own hosts that live inside the base domain, when PUBLIC_ADDRESSES is set. */
function hostRecords(config: Config): StoredRecord[] {
  const hosts = [...new Set([config.mailHost, ...config.nameservers].map(hostContent))].filter(
    (h) => h === config.baseDomain || h.endsWith(`.${config.baseDomain}`),
  );
  return hosts.flatMap((h) => config.dns.publicAddresses.map((ip) => ({ name: h, type: ip.includes(':') ? 'AAAA' : 'A', ttl: DEFAULT_TTL, content: ip })));
}

async function insertRecords(db: DbOrTx, zoneId: string, records: StoredRecord[], opts: { reserved: boolean; domainId?: string | null }): Promise<void> {
  if (!records.length) return;
  await db.dnsRecord.createMany({
    data: records.map((r) => ({ id: newId('rr'), zoneId, ...r, name: hostContent(r.name), reserved: opts.reserved, domainId: opts.domainId ?? null })),
  });
}

export async function bumpSerial(db: DbOrTx, zoneId: string): Promise<void> {
  await db.dnsZone.update({ where: { id: zoneId }, data: { serial: { increment: 1 } } });
}

const soa = (config: Config) => ({ soaMname: hostContent(config.nameservers[0] ?? `ns1.${config.baseDomain}`), soaRname: config.dns.hostmaster });

/**
 * Creates the base zone if missing and brings its instance records (NS, A/AAAA) and every live free
 * subdomain's mail records up to date. Idempotent; run at start by the server and the DNS app.
 */
export async function ensureBaseZone(db: Db, config: Config): Promise<string> {
  return db.$transaction(async (tx) => {
    await exec(tx, sql`SELECT pg_advisory_xact_lock(hashtext('boxes:dns:base-zone'))`);
    const zone =
      (await tx.dnsZone.findUnique({ where: { name: config.baseDomain } })) ??
      (await tx.dnsZone.create({ data: { id: newId('zone'), name: config.baseDomain, kind: 'base', ...soa(config) } }));
    const want = [...nsRecords(config, config.baseDomain), ...hostRecords(config)];
    const have = await tx.dnsRecord.findMany({ where: { zoneId: zone.id, domainId: null, reserved: true } });
    const key = (r: StoredRecord) => `${hostContent(r.name)} ${r.type} ${r.content}`;
    const wantKeys = new Set(want.map(key));
    const stale = have.filter((r) => !wantKeys.has(key(r)));
    const missing = want.filter((r) => !have.some((h) => key(h) === key(r)));
    // Free subdomains live before their records were kept here (and any whose records are missing).
    const unserved = await tx.domain.findMany({
      where: {
        mode: 'subdomain',
        status: 'active',
        NOT: {
          id: {
            in: (await tx.dnsRecord.findMany({ where: { zoneId: zone.id, domainId: { not: null } }, select: { domainId: true }, distinct: ['domainId'] })).map(
              (r) => r.domainId!,
            ),
          },
        },
      },
    });
    if (!stale.length && !missing.length && !unserved.length && zone.soaMname === soa(config).soaMname && zone.soaRname === soa(config).soaRname)
      return zone.id;
    if (stale.length) await tx.dnsRecord.deleteMany({ where: { id: { in: stale.map((r) => r.id) } } });
    await insertRecords(tx, zone.id, missing, { reserved: true });
    for (const d of unserved) await insertRecords(tx, zone.id, mailRecordContents(config, d), { reserved: true, domainId: d.id });
    await tx.dnsZone.update({ where: { id: zone.id }, data: { serial: { increment: 1 }, ...soa(config) } });
    return zone.id;
  });
}

/**
 * Serves a domain that has just gone live: a free subdomain's mail records join the base zone; a delegated
 * (or registered) domain gets its own zone, with NS and its mail records, taking over the SOA/NS-only zone its
 * pending claim had.
 */
export async function publishLiveDomain(tx: Tx, config: Config, d: MailDomain & { mode: string }): Promise<void> {
  if (d.mode === 'subdomain') {
    const zone = await tx.dnsZone.findUnique({ where: { name: config.baseDomain } });
    if (!zone) return; // created (with this domain's records) by ensureBaseZone at the next start
    await tx.dnsRecord.deleteMany({ where: { zoneId: zone.id, domainId: d.id } });
    await insertRecords(tx, zone.id, mailRecordContents(config, d), { reserved: true, domainId: d.id });
    await bumpSerial(tx, zone.id);
    return;
  }
  if (d.mode !== 'byo_delegated' && d.mode !== 'register') return; // byo_manual: the owner's DNS serves it
  const zoneId = await ensureOwnZone(tx, config, d.name, d.mode === 'register' ? 'registered' : 'delegated');
  await tx.dnsZone.update({ where: { id: zoneId }, data: { domainId: d.id } });
  await tx.dnsRecord.deleteMany({ where: { zoneId, reserved: true, type: { not: 'NS' } } });
  await insertRecords(tx, zoneId, mailRecordContents(config, d), { reserved: true, domainId: d.id });
  await bumpSerial(tx, zoneId);
}

/** The zone of a delegated or registered name, created with its SOA and NS when missing. */
export async function ensureOwnZone(tx: Tx, config: Config, name: string, kind: 'delegated' | 'registered'): Promise<string> {
  // Competing claims on one name may get here at once: the zone is created once, with its NS once.
  const created = await tx.dnsZone.createMany({ data: [{ id: newId('zone'), name, kind, ...soa(config) }], skipDuplicates: true });
  const zone = await tx.dnsZone.findUniqueOrThrow({ where: { name } });
  if (created.count) await insertRecords(tx, zone.id, nsRecords(config, name), { reserved: true });
  return zone.id;
}
