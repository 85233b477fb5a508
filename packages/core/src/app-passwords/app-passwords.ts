/**
 * App-passwords: per-device credentials for mail clients (IMAP and SMTP submission), never for the HTTP API.
 * The value is four groups of four base32 characters (80 random bits) joined by hyphens, shown once and
 * stored only as an scrypt hash, beside a short keyed lookup tag that finds the row to check. Minting,
 * listing and revoking append account.app_password.* events; revoking also ends open IMAP sessions (they
 * follow the event stream). The first app-password starts the account's folders following its mail.
 */
import { createHmac, randomBytes, scrypt as scryptCb, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { k, poolRows, type AppPassword, type Db } from '@boxes/db';
import { appendEvent } from '../events/append';
import { followMailboxes } from '../mailboxes/sync';
import { inTransaction } from '../shared/context';
import { AppError, notFound } from '../shared/errors';
import { newId } from '../shared/ids';

const BASE32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';

/** scrypt cost: 16 MiB and about 40 ms a check. The 80-bit value itself makes guessing hopeless. */
const SCRYPT = { N: 16384, r: 8, p: 1, keyLength: 32 } as const;

function scrypt(password: string, salt: Buffer, params: { N: number; r: number; p: number; keyLength: number }): Promise<Buffer> {
  const opts: ScryptOptions = { N: params.N, r: params.r, p: params.p, maxmem: 128 * params.N * params.r * 2 };
  return new Promise((resolve, reject) => scryptCb(password, salt, params.keyLength, opts, (err, key) => (err ? reject(err) : resolve(key))));
}

/** A fresh app-password: XXXX-XXXX-XXXX-XXXX over the RFC 4648 base32 alphabet. */
export function generateAppPassword(): string {
  const bytes = randomBytes(10);
  let bits = 0;
  let value = 0;
  let out = '';
  for (const b of bytes) {
    value = (value << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out += BASE32[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  return out.match(/.{4}/g)!.join('-');
}

/**
 * The canonical form of a typed app-password (upper case, without the hyphens or spaces people add or drop),
 * or null when it cannot be one: anything else (an API key, a guess of the wrong shape) never reaches a hash.
 */
export function normalizeAppPassword(input: string): string | null {
  const compact = input.replace(/[\s-]/g, '').toUpperCase();
  return /^[A-Z2-7]{16}$/.test(compact) ? compact : null;
}

export function appPasswordLookup(secretKey: Buffer, normalized: string): string {
  return createHmac('sha256', secretKey).update(`app-password:${normalized}`).digest('hex').slice(0, 8);
}

export async function hashAppPassword(normalized: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scrypt(normalized, salt, SCRYPT);
  return ['scrypt', SCRYPT.N, SCRYPT.r, SCRYPT.p, salt.toString('base64url'), key.toString('base64url')].join('$');
}

export async function checkAppPasswordHash(normalized: string, stored: string): Promise<boolean> {
  const [kind, n, r, p, salt, hash] = stored.split('$');
  if (kind !== 'scrypt' || !salt || !hash) return false;
  const expected = Buffer.from(hash, 'base64url');
  const got = await scrypt(normalized, Buffer.from(salt, 'base64url'), { N: Number(n), r: Number(r), p: Number(p), keyLength: expected.length });
  return got.length === expected.length && timingSafeEqual(got, expected);
}

/** Spends the time of one check, so a login without any candidate row answers as slowly as a wrong password. */
export async function burnAppPasswordCheck(): Promise<void> {
  await scrypt('not-a-password', Buffer.alloc(16), SCRYPT);
}

export interface AppPasswordView {
  id: string;
  label: string;
  box_id: string | null;
  box: string | null;
  created_at: string;
  last_used_at: string | null;
}

async function present(db: Db, rows: AppPassword[]): Promise<AppPasswordView[]> {
  const ids = [...new Set(rows.map((r) => r.boxId).filter((x): x is string => !!x))];
  const boxes = ids.length ? await db.box.findMany({ where: { id: { in: ids } }, select: { id: true, address: true } }) : [];
  const address = new Map(boxes.map((b) => [b.id, b.address]));
  return rows.map((r) => ({
    id: r.id,
    label: r.label,
    box_id: r.boxId,
    // A box deleted since keeps its id (the password stays limited to it, so it no longer works) but has no address.
    box: r.boxId ? (address.get(r.boxId) ?? null) : null,
    created_at: r.createdAt.toISOString(),
    last_used_at: r.lastUsedAt?.toISOString() ?? null,
  }));
}

/** Where mail clients connect, as the created app-password tells them. */
export interface MailClientSettings {
  host: string;
  imap_port: number;
  smtp_port: number;
}

export async function createAppPassword(input: {
  db: Db;
  secretKey: Buffer;
  accountId: string;
  label: string;
  /** A box of the account (address, local part or id) the password is limited to. */
  box?: string | undefined;
  actorKeyId: string;
}): Promise<{ view: AppPasswordView; password: string; usernames: string[] }> {
  let boxId: string | null = null;
  let boxAddress: string | null = null;
  if (input.box !== undefined) {
    const want = input.box.trim().toLowerCase();
    const boxes = await input.db.box.findMany({ where: { accountId: input.accountId }, select: { id: true, address: true, localPart: true } });
    const box = boxes.find((b) => b.id === input.box || b.address === want || (!want.includes('@') && b.localPart === want));
    if (!box) throw new AppError('validation_error', `box: no such box on this account: ${input.box}`, { fields: [{ path: 'box', message: 'unknown box' }] });
    boxId = box.id;
    boxAddress = box.address;
  }
  const password = generateAppPassword();
  const normalized = normalizeAppPassword(password)!;
  const hash = await hashAppPassword(normalized);
  const row = await inTransaction(input.db, async (tx) => {
    const created = await tx.appPassword.create({
      data: { id: newId('apw'), accountId: input.accountId, label: input.label, boxId, lookup: appPasswordLookup(input.secretKey, normalized), hash },
    });
    await appendEvent({
      db: tx,
      accountId: input.accountId,
      type: 'account.app_password.created',
      boxId,
      data: { app_password_id: created.id, label: created.label, box_id: boxId, box: boxAddress, by_key_id: input.actorKeyId },
    });
    // The account now uses mail clients: the IMAP servers fold its mail as it arrives, so a first sync finds its
    // folders ready.
    await followMailboxes(tx, input.accountId);
    return created;
  });
  const [view] = await present(input.db, [row]);
  const usernames = boxAddress ? [boxAddress] : await accountUsernames(input.db, input.accountId);
  return { view: view!, password, usernames };
}

/** The usernames an unrestricted app-password logs in with: the owner's email (every box), then each box address. */
async function accountUsernames(db: Db, accountId: string): Promise<string[]> {
  const account = await db.account.findUniqueOrThrow({ where: { id: accountId }, select: { humanEmail: true } });
  const boxes = await db.box.findMany({
    where: { accountId, liveAddress: { not: null } },
    orderBy: [{ isPrimary: 'desc' }, { createdAt: 'asc' }],
    select: { address: true },
  });
  return [account.humanEmail.toLowerCase(), ...boxes.map((b) => b.address)];
}

export async function listAppPasswords(input: { db: Db; accountId: string }): Promise<AppPasswordView[]> {
  const rows = await input.db.appPassword.findMany({ where: { accountId: input.accountId, revokedAt: null }, orderBy: { createdAt: 'asc' } });
  return present(input.db, rows);
}

export async function revokeAppPassword(input: { db: Db; accountId: string; id: string; actorKeyId: string }) {
  return inTransaction(input.db, async (tx) => {
    const row = await tx.appPassword.findFirst({ where: { id: input.id, accountId: input.accountId, revokedAt: null } });
    if (!row) throw notFound('app-password', input.id);
    const revokedAt = new Date();
    await tx.appPassword.update({ where: { id: row.id }, data: { revokedAt } });
    await appendEvent({
      db: tx,
      accountId: input.accountId,
      type: 'account.app_password.revoked',
      boxId: row.boxId,
      data: { app_password_id: row.id, label: row.label, by_key_id: input.actorKeyId },
    });
    return { id: row.id, revoked: true as const, revoked_at: revokedAt.toISOString() };
  });
}

/**
 * Whether an app-password still works (open sessions check this each time their account's stream moves, and a
 * submission before each message): on the pg pool (poolRows), as Prisma's client compiled its query first and
 * then cost several times the statement's own client side.
 */
export async function appPasswordActive(db: Db, id: string): Promise<boolean> {
  const [row] = await poolRows(db, k.selectFrom('app_passwords').select('revoked_at').where('id', '=', id));
  return Boolean(row && !row.revoked_at);
}
