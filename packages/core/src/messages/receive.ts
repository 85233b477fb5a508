/**
 * Inbound mail, shared by the MX (apps/mail) and local delivery between accounts of this instance: resolve
 * each recipient, store the message once per box (raw and parsed, both sealed), charge it, echo the context of
 * the message it replies to, announce it as mail.received, and apply delivery reports (DSN, ARF).
 */
import type { Box, Tx } from '@boxes/db';
import { Prisma } from '@boxes/db';
import { parseMessage, parseReport, type ParsedMessage } from '@boxes/mail';
import { lockAccountCredit, postEntries, receivedCharge } from '../credit/ledger';
import { isQuietCharge, leanChargeSql } from '../credit/lean';
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';
import { sealBytes } from '../shared/crypto';
import { newId } from '../shared/ids';
import { domainOf } from './addresses';
import { sealBody } from './body';
import { applyReport } from './reports';
import { parentIds, pickThread } from '../threads/parents';
import { enqueueForwardRuns, queueForwardRuns } from '../forwarding/run';
import { storedTrust, type InboundTrust } from '../trust/inbound';

export type RecipientResolution =
  | { kind: 'box'; box: Box }
  | { kind: 'bounce'; deliveryId: string; accountId: string }
  | { kind: 'unknown_box' }
  | { kind: 'not_hosted' };

const BOUNCE_LOCAL = /^bounces\+(dlv_[0-9a-z]{20})$/;

/** The address that DSNs for one delivery come back to (the SMTP MAIL FROM of that delivery). */
export const bounceAddress = (deliveryId: string, domain: string): string => `bounces+${deliveryId}@${domain}`;

export async function resolveRecipient(svc: Services, rcpt: string): Promise<RecipientResolution> {
  const address = rcpt.trim().toLowerCase();
  // Only live domains are hosted: a pending claim's name is anybody's until proven, so its mail is refused.
  const domain = await svc.db.domain.findUnique({ where: { liveName: domainOf(address) }, select: { accountId: true, status: true } });
  if (!domain) return { kind: 'not_hosted' };
  const box =
    (await svc.db.box.findUnique({ where: { liveAddress: address } })) ??
    // The old domain of an account that moved (retiring, in its grace period): its boxes moved to the new
    // domain with their local parts, so name@old reaches the box that is now name@new.
    (domain.status === 'retiring' ? await svc.db.box.findFirst({ where: { accountId: domain.accountId, localPart: address.slice(0, address.lastIndexOf('@')) } }) : null);
  if (box) return { kind: 'box', box };
  const m = BOUNCE_LOCAL.exec(address.slice(0, address.lastIndexOf('@')));
  if (m) {
    const d = await svc.db.delivery.findUnique({ where: { id: m[1]! }, select: { accountId: true } });
    if (d && d.accountId === domain.accountId) return { kind: 'bounce', deliveryId: m[1]!, accountId: d.accountId };
  }
  return { kind: 'unknown_box' };
}

/**
 * The messages of the account this one answers (or is another copy of), in one query: the context to echo
 * (from a sent message, In-Reply-To first, then the newest reference) and the thread to join. own: also look
 * for the message's own Message-ID (a local delivery: the sender may be this same account). No query at all
 * for a message that answers nothing: it starts a thread.
 */
async function findParents(tx: Tx, accountId: string, parsed: ParsedMessage, own: boolean): Promise<{ context: Record<string, unknown> | null; threadId: string }> {
  const ids = parentIds({ inReplyTo: parsed.inReplyTo, references: parsed.references, own: own ? parsed.messageId : null });
  const found = ids.length
    ? await tx.message.findMany({
        where: { accountId, rfcMessageId: { in: ids } },
        select: { rfcMessageId: true, context: true, direction: true, threadId: true },
        orderBy: { recordedAt: 'asc' },
      })
    : [];
  let context: Record<string, unknown> | null = null;
  // Only what the message answers carries context, never another copy of itself.
  for (const id of parentIds({ inReplyTo: parsed.inReplyTo, references: parsed.references })) {
    const hit = found.find((m) => m.rfcMessageId === id && m.direction === 'sent' && m.context !== null);
    if (hit) {
      context = hit.context as Record<string, unknown>;
      break;
    }
  }
  return { context, threadId: pickThread(ids, found) };
}

export interface InboundInput {
  raw: Buffer;
  /** Resolved recipients (boxes and bounce addresses); unknown ones were refused at RCPT time. */
  recipients: RecipientResolution[];
  mailFrom: string | null;
  via: 'smtp' | 'local';
  /** Already parsed (local delivery parses once for all recipients). */
  parsed?: ParsedMessage;
  /** Mail from the service itself (notices) is not charged. */
  free?: boolean;
  /** Run inside this transaction (local delivery marks its delivery in the same one). */
  tx?: Tx;
  /** What the trust checks found (core/trust): stored as the message's authentication and spam. */
  trust?: InboundTrust | null;
}

export interface StoredInbound {
  messageIds: string[];
  /** Auto-forwards to send (forward runs), to enqueue once the transaction commits. */
  forwardRunIds?: string[];
}

export async function receiveMessage(svc: Services, input: InboundInput): Promise<StoredInbound> {
  const parsed = input.parsed ?? (await parseMessage(input.raw));
  const report = parseReport(parsed.mail);
  const attachmentBytes = parsed.attachments.reduce((n, a) => n + a.content.length, 0);
  // One sealed copy per box, made before the transaction: encrypting a large message must not keep a
  // connection busy in a transaction.
  const sealed = input.recipients.map((r) =>
    r.kind !== 'box'
      ? null
      : {
          bodyEnc: sealBody(svc.secretKey, {
            text: parsed.text,
            html: parsed.html,
            headers: parsed.headers,
            attachments: parsed.attachments.map((a) => ({
              filename: a.filename,
              content_type: a.contentType,
              content_id: a.contentId,
              content_b64: a.content.toString('base64'),
            })),
          }),
          rawEnc: sealBytes(svc.secretKey, input.raw),
        },
  );
  const trust = storedTrust(input.trust);
  const run = async (tx: Tx): Promise<StoredInbound> => {
    const messageIds: string[] = [];
    // Copies of one message for several boxes of one account share a thread.
    const threadOfAccount = new Map<string, string>();
    const forwardRunIds: string[] = [];
    for (const [i, r] of input.recipients.entries()) {
      if (r.kind === 'bounce') {
        if (report) await applyReport(tx, { report, accountId: r.accountId, deliveryId: r.deliveryId });
        continue;
      }
      if (r.kind !== 'box') continue;
      const box = r.box;
      const id = newId('msg');
      const { context, threadId: found } = await findParents(tx, box.accountId, parsed, input.via === 'local');
      const threadId = threadOfAccount.get(box.accountId) ?? found;
      threadOfAccount.set(box.accountId, threadId);
      const rfcMessageId = parsed.messageId ?? `<${id}@${domainOf(box.address)}>`;
      const eventData = {
        message: {
          id,
          box_id: box.id,
          to_box: box.address,
          from: parsed.from,
          to: parsed.to,
          cc: parsed.cc,
          subject: parsed.subject,
          rfc_message_id: parsed.messageId,
          in_reply_to: parsed.inReplyTo,
          thread_id: threadId,
          size_bytes: input.raw.length,
          attachments: parsed.attachments.length,
          via: input.via,
          ...trust,
        },
        context,
      };
      // The hot path (typed SQL, README "Hot paths"): lock the account row, then the message, its charge and
      // mail.received in one statement, unless the charge has something to announce.
      const a = await lockAccountCredit(tx, box.accountId);
      const postings = input.free ? [] : receivedCharge(svc, a, id, attachmentBytes);
      if (isQuietCharge(a, postings)) {
        const lean = leanChargeSql({ accountId: box.accountId, locked: a, postings, event: { type: 'mail.received', boxId: box.id, data: eventData } });
        await tx.$queryRaw`
          WITH msg AS (
            INSERT INTO messages (id, account_id, box_id, direction, status, rfc_message_id, provider_message_id, in_reply_to, "references",
              from_address, to_addresses, cc_addresses, bcc_addresses, subject, size_bytes, body_enc, raw_enc, context, recorded_at,
              authentication, spam, thread_id)
            VALUES (${id}, ${box.accountId}, ${box.id}, 'received', 'received', ${rfcMessageId}, ${id}, ${parsed.inReplyTo}, ${parsed.references}::text[],
              ${parsed.from}, ${parsed.to}::text[], ${parsed.cc}::text[], '{}'::text[], ${parsed.subject}, ${input.raw.length},
              ${sealed[i]!.bodyEnc}, ${sealed[i]!.rawEnc}, ${context === null ? null : JSON.stringify(context)}::jsonb, now(),
              ${trust.authentication === null ? null : JSON.stringify(trust.authentication)}::jsonb, ${trust.spam === null ? null : JSON.stringify(trust.spam)}::jsonb, ${threadId})
          ), ${lean.ctes}
          ${lean.notify}`;
      } else {
        await tx.message.create({
          data: {
            id,
            accountId: box.accountId,
            boxId: box.id,
            direction: 'received',
            status: 'received',
            rfcMessageId,
            providerMessageId: id,
            inReplyTo: parsed.inReplyTo,
            references: { set: parsed.references },
            fromAddress: parsed.from,
            toAddresses: { set: parsed.to },
            ccAddresses: { set: parsed.cc },
            bccAddresses: { set: [] },
            subject: parsed.subject,
            sizeBytes: input.raw.length,
            bodyEnc: sealed[i]!.bodyEnc,
            rawEnc: sealed[i]!.rawEnc,
            context: (context ?? Prisma.DbNull) as Prisma.InputJsonValue,
            authentication: (trust.authentication ?? Prisma.DbNull) as unknown as Prisma.InputJsonValue,
            spam: (trust.spam ?? Prisma.DbNull) as unknown as Prisma.InputJsonValue,
            threadId,
          },
        });
        await postEntries(svc, tx, box.accountId, postings, { locked: a });
        await appendEvent({ db: tx, accountId: box.accountId, type: 'mail.received', boxId: box.id, data: eventData });
      }
      if (report) await applyReport(tx, { report, accountId: box.accountId });
      messageIds.push(id);
      // Auto-forwarding: only boxes with an active forward look their forwards up (box.forwarding).
      if (box.forwarding && !report) forwardRunIds.push(...(await queueForwardRuns(tx, { box, messageId: id, parsed })));
    }
    return { messageIds, forwardRunIds };
  };
  if (input.tx) return run(input.tx);
  const stored = await svc.db.$transaction(run, { maxWait: 10_000, timeout: 30_000 });
  await enqueueForwardRuns(svc, stored.forwardRunIds ?? []);
  return stored;
}
