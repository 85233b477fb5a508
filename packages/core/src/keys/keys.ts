/**
 * API keys: bxs_live_ + 32 random bytes (base62), stored only as SHA-256 with a display prefix. Authentication
 * looks the key up by its hash and compares in constant time; revocation is read on every request.
 */
import { randomBytes } from 'node:crypto';
import { parameterRows, sql, type Account, type ApiKey, type DB, type Db, type DbClient } from '@boxes/db';
import { REVIEW_POLICIES, type ReviewPolicy, type Scope } from '@boxes/schemas';
import { appendEvent } from '../events/append';
import { constantTimeEqual, sha256Hex } from '../shared/crypto';
import { inTransaction } from '../shared/context';
import { AppError, invalidField, notFound } from '../shared/errors';
import { newId } from '../shared/ids';
import { groupCommitOf } from '../shared/group-commit';
import { capsOf, type SendCaps } from '../guard/caps';
import { narrowStatus } from '../shared/statuses';

export const KEY_PREFIX = 'bxs_live_';
const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

function randomBase62(bytes: number): string {
  // 43 base62 characters carry 256 bits; rejection sampling keeps them uniform.
  const need = Math.ceil((bytes * 8) / Math.log2(62));
  let out = '';
  while (out.length < need) {
    for (const b of randomBytes(need * 2)) {
      if (b < 248 && out.length < need) out += BASE62[b % 62];
    }
  }
  return out;
}

export function generateRawKey(): string {
  return KEY_PREFIX + randomBase62(32);
}

export interface KeyView {
  id: string;
  prefix: string;
  label: string;
  scopes: Scope[];
  allowed_box_ids: string[] | null;
  allowed_boxes: string[] | null;
  is_owner: boolean;
  review: ReviewPolicy;
  created_at: string;
  last_used_at: string | null;
  expires_at: string | null;
  caps: SendCaps | null;
}

export async function presentKeys(db: DbClient, keys: ApiKey[]): Promise<KeyView[]> {
  const ids = [...new Set(keys.flatMap((k) => k.allowedBoxIds))];
  const boxes = ids.length ? await db.box.findMany({ where: { id: { in: ids } }, select: { id: true, address: true } }) : [];
  const address = new Map(boxes.map((b) => [b.id, b.address]));
  return keys.map((k) => ({
    id: k.id,
    prefix: k.prefix,
    label: k.label,
    scopes: k.scopes as Scope[],
    allowed_box_ids: k.allowedBoxIds.length ? k.allowedBoxIds : null,
    // A box deleted since keeps its id in the restriction (the key must not widen) but has no address.
    allowed_boxes: k.allowedBoxIds.length ? k.allowedBoxIds.map((id) => address.get(id)).filter((a): a is string => !!a) : null,
    is_owner: k.isOwner,
    review: narrowStatus(REVIEW_POLICIES, k.review),
    created_at: k.createdAt.toISOString(),
    last_used_at: k.lastUsedAt?.toISOString() ?? null,
    expires_at: k.expiresAt?.toISOString() ?? null,
    caps: capsOf(k.sendCaps),
  }));
}

export interface MintKeyInput {
  db: DbClient;
  accountId: string;
  label: string;
  scopes: Scope[];
  allowedBoxIds?: string[];
  isOwner?: boolean;
  /** Owner review of the key's sends (reviews/reviews.ts); default none. */
  review?: ReviewPolicy;
  /** Key that asked for this one (for the event); null at signup. */
  actorKeyId?: string | null;
  /** When it stops working; none: never. */
  expiresAt?: Date | null;
  sendCaps?: SendCaps | null;
}

export async function mintKey(input: MintKeyInput): Promise<{ key: ApiKey; raw: string }> {
  const raw = generateRawKey();
  return inTransaction(input.db, async (tx) => {
    const key = await tx.apiKey.create({
      data: {
        id: newId('key'),
        accountId: input.accountId,
        hash: sha256Hex(raw),
        prefix: raw.slice(0, KEY_PREFIX.length + 4),
        label: input.label,
        scopes: input.scopes,
        allowedBoxIds: input.allowedBoxIds ?? [],
        isOwner: input.isOwner ?? false,
        expiresAt: input.expiresAt ?? null,
        ...(input.sendCaps ? { sendCaps: input.sendCaps } : {}),
        review: input.review ?? 'none',
      },
    });
    await appendEvent({
      db: tx,
      accountId: input.accountId,
      type: 'api_key.created',
      data: {
        key_id: key.id,
        prefix: key.prefix,
        label: key.label,
        scopes: key.scopes as Scope[],
        allowed_box_ids: key.allowedBoxIds.length ? key.allowedBoxIds : null,
        ...(input.review && input.review !== 'none' ? { review: input.review } : {}),
        by_key_id: input.actorKeyId ?? null,
        ...(key.expiresAt ? { expires_at: key.expiresAt.toISOString() } : {}),
      },
    });
    return { key, raw };
  });
}

/** Resolves allowed_boxes (addresses or local parts) or allowed_box_ids to ids of this account's boxes. */
export async function resolveBoxRestriction(input: {
  db: DbClient;
  accountId: string;
  allowedBoxes?: string[] | undefined;
  allowedBoxIds?: string[] | undefined;
}): Promise<string[]> {
  const boxes = await input.db.box.findMany({ where: { accountId: input.accountId } });
  if (input.allowedBoxIds) {
    const known = new Set(boxes.map((b) => b.id));
    const unknown = input.allowedBoxIds.filter((id) => !known.has(id));
    if (unknown.length) {
      throw new AppError('validation_error', `allowed_box_ids: no such box on this account: ${unknown.join(', ')}`, {
        fields: [{ path: 'allowed_box_ids', message: `unknown box ids: ${unknown.join(', ')}` }],
      });
    }
    return [...new Set(input.allowedBoxIds)];
  }
  if (input.allowedBoxes) {
    const ids: string[] = [];
    const unknown: string[] = [];
    for (const a of input.allowedBoxes) {
      const want = a.trim().toLowerCase();
      const box = boxes.find((b) => b.address === want || (!want.includes('@') && b.localPart === want));
      if (box) ids.push(box.id);
      else unknown.push(a);
    }
    if (unknown.length) {
      throw new AppError('validation_error', `allowed_boxes: no such box on this account: ${unknown.join(', ')}`, {
        fields: [{ path: 'allowed_boxes', message: `unknown boxes: ${unknown.join(', ')}` }],
      });
    }
    return [...new Set(ids)];
  }
  return [];
}

export async function listKeys(input: { db: Db; accountId: string }): Promise<KeyView[]> {
  const keys = await input.db.apiKey.findMany({
    where: { accountId: input.accountId, revokedAt: null },
    orderBy: { createdAt: 'asc' },
  });
  return presentKeys(input.db, keys);
}

export async function revokeKey(input: { db: Db; accountId: string; keyId: string; actorKeyId: string }) {
  return inTransaction(input.db, async (tx) => {
    const key = await tx.apiKey.findFirst({ where: { id: input.keyId, accountId: input.accountId, revokedAt: null } });
    if (!key) throw notFound('API key', input.keyId);
    if (key.isOwner) {
      throw new AppError(
        'owner_key_protected',
        'The original owner key cannot be revoked. Mint a new admin key if this one leaked, and contact support to rotate the owner key.',
      );
    }
    const revokedAt = new Date();
    await tx.apiKey.update({ where: { id: key.id }, data: { revokedAt } });
    await appendEvent({
      db: tx,
      accountId: input.accountId,
      type: 'api_key.revoked',
      data: { key_id: key.id, prefix: key.prefix, by_key_id: input.actorKeyId },
    });
    return { id: key.id, revoked: true as const, revoked_at: revokedAt.toISOString() };
  });
}

/**
 * The expiry of a key to mint: an ISO time with a zone, in the future; a minting key that expires itself cannot
 * mint one that outlives it (400 key_outlives_parent). Null: it does not expire.
 */
export function checkKeyExpiry(expiresAt: string | undefined, minter: Pick<ApiKey, 'id' | 'expiresAt'>, now: Date): Date | null {
  const at = expiresAt === undefined ? null : new Date(expiresAt);
  if (expiresAt !== undefined) {
    if (!at || Number.isNaN(at.getTime()) || !/(Z|[+-]\d{2}:\d{2})$/i.test(expiresAt) || !/^\d{4}-\d{2}-\d{2}T/.test(expiresAt)) {
      throw invalidField('expires_at', 'must be an ISO 8601 time with a zone, such as 2026-12-31T00:00:00Z');
    }
    if (at.getTime() <= now.getTime()) throw invalidField('expires_at', `must be in the future (it is ${now.toISOString()} now)`);
  }
  if (minter.expiresAt && (!at || at.getTime() > minter.expiresAt.getTime())) {
    throw new AppError(
      'key_outlives_parent',
      `This key expires at ${minter.expiresAt.toISOString()}; a key it mints must expire no later (give expires_at at or before that time).`,
      { parent_expires_at: minter.expiresAt.toISOString(), parent_key_id: minter.id },
    );
  }
  return at;
}

/** An expired key is refused with 401 key_expired (not the generic unauthorized: the caller learns why). */
export function assertKeyLive(key: Pick<ApiKey, 'expiresAt'>, now: Date): void {
  if (key.expiresAt && key.expiresAt.getTime() <= now.getTime()) {
    throw new AppError('key_expired', `This API key expired at ${key.expiresAt.toISOString()}; use another key (an admin key mints new ones).`, {
      expired_at: key.expiresAt.toISOString(),
    });
  }
}

type ColumnOf<T extends keyof DB> = keyof DB[T] & string;

/** Every column of api_keys and of accounts: the key lookup answers whole rows, as the Prisma models have them. */
const KEY_COLUMNS = [
  'id',
  'account_id',
  'hash',
  'prefix',
  'label',
  'scopes',
  'is_owner',
  'allowed_box_ids',
  'review',
  'created_at',
  'last_used_at',
  'revoked_at',
  'expires_at',
  'send_caps',
] as const satisfies readonly ColumnOf<'api_keys'>[];
const ACCOUNT_COLUMNS = [
  'id',
  'status',
  'human_email',
  'primary_address',
  'callback_webhook',
  'chain_seq',
  'chain_hash',
  'created_at',
  'updated_at',
  'balance_micros',
  'held_micros',
  'free_messages_left',
  'held_free_messages',
  'reputation_state',
  'webhook_secret_enc',
  'webhook_secret_prev_enc',
  'webhook_secret_prev_until',
  'webhook_cursor',
  'webhook_attempts',
  'webhook_next_attempt_at',
  'mqtt_cursor',
  'paused_at',
  'paused_by',
  'mcp_enrolled_at',
  'mcp_disabled_at',
  'alert_first_micros',
  'alert_second_micros',
  'deficit_since',
  'payer_customer_id',
  'payer_email',
  'trailer_opted_out_at',
  'trailer_paid_micros',
  'storage_billed_through',
  'close_protection_at',
  'evidence_enrolled_at',
  'audit_retention_days',
  'search_indexing',
  'closed_at',
  'delete_after',
] as const satisfies readonly ColumnOf<'accounts'>[];
// A column added to either table and not listed above is a compile error here (the rows must stay whole).
type Unlisted = Exclude<ColumnOf<'api_keys'>, (typeof KEY_COLUMNS)[number]> | Exclude<ColumnOf<'accounts'>, (typeof ACCOUNT_COLUMNS)[number]>;
const everyColumnListed: [Unlisted] extends [never] ? true : Unlisted = true;
void everyColumnListed;

/** The model's field name of a column (the schema maps each field to its snake_case column). */
const fieldOf = (column: string) => column.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
const KEY_FIELDS = KEY_COLUMNS.map((c) => [`k_${c}`, fieldOf(c)] as const);
const ACCOUNT_FIELDS = ACCOUNT_COLUMNS.map((c) => [`a_${c}`, fieldOf(c)] as const);

/**
 * The key and its account in one statement (this runs on every keyed call): Prisma's findUnique with include
 * made two queries and cost about as much client CPU as the rest of a send's reads. One row of parameters per
 * hash (parameterRows), so each connection keeps its plan; compiled once per size (compiling 53 columns cost
 * more than the read).
 */
export const KEY_LOOKUP = parameterRows<string, Record<string, unknown>>({
  types: ['text'],
  values: (hash) => [hash],
  build: (values) =>
    sql<Record<string, unknown>>`SELECT ${sql.join([
      ...KEY_COLUMNS.map((c) => sql`${sql.ref(`k.${c}`)} AS ${sql.id(`k_${c}`)}`),
      ...ACCOUNT_COLUMNS.map((c) => sql`${sql.ref(`a.${c}`)} AS ${sql.id(`a_${c}`)}`),
    ])}
    FROM ${values} AS q(i, hash) JOIN ${sql.table('api_keys')} AS k ON ${sql.ref('k.hash')} = q.hash
      JOIN ${sql.table('accounts')} AS a ON ${sql.ref('a.id')} = ${sql.ref('k.account_id')}`,
});

/**
 * The lookups of the calls that arrive together share one statement (group commit): under load each call's
 * lookup was a statement of its own, whose fixed cost in PostgreSQL was most of the read's.
 */
const keyLookupsOf = (db: Db) =>
  groupCommitOf<string, Record<string, unknown> | null>(db, 'key_lookups', async (hashes) => {
    const found = await KEY_LOOKUP.run(db, [...new Set(hashes)]);
    const byHash = new Map(found.map((r) => [r.k_hash as string, r]));
    return hashes.map((h) => byHash.get(h) ?? null);
  });

function pick(row: Record<string, unknown>, fields: readonly (readonly [string, string])[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [column, field] of fields) out[field] = row[column];
  return out;
}

/** Finds the active key for a raw bearer value, or null. */
export async function authenticateKey(input: { db: Db; raw: string }): Promise<(ApiKey & { account: Account }) | null> {
  if (!input.raw.startsWith(KEY_PREFIX) || input.raw.length > 128) return null;
  const hash = sha256Hex(input.raw);
  const row = await keyLookupsOf(input.db).add(hash);
  if (!row) return null;
  const key = { ...(pick(row, KEY_FIELDS) as unknown as ApiKey), account: pick(row, ACCOUNT_FIELDS) as unknown as Account };
  if (key.revokedAt || !constantTimeEqual(key.hash, hash)) return null;
  if (!key.lastUsedAt || Date.now() - key.lastUsedAt.getTime() > 60_000) {
    // At most one write a minute per key; failure to record use must not fail the request.
    void input.db.apiKey.updateMany({ where: { id: key.id }, data: { lastUsedAt: new Date() } }).catch(() => undefined);
  }
  return key;
}
