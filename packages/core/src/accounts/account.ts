/** The account itself: its summary and its callback webhook. */
import type { Db } from '@boxes/db';
import { appendEvent } from '../events/append';
import { inTransaction } from '../shared/context';

export async function getAccount(input: { db: Db; accountId: string }) {
  const a = await input.db.account.findUniqueOrThrow({
    where: { id: input.accountId },
    include: { domains: { where: { isPrimary: true } } },
  });
  const d = a.domains[0]!;
  return {
    id: a.id,
    account_status: a.status as 'active',
    primary_address: a.primaryAddress,
    owner_email: a.humanEmail,
    domain: {
      name: d.name,
      mode: d.mode as 'subdomain' | 'register' | 'byo_manual' | 'byo_delegated',
      status: d.status as 'active' | 'pending_dns' | 'pending_delegation',
    },
    agent_callback_webhook: a.callbackWebhook,
    created_at: a.createdAt.toISOString(),
  };
}

export async function setCallbackWebhook(input: { db: Db; accountId: string; url: string | null; actorKeyId: string }) {
  return inTransaction(input.db, async (tx) => {
    await tx.account.update({ where: { id: input.accountId }, data: { callbackWebhook: input.url } });
    await appendEvent({
      db: tx,
      accountId: input.accountId,
      type: 'account.callback_webhook_updated',
      data: { agent_callback_webhook: input.url, by_key_id: input.actorKeyId },
    });
    return { agent_callback_webhook: input.url };
  });
}
