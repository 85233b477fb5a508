/** The per-account suppression list: addresses that bounced or complained are not attempted again. */
import type { Db, Suppression, Tx } from '@boxes/db';
import { appendEvent } from '../events/append';
import { AppError } from '../shared/errors';
import { evaluateReputation } from './reputation';

export function presentSuppression(s: Suppression) {
  return { address: s.address, reason: s.reason as 'bounce' | 'complaint', detail: s.detail, message_id: s.messageId, created_at: s.createdAt.toISOString() };
}

/** Adds (or keeps) an address on one account's list, with its event, and re-evaluates reputation. */
export async function suppress(
  tx: Tx,
  input: { accountId: string; address: string; reason: 'bounce' | 'complaint'; detail?: string | null; messageId?: string | null; now: Date },
) {
  const address = input.address.toLowerCase();
  const existing = await tx.suppression.findUnique({ where: { accountId_address: { accountId: input.accountId, address } } });
  if (existing && (existing.reason === input.reason || existing.reason === 'complaint')) return;
  await tx.suppression.upsert({
    where: { accountId_address: { accountId: input.accountId, address } },
    create: { accountId: input.accountId, address, reason: input.reason, detail: input.detail ?? null, messageId: input.messageId ?? null },
    update: { reason: input.reason, detail: input.detail ?? null, messageId: input.messageId ?? null },
  });
  await appendEvent({
    db: tx,
    accountId: input.accountId,
    type: 'suppression.added',
    data: { address, reason: input.reason, detail: input.detail ?? null, message_id: input.messageId ?? null },
  });
  if (input.reason === 'complaint') await evaluateReputation(tx, input.accountId, input.now);
}

export async function listSuppressions(db: Db, accountId: string) {
  const rows = await db.suppression.findMany({ where: { accountId }, orderBy: { createdAt: 'desc' }, take: 10_000 });
  return rows.map(presentSuppression);
}

export async function getSuppression(db: Db, accountId: string, address: string) {
  const a = address.trim().toLowerCase();
  const row = await db.suppression.findUnique({ where: { accountId_address: { accountId, address: a } } });
  return { address: a, suppressed: Boolean(row), entry: row ? presentSuppression(row) : null };
}

export async function unblock(db: Db, accountId: string, address: string, actorKeyId: string) {
  const a = address.trim().toLowerCase();
  return db.$transaction(async (tx) => {
    const removed = await tx.suppression.deleteMany({ where: { accountId, address: a } });
    if (!removed.count) throw new AppError('not_found', `${a} is not on the suppression list`);
    await appendEvent({ db: tx, accountId, type: 'suppression.removed', data: { address: a, by_key_id: actorKeyId } });
    return { address: a, removed: true };
  });
}
