/**
 * Mandatory recurring debits, run by the worker's repeatable billing job: DNS hosting of delegated domains and
 * name service of registered ones and live dedicated sending IPs (per calendar month, charged when the month
 * starts), DNS query overage (per
 * month, once it has ended) and storage of mail older than the free days (per UTC day, once it has ended).
 * They are never skipped: each period is charged once, under a ledger key naming it, and a run catches up
 * every period since the last one (a worker that was down for a week charges the week). They may take the
 * balance below zero.
 */
import { k, rows as run, sql, tbl } from '@boxes/db';
import type { Services } from '../shared/context';
import type { Posting } from './ledger';
import { postedKeys, postEntries } from '../store/ledger';
import { centsToMicros, dnsOverageMicros, PRICES_MICROS, STORAGE_FREE_DAYS, storageDayMicros } from './prices';
import { sendingIpPostings } from '../sending-ips/sending-ips';
import type { AccountStatus, DomainRegistrationStatus, DomainStatus } from '@boxes/schemas';

const DAY_MS = 86_400_000;
/** At most this many days of storage are caught up per account and run (the next run continues). */
const MAX_STORAGE_DAYS_PER_RUN = 400;

const monthKey = (d: Date) => `${d.getUTCFullYear()}-${String(d.getUTCMonth() + 1).padStart(2, '0')}`;
const dayStart = (d: Date) => new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()));

function monthsFrom(start: Date, end: Date): string[] {
  const out: string[] = [];
  let y = start.getUTCFullYear();
  let m = start.getUTCMonth();
  while (y < end.getUTCFullYear() || (y === end.getUTCFullYear() && m <= end.getUTCMonth())) {
    out.push(`${y}-${String(m + 1).padStart(2, '0')}`);
    m += 1;
    if (m === 12) {
      m = 0;
      y += 1;
    }
  }
  return out;
}

/** Monthly charge per domain mode (subdomain and byo_manual domains cost nothing). */
const MONTHLY: Record<string, { type: 'domain_hosting' | 'domain_maintenance'; micros: number } | undefined> = {
  byo_delegated: { type: 'domain_hosting', micros: PRICES_MICROS.domainHostingPerMonth },
  register: { type: 'domain_maintenance', micros: PRICES_MICROS.domainMaintenancePerMonth },
};

export interface CycleResult {
  accounts: number;
  entries: number;
}

/** Charges every account what is due up to the service clock's now. Safe to run concurrently and repeatedly. */
export async function runBillingCycle(svc: Services): Promise<CycleResult> {
  const now = svc.clock.now();
  let cursor = '';
  const result: CycleResult = { accounts: 0, entries: 0 };
  for (;;) {
    const accounts = await svc.db.account.findMany({
      where: { id: { gt: cursor }, status: 'active' satisfies AccountStatus },
      orderBy: { id: 'asc' },
      take: 200,
      select: {
        id: true,
        createdAt: true,
        storageBilledThrough: true,
        sendingIp: { select: { id: true, ip: true, mode: true, createdAt: true } },
        domains: { where: { status: { in: ['active', 'retiring'] satisfies DomainStatus[] } }, select: { id: true, name: true, mode: true, verifiedAt: true } },
      },
    });
    if (!accounts.length) break;
    cursor = accounts[accounts.length - 1]!.id;
    for (const a of accounts) {
      const n = await billAccount(svc, a, now);
      if (n) {
        result.accounts += 1;
        result.entries += n;
      }
    }
  }
  return result;
}

async function billAccount(
  svc: Services,
  a: {
    id: string;
    createdAt: Date;
    storageBilledThrough: Date | null;
    sendingIp: { id: string; ip: string; mode: string; createdAt: Date } | null;
    domains: { id: string; name: string; mode: string; verifiedAt: Date | null }[];
  },
  now: Date,
): Promise<number> {
  // A live dedicated sending IP: each calendar month it is held (the first was charged when it was taken).
  const postings: Posting[] = sendingIpPostings(a.sendingIp, now);
  const thisMonth = monthKey(now);
  for (const d of a.domains) {
    const monthly = MONTHLY[d.mode];
    // Hosting is billed from the month the domain went live (a delegation proven), never for a pending claim.
    if (!monthly || !d.verifiedAt) continue;
    for (const month of monthsFrom(d.verifiedAt, now)) {
      postings.push({
        type: monthly.type,
        amountMicros: -BigInt(monthly.micros),
        idempotencyKey: `${monthly.type}:${d.id}:${month}`,
        quantity: 1n,
        description: `${d.name} ${month}`,
      });
    }
    const counts = await svc.db.dnsQueryCount.findMany({ where: { domainId: d.id, month: { lt: thisMonth } } });
    for (const c of counts) {
      const micros = dnsOverageMicros(c.queries);
      if (micros > 0n) {
        postings.push({
          type: 'dns_overage',
          amountMicros: -micros,
          idempotencyKey: `dns_overage:${d.id}:${c.month}`,
          quantity: c.queries,
          description: `${d.name} ${c.month}: ${c.queries} queries`,
        });
      }
    }
  }
  // Storage: each whole UTC day that has ended since the last one billed.
  const firstDay = a.storageBilledThrough ? new Date(a.storageBilledThrough.getTime() + DAY_MS) : dayStart(a.createdAt);
  const lastDay = new Date(dayStart(now).getTime() - DAY_MS);
  let through: Date | null = null;
  for (let day = firstDay, i = 0; day <= lastDay && i < MAX_STORAGE_DAYS_PER_RUN; day = new Date(day.getTime() + DAY_MS), i++) {
    // Mail counts on a day once it is older than the free days at that day's end, while its body is stored.
    const cutoff = new Date(day.getTime() + DAY_MS - STORAGE_FREE_DAYS * DAY_MS);
    // The bytes of a message (attachments included) and the text extracted from its attachments.
    const [m, t] = [tbl('messages', 'm'), tbl('message_attachments', 't')];
    const rows = await run(
      svc.db,
      sql<{ bytes: bigint | null }>`
      SELECT (SUM(${m.size_bytes}) + COALESCE(SUM((SELECT SUM(${t.text_bytes}) FROM ${t.$} WHERE ${t.message_id} = ${m.id} AND ${t.text_enc} IS NOT NULL)), 0))::bigint AS bytes
      FROM ${m.$}
      WHERE ${m.account_id} = ${a.id} AND ${m.recorded_at} < ${cutoff} AND ${m.body_reclaimed_at} IS NULL`,
    );
    const bytes = rows[0]?.bytes ?? 0n;
    const micros = storageDayMicros(bytes);
    const key = day.toISOString().slice(0, 10);
    if (micros > 0n)
      postings.push({
        type: 'storage',
        amountMicros: -micros,
        idempotencyKey: `storage:${a.id}:${key}`,
        quantity: bytes,
        description: `${key}: ${bytes} bytes`,
      });
    through = day;
  }
  // Periods charged already are dropped here, so an account with nothing new is not locked at all.
  const seen = await postedKeys(
    svc.db,
    postings.map((p) => p.idempotencyKey!),
  );
  const due = postings.filter((p) => !seen.has(p.idempotencyKey!));
  if (!due.length && !through) return 0;
  const renewed = await renewRegistrations(svc, a.id, now);
  if (!due.length && !through) return renewed;
  return svc.db.$transaction(
    async (tx) => {
      const r = due.length ? await postEntries(svc, tx, a.id, due) : { posted: 0 };
      if (through) await tx.account.update({ where: { id: a.id }, data: { storageBilledThrough: through } });
      return r.posted + renewed;
    },
    { maxWait: 10_000, timeout: 30_000 },
  );
}

/**
 * Registered domains whose year has run out are renewed for another year at the registrar and the year is
 * debited (domain_renewal), whatever the balance: a mandatory debit that may take it below zero (a
 * deficit: mandatory debits are never skipped). One renewal per registration year: the ledger key names the year's end, and the renewal and
 * its debit commit together.
 */
async function renewRegistrations(svc: Services, accountId: string, now: Date): Promise<number> {
  const due = await svc.db.domainRegistration.findMany({
    where: { domain: { accountId, status: 'active' satisfies DomainStatus }, status: 'active' satisfies DomainRegistrationStatus, expiresAt: { lte: now } },
  });
  let posted = 0;
  for (const reg of due) {
    posted += await svc.db.$transaction(
      async (tx) => {
        const rows = await run(tx, k.selectFrom('domain_registrations').select('expires_at').where('id', '=', reg.id).forUpdate());
        const current = rows[0]?.expires_at;
        if (!current || current > now) return 0;
        const { expiresAt } = await svc.registrar.renew(tx, reg.name, { years: 1, currentExpiry: current });
        await tx.domainRegistration.update({ where: { id: reg.id }, data: { expiresAt } });
        const r = await postEntries(svc, tx, accountId, [
          {
            type: 'domain_renewal',
            amountMicros: -centsToMicros(reg.priceCentsPerYear),
            idempotencyKey: `domain_renewal:${reg.id}:${current.toISOString().slice(0, 10)}`,
            quantity: 1n,
            description: `${reg.name}: renewed for one year, until ${expiresAt.toISOString().slice(0, 10)} (${svc.registrar.label})`,
          },
        ]);
        return r.posted;
      },
      { maxWait: 10_000, timeout: 30_000 },
    );
  }
  return posted;
}
