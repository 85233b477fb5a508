/**
 * Authoritative answers from the served zones (dns_zones, dns_records), independent of the wire format:
 * apps/dns encodes them. One query per question finds the closest enclosing zone, the records at the name
 * and whether anything exists below it (empty non-terminals answer NODATA, not NXDOMAIN).
 */
import type { Db } from '@boxes/db';
import { hostContent } from './content';

export const SOA_TIMERS = { refresh: 3600, retry: 600, expire: 1_209_600, minimum: 300 } as const;
export const SOA_TTL = 3600;

export interface ServedZone {
  id: string;
  name: string;
  serial: number;
  soaMname: string;
  soaRname: string;
  domainId: string | null;
}

export interface ServedRecord {
  name: string;
  type: string;
  ttl: number;
  /** Presentation content as stored (see content.ts); SOA records are synthesized from the zone. */
  content: string;
}

export interface Lookup {
  /** null: no zone served here contains the name (REFUSED). */
  zone: ServedZone | null;
  /** Every record at the name (the SOA included at the apex). */
  records: ServedRecord[];
  /** Some record exists at a name below this one. */
  hasDescendants: boolean;
}

/** The SOA of a zone as a record (its content in presentation format). */
export function soaRecord(z: ServedZone): ServedRecord {
  const t = SOA_TIMERS;
  return { name: z.name, type: 'SOA', ttl: SOA_TTL, content: `${z.soaMname} ${z.soaRname} ${z.serial} ${t.refresh} ${t.retry} ${t.expire} ${t.minimum}` };
}

/** Every suffix of a name that could be a zone apex: a.b.example.com -> a.b.example.com, b.example.com, example.com, com. */
function suffixes(name: string): string[] {
  const labels = name.split('.');
  return labels.map((_, i) => labels.slice(i).join('.'));
}

export async function lookupName(db: Db, qname: string): Promise<Lookup> {
  const name = hostContent(qname);
  const rows = await db.$queryRaw<
    { id: string; name: string; serial: number; soa_mname: string; soa_rname: string; domain_id: string | null; records: ServedRecord[] | null; below: boolean }[]
  >`
    WITH z AS (
      SELECT id, name, serial, soa_mname, soa_rname, domain_id FROM dns_zones
      WHERE name = ANY(${suffixes(name)}::text[]) ORDER BY length(name) DESC LIMIT 1
    )
    SELECT z.*,
      (SELECT json_agg(json_build_object('name', r.name, 'type', r.type, 'ttl', r.ttl, 'content', r.content) ORDER BY r.type, r.content)
         FROM dns_records r WHERE r.zone_id = z.id AND r.name = ${name}) AS records,
      EXISTS (SELECT 1 FROM dns_records r WHERE r.zone_id = z.id AND r.name LIKE ${`%.${name.replace(/[\\%_]/g, '\\$&')}`}) AS below
    FROM z`;
  const r = rows[0];
  if (!r) return { zone: null, records: [], hasDescendants: false };
  const zone: ServedZone = { id: r.id, name: r.name, serial: r.serial, soaMname: r.soa_mname, soaRname: r.soa_rname, domainId: r.domain_id };
  const records = r.records ?? [];
  if (name === zone.name) records.unshift(soaRecord(zone));
  return { zone, records, hasDescendants: r.below };
}
