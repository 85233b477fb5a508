/**
 * Sending one notice (worker): composed from NOTICE_FROM; to a box on this instance it is stored directly
 * (not charged: it is the service's own mail), elsewhere it goes over SMTP like any delivery. Idempotent: a
 * sent notice is left alone.
 */
import { enqueueAttachmentText } from '../messages/attachments';
import { composeMessage, type MxResolver, type SmtpDestination, type SmtpSender } from '@boxes/mail';
import type { Services } from '../shared/context';
import { domainOf } from '../messages/addresses';
import { receiveMessage, resolveRecipient } from '../messages/receive';
import { enqueueForwardRuns } from '../forwarding/run';
import type { NoticeStatus } from '@boxes/schemas';

export interface NoticeDeps {
  sender: SmtpSender;
  resolver: MxResolver;
  relay?: SmtpDestination | undefined;
}

export type NoticeResult = { done: true } | { done: false; error: string };

export async function deliverNotice(svc: Services, deps: NoticeDeps, id: string, lastAttempt: boolean): Promise<NoticeResult> {
  const n = await svc.db.notice.findUnique({ where: { id } });
  if (!n || n.status !== 'pending') return { done: true };
  const raw = await composeMessage({
    from: { name: 'Boxes', address: svc.config.noticeFrom },
    to: [n.to],
    cc: [],
    replyTo: [],
    subject: n.subject,
    text: n.text,
    headers: { 'Auto-Submitted': 'auto-generated' },
    attachments: [],
    messageId: `<${n.id}@${domainOf(svc.config.noticeFrom)}>`,
    date: n.createdAt,
  });
  const fail = async (error: string, final: boolean): Promise<NoticeResult> => {
    await svc.db.notice.update({
      where: { id },
      data: { attempts: { increment: 1 }, lastError: error.slice(0, 1000), ...(final ? { status: 'failed' satisfies NoticeStatus } : {}) },
    });
    return final ? { done: true } : { done: false, error };
  };
  const target = await resolveRecipient(svc, n.to);
  if (target.kind === 'box') {
    const stored = await svc.db.$transaction(async (tx) => {
      const claimed = await tx.notice.updateMany({
        where: { id, status: 'pending' satisfies NoticeStatus },
        data: { status: 'sent' satisfies NoticeStatus, sentAt: new Date(), attempts: { increment: 1 } },
      });
      if (claimed.count !== 1) return null;
      return receiveMessage(svc, { raw, recipients: [target], mailFrom: svc.config.noticeFrom, via: 'local', free: true, tx });
    });
    await enqueueForwardRuns(svc, stored?.forwardRunIds ?? []);
    await enqueueAttachmentText(svc, stored?.attachmentIds ?? []);
    return { done: true };
  }
  if (target.kind !== 'not_hosted') return fail(`${n.to}: no such box on this instance`, true);
  let destinations: SmtpDestination[];
  try {
    destinations = deps.relay ? [deps.relay] : await deps.resolver.resolve(domainOf(n.to));
  } catch (err) {
    return fail(`DNS lookup for ${domainOf(n.to)} failed: ${(err as Error).message}`, lastAttempt || (err as { code?: string }).code === 'ENOTFOUND');
  }
  let lastError = `${domainOf(n.to)} accepts no mail`;
  for (const dest of destinations) {
    const outcome = await deps.sender.send(dest, { from: svc.config.noticeFrom, to: n.to }, raw);
    if (outcome.kind === 'delivered') {
      await svc.db.notice.update({
        where: { id },
        data: { status: 'sent' satisfies NoticeStatus, sentAt: new Date(), attempts: { increment: 1 }, lastError: null },
      });
      return { done: true };
    }
    if (outcome.kind === 'permanent') return fail(`${outcome.mta}: ${outcome.response}`, true);
    lastError = `${outcome.mta}: ${outcome.response}`;
  }
  return fail(lastError, lastAttempt || destinations.length === 0);
}
