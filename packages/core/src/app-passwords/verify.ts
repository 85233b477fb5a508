/**
 * The internal verify call of the mail servers: a username and an app-password in, a
 * login (which account, which boxes it sees and may send from) or a refusal out. The mail servers never see API
 * keys, and nothing but an app-password's shape ever reaches a hash.
 *
 * Failed logins are counted in Redis (shared by every process) per username and per client address, in a window
 * of MAIL_AUTH_LOCKOUT_SECONDS: after MAIL_AUTH_FREE_FAILURES failures each further failure is answered
 * MAIL_AUTH_DELAY_MS later per extra failure (at most five steps), and at MAIL_AUTH_USER_MAX_FAILURES (per
 * username) or MAIL_AUTH_ADDRESS_MAX_FAILURES (per address) every login is refused, right password or not, until
 * the window (restarted by the failure that reached the limit) ends. A success does not clear the counts.
 *
 * A successful login appends account.app_password.used, at most once a minute per credential.
 *
 * Mail clients log in often (a phone on every wake, Thunderbird with several connections, mbsync per run) and an
 * scrypt check costs about 40 ms of CPU. As Dovecot's auth cache does, a password that matched a row's hash is
 * remembered in this process for VERIFIED_TTL_MS, as a keyed hash of the password and that stored hash (never
 * the password): the same password against the same row then skips scrypt. Only matches are kept, so a wrong
 * guess always pays the full check and counts towards the lockout; the row is read on every login, so a revoked
 * password (or a deleted box, a closed account) fails at once.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { Prisma } from '@boxes/db';
import { k, rows as sqlRows, sql, tbl } from '@boxes/db';
import { ACCOUNT_STATUSES } from '@boxes/schemas';
import { statusLit } from '../shared/statuses';
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';
import { sha256Hex } from '../shared/crypto';
import { appPasswordLookup, burnAppPasswordCheck, checkAppPasswordHash, normalizeAppPassword } from './app-passwords';

export type MailService = 'imap' | 'smtp';

export interface MailLogin {
  accountId: string;
  appPasswordId: string;
  label: string;
  /** The username as given (lower case). */
  username: string;
  /**
   * account: the owner's email; every box of the account (boxes made later too).
   * box: a box address; that box only.
   */
  kind: 'account' | 'box';
  /** The box of a box login. */
  boxId: string | null;
  /** Boxes the credential may send from; null: every box of the account. */
  sendBoxIds: string[] | null;
}

export type VerifyResult = { ok: true; login: MailLogin } | { ok: false; reason: 'invalid' | 'locked'; message: string; retryAfterSeconds?: number };

/** How long, and for how many credentials, a verified password skips scrypt (see above). */
const VERIFIED_TTL_MS = 10 * 60_000;
const VERIFIED_MAX = 10_000;
const verified = new Map<string, { proof: Buffer; until: number }>();
/** Password checks made (scrypt) and skipped (verified lately), for tests and metrics. */
export const mailLoginChecks = { scrypt: 0, cached: 0 };

function proofOf(secretKey: Buffer, normalized: string, storedHash: string): Buffer {
  return createHmac('sha256', secretKey).update(`verified:${storedHash}:${normalized}`).digest();
}

/** Whether this password matches this row's hash: from a recent match, or by scrypt (remembered when it does). */
async function matches(secretKey: Buffer, row: { id: string; hash: string }, normalized: string): Promise<boolean> {
  const key = `${row.id}:${row.hash}`;
  const proof = proofOf(secretKey, normalized, row.hash);
  const seen = verified.get(key);
  if (seen && seen.until > Date.now() && timingSafeEqual(seen.proof, proof)) {
    mailLoginChecks.cached++;
    return true;
  }
  mailLoginChecks.scrypt++;
  if (!(await checkAppPasswordHash(normalized, row.hash))) return false;
  verified.delete(key);
  verified.set(key, { proof, until: Date.now() + VERIFIED_TTL_MS });
  if (verified.size > VERIFIED_MAX) verified.delete(verified.keys().next().value!);
  return true;
}

/** The longest a failure is slowed down, in steps of MAIL_AUTH_DELAY_MS. */
const MAX_DELAY_STEPS = 5;

export function normalizeRemoteAddress(address: string | null | undefined): string {
  if (!address) return 'unknown';
  return address.startsWith('::ffff:') ? address.slice(7) : address;
}

function counterKeys(svc: Pick<Services, 'config'>, username: string, remoteAddress: string) {
  const p = `${svc.config.redisPrefix}:mailauth`;
  return { user: `${p}:user:${sha256Hex(username)}`, address: `${p}:addr:${remoteAddress}` };
}

/** Seconds until a lockout ends, or 0 when neither counter is at its limit. Redis failing counts as no lockout. */
async function lockedFor(svc: Services, keys: { user: string; address: string }): Promise<number> {
  const limits = svc.config.mailClients.auth;
  try {
    const res = (await svc.redis.multi().get(keys.user).pttl(keys.user).get(keys.address).pttl(keys.address).exec()) ?? [];
    const [userCount, userTtl, addrCount, addrTtl] = res.map(([, v]) => v) as [string | null, number, string | null, number];
    let wait = 0;
    if (Number(userCount ?? 0) >= limits.userMaxFailures) wait = Math.max(wait, userTtl);
    if (Number(addrCount ?? 0) >= limits.addressMaxFailures) wait = Math.max(wait, addrTtl);
    return wait > 0 ? Math.ceil(wait / 1000) : 0;
  } catch {
    return 0;
  }
}

/** Counts one failure against both keys; returns the larger count relative to its free failures. */
async function countFailure(svc: Services, keys: { user: string; address: string }): Promise<number> {
  const limits = svc.config.mailClients.auth;
  const windowMs = limits.windowSeconds * 1000;
  try {
    const res =
      (await svc.redis.multi().set(keys.user, 0, 'PX', windowMs, 'NX').incr(keys.user).set(keys.address, 0, 'PX', windowMs, 'NX').incr(keys.address).exec()) ??
      [];
    const user = Number(res[1]?.[1] ?? 0);
    const addr = Number(res[3]?.[1] ?? 0);
    // The failure that reaches a limit starts the lockout's full length.
    if (user === limits.userMaxFailures) await svc.redis.pexpire(keys.user, windowMs);
    if (addr === limits.addressMaxFailures) await svc.redis.pexpire(keys.address, windowMs);
    return Math.max(user, addr);
  } catch {
    return 0;
  }
}

interface Candidate {
  id: string;
  account_id: string;
  label: string;
  box_id: string | null;
  hash: string;
}

/**
 * Checks a mail-client login. Always resolves (never throws for a bad credential); the caller answers the
 * client with `message` on refusal.
 */
export async function verifyMailLogin(
  svc: Services,
  input: { username: string; password: string; service: MailService; remoteAddress?: string | null },
): Promise<VerifyResult> {
  const username = input.username.trim().toLowerCase();
  const remote = normalizeRemoteAddress(input.remoteAddress);
  const keys = counterKeys(svc, username, remote);
  const locked = await lockedFor(svc, keys);
  if (locked > 0) {
    return { ok: false, reason: 'locked', retryAfterSeconds: locked, message: `Too many failed logins; try again in ${locked} seconds` };
  }

  const login = await check(svc, username, input.password);
  if (!login) {
    const count = await countFailure(svc, keys);
    const steps = Math.min(MAX_DELAY_STEPS, Math.max(0, count - svc.config.mailClients.auth.freeFailures));
    if (steps > 0) await new Promise((r) => setTimeout(r, steps * svc.config.mailClients.auth.delayMs));
    return { ok: false, reason: 'invalid', message: 'Invalid username or app-password' };
  }
  await recordUse(svc, login, input.service, remote);
  return { ok: true, login };
}

async function check(svc: Services, username: string, password: string): Promise<MailLogin | null> {
  const normalized = normalizeAppPassword(password);
  if (!normalized || username.length > 320 || !username.includes('@')) {
    await burnAppPasswordCheck();
    return null;
  }
  const lookup = appPasswordLookup(svc.secretKey, normalized);
  // The box the username names (on a live domain), and the active accounts whose owner's email it is, with the
  // candidate app-passwords of those accounts, in one round trip.
  const box = tbl('boxes');
  const owner = tbl('accounts');
  const p = tbl('app_passwords', 'p');
  const a = tbl('accounts', 'a');
  const x = tbl('boxes', 'x');
  const active = statusLit(ACCOUNT_STATUSES, 'active');
  const rows = await sqlRows(
    svc.db,
    sql<Candidate & { box_account_id: string | null; login_box_id: string | null; box_exists: boolean }>`
    WITH b AS (SELECT ${box.id}, ${box.account_id} FROM ${box.$} WHERE ${box.live_address} = ${username}),
         owners AS (SELECT ${owner.id} FROM ${owner.$} WHERE ${owner.human_email} = ${username} AND ${owner.status} = ${active})
    SELECT ${p.id}, ${p.account_id}, ${p.label}, ${p.box_id}, ${p.hash},
      (SELECT account_id FROM b) AS box_account_id, (SELECT id FROM b) AS login_box_id,
      (${p.box_id} IS NULL OR EXISTS (SELECT 1 FROM ${x.$} WHERE ${x.id} = ${p.box_id})) AS box_exists
    FROM ${p.$} JOIN ${a.$} ON ${a.id} = ${p.account_id}
    WHERE ${p.lookup} = ${lookup} AND ${p.revoked_at} IS NULL AND ${a.status} = ${active}
      AND (${p.account_id} IN (SELECT account_id FROM b) OR ${p.account_id} IN (SELECT id FROM owners))`,
  );
  if (!rows.length) {
    await burnAppPasswordCheck();
    return null;
  }
  for (const row of rows) {
    if (!(await matches(svc.secretKey, row, normalized))) continue;
    if (!row.box_exists) return null;
    const isBoxLogin = row.box_account_id === row.account_id && row.login_box_id !== null;
    if (row.box_id) {
      // A password limited to a box logs in with that box's address only.
      if (!isBoxLogin || row.login_box_id !== row.box_id) return null;
    }
    return {
      accountId: row.account_id,
      appPasswordId: row.id,
      label: row.label,
      username,
      kind: isBoxLogin ? 'box' : 'account',
      boxId: isBoxLogin ? row.login_box_id : null,
      sendBoxIds: row.box_id ? [row.box_id] : null,
    };
  }
  return null;
}

/** account.app_password.used, at most once a minute per credential (the row's last_used_at decides). */
async function recordUse(svc: Services, login: MailLogin, service: MailService, remote: string): Promise<void> {
  try {
    await svc.db.$transaction(async (tx) => {
      const claimed = await sqlRows(
        tx,
        k
          .updateTable('app_passwords')
          .set({ last_used_at: sql`now()` })
          .where('id', '=', login.appPasswordId)
          .where((eb) => eb.or([eb('last_used_at', 'is', null), eb('last_used_at', '<', sql<Date>`now() - interval '60 seconds'`)]))
          .returning('box_id'),
      );
      if (!claimed.length) return;
      await appendEvent({
        db: tx,
        accountId: login.accountId,
        type: 'account.app_password.used',
        boxId: claimed[0]!.box_id,
        data: { app_password_id: login.appPasswordId, label: login.label, service, username: login.username, remote_address: remote },
      });
    });
  } catch (err) {
    // Recording use must not refuse a valid login; a serialization hiccup only loses one throttled event.
    if (!(err instanceof Prisma.PrismaClientKnownRequestError)) throw err;
  }
}
