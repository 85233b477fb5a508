/**
 * Applying delivery reports to the account that sent the original message, and only to it: a DSN with a
 * permanent failure bounces that recipient's delivery and suppresses the address; an ARF complaint
 * suppresses the complaining recipient.
 */
import type { Tx } from '@boxes/db';
import type { DeliveryStatusReport, FeedbackReport } from '@boxes/mail';
import { suppress } from '../suppression/suppression';
import { markBounced } from './outcomes';

export async function applyReport(
  tx: Tx,
  input: { report: DeliveryStatusReport | FeedbackReport; accountId: string; deliveryId?: string },
): Promise<void> {
  const { report, accountId } = input;
  // The original message, looked up in this account only.
  const original = report.originalMessageId
    ? await tx.message.findFirst({ where: { accountId, direction: 'sent', rfcMessageId: report.originalMessageId }, select: { id: true } })
    : null;
  const exact = input.deliveryId ? await tx.delivery.findFirst({ where: { id: input.deliveryId, accountId } }) : null;
  const messageId = exact?.messageId ?? original?.id ?? null;
  if (!messageId) return;

  if (report.kind === 'dsn') {
    for (const r of report.recipients.filter((x) => x.permanent)) {
      const delivery =
        exact && exact.recipient === r.address
          ? exact
          : await tx.delivery.findFirst({ where: { accountId, messageId, recipient: r.address } });
      if (!delivery) continue;
      await markBounced(tx, delivery.id, { code: null, response: `${r.status ?? ''} ${r.diagnostic ?? 'bounced (DSN)'}`.trim(), source: 'dsn' });
    }
    return;
  }
  const recipients = report.originalRcptTo.length ? report.originalRcptTo : report.originalRecipients;
  for (const address of recipients) {
    const delivery = await tx.delivery.findFirst({ where: { accountId, messageId, recipient: address } });
    if (!delivery) continue;
    await suppress(tx, { accountId, address, reason: 'complaint', detail: `feedback report: ${report.feedbackType}`, messageId });
  }
}
