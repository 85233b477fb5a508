/**
 * The managed DNS API (GET/POST/PUT/DELETE /domain/dns): the records of the account's zone, for accounts whose
 * primary domain is a live registered or delegated domain. A record is an RRset {name, type, ttl, values};
 * values are validated per type and stored one row each (content as PowerDNS reads it, content.ts). Records that
 * carry the account's mail (the apex MX, SPF and NS, the DKIM and DMARC records) are reserved: listed, never
 * changed, deleted or shadowed here. Every change bumps the zone's SOA serial and appends domain.dns.changed.
 */
import { isIP } from 'node:net';
import type { Tx } from '@boxes/db';
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';
import { AppError } from '../shared/errors';
import { newId } from '../shared/ids';
import { hostContent, txtContent, txtText } from './content';
import { bumpSerial } from './zones';

export const MANAGED_TYPES = ['A', 'AAAA', 'CNAME', 'MX', 'TXT', 'SRV', 'CAA'] as const;
export type ManagedType = (typeof MANAGED_TYPES)[number];
export const TTL_MIN = 60;
export const TTL_MAX = 86_400;
export const MAX_RECORDS_PER_ZONE = 500;
export const MAX_VALUES_PER_RRSET = 20;
export const MAX_TXT_LENGTH = 2048;

export interface RecordInput {
  name: string;
  type: ManagedType;
  ttl: number;
  values: string[];
}

const HOST = /^(?=.{1,253}$)(?:(?!-)[a-z0-9_-]{1,63}(?<!-)\.)*(?!-)[a-z0-9-]{1,63}(?<!-)$/;

function bad(path: string, message: string): AppError {
  return new AppError('validation_error', `${path}: ${message}`, { fields: [{ path, message }] });
}

const hostValue = (v: string, path: string): string => {
  const h = hostContent(v);
  if (!HOST.test(h)) throw bad(path, `"${v}" is not a host name`);
  return h;
};

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
      const m = /^(\d{1,3})\s+(issue|issuewild|iodef)\s+"?([^"]*)"?$/.exec(v);
      if (!m || Number(m[1]) > 255) throw bad(path, `"${value}" is not "<flags 0-255> <issue|issuewild|iodef> \\"<value>\\""`);
      return `${Number(m[1])} ${m[2]} "${m[3]}"`;
    }
    case 'TXT':
      if (value.length === 0 || value.length > MAX_TXT_LENGTH) throw bad(path, `a TXT value has 1 to ${MAX_TXT_LENGTH} characters`);
      if (/[\u0000-\u0008\u000a-\u001f\u007f]/.test(value)) throw bad(path, 'a TXT value may not contain control characters');
      return txtContent(value);
  }
}

/** A stored content shown as a value: TXT unquoted, the rest as stored. */
const valueOf = (type: string, content: string): string => (type === 'TXT' ? txtText(content) : content);

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
    throw new AppError('dns_not_managed', `${d.name} is served by your own DNS (mode byo_manual): change its records there. The records Boxes needs are in GET ${see}.`, { see });
  }
  if (d.mode === 'subdomain') {
    throw new AppError('dns_not_managed', `${d.name} is a free subdomain of ${svc.config.baseDomain}, whose zone belongs to this instance: its records are the mail records only. Managed DNS is for registered and delegated domains (POST /account/domain moves the account onto one).`);
  }
  if (d.status !== 'active' || !d.zone) {
    throw new AppError('dns_not_managed', `${d.name} is not live yet (${d.status}): its zone becomes editable once the delegation is verified (GET /account/domain).`, { domain_status: d.status });
  }
  return { id: d.zone.id, name: d.zone.name, serial: d.zone.serial };
}

/**
 * A record name, lower case, without the trailing dot: "@" is the apex; a name ending in a dot is absolute; any
 * other name is absolute when it ends with the zone, else relative to it. It must be inside the zone.
 */
function absoluteName(zone: string, name: string): string {
  const raw = name.trim().toLowerCase();
  const absolute = raw.endsWith('.');
  const n = raw.replace(/\.$/, '');
  const full = n === '@' || n === '' ? zone : absolute || n === zone || n.endsWith(`.${zone}`) ? n : `${n}.${zone}`;
  if (!HOST.test(full)) throw bad('name', `"${name}" is not a valid name`);
  if (full !== zone && !full.endsWith(`.${zone}`)) throw bad('name', `"${name}" is not inside the zone ${zone}`);
  return full;
}

type Row = { id: string; name: string; type: string; ttl: number; content: string; reserved: boolean };

function group(rows: Row[]) {
  const sets = new Map<string, { name: string; type: string; ttl: number; values: string[]; reserved: boolean }>();
  for (const r of rows) {
    const key = `${r.name} ${r.type}`;
    const s = sets.get(key) ?? { name: r.name, type: r.type, ttl: r.ttl, values: [], reserved: false };
    s.values.push(valueOf(r.type, r.content));
    s.reserved ||= r.reserved;
    sets.set(key, s);
  }
  return [...sets.values()].sort((a, b) => (a.name === b.name ? a.type.localeCompare(b.type) : a.name.length - b.name.length || a.name.localeCompare(b.name)));
}

export async function listZoneRecords(svc: Services, accountId: string) {
  const zone = await zoneOf(svc, accountId);
  const rows = await svc.db.dnsRecord.findMany({ where: { zoneId: zone.id }, orderBy: [{ name: 'asc' }, { type: 'asc' }, { content: 'asc' }] });
  return { zone: zone.name, serial: zone.serial, records: group(rows) };
}

export type DnsAction = 'create' | 'replace' | 'delete';

/**
 * One change to one RRset, under the zone's row lock: create (409 if it exists), replace (create if missing)
 * or delete. Reserved records are never touched; a TXT at the apex keeps the reserved SPF value beside it.
 */
export async function changeZoneRecord(svc: Services, input: { accountId: string; action: DnsAction; record: { name: string; type: ManagedType; ttl?: number; values?: string[] } }) {
  const zone = await zoneOf(svc, input.accountId);
  const { action, record } = input;
  const name = absoluteName(zone.name, record.name);
  const type = record.type;
  let contents: string[] = [];
  let ttl = 0;
  if (action !== 'delete') {
    ttl = record.ttl ?? 3600;
    if (!Number.isInteger(ttl) || ttl < TTL_MIN || ttl > TTL_MAX) throw bad('ttl', `between ${TTL_MIN} and ${TTL_MAX} seconds`);
    const values = record.values ?? [];
    if (values.length < 1 || values.length > MAX_VALUES_PER_RRSET) throw bad('values', `1 to ${MAX_VALUES_PER_RRSET} values`);
    contents = [...new Set(values.map((v, i) => contentOf(type, v, `values.${i}`)))];
    if (type === 'CNAME' && contents.length > 1) throw bad('values', 'a CNAME has exactly one target');
    if (type === 'CNAME' && name === zone.name) throw bad('type', 'no CNAME at the zone apex (it cannot stand beside the SOA and NS records)');
    if (type === 'TXT' && name === zone.name && values.some((v) => /^v=spf1\b/i.test(v.trim()))) {
      throw new AppError('dns_record_reserved', `The SPF record of ${zone.name} carries the account's mail and is managed by Boxes; it cannot be replaced or shadowed here.`, { name, type });
    }
  }
  return svc.db.$transaction(async (tx: Tx) => {
    await tx.$queryRaw`SELECT id FROM dns_zones WHERE id = ${zone.id} FOR UPDATE`;
    const atName = await tx.dnsRecord.findMany({ where: { zoneId: zone.id, name } });
    const sameType = atName.filter((r) => r.type === type);
    const reservedHere = sameType.filter((r) => r.reserved);
    // The apex TXT set holds the reserved SPF value: other TXT values may stand beside it.
    const apexTxt = type === 'TXT' && name === zone.name;
    if (reservedHere.length && !apexTxt) {
      throw new AppError('dns_record_reserved', `${type} ${name} carries the account's mail and is managed by Boxes: it is read-only.`, { name, type });
    }
    if (type === 'CNAME' && action !== 'delete' && atName.some((r) => r.reserved)) {
      throw new AppError('dns_record_reserved', `${name} carries the account's mail (${[...new Set(atName.filter((r) => r.reserved).map((r) => r.type))].join(', ')}): a CNAME there would shadow it.`, { name, type });
    }
    if (type === 'CNAME' && atName.some((r) => r.type !== 'CNAME')) {
      throw bad('type', `${name} already has ${[...new Set(atName.filter((r) => r.type !== 'CNAME').map((r) => r.type))].join(', ')} records: a CNAME cannot stand beside other data`);
    }
    if (type !== 'CNAME' && action !== 'delete' && atName.some((r) => r.type === 'CNAME')) {
      throw bad('type', `${name} is a CNAME: other records cannot stand beside it`);
    }
    const managed = sameType.filter((r) => !r.reserved);
    if (action === 'create' && managed.length) {
      throw new AppError('dns_record_exists', `${type} ${name} exists already: PUT /domain/dns replaces it.`, { name, type });
    }
    if (action === 'delete' && !managed.length) throw new AppError('not_found', `There is no ${type} record at ${name}.`);
    if (action !== 'delete') {
      const count = await tx.dnsRecord.count({ where: { zoneId: zone.id } });
      if (count - managed.length + contents.length > MAX_RECORDS_PER_ZONE) throw bad('values', `a zone holds at most ${MAX_RECORDS_PER_ZONE} records`);
    }
    await tx.dnsRecord.deleteMany({ where: { id: { in: managed.map((r) => r.id) } } });
    if (action !== 'delete') {
      await tx.dnsRecord.createMany({ data: contents.map((content) => ({ id: newId('rr'), zoneId: zone.id, name, type, ttl, content })) });
    }
    await bumpSerial(tx, zone.id);
    const after = await tx.dnsZone.findUniqueOrThrow({ where: { id: zone.id }, select: { serial: true } });
    const set = action === 'delete' ? null : { name, type, ttl, values: contents.map((c) => valueOf(type, c)), reserved: false };
    await appendEvent({
      db: tx,
      accountId: input.accountId,
      type: 'domain.dns.changed',
      data: { zone: zone.name, action, name, type, ttl: set?.ttl ?? null, values: set?.values ?? [], serial: after.serial },
    });
    return { zone: zone.name, serial: after.serial, action, record: set ?? { name, type, ttl: null, values: [], reserved: false } };
  });
}
