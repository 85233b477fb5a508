/** The account itself: its summary and its callback webhook. */
import { creditBalance } from '../credit/ledger';
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';
import { checkCallbackUrl } from '../webhooks/url-guard';
import { retentionOf } from '../audit/retention';
import { closeProtectionOf } from './close';
import { ACCOUNT_STATUSES, PUBLIC_DOMAIN_STATUSES } from '@boxes/schemas';
import { narrowStatus } from '../shared/statuses';

export async function getAccount(svc: Services, input: { accountId: string }) {
  const credit = await creditBalance(svc, input.accountId);
  const a = await svc.db.account.findUniqueOrThrow({
    where: { id: input.accountId },
    include: { domains: { where: { isPrimary: true } } },
  });
  const d = a.domains[0]!;
  return {
    id: a.id,
    account_status: narrowStatus(ACCOUNT_STATUSES, a.status),
    primary_address: a.primaryAddress,
    owner_email: a.humanEmail,
    domain: {
      name: d.name,
      mode: d.mode as 'subdomain' | 'register' | 'byo_manual' | 'byo_delegated',
      status: narrowStatus(PUBLIC_DOMAIN_STATUSES, d.status),
    },
    agent_callback_webhook: a.callbackWebhook,
    credit_balance_cents: credit.credit_balance_cents,
    balance_state: credit.balance_state,
    low_balance: credit.low_balance,
    emails_covered: credit.emails_covered,
    trailer: credit.trailer,
    close_protection: closeProtectionOf(a),
    created_at: a.createdAt.toISOString(),
  };
}

/**
 * Sets (or with null removes) the callback URL after the URL guard. A new URL receives events from now on,
 * starting with the account.callback_webhook_updated event of this change; history is on GET /events.
 */
export async function setCallbackWebhook(svc: Services, input: { accountId: string; url: string | null; actorKeyId: string }) {
  const url = input.url === null ? null : await checkCallbackUrl(input.url, { allowPrivate: svc.config.webhook.allowPrivate });
  return svc.db.$transaction(async (tx) => {
    const a = await tx.account.findUniqueOrThrow({ where: { id: input.accountId }, select: { chainSeq: true, callbackWebhook: true } });
    await tx.account.update({
      where: { id: input.accountId },
      data: {
        callbackWebhook: url,
        ...(url !== a.callbackWebhook ? { webhookCursor: a.chainSeq, webhookAttempts: 0, webhookNextAttemptAt: null } : {}),
      },
    });
    await appendEvent({
      db: tx,
      accountId: input.accountId,
      type: 'account.callback_webhook_updated',
      data: { agent_callback_webhook: url, by_key_id: input.actorKeyId },
    });
    return { agent_callback_webhook: url };
  });
}

/** usermetadata: the settings an agent keeps on its account (today: audit_retention_days). */
export async function getUsermetadata(svc: Services, input: { accountId: string }) {
  const a = await svc.db.account.findUniqueOrThrow({ where: { id: input.accountId }, select: { auditRetentionDays: true } });
  const r = retentionOf(a);
  return { audit_retention_days: r.audit_retention_days, audit_retention_source: r.source };
}

export async function setUsermetadata(svc: Services, input: { accountId: string; auditRetentionDays: number | null; actorKeyId: string }) {
  return svc.db.$transaction(async (tx) => {
    const a = await tx.account.update({
      where: { id: input.accountId },
      data: { auditRetentionDays: input.auditRetentionDays },
      select: { auditRetentionDays: true },
    });
    const r = retentionOf(a);
    await appendEvent({
      db: tx,
      accountId: input.accountId,
      type: 'account.usermetadata_updated',
      data: { audit_retention_days: r.audit_retention_days, source: r.source, by_key_id: input.actorKeyId },
    });
    return { audit_retention_days: r.audit_retention_days, audit_retention_source: r.source };
  });
}
