/**
 * Authoritative answers from the served zones (dns_zones, dns_records), independent of the wire format:
 * apps/dns encodes them. One statement per name finds the closest enclosing zone, the records at the name, the
 * NS records of a delegation above it, the wildcards that could stand in for it, and which of the name and its
 * ancestors exist (a name with nothing at it but names below it is an empty non-terminal: NODATA, not
 * NXDOMAIN). "Below" is found through the index on the reversed owner name (migration
 * *_dns_records_reverse_name): the names under `b.example` are those whose reversed name starts with `elpmaxe.b.`.
 */
import type { Db } from '@boxes/db';
import { k, rows as sqlRows, sql, tbl } from '@boxes/db';
import { hostContent } from './content';

/**
 * The SOA timers of every zone served (the SOA itself is made from dns_zones): refresh 1 hour, retry 10 minutes,
 * expire 14 days (secondaries are not used, these only describe the zone), minimum 5 minutes (the TTL of negative
 * answers, RFC 2308). PowerDNS serves the same numbers (migration *_powerdns_views_by_pdns_id).
 */
export const SOA_TIMERS = { refresh: 3600, retry: 600, expire: 1_209_600, minimum: 300 } as const;
export const SOA_TTL = 3600;
/** The TTL of the SOA in a negative answer: the smaller of the SOA's TTL and its minimum (RFC 2308 section 3). */
export const NEGATIVE_TTL = Math.min(SOA_TTL, SOA_TIMERS.minimum);

export interface ServedZone {
  id: string;
  name: string;
  /** base | delegated | registered */
  kind: string;
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
  /** The name has records, or names below it (an empty non-terminal). */
  exists: boolean;
  /**
   * The NS records of a delegation below the apex at or above the name (the one closest to the apex): the
   * zone's data stops there and the answer is a referral. null when the name is not delegated.
   */
  delegation: ServedRecord[] | null;
  /**
   * When the name does not exist: the records of the wildcard at its closest encloser (RFC 4592 section 3.3),
   * with the name as their owner. Empty when there is none.
   */
  wildcard: ServedRecord[];
}

/** The SOA of a zone as a record (its content in presentation format). */
export function soaRecord(z: ServedZone): ServedRecord {
  const t = SOA_TIMERS;
  return { name: z.name, type: 'SOA', ttl: SOA_TTL, content: `${z.soaMname} ${z.soaRname} ${z.serial} ${t.refresh} ${t.retry} ${t.expire} ${t.minimum}` };
}

/** A name and its ancestors, longest first: a.b.example.com -> a.b.example.com, b.example.com, example.com, com. */
function suffixes(name: string): string[] {
  const labels = name.split('.');
  return labels.map((_, i) => labels.slice(i).join('.'));
}

interface Row {
  id: string;
  name: string;
  kind: string;
  serial: number;
  soa_mname: string;
  soa_rname: string;
  domain_id: string | null;
  records: ServedRecord[] | null;
  existing: string[] | null;
}

export async function lookupName(db: Db, qname: string): Promise<Lookup> {
  const name = hostContent(qname);
  const names = suffixes(name);
  // Candidates for records: the name, its ancestors (NS of a delegation) and a wildcard under each ancestor.
  const candidates = [...names, ...names.slice(1).map((a) => `*.${a}`)];
  const zt = tbl('dns_zones');
  const r = tbl('dns_records', 'r');
  const rows = await sqlRows(
    db,
    sql<Row>`
    WITH z AS (
      SELECT ${zt.id}, ${zt.name}, ${zt.kind}, ${zt.serial}, ${zt.soa_mname}, ${zt.soa_rname}, ${zt.domain_id} FROM ${zt.$}
      WHERE ${zt.name} = ANY(${names}::text[]) ORDER BY length(${zt.name}) DESC LIMIT 1
    )
    SELECT z.*,
      (SELECT json_agg(json_build_object('name', ${r.name}, 'type', ${r.type}, 'ttl', ${r.ttl}, 'content', ${r.content}) ORDER BY ${r.type}, ${r.content})
         FROM ${r.$} WHERE ${r.zone_id} = z.id AND ${r.name} = ANY(${candidates}::text[])) AS records,
      (SELECT array_agg(a.name) FROM unnest(${names}::text[]) AS a(name)
         WHERE length(a.name) > length(z.name) AND EXISTS (
           SELECT 1 FROM ${r.$} WHERE ${r.zone_id} = z.id
             AND (${r.name} = a.name OR (reverse(${r.name}) ~>=~ (reverse(a.name) || '.') AND reverse(${r.name}) ~<~ (reverse(a.name) || '/'))))) AS existing
    FROM z`,
  );
  const row = rows[0];
  if (!row) return { zone: null, records: [], exists: false, delegation: null, wildcard: [] };
  const zone: ServedZone = {
    id: row.id,
    name: row.name,
    kind: row.kind,
    serial: row.serial,
    soaMname: row.soa_mname,
    soaRname: row.soa_rname,
    domainId: row.domain_id,
  };
  const all = row.records ?? [];
  const existing = new Set([zone.name, ...(row.existing ?? [])]);
  const inZone = names.filter((n) => n.length >= zone.name.length); // the name up to the apex
  // A delegation: NS records at a name between the apex (excluded) and the name (included); the highest wins.
  let delegation: ServedRecord[] | null = null;
  for (const cut of inZone.filter((n) => n !== zone.name).reverse()) {
    const ns = all.filter((x) => x.name === cut && x.type === 'NS');
    if (ns.length) {
      delegation = ns;
      break;
    }
  }
  const records = all.filter((x) => x.name === name);
  if (name === zone.name) records.unshift(soaRecord(zone));
  const exists = records.length > 0 || existing.has(name);
  let wildcard: ServedRecord[] = [];
  if (!exists) {
    // The closest encloser: the longest existing ancestor (the apex always exists).
    const encloser = inZone.find((n) => n !== name && existing.has(n)) ?? zone.name;
    wildcard = all.filter((x) => x.name === `*.${encloser}`).map((x) => ({ ...x, name }));
  }
  return { zone, records, exists, delegation, wildcard };
}

/** The A and AAAA records of names in a zone (glue for a referral's NS targets). */
export async function addressRecords(db: Db, zoneId: string, hosts: string[]): Promise<ServedRecord[]> {
  if (!hosts.length) return [];
  return sqlRows(
    db,
    k
      .selectFrom('dns_records')
      .select(['name', 'type', 'ttl', 'content'])
      .where('zone_id', '=', zoneId)
      .where('name', '=', sql<string>`ANY(${hosts.map(hostContent)}::text[])`)
      .where('type', 'in', [sql.lit('A'), sql.lit('AAAA')])
      .orderBy(['name', 'type', 'content']),
  );
}
