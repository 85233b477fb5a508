/**
 * Allow and block lists, per account (box null) and per box. An entry is an address (name@domain) or a domain
 * (which covers its subdomains), for receiving, for sending or both. Matching rules, the same in both
 * directions:
 *  - a block entry refuses, unless an allow entry names the exact address (block a domain, allow one person);
 *  - a box in allow_list mode (receiving) accepts only senders an allow entry matches, and with
 *    require_verified_sender only when the message's sender is verified (DMARC pass, From aligned).
 * Entries are matched with one indexed query: the address and each of its parent domains.
 */
import type { Box, Db, DbClient, TrustListEntry, Tx } from '@boxes/db';
import type { Prisma } from '@boxes/db';
import { k, rows, sql } from '@boxes/db';
import type { BoxScope } from '../boxes/boxes';
import { appendEvent } from '../events/append';
import { inTransaction } from '../shared/context';
import { AppError, notFound } from '../shared/errors';
import { newId } from '../shared/ids';

export type ListName = 'allow' | 'block';
export type ListDirection = 'receive' | 'send' | 'both';

const DOMAIN = /^(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/;
const LOCAL = /^[a-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}$/;

/** Normalizes an entry value: a lower-case address or domain ("@example.com" and "*.example.com" mean the domain). */
export function parseListValue(input: string): { value: string; kind: 'address' | 'domain' } {
  let v = input.trim().toLowerCase();
  const angle = /<([^<>]+)>\s*$/.exec(v);
  if (angle) v = angle[1]!.trim();
  if (v.startsWith('*.')) v = v.slice(2);
  else if (v.startsWith('@')) v = v.slice(1);
  v = v.replace(/\.$/, '');
  const at = v.lastIndexOf('@');
  const bad = () =>
    new AppError('validation_error', 'value: give an address (name@example.com) or a domain (example.com, which covers its subdomains)', {
      fields: [{ path: 'value', message: 'not an address or a domain' }],
    });
  if (at === -1) {
    if (!DOMAIN.test(v) || !v.includes('.')) throw bad();
    return { value: v, kind: 'domain' };
  }
  const local = v.slice(0, at);
  const domain = v.slice(at + 1);
  if (!LOCAL.test(local) || !DOMAIN.test(domain)) throw bad();
  return { value: v, kind: 'address' };
}

/** What an address matches: itself and every parent domain (a@x.example.com: the address, x.example.com, example.com, com). */
export function candidatesOf(address: string): string[] {
  const a = address.trim().toLowerCase();
  const at = a.lastIndexOf('@');
  const out = at === -1 ? [] : [a];
  const labels = a.slice(at + 1).split('.');
  for (let i = 0; i < labels.length; i++) out.push(labels.slice(i).join('.'));
  return out;
}

export interface ListedRow {
  box_id: string | null;
  list: string;
  direction: string;
  value: string;
  kind: string;
}

/** Entries of the account (and of these boxes) that match any of the addresses, for one direction. */
export async function matchingEntries(
  db: DbClient,
  accountId: string,
  boxIds: string[],
  direction: 'receive' | 'send',
  addresses: string[],
): Promise<ListedRow[]> {
  const candidates = [...new Set(addresses.flatMap(candidatesOf))];
  if (!candidates.length) return [];
  return rows(
    db,
    k
      .selectFrom('trust_list_entries')
      .select(['box_id', 'list', 'direction', 'value', 'kind'])
      .where('account_id', '=', accountId)
      .where('value', '=', sql<string>`ANY(${candidates}::text[])`)
      .where('direction', 'in', [direction, sql.lit('both')])
      .where((eb) => eb.or([eb('box_id', 'is', null), eb('box_id', '=', sql<string>`ANY(${boxIds}::text[])`)])),
  );
}

const appliesTo = (row: ListedRow, boxId: string | null) => row.box_id === null || row.box_id === boxId;
const matches = (row: ListedRow, address: string) => (row.kind === 'address' ? row.value === address : candidatesOf(address).includes(row.value));

/** Whether a block entry refuses this address (for the box, or account-wide when boxId is null). */
export function isBlocked(rows: ListedRow[], boxId: string | null, address: string): boolean {
  const a = address.toLowerCase();
  const mine = rows.filter((r) => appliesTo(r, boxId));
  if (mine.some((r) => r.list === 'allow' && r.kind === 'address' && r.value === a)) return false;
  return mine.some((r) => r.list === 'block' && matches(r, a));
}

export function isAllowed(rows: ListedRow[], boxId: string | null, address: string): boolean {
  const a = address.toLowerCase();
  return rows.some((r) => appliesTo(r, boxId) && r.list === 'allow' && matches(r, a));
}

export function presentEntry(e: TrustListEntry) {
  return {
    id: e.id,
    list: e.list as ListName,
    direction: e.direction as ListDirection,
    value: e.value,
    kind: e.kind as 'address' | 'domain',
    box_id: e.boxId,
    note: e.note,
    created_at: e.createdAt.toISOString(),
  };
}

async function boxOf(db: DbClient, accountId: string, scope: BoxScope, ref: string): Promise<Box> {
  const box = await db.box.findFirst({ where: { accountId, OR: [{ id: ref }, { address: ref.trim().toLowerCase() }] } });
  if (!box || (scope && !scope.includes(box.id))) throw notFound('box', ref);
  return box;
}

export async function listEntries(input: {
  db: Db;
  accountId: string;
  scope: BoxScope;
  box?: string | undefined;
  list?: ListName | undefined;
  direction?: ListDirection | undefined;
}) {
  const where: Prisma.TrustListEntryWhereInput = { accountId: input.accountId };
  if (input.box) {
    const box = await boxOf(input.db, input.accountId, input.scope, input.box);
    where.boxId = box.id;
  } else if (input.scope) {
    // A box-restricted key sees the account's entries and those of its boxes.
    where.OR = [{ boxId: null }, { boxId: { in: input.scope } }];
  }
  if (input.list) where.list = input.list;
  if (input.direction) where.direction = input.direction;
  const rows = await input.db.trustListEntry.findMany({ where, orderBy: [{ createdAt: 'asc' }, { id: 'asc' }], take: 5000 });
  return { entries: rows.map(presentEntry) };
}

/** At most this many entries per account. */
export const MAX_LIST_ENTRIES = 5000;

export async function addEntry(input: {
  db: Db;
  accountId: string;
  scope: BoxScope;
  list: ListName;
  direction: ListDirection;
  value: string;
  box?: string | undefined;
  note?: string | undefined;
}) {
  const { value, kind } = parseListValue(input.value);
  return inTransaction(input.db, async (tx: Tx) => {
    let boxId: string | null = null;
    if (input.box) boxId = (await boxOf(tx, input.accountId, input.scope, input.box)).id;
    else if (input.scope) throw new AppError('box_restricted_key', 'A box-restricted key may only change the lists of its boxes: give box', { field: 'box' });
    // Adding an entry twice gives the first one back (safe to retry).
    const existing = await tx.trustListEntry.findFirst({ where: { accountId: input.accountId, boxId, list: input.list, direction: input.direction, value } });
    if (existing) return { ...presentEntry(existing), created: false };
    const count = await tx.trustListEntry.count({ where: { accountId: input.accountId } });
    if (count >= MAX_LIST_ENTRIES) throw new AppError('conflict', `At most ${MAX_LIST_ENTRIES} list entries per account`, { limit: MAX_LIST_ENTRIES });
    const entry = await tx.trustListEntry.create({
      data: { id: newId('tle'), accountId: input.accountId, boxId, list: input.list, direction: input.direction, value, kind, note: input.note ?? null },
    });
    await appendEvent({ db: tx, accountId: input.accountId, type: 'list.entry_added', boxId, data: { entry: presentEntry(entry) } });
    return { ...presentEntry(entry), created: true };
  });
}

export async function removeEntry(input: { db: Db; accountId: string; scope: BoxScope; id: string }) {
  return inTransaction(input.db, async (tx: Tx) => {
    const e = await tx.trustListEntry.findFirst({ where: { id: input.id, accountId: input.accountId } });
    if (!e || (input.scope && (!e.boxId || !input.scope.includes(e.boxId)))) throw notFound('list entry', input.id);
    await tx.trustListEntry.delete({ where: { id: e.id } });
    await appendEvent({ db: tx, accountId: input.accountId, type: 'list.entry_removed', boxId: e.boxId, data: { entry: presentEntry(e) } });
    return { id: e.id, deleted: true as const };
  });
}

/** Sending: refuses (403 recipient_blocked) when a block entry of the account or the sending box names a recipient. */
export function assertRecipientsAllowed(rows: ListedRow[], boxId: string, recipients: string[]): void {
  const blocked = recipients.filter((r) => isBlocked(rows, boxId, r));
  if (blocked.length) {
    throw new AppError(
      'recipient_blocked',
      `Sending to ${blocked.join(', ')} is refused: ${blocked.length === 1 ? 'it is' : 'they are'} on your block list (GET /lists)`,
      {
        blocked,
      },
    );
  }
}

export function presentPolicy(b: Box) {
  return {
    box_id: b.id,
    address: b.address,
    receive_mode: b.receiveMode as 'open' | 'allow_list',
    require_verified_sender: b.requireVerifiedSender,
    spam_action: b.spamAction as 'label' | 'refuse',
    refused_count: b.refusedCount,
    last_refused_at: b.refusedAt?.toISOString() ?? null,
  };
}

export async function getBoxPolicy(input: { db: Db; accountId: string; scope: BoxScope; boxId: string }) {
  return presentPolicy(await boxOf(input.db, input.accountId, input.scope, input.boxId));
}

export async function setBoxPolicy(input: {
  db: Db;
  accountId: string;
  scope: BoxScope;
  boxId: string;
  receiveMode?: 'open' | 'allow_list' | undefined;
  requireVerifiedSender?: boolean | undefined;
  spamAction?: 'label' | 'refuse' | undefined;
}) {
  return inTransaction(input.db, async (tx: Tx) => {
    const box = await boxOf(tx, input.accountId, input.scope, input.boxId);
    const updated = await tx.box.update({
      where: { id: box.id },
      data: {
        ...(input.receiveMode !== undefined ? { receiveMode: input.receiveMode } : {}),
        ...(input.requireVerifiedSender !== undefined ? { requireVerifiedSender: input.requireVerifiedSender } : {}),
        ...(input.spamAction !== undefined ? { spamAction: input.spamAction } : {}),
      },
    });
    const policy = presentPolicy(updated);
    await appendEvent({ db: tx, accountId: input.accountId, type: 'box.policy_updated', boxId: box.id, data: { policy } });
    return policy;
  });
}
