/**
 * What a change of balance announces: low_balance when a charge crosses an alert threshold (once per
 * crossing: the balance has to come back above it to cross it again), billing.deficit when the balance
 * goes below zero (with mail to agent@<domain> and the owner), billing.recovered when it is back at zero
 * or above. Runs in the transaction of the ledger entry, under the account's row lock.
 */
import type { Tx } from '@boxes/db';
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';
import { queueNotice } from '../notices/notices';
import { microsToCents, microsToUsd } from './prices';

export type BalanceState = 'ok' | 'low' | 'critical';

export interface Thresholds {
  first: bigint | null;
  second: bigint | null;
}

/**
 * ok, low or critical: critical below zero or below the second (urgent) threshold, low below the first.
 * Without thresholds an account is ok until its balance is negative.
 */
export function balanceState(balance: bigint, t: Thresholds): BalanceState {
  if (balance < 0n || (t.second !== null && balance < t.second)) return 'critical';
  if (t.first !== null && balance < t.first) return 'low';
  return 'ok';
}

export interface BalanceChange {
  accountId: string;
  primaryAddress: string;
  humanEmail: string;
  thresholds: Thresholds;
  deficitSince: Date | null;
  before: bigint;
  after: bigint;
  /** The ledger entry type that moved the balance. */
  cause: string;
}

export async function announceBalanceChange(svc: Services, tx: Tx, c: BalanceChange): Promise<void> {
  if (c.after < c.before) {
    for (const [alert, threshold] of [
      ['first', c.thresholds.first],
      ['second', c.thresholds.second],
    ] as const) {
      if (threshold === null || !(c.before >= threshold && c.after < threshold)) continue;
      await appendEvent({
        db: tx,
        accountId: c.accountId,
        type: 'low_balance',
        data: {
          alert,
          threshold_cents: microsToCents(threshold),
          credit_balance_cents: microsToCents(c.after),
          balance_state: balanceState(c.after, c.thresholds),
          cause: c.cause,
          top_up: `${svc.config.apiBaseUrl}/account/credit/topup/mpp`,
        },
      });
    }
  }
  if (c.before >= 0n && c.after < 0n) {
    const now = svc.clock.now();
    await tx.account.update({ where: { id: c.accountId }, data: { deficitSince: now } });
    await appendEvent({
      db: tx,
      accountId: c.accountId,
      type: 'billing.deficit',
      data: {
        credit_balance_cents: microsToCents(c.after),
        credit_balance_usd: microsToUsd(c.after),
        cause: c.cause,
        sending_blocked: true,
        inbound_continues: true,
        top_up: { mpp: `${svc.config.apiBaseUrl}/account/credit/topup/mpp`, card: `${svc.config.apiBaseUrl}/account/credit/topup` },
      },
    });
    const text = [
      `The prepaid credit of ${c.primaryAddress} is below zero: ${microsToUsd(c.after)} USD (after a ${c.cause.replace(/_/g, ' ')} charge).`,
      '',
      'While the balance is negative, sending is blocked. Inbound mail keeps arriving and can be read.',
      `To resume sending, top up: POST ${svc.config.apiBaseUrl}/account/credit/topup/mpp (the agent starts it; you approve it in your wallet),`,
      `or POST ${svc.config.apiBaseUrl}/account/credit/topup for a card payment you approve.`,
    ].join('\n');
    const subject = `Boxes: ${c.primaryAddress} has a negative balance; sending is paused`;
    await queueNotice(tx, { accountId: c.accountId, kind: 'billing.deficit', to: c.primaryAddress, subject, text });
    if (c.humanEmail.toLowerCase() !== c.primaryAddress.toLowerCase()) {
      await queueNotice(tx, { accountId: c.accountId, kind: 'billing.deficit', to: c.humanEmail, subject, text });
    }
  } else if (c.before < 0n && c.after >= 0n) {
    await tx.account.update({ where: { id: c.accountId }, data: { deficitSince: null } });
    await appendEvent({
      db: tx,
      accountId: c.accountId,
      type: 'billing.recovered',
      data: { credit_balance_cents: microsToCents(c.after), sending_blocked: false, cause: c.cause },
    });
  }
}
