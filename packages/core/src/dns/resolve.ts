/**
 * This instance's own zones as a resolver would answer for them, in the shapes node:dns's `resolve` gives
 * (TXT as string[][], MX as { exchange, priority }[], A/AAAA/CNAME/NS/PTR as string[]), for the code that checks
 * inbound mail (SPF, DKIM, DMARC). The instance is the authority for these zones and reads them from the
 * same rows apps/dns serves, so mail between its own boxes is verified whether or not the machine's resolvers can
 * reach its DNS server (a local instance's zones, such as *.boxes.localhost, are known to no resolver).
 */
import type { Db } from '@boxes/db';
import { hostContent, txtStrings } from './content';
import { lookupName, type ServedRecord, type ServedZone } from './lookup';

export type ResolvedRecords = string[] | string[][] | { exchange: string; priority: number }[];

const MAX_CNAME_CHAIN = 8;

/**
 * Names no zone here is the authority for, remembered a few seconds per database: inbound mail asks several
 * names of the sender's domain (SPF, the DKIM key, DMARC), and mail from outside is most mail, so each such name
 * would cost a query before the outside resolvers are asked. Names of our own zones are never remembered (a
 * changed key counts at once); a zone made here is seen within NOT_OURS_TTL_MS.
 */
const NOT_OURS_TTL_MS = 5_000;
const NOT_OURS_MAX = 10_000;
const notOurs = new WeakMap<Db, Map<string, number>>();

function knownNotOurs(db: Db, name: string): boolean {
  const names = notOurs.get(db);
  const until = names?.get(name);
  if (until === undefined) return false;
  if (until > Date.now()) return true;
  names!.delete(name);
  return false;
}

function rememberNotOurs(db: Db, name: string): void {
  let names = notOurs.get(db);
  if (!names) {
    names = new Map();
    notOurs.set(db, names);
  }
  // The oldest entry makes room (a Map iterates in insertion order).
  if (names.size >= NOT_OURS_MAX) names.delete(names.keys().next().value!);
  names.set(name, Date.now() + NOT_OURS_TTL_MS);
}

/** An error shaped like node:dns's (code ENOTFOUND for NXDOMAIN, ENODATA for no record of the type). */
function dnsError(code: 'ENOTFOUND' | 'ENODATA', rrtype: string, name: string): Error {
  return Object.assign(new Error(`query${rrtype[0]}${rrtype.slice(1).toLowerCase()} ${code} ${name}`), { code, hostname: name });
}

function shape(rrtype: string, records: ServedRecord[]): ResolvedRecords {
  switch (rrtype) {
    case 'TXT':
      return records.map((r) => txtStrings(r.content));
    case 'MX':
      return records.map((r) => {
        const [priority, exchange] = r.content.trim().split(/\s+/);
        return { priority: Number(priority), exchange: hostContent(exchange ?? '') };
      });
    case 'A':
    case 'AAAA':
      return records.map((r) => r.content.trim());
    default:
      return records.map((r) => hostContent(r.content));
  }
}

/**
 * Whether the instance is the name's authority: the base zone, or the zone of a domain that went live here. A
 * delegated zone without a domain is a pending claim (SOA and NS only, until the parent zone names this
 * instance): anyone may claim any name, so such a zone must not hide what the real domain publishes.
 */
const authoritative = (z: ServedZone): boolean => z.kind === 'base' || z.domainId !== null;

/**
 * The answer for a name in a zone served here, or null when no zone here is the name's authority (none holds
 * it, it is delegated away below the apex, or the zone is only a pending claim's): then the question is for
 * the outside resolvers. A CNAME that leaves our zones is followed by `outside`. Throws node:dns-shaped errors
 * for NXDOMAIN and NODATA, as the resolvers would.
 */
export async function resolveOwnZones(
  db: Db,
  name: string,
  rrtype: string,
  outside: (name: string, rrtype: string) => Promise<ResolvedRecords>,
): Promise<ResolvedRecords | null> {
  let current = hostContent(name);
  if (knownNotOurs(db, current)) return null;
  for (let step = 0; step <= MAX_CNAME_CHAIN; step++) {
    const found = await lookupName(db, current);
    if (!found.zone || found.delegation || !authoritative(found.zone)) {
      if (step > 0) return outside(current, rrtype);
      rememberNotOurs(db, current);
      return null;
    }
    const records = found.exists ? found.records : found.wildcard;
    const wanted = records.filter((r) => r.type === rrtype);
    if (wanted.length) return shape(rrtype, wanted);
    const cname = rrtype === 'CNAME' ? undefined : records.find((r) => r.type === 'CNAME');
    if (!cname) throw dnsError(found.exists || records.length ? 'ENODATA' : 'ENOTFOUND', rrtype, current);
    current = hostContent(cname.content);
  }
  throw dnsError('ENOTFOUND', rrtype, current);
}
