/**
 * Applying delivery reports to the account that sent the original message, and only to it: a DSN with a
 * permanent failure bounces that recipient's delivery and suppresses the address; an ARF complaint
 * (Feedback-Type abuse, fraud, virus or other) suppresses the complaining recipient. not-spam and
 * auth-failure reports are not complaints.
 */
import type { Tx } from '@boxes/db';
import type { DeliveryStatusReport, FeedbackReport } from '@boxes/mail';
import { suppress } from '../suppression/suppression';
import { markBounced } from './outcomes';

export const COMPLAINT_FEEDBACK_TYPES = ['abuse', 'fraud', 'virus', 'other'] as const;
const BOUNCE_ADDRESS = /^bounces\+(dlv_[0-9a-z]{20})@/i;

export async function applyReport(
  tx: Tx,
  input: { report: DeliveryStatusReport | FeedbackReport; accountId: string; deliveryId?: string; now: Date },
): Promise<void> {
  const { report, accountId } = input;
  if (report.kind === 'arf' && !(COMPLAINT_FEEDBACK_TYPES as readonly string[]).includes(report.feedbackType)) return;
  // Which delivery the report is about, looked up in this account only: the bounce address it came to, the
  // envelope sender it quotes (ARF Original-Mail-From is our bounces+<delivery> address), or the original
  // message's Message-ID.
  const quoted = report.kind === 'arf' ? BOUNCE_ADDRESS.exec(report.originalMailFrom ?? '')?.[1] : undefined;
  const deliveryId = input.deliveryId ?? quoted;
  const exact = deliveryId ? await tx.delivery.findFirst({ where: { id: deliveryId, accountId } }) : null;
  const original =
    !exact && report.originalMessageId
      ? await tx.message.findFirst({ where: { accountId, direction: 'sent', rfcMessageId: report.originalMessageId }, select: { id: true } })
      : null;
  const messageId = exact?.messageId ?? original?.id ?? null;

  if (report.kind === 'dsn') {
    if (!messageId) return;
    for (const r of report.recipients.filter((x) => x.permanent)) {
      const delivery = exact && exact.recipient === r.address ? exact : await tx.delivery.findFirst({ where: { accountId, messageId, recipient: r.address } });
      if (!delivery) continue;
      await markBounced(tx, delivery.id, {
        code: null,
        response: `${r.status ?? ''} ${r.diagnostic ?? 'bounced (DSN)'}`.trim(),
        source: 'dsn',
        now: input.now,
      });
    }
    return;
  }
  const recipients = report.originalRcptTo.length ? report.originalRcptTo : exact ? [exact.recipient] : report.originalRecipients;
  for (const address of recipients) {
    // Only an address this account actually sent to can complain about it.
    const delivery = await tx.delivery.findFirst({
      where: { accountId, recipient: address, ...(messageId ? { messageId } : {}) },
      orderBy: { createdAt: 'desc' },
    });
    if (!delivery) continue;
    await suppress(tx, {
      accountId,
      address,
      reason: 'complaint',
      detail: `feedback report: ${report.feedbackType}`,
      messageId: delivery.messageId,
      now: input.now,
    });
  }
}
