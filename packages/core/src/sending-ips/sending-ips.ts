/**
 * Dedicated sending IPs (POST/GET/DELETE /account/sending-ip). The operator lists spare addresses of the
 * machine in SENDING_IPS, each with its HELO name. Mode live takes one of them for the account: the row is
 * provisioning until the worker has checked that the address can be bound here, then warming (daily caps of
 * SENDING_IP_WARMUP_CAPS, one per UTC day), then active with no cap. The delivery worker binds the account's
 * outbound SMTP connections to it; what a day's cap leaves over goes through the shared address. Mode
 * simulated binds nothing: it starts at warming on a documentation address (RFC 5737) and routes nothing.
 *
 * Status is derived from warmup_started_at and the service clock, so advancing the clock moves a row through
 * its warm-up without any job. A live row costs PRICES_MICROS.dedicatedIpPerMonth per calendar month: the first
 * month when it is taken (402 without the credit), later months by the billing cycle (sendingIpPostings).
 */
import { createServer } from 'node:net';
import type { SendingIp } from '@boxes/db';
import type { SmtpSource } from '@boxes/mail';
import { lockAccountCredit, paymentRequired, type Posting } from '../credit/ledger';
import { postEntries } from '../store/ledger';
import { microsToUsd, PRICES_MICROS } from '../credit/prices';
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';
import { AppError, isUniqueViolation } from '../shared/errors';
import { newId } from '../shared/ids';
import { narrowStatus } from '../shared/statuses';
import { SENDING_IP_MODES, type SendingIpMode, type SendingIpStatus } from '@boxes/schemas';

const DAY_MS = 86_400_000;
const dayStart = (d: Date) => Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
const dayKey = (d: Date) => new Date(dayStart(d)).toISOString().slice(0, 10);
const monthKey = (d: Date) => `${d.getUTCFullYear()}-${String(d.getUTCMonth() + 1).padStart(2, '0')}`;

export type { SendingIpMode, SendingIpStatus };

/** The name of the account's own configuration set, carried by its sends in X-Boxes-Configuration-Set. */
export const configurationSetName = (accountId: string): string => `dedicated-${accountId}`;
export const CONFIGURATION_SET_HEADER = 'X-Boxes-Configuration-Set';

/** Which warm-up day `now` is (0 = the UTC day provisioning finished), or null while provisioning. */
function warmupDay(row: Pick<SendingIp, 'warmupStartedAt'>, now: Date): number | null {
  if (!row.warmupStartedAt) return null;
  return Math.max(0, Math.floor((dayStart(now) - dayStart(row.warmupStartedAt)) / DAY_MS));
}

export function sendingIpStatus(caps: number[], row: Pick<SendingIp, 'warmupStartedAt'>, now: Date): SendingIpStatus {
  const day = warmupDay(row, now);
  if (day === null) return 'provisioning';
  return day < caps.length ? 'warming' : 'active';
}

/** Today's cap through the address, or null when there is none (active). */
function capToday(caps: number[], row: Pick<SendingIp, 'warmupStartedAt'>, now: Date): number | null {
  const day = warmupDay(row, now);
  if (day === null) return 0;
  return caps[day] ?? null;
}

const counterKey = (svc: Services, rowId: string, now: Date) => `${svc.config.redisPrefix}:sending-ip:${rowId}:${dayKey(now)}`;

async function sentToday(svc: Services, row: SendingIp, now: Date): Promise<number | null> {
  try {
    return Number((await svc.redis.get(counterKey(svc, row.id, now))) ?? 0);
  } catch {
    return null;
  }
}

export async function presentSendingIp(svc: Services, row: SendingIp) {
  const now = svc.clock.now();
  const caps = svc.config.smtp.sendingIpWarmupCaps;
  const status = sendingIpStatus(caps, row, now);
  const day = warmupDay(row, now);
  const simulated = row.mode === 'simulated';
  const started = row.warmupStartedAt ? dayStart(row.warmupStartedAt) : null;
  const phase = simulated
    ? 'simulated'
    : status === 'provisioning'
      ? 'checking_address'
      : status === 'warming'
        ? `warmup_day_${day! + 1}_of_${caps.length}`
        : 'warmed_up';
  const cap = capToday(caps, row, now);
  const note = simulated
    ? `Simulated: no address of this machine is bound and nothing is routed through ${row.ip} (a documentation address); every message goes through the shared addresses. The warm-up schedule runs as it would for a live address.`
    : status === 'provisioning'
      ? `Checking that ${row.ip} can be bound on this machine${row.lastError ? ` (last attempt: ${row.lastError})` : ''}; until then sends go through the shared addresses.`
      : status === 'warming'
        ? `Warming up: at most ${cap} messages through ${row.ip} today (UTC); more goes through the shared addresses.`
        : `Active: every message to an outside MX goes through ${row.ip}, announcing ${row.heloName}.`;
  return {
    id: row.id,
    ip: row.ip,
    helo_name: row.heloName,
    status,
    provisioning_mode: narrowStatus(SENDING_IP_MODES, row.mode),
    phase,
    note,
    configuration_set: configurationSetName(row.accountId),
    warmup: {
      started_at: row.warmupStartedAt?.toISOString() ?? null,
      day: day === null ? null : day + 1,
      today_cap: status === 'warming' ? cap : null,
      sent_today: simulated ? 0 : status === 'provisioning' ? 0 : await sentToday(svc, row, now),
      active_from: started === null ? null : new Date(started + caps.length * DAY_MS).toISOString(),
      schedule: caps.map((c, i) => ({ day: i + 1, daily_cap: c, date: started === null ? null : new Date(started + i * DAY_MS).toISOString().slice(0, 10) })),
    },
    monthly_price_usd: microsToUsd(row.mode === 'live' ? BigInt(PRICES_MICROS.dedicatedIpPerMonth) : 0n),
    created_at: row.createdAt.toISOString(),
  };
}
export type SendingIpView = Awaited<ReturnType<typeof presentSendingIp>>;

/** A documentation address (RFC 5737 TEST-NET-2) for a simulated row: never an address of this machine. */
function simulatedAddress(accountId: string): string {
  let h = 0;
  for (const c of accountId) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return `198.51.100.${1 + (h % 254)}`;
}

export async function getSendingIp(svc: Services, accountId: string): Promise<SendingIpView> {
  const row = await svc.db.sendingIp.findUnique({ where: { accountId } });
  if (!row) throw new AppError('not_found', 'This account has no dedicated sending IP; POST /account/sending-ip takes one');
  return presentSendingIp(svc, row);
}

export async function provisionSendingIp(svc: Services, input: { accountId: string; mode: SendingIpMode }): Promise<SendingIpView> {
  const { accountId, mode } = input;
  const now = svc.clock.now();
  let row: SendingIp;
  try {
    row = await svc.db.$transaction(
      async (tx) => {
        const a = await lockAccountCredit(tx, accountId);
        const existing = await tx.sendingIp.findUnique({ where: { accountId } });
        if (existing) {
          throw new AppError(
            'sending_ip_exists',
            `This account already has a dedicated sending IP (${existing.ip}, ${existing.mode}); DELETE /account/sending-ip first`,
            {
              sending_ip: { id: existing.id, ip: existing.ip, provisioning_mode: existing.mode },
            },
          );
        }
        if (mode === 'simulated') {
          const created = await tx.sendingIp.create({
            data: {
              id: newId('sip'),
              accountId,
              mode,
              ip: simulatedAddress(accountId),
              liveIp: null,
              heloName: `simulated.${svc.config.mailHost}`,
              warmupStartedAt: now,
            },
          });
          await appendEvent({
            db: tx,
            accountId,
            type: 'account.sending_ip.provisioned',
            data: { id: created.id, ip: created.ip, provisioning_mode: mode, status: 'warming', configuration_set: configurationSetName(accountId) },
          });
          return created;
        }
        const taken = new Set((await tx.sendingIp.findMany({ where: { liveIp: { not: null } }, select: { liveIp: true } })).map((r) => r.liveIp));
        const free = svc.config.smtp.sendingIps.find((s) => !taken.has(s.ip));
        if (!free) {
          throw new AppError(
            'sending_ip_unavailable',
            svc.config.smtp.sendingIps.length
              ? 'Every address this instance offers as a dedicated sending IP is taken; ask the operator to add one to SENDING_IPS, or use mode simulated'
              : 'This instance offers no dedicated sending IPs (SENDING_IPS is empty); mode simulated is available',
            { offered: svc.config.smtp.sendingIps.length },
          );
        }
        const price = BigInt(PRICES_MICROS.dedicatedIpPerMonth);
        if (a.balance_micros - a.held_micros < price) {
          throw paymentRequired(
            svc,
            `A dedicated sending IP costs ${microsToUsd(price)} USD a month, the first month now, and ${microsToUsd(a.balance_micros - a.held_micros)} USD is available. Nothing was provisioned.`,
            {
              required_usd: microsToUsd(price),
            },
          );
        }
        const created = await tx.sendingIp.create({
          data: { id: newId('sip'), accountId, mode, ip: free.ip, liveIp: free.ip, heloName: free.heloName, warmupStartedAt: null },
        });
        await postEntries(svc, tx, accountId, [monthPosting(created, monthKey(now))], { locked: a });
        return created;
      },
      { maxWait: 10_000, timeout: 20_000 },
    );
  } catch (err) {
    // Two accounts taking the last free address at once: the loser is told it is taken.
    if (isUniqueViolation(err)) throw new AppError('sending_ip_unavailable', 'The address was taken by another account at the same moment; try again');
    throw err;
  }
  if (row.mode === 'live') {
    try {
      await svc.jobs.billing.add(
        'sending-ip',
        { sendingIpId: row.id },
        {
          jobId: `sending-ip-${row.id}`,
          attempts: 8,
          backoff: { type: 'exponential', delay: 2_000 },
          removeOnComplete: { age: 3600 },
          removeOnFail: { age: 7 * 86_400 },
        },
      );
    } catch {
      // Redis away: the billing cycle finishes rows still provisioning (finishPendingSendingIps).
    }
  }
  return presentSendingIp(svc, row);
}

function monthPosting(row: Pick<SendingIp, 'id' | 'ip'>, month: string): Posting {
  return {
    type: 'dedicated_ip',
    amountMicros: -BigInt(PRICES_MICROS.dedicatedIpPerMonth),
    idempotencyKey: `dedicated_ip:${row.id}:${month}`,
    quantity: 1n,
    description: `dedicated sending IP ${row.ip} ${month}`,
  };
}

/** The months a live row is charged for up to now (the billing cycle posts those not yet charged). */
export function sendingIpPostings(row: Pick<SendingIp, 'id' | 'ip' | 'mode' | 'createdAt'> | null, now: Date): Posting[] {
  if (!row || row.mode !== 'live') return [];
  const out: Posting[] = [];
  let y = row.createdAt.getUTCFullYear();
  let m = row.createdAt.getUTCMonth();
  while (y < now.getUTCFullYear() || (y === now.getUTCFullYear() && m <= now.getUTCMonth())) {
    out.push(monthPosting(row, `${y}-${String(m + 1).padStart(2, '0')}`));
    m += 1;
    if (m === 12) {
      m = 0;
      y += 1;
    }
  }
  return out;
}

/** Whether this machine can bind the address (it is one of its own). */
function canBind(ip: string): Promise<string | null> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', (err) => resolve((err as NodeJS.ErrnoException).code ?? err.message));
    server.listen(0, ip, () => server.close(() => resolve(null)));
  });
}

/**
 * Provisioning of a live row (the worker's sending-ip job): the address must be bindable on this machine; then
 * the warm-up starts and account.sending_ip.provisioned is appended. Idempotent; throws to be retried.
 */
export async function finishProvisioning(svc: Services, sendingIpId: string): Promise<SendingIpStatus | null> {
  const row = await svc.db.sendingIp.findUnique({ where: { id: sendingIpId } });
  if (!row || row.warmupStartedAt) return row ? sendingIpStatus(svc.config.smtp.sendingIpWarmupCaps, row, svc.clock.now()) : null;
  const error = await canBind(row.ip);
  if (error) {
    await svc.db.sendingIp.updateMany({ where: { id: row.id }, data: { lastError: `cannot bind ${row.ip}: ${error}` } });
    throw new Error(`dedicated IP ${row.ip} cannot be bound: ${error}`);
  }
  const now = svc.clock.now();
  await svc.db.$transaction(async (tx) => {
    const done = await tx.sendingIp.updateMany({ where: { id: row.id, warmupStartedAt: null }, data: { warmupStartedAt: now, lastError: null } });
    if (done.count !== 1) return;
    await appendEvent({
      db: tx,
      accountId: row.accountId,
      type: 'account.sending_ip.provisioned',
      data: {
        id: row.id,
        ip: row.ip,
        helo_name: row.heloName,
        provisioning_mode: 'live',
        status: 'warming',
        configuration_set: configurationSetName(row.accountId),
      },
    });
  });
  return 'warming';
}

/** Live rows still provisioning (their job lost): the billing cycle tries them again. */
export async function finishPendingSendingIps(svc: Services): Promise<number> {
  const rows = await svc.db.sendingIp.findMany({ where: { mode: 'live', warmupStartedAt: null }, select: { id: true }, take: 100 });
  let n = 0;
  for (const r of rows) if ((await finishProvisioning(svc, r.id).catch(() => null)) === 'warming') n++;
  return n;
}

export async function deprovisionSendingIp(svc: Services, accountId: string): Promise<{ deleted: true; id: string; ip: string }> {
  return svc.db.$transaction(async (tx) => {
    const row = await tx.sendingIp.findUnique({ where: { accountId } });
    if (!row) throw new AppError('not_found', 'This account has no dedicated sending IP');
    await tx.sendingIp.delete({ where: { id: row.id } });
    await appendEvent({
      db: tx,
      accountId,
      type: 'account.sending_ip.deprovisioned',
      data: { id: row.id, ip: row.ip, provisioning_mode: row.mode as 'live' | 'simulated' },
    });
    return { deleted: true as const, id: row.id, ip: row.ip };
  });
}

/** What a delivery worker needs of an account's row (read with the delivery). */
export interface DeliverySendingIp {
  id: string;
  mode: string;
  ip: string;
  heloName: string;
  warmupStartedAt: Date | null;
}

/**
 * Where one outbound SMTP delivery of the account leaves from: its dedicated address (bound, with its HELO
 * name) while the row is live, provisioned and under today's warm-up cap; otherwise the shared address (null).
 * Each delivery attempt through the address counts toward the day's cap (one Redis counter per row and UTC day,
 * shared by every worker); when Redis does not answer, the shared address is used.
 */
export async function sendingSource(svc: Services, row: DeliverySendingIp | null): Promise<SmtpSource | null> {
  if (!row || row.mode !== 'live' || !row.warmupStartedAt) return null;
  const now = svc.clock.now();
  const cap = capToday(svc.config.smtp.sendingIpWarmupCaps, row, now);
  if (cap !== null) {
    try {
      const key = counterKey(svc, row.id, now);
      const n = await svc.redis.incr(key);
      if (n === 1) await svc.redis.expire(key, 3 * 86_400);
      if (n > cap) {
        await svc.redis.decr(key);
        return null;
      }
    } catch {
      return null;
    }
  }
  return { localAddress: row.ip, heloName: row.heloName };
}
