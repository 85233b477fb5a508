/**
 * Per-account sending reputation over the last 7 days: sent, bounced and complained counts. Crossing a
 * threshold (bounce rate over 3%, complaint rate over 0.05%) appends reputation.warning; falling back under
 * both appends reputation.recovered. The window is read on the service clock. A state other than ok can only
 * improve without a new bounce or complaint, so it is evaluated again when the account's deliveries are
 * recorded (more mail sent) and as the window slides past old bounces (the billing cycle runs
 * reevaluateReputations). One account's bounces never touch another's counts.
 */
import type { DbClient, Tx } from '@boxes/db';
import { k, rows } from '@boxes/db';
import { appendEvent } from '../events/append';
import type { DeliveryStatus } from '@boxes/schemas';
import type { Services } from '../shared/context';

export const BOUNCE_RATE_LIMIT = 0.03;
export const COMPLAINT_RATE_LIMIT = 0.0005;
const WEEK_MS = 7 * 86_400_000;

export async function reputationCounts(db: DbClient, accountId: string, now: Date) {
  const since = new Date(now.getTime() - WEEK_MS);
  const [sent, bounced, complained] = await Promise.all([
    db.delivery.count({ where: { accountId, createdAt: { gte: since } } }),
    db.delivery.count({ where: { accountId, createdAt: { gte: since }, status: 'bounced' satisfies DeliveryStatus } }),
    db.suppression.count({ where: { accountId, reason: 'complaint', createdAt: { gte: since } } }),
  ]);
  const bounceRate = sent ? bounced / sent : 0;
  const complaintRate = sent ? complained / sent : 0;
  const state: 'ok' | 'bounce_rate_high' | 'complaint_rate_high' | 'bounce_and_complaint_rate_high' =
    bounceRate > BOUNCE_RATE_LIMIT && complaintRate > COMPLAINT_RATE_LIMIT
      ? 'bounce_and_complaint_rate_high'
      : bounceRate > BOUNCE_RATE_LIMIT
        ? 'bounce_rate_high'
        : complaintRate > COMPLAINT_RATE_LIMIT
          ? 'complaint_rate_high'
          : 'ok';
  return {
    window_days: 7,
    sent,
    bounced,
    complained,
    bounce_rate: bounceRate,
    complaint_rate: complaintRate,
    bounce_rate_limit: BOUNCE_RATE_LIMIT,
    complaint_rate_limit: COMPLAINT_RATE_LIMIT,
    state,
  };
}

/** Recomputes the reputation and appends an event when its state changed. Call inside the change's transaction. */
export async function evaluateReputation(tx: Tx, accountId: string, now: Date): Promise<void> {
  const r = await reputationCounts(tx, accountId, now);
  const account = await tx.account.findUniqueOrThrow({ where: { id: accountId }, select: { reputationState: true } });
  if (account.reputationState === r.state) return;
  await tx.account.update({ where: { id: accountId }, data: { reputationState: r.state } });
  const { state, ...rates } = r;
  await appendEvent({
    db: tx,
    accountId,
    ...(state === 'ok' ? { type: 'reputation.recovered', data: { ...rates, state } } : { type: 'reputation.warning', data: { ...rates, state } }),
  });
}

/**
 * Accounts whose announced state is not ok, evaluated again: their bounces and complaints age out of the window
 * with no new mail to prompt it. Each in its own transaction, under the account's lock as appending requires.
 * Returns how many recovered.
 */
export async function reevaluateReputations(svc: Pick<Services, 'db' | 'clock'>): Promise<number> {
  // Every flagged account, in pages by id (a first page alone would leave the rest flagged for good).
  const flagged: { id: string }[] = [];
  for (let after = ''; ; ) {
    const page = await svc.db.account.findMany({
      where: { reputationState: { not: 'ok' }, id: { gt: after } },
      orderBy: { id: 'asc' },
      select: { id: true },
      take: 1000,
    });
    flagged.push(...page);
    if (page.length < 1000) break;
    after = page.at(-1)!.id;
  }
  let recovered = 0;
  for (const { id } of flagged) {
    await svc.db.$transaction(async (tx) => {
      await rows(tx, k.selectFrom('accounts').select('id').where('id', '=', id).forNoKeyUpdate());
      await evaluateReputation(tx, id, svc.clock.now());
      const after = await tx.account.findUniqueOrThrow({ where: { id }, select: { reputationState: true } });
      if (after.reputationState === 'ok') recovered++;
    });
  }
  return recovered;
}
