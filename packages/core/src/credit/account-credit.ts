/**
 * The account's own credit settings and reports: usage by entry type, low-balance alert thresholds, and the
 * outbound trailer (opt out with a per-send surcharge until paid off, or buy out the rest at once).
 */
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';
import { AppError } from '../shared/errors';
import { creditBalance, lockAccountCredit, paymentRequired, trailerStatus, type TrailerStatus } from './ledger';
import { postEntries } from '../store/ledger';
import { centsToMicros, LEDGER_TYPES, microsToCents, microsToUsd, TRAILER_PAYOFF_MICROS } from './prices';

export interface UsageRow {
  type: string;
  entries: number;
  amount_micros: number;
  amount_usd: string;
  free_messages: number;
}

/** A window bound; an unparseable one is a 400 (new Date() gives an Invalid Date, which the query rejects with a 500). */
function usageTime(value: string | undefined, path: 'since' | 'before'): Date | null {
  if (!value) return null;
  const d = new Date(value);
  // The database's timestamps end where JavaScript's do not (-271821-04-20 is a valid Date): a year outside
  // 1..9999 is a 400 too, not a 500 from the query.
  if (Number.isNaN(d.getTime()) || d.getUTCFullYear() < 1 || d.getUTCFullYear() > 9999)
    throw new AppError('validation_error', `${path}: not an ISO 8601 time`, { fields: [{ path, message: 'not an ISO 8601 time' }] });
  return d;
}

export async function creditUsage(svc: Services, accountId: string, window: { since?: string | undefined; before?: string | undefined }) {
  const since = usageTime(window.since, 'since');
  const before = usageTime(window.before, 'before');
  if (since && before && since >= before)
    throw new AppError('validation_error', 'since must be before before', { fields: [{ path: 'since', message: 'after before' }] });
  const rows = await svc.db.ledgerEntry.groupBy({
    by: ['type'],
    where: { accountId, createdAt: { ...(since ? { gte: since } : {}), ...(before ? { lt: before } : {}) } },
    _count: { _all: true },
    _sum: { amountMicros: true, freeMessages: true },
  });
  const order = (t: string) => {
    const i = (LEDGER_TYPES as readonly string[]).indexOf(t);
    return i < 0 ? LEDGER_TYPES.length : i;
  };
  const usage: UsageRow[] = rows
    .map((r) => ({
      type: r.type,
      entries: r._count._all,
      amount_micros: Number(r._sum.amountMicros ?? 0n),
      amount_usd: microsToUsd(r._sum.amountMicros ?? 0n),
      free_messages: r._sum.freeMessages ?? 0,
    }))
    .sort((a, b) => order(a.type) - order(b.type));
  const charges = rows.reduce((n, r) => n + ((r._sum.amountMicros ?? 0n) < 0n ? (r._sum.amountMicros ?? 0n) : 0n), 0n);
  const credits = rows.reduce((n, r) => n + ((r._sum.amountMicros ?? 0n) > 0n ? (r._sum.amountMicros ?? 0n) : 0n), 0n);
  return {
    since: since?.toISOString() ?? null,
    before: before?.toISOString() ?? null,
    usage,
    totals: {
      charges_micros: Number(charges),
      charges_usd: microsToUsd(charges),
      credits_micros: Number(credits),
      credits_usd: microsToUsd(credits),
      net_micros: Number(charges + credits),
      net_usd: microsToUsd(charges + credits),
    },
  };
}

export async function setAlertThresholds(svc: Services, accountId: string, input: { first_cents: number | null; second_cents: number | null }) {
  if (input.first_cents !== null && input.second_cents !== null && input.second_cents > input.first_cents) {
    throw new AppError('validation_error', 'second_cents (urgent) must not be above first_cents (early)', {
      fields: [{ path: 'second_cents', message: 'above first_cents' }],
    });
  }
  await svc.db.account.update({
    where: { id: accountId },
    data: {
      alertFirstMicros: input.first_cents === null ? null : centsToMicros(input.first_cents),
      alertSecondMicros: input.second_cents === null ? null : centsToMicros(input.second_cents),
    },
  });
  const b = await creditBalance(svc, accountId);
  return { ...b.alert_thresholds, balance_state: b.balance_state, credit_balance_cents: b.credit_balance_cents };
}

export async function getTrailer(svc: Services, accountId: string): Promise<TrailerStatus> {
  const a = await svc.db.account.findUniqueOrThrow({ where: { id: accountId }, select: { trailerOptedOutAt: true, trailerPaidMicros: true } });
  return trailerStatus(a);
}

/** Opts out of the trailer: from the next send on, messages go without it and carry the surcharge until paid off. */
export async function optOutOfTrailer(svc: Services, accountId: string): Promise<TrailerStatus> {
  return svc.db.$transaction(async (tx) => {
    const a = await lockAccountCredit(tx, accountId);
    if (a.trailer_opted_out_at === null) {
      await tx.account.update({ where: { id: accountId }, data: { trailerOptedOutAt: svc.clock.now() } });
      await appendEvent({
        db: tx,
        accountId,
        type: 'account.trailer.opted_out',
        data: { surcharge_remaining_usd: microsToUsd(TRAILER_PAYOFF_MICROS - a.trailer_paid_micros) },
      });
    }
    const fresh = await tx.account.findUniqueOrThrow({ where: { id: accountId }, select: { trailerOptedOutAt: true, trailerPaidMicros: true } });
    return trailerStatus(fresh);
  });
}

/** Prepays what remains of the opt-out surcharge (and opts out, if not yet). 402 without the credit for it. */
export async function buyOutTrailer(svc: Services, accountId: string): Promise<TrailerStatus & { charged_usd: string }> {
  return svc.db.$transaction(async (tx) => {
    const a = await lockAccountCredit(tx, accountId);
    const remaining = TRAILER_PAYOFF_MICROS - a.trailer_paid_micros;
    if (remaining > 0n) {
      const spendable = a.balance_micros - a.held_micros;
      if (spendable < remaining) {
        throw paymentRequired(
          svc,
          `The buyout costs ${microsToUsd(remaining)} USD and ${microsToUsd(spendable > 0n ? spendable : 0n)} USD is available. Top up first.`,
          {
            required_usd: microsToUsd(remaining),
            credit_balance_cents: microsToCents(a.balance_micros),
          },
        );
      }
      await postEntries(svc, tx, accountId, [{ type: 'trailer_buyout', amountMicros: -remaining, description: 'trailer opt-out bought out' }], {
        locked: a,
        trailerPaidMicros: remaining,
      });
      if (a.trailer_opted_out_at === null) await tx.account.update({ where: { id: accountId }, data: { trailerOptedOutAt: svc.clock.now() } });
      await appendEvent({ db: tx, accountId, type: 'account.trailer.bought_out', data: { charged_usd: microsToUsd(remaining) } });
    }
    const fresh = await tx.account.findUniqueOrThrow({ where: { id: accountId }, select: { trailerOptedOutAt: true, trailerPaidMicros: true } });
    return { ...trailerStatus(fresh), charged_usd: microsToUsd(remaining > 0n ? remaining : 0n) };
  });
}
