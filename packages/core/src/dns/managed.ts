/**
 * The managed DNS API (GET/POST/PUT/DELETE /domain/dns): the records of the account's zone, for accounts whose
 * primary domain is a live registered or delegated domain. A record is an RRset {name, type, ttl, values};
 * values are validated per type and stored one row each (content as PowerDNS reads it, content.ts). Records that
 * carry the account's mail (the apex MX, SPF and NS, the DKIM and DMARC records) are reserved: listed, never
 * changed, deleted or shadowed here. Every change bumps the zone's SOA serial and appends domain.dns.changed.
 */
import { createHash } from 'node:crypto';
import { isIP } from 'node:net';
import type { Tx } from '@boxes/db';
import { k, rows } from '@boxes/db';
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';
import { AppError, invalidField } from '../shared/errors';
import { newId } from '../shared/ids';
import { hostContent, txtContent, txtText } from './content';
import { bumpSerial, DEFAULT_TTL } from './zones';

/** Types the account may write. */
export const MANAGED_TYPES = ['A', 'AAAA', 'CNAME', 'MX', 'TXT', 'SRV', 'CAA'] as const;
export type ManagedType = (typeof MANAGED_TYPES)[number];
/** Types a call may name: the managed ones, and NS (only the apex's, which are reserved). */
export const RECORD_TYPES = [...MANAGED_TYPES, 'NS'] as const;
export type RecordType = (typeof RECORD_TYPES)[number];
export const TTL_MIN = 60;
export const TTL_MAX = 86_400;
export const MAX_RECORDS_PER_ZONE = 500;
export const MAX_VALUES_PER_RRSET = 20;
export const MAX_TXT_LENGTH = 2048;

const LABEL = '(?!-)[a-z0-9_-]{1,63}(?<!-)';
/** A name as stored: labels of letters, digits, - and _ (service labels), the last without _. */
const HOST = new RegExp(`^(?=.{1,253}$)(?:${LABEL}\\.)*(?!-)[a-z0-9-]{1,63}(?<!-)$`);
/** A host name in a value: as HOST, with at least two labels (values are absolute: "mail" is a mistake). */
const TARGET = new RegExp(`^(?=.{1,253}$)(?:${LABEL}\\.)+(?!-)[a-z0-9-]{1,63}(?<!-)$`);

const bad = invalidField;

const hostValue = (v: string, path: string): string => {
  const h = hostContent(v);
  if (!TARGET.test(h)) throw bad(path, `"${v}" is not a fully qualified host name (at least two labels, such as mail.example.com)`);
  return h;
};

/** A CAA value (RFC 8659): issue/issuewild name a CA domain (or none: ";") with optional parameters; iodef a URL. */
function caaValue(tag: string, value: string, path: string): string {
  if (tag === 'iodef') {
    if (!/^(?:mailto:[^\s@]+@[^\s@]+|https?:\/\/\S+)$/i.test(value)) throw bad(path, `the iodef value "${value}" is not a mailto: or http(s):// URL`);
    return value;
  }
  const m = /^\s*([^;\s]*)\s*(;.*)?$/.exec(value);
  const domain = m?.[1] ?? '';
  if (!m || (domain !== '' && !TARGET.test(domain.toLowerCase()))) {
    throw bad(path, `the ${tag} value "${value}" is not "<CA domain>[; parameters]" (or ";" to forbid issuance)`);
  }
  return value.trim();
}

/** The stored content of one value of a type, or a validation error naming the value. */
export function contentOf(type: ManagedType, value: string, path: string): string {
  const v = value.trim();
  switch (type) {
    case 'A':
      if (isIP(v) !== 4) throw bad(path, `"${value}" is not an IPv4 address`);
      return v;
    case 'AAAA':
      if (isIP(v) !== 6) throw bad(path, `"${value}" is not an IPv6 address`);
      return v.toLowerCase();
    case 'CNAME':
      return hostValue(v, path);
    case 'MX': {
      const m = /^(\d{1,5})\s+(\S+)$/.exec(v);
      if (!m || Number(m[1]) > 65535) throw bad(path, `"${value}" is not "<preference 0-65535> <host>"`);
      return `${Number(m[1])} ${hostValue(m[2]!, path)}`;
    }
    case 'SRV': {
      const m = /^(\d{1,5})\s+(\d{1,5})\s+(\d{1,5})\s+(\S+)$/.exec(v);
      if (!m || [m[1], m[2], m[3]].some((n) => Number(n) > 65535)) throw bad(path, `"${value}" is not "<priority> <weight> <port> <target>" (numbers 0-65535)`);
      return `${Number(m[1])} ${Number(m[2])} ${Number(m[3])} ${hostValue(m[4]!, path)}`;
    }
    case 'CAA': {
      // The value quoted (as dig shows it) or bare (one token).
      const m = /^(\d{1,3})\s+([a-z]+)\s+(?:"([^"\\]*)"|([^"\s]+))$/i.exec(v);
      const tag = m?.[2]?.toLowerCase();
      if (!m || Number(m[1]) > 255 || (tag !== 'issue' && tag !== 'issuewild' && tag !== 'iodef')) {
        throw bad(path, `"${value}" is not "<flags 0-255> <issue|issuewild|iodef> \\"<value>\\""`);
      }
      return `${Number(m[1])} ${tag} "${caaValue(tag, m[3] ?? m[4]!, path)}"`;
    }
    case 'TXT':
      if (value.length === 0 || value.length > MAX_TXT_LENGTH) throw bad(path, `a TXT value has 1 to ${MAX_TXT_LENGTH} characters`);
      if (/[\u0000-\u0008\u000a-\u001f\u007f]/.test(value)) throw bad(path, 'a TXT value may not contain control characters');
      return txtContent(value);
  }
}

/** A stored content shown as a value: TXT unquoted, the rest as stored (host names without the trailing dot). */
const recordValue = (type: string, content: string): string => (type === 'TXT' ? txtText(content) : content);

interface ZoneOf {
  id: string;
  name: string;
  serial: number;
}

/** The account's managed zone, or 409 dns_not_managed saying why there is none. */
async function zoneOf(svc: Services, accountId: string): Promise<ZoneOf> {
  const d = await svc.db.domain.findFirstOrThrow({ where: { accountId, isPrimary: true }, include: { zone: true } });
  const see = `${svc.config.apiBaseUrl}/events?type=domain.dns_required`;
  if (d.mode === 'byo_manual') {
    throw new AppError(
      'dns_not_managed',
      `${d.name} is served by your own DNS (mode byo_manual): change its records there. The records Boxes needs are in GET ${see}.`,
      { see },
    );
  }
  if (d.mode === 'subdomain') {
    throw new AppError(
      'dns_not_managed',
      `${d.name} is a free subdomain of ${svc.config.baseDomain}, whose zone belongs to this instance: its records are the mail records only. Managed DNS is for registered and delegated domains (POST /account/domain moves the account onto one).`,
    );
  }
  if (d.status !== 'active' || !d.zone) {
    const why =
      d.mode === 'byo_delegated'
        ? 'its zone becomes editable once the delegation is verified (GET /account/domain shows the check; POST /account/domain/verify checks now)'
        : 'its zone becomes editable once it is live';
    throw new AppError('dns_not_managed', `${d.name} is not live yet (${d.status}): ${why}.`, { domain_status: d.status });
  }
  return { id: d.zone.id, name: d.zone.name, serial: d.zone.serial };
}

/**
 * A record name, lower case, without the trailing dot: "@" is the apex; a name ending in a dot is absolute; any
 * other name is absolute when it is the zone or ends with it, else relative to it. It must be inside the zone.
 * A leftmost "*" label makes a wildcard owner (RFC 4592).
 */
function absoluteName(zone: string, name: string): string {
  const raw = name.trim().toLowerCase();
  if (raw === '.') throw bad('name', `"." is the root, not inside the zone ${zone}`);
  const absolute = raw.endsWith('.');
  const n = raw.replace(/\.$/, '');
  const full = n === '@' ? zone : absolute || n === zone || n.endsWith(`.${zone}`) ? n : `${n}.${zone}`;
  const wildcard = full.startsWith('*.');
  if (!HOST.test(wildcard ? full.slice(2) : full))
    throw bad('name', `"${name}" is not a valid name (labels of letters, digits, - and _; "*" only as the leftmost label)`);
  if (full !== zone && !full.endsWith(`.${zone}`)) throw bad('name', `"${name}" is not inside the zone ${zone}`);
  return full;
}

type Row = { id: string; name: string; type: string; ttl: number; content: string; reserved: boolean };

export interface RecordSet {
  id: string;
  name: string;
  type: string;
  ttl: number | null;
  values: string[];
  reserved: boolean;
}

/**
 * A record set's id: stable for the zone, name, type and reserved flag (a replace keeps it), so clients can key
 * on it; calls address records by name and type.
 */
function setId(zoneId: string, name: string, type: string, reserved: boolean): string {
  const digest = createHash('sha256')
    .update(`${zoneId}\n${name}\n${type}\n${reserved ? 'reserved' : 'managed'}`)
    .digest();
  let out = '';
  for (const b of digest.subarray(0, 20)) out += BASE32[b & 31];
  return `rrs_${out}`;
}
const BASE32 = '0123456789abcdefghjkmnpqrstvwxyz';

/**
 * Rows grouped into record sets by name and type. Reserved values and the account's own values of one name and
 * type (only TXT at the apex, beside the SPF record) are listed as two sets, so what is read-only is plain.
 */
function group(zoneId: string, rows: Row[]): RecordSet[] {
  const sets = new Map<string, RecordSet>();
  for (const r of rows) {
    const key = `${r.name} ${r.type} ${r.reserved}`;
    const s = sets.get(key) ?? { id: setId(zoneId, r.name, r.type, r.reserved), name: r.name, type: r.type, ttl: r.ttl, values: [], reserved: r.reserved };
    s.values.push(recordValue(r.type, r.content));
    sets.set(key, s);
  }
  return [...sets.values()].sort(
    (a, b) => a.name.length - b.name.length || a.name.localeCompare(b.name) || a.type.localeCompare(b.type) || Number(b.reserved) - Number(a.reserved),
  );
}

export async function listZoneRecords(svc: Services, accountId: string) {
  const zone = await zoneOf(svc, accountId);
  const rows = await svc.db.dnsRecord.findMany({ where: { zoneId: zone.id }, orderBy: [{ name: 'asc' }, { type: 'asc' }, { content: 'asc' }] });
  return { zone: zone.name, serial: zone.serial, records: group(zone.id, rows) };
}

export type DnsAction = 'create' | 'replace' | 'delete';

const reservedError = (name: string, type: string, why: string) =>
  new AppError('dns_record_reserved', `${type} ${name} carries the account's mail and is managed by Boxes: ${why}`, { name, type });

/**
 * One change to one RRset, under the zone's row lock: create (409 if it exists), replace (create if missing)
 * or delete. Reserved records are never touched; a TXT at the apex keeps the reserved SPF value beside it.
 */
export async function changeZoneRecord(
  svc: Services,
  input: {
    accountId: string;
    actorKeyId: string;
    action: DnsAction;
    record: { name: string; type: RecordType; ttl?: number | undefined; values?: string[] | undefined };
  },
) {
  const zone = await zoneOf(svc, input.accountId);
  const { action, record } = input;
  const name = absoluteName(zone.name, record.name);
  const type = record.type;
  const apex = name === zone.name;
  // NS records exist only at the apex, where they are the delegation to this instance.
  if (type === 'NS') {
    if (apex) throw reservedError(name, type, 'the apex NS records are the delegation to this instance and are read-only.');
    throw bad('type', 'NS records below the apex (delegating a subzone elsewhere) are not offered');
  }
  let contents: string[] = [];
  let ttl = 0;
  if (action !== 'delete') {
    ttl = record.ttl ?? DEFAULT_TTL;
    if (!Number.isInteger(ttl) || ttl < TTL_MIN || ttl > TTL_MAX) throw bad('ttl', `between ${TTL_MIN} and ${TTL_MAX} seconds`);
    const values = record.values ?? [];
    if (values.length < 1 || values.length > MAX_VALUES_PER_RRSET) throw bad('values', `1 to ${MAX_VALUES_PER_RRSET} values`);
    contents = [...new Set(values.map((v, i) => contentOf(type, v, `values.${i}`)))];
    if (type === 'CNAME' && contents.length > 1) throw bad('values', 'a CNAME has exactly one target');
    if (type === 'CNAME' && apex) throw bad('type', 'no CNAME at the zone apex (it cannot stand beside the SOA, NS and mail records there)');
    if (type === 'CNAME' && contents[0] === name) throw bad('values.0', 'a CNAME cannot point at its own name');
    if (type === 'TXT' && apex && values.some((v) => /^v=spf1(?:\s|$)/i.test(v.trim()))) {
      throw reservedError(
        name,
        'TXT',
        'its SPF record is read-only, and a second SPF record would make SPF fail (RFC 7208 4.5). Other TXT values may stand at the apex.',
      );
    }
  }
  return svc.db.$transaction(async (tx: Tx) => {
    await rows(tx, k.selectFrom('dns_zones').select('id').where('id', '=', zone.id).forUpdate());
    const atName = await tx.dnsRecord.findMany({ where: { zoneId: zone.id, name } });
    const sameType = atName.filter((r) => r.type === type);
    const reservedHere = sameType.filter((r) => r.reserved);
    const managed = sameType.filter((r) => !r.reserved);
    const reservedTypes = [...new Set(atName.filter((r) => r.reserved).map((r) => r.type))];
    // The apex TXT set holds the reserved SPF value: other TXT values may stand beside it.
    const apexTxt = type === 'TXT' && apex;
    if (reservedHere.length && !apexTxt) throw reservedError(name, type, 'it is read-only.');
    if (action === 'delete') {
      if (!managed.length && reservedHere.length)
        throw reservedError(name, type, 'its SPF value is read-only, and there are no other TXT values at the apex to delete.');
      if (!managed.length) throw new AppError('not_found', `There is no ${type} record at ${name}.`, { name, type });
    } else {
      if (type === 'CNAME' && reservedTypes.length) {
        throw new AppError('dns_record_reserved', `${name} carries the account's mail (${reservedTypes.join(', ')}): a CNAME there would shadow it.`, {
          name,
          type,
        });
      }
      const others = [...new Set(atName.filter((r) => r.type !== 'CNAME').map((r) => r.type))];
      if (type === 'CNAME' && others.length) throw bad('type', `${name} already has ${others.join(', ')} records: a CNAME cannot stand beside other data`);
      if (type !== 'CNAME' && atName.some((r) => r.type === 'CNAME')) throw bad('type', `${name} is a CNAME: other records cannot stand beside it`);
      if (action === 'create' && managed.length) {
        throw new AppError('dns_record_exists', `${type} ${name} exists already: PUT /domain/dns replaces it.`, { name, type });
      }
      const count = await tx.dnsRecord.count({ where: { zoneId: zone.id } });
      if (count - managed.length + contents.length > MAX_RECORDS_PER_ZONE) {
        throw bad('values', `the zone holds at most ${MAX_RECORDS_PER_ZONE} records (values), reserved ones included; it has ${count}`, {
          limit: MAX_RECORDS_PER_ZONE,
          records_in_zone: count,
        });
      }
    }
    await tx.dnsRecord.deleteMany({ where: { id: { in: managed.map((r) => r.id) } } });
    if (action !== 'delete') {
      await tx.dnsRecord.createMany({ data: contents.map((content) => ({ id: newId('rr'), zoneId: zone.id, name, type, ttl, content })) });
    }
    await bumpSerial(tx, zone.id);
    const after = await tx.dnsZone.findUniqueOrThrow({ where: { id: zone.id }, select: { serial: true } });
    const values = contents.map((c) => recordValue(type, c));
    const set: RecordSet = { id: setId(zone.id, name, type, false), name, type, ttl: action === 'delete' ? null : ttl, values, reserved: false };
    await appendEvent({
      db: tx,
      accountId: input.accountId,
      type: 'domain.dns.changed',
      data: {
        zone: zone.name,
        action,
        id: set.id,
        name,
        type,
        ttl: set.ttl,
        values,
        previous: managed.length ? { ttl: managed[0]!.ttl, values: managed.map((r) => recordValue(type, r.content)) } : null,
        serial: after.serial,
        by_key_id: input.actorKeyId,
      },
    });
    return { zone: zone.name, serial: after.serial, action, record: set };
  });
}
