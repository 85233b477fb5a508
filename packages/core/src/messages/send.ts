/**
 * POST /messages/send: validate, check the sender and the credit, reserve, store the message (body sealed)
 * and one delivery per recipient in one transaction, then enqueue the deliveries. The call returns once the
 * message is durably queued; if enqueueing fails after commit, the sweeper (apps/worker) picks it up.
 */
import canonicalize from 'canonicalize';
import type { Account, ApiKey, Box, Message } from '@boxes/db';
import { Prisma } from '@boxes/db';
import { MAX_CONTEXT_BYTES, MAX_RECIPIENTS, type SendInput, type SendOutput } from '@boxes/schemas';
import type { z } from 'zod';
import { microsToCents, microsToUsd } from '../credit/prices';
import { messagePrice, reserveMessages } from '../credit/ledger';
import { appendEvent } from '../events/append';
import type { BoxScope } from '../boxes/boxes';
import { seal, sha256Hex } from '../shared/crypto';
import type { Services } from '../shared/context';
import { AppError } from '../shared/errors';
import { newId } from '../shared/ids';
import { assertSendable } from '../domains/verify';
import { domainOf, formatMailbox, parseMailbox, parseMailboxes, type Mailbox } from './addresses';
import { validateHeaders } from './headers';
import { sealBody, type StoredBody } from './body';
import { checkSendLoop } from './loop';

type Input = z.infer<typeof SendInput>;
type Output = z.infer<typeof SendOutput>;

export interface SendCaller {
  account: Account;
  key: ApiKey;
  boxScope: BoxScope;
}

/** The outbound trailer every sent message carries unless the account opted out (POST /account/trailer). */
export function trailerText(siteUrl: string): string {
  return `--\nSent by an AI agent with Boxes: ${siteUrl}`;
}

function appendTrailer(body: { text?: string | undefined; html?: string | undefined }, siteUrl: string) {
  const href = siteUrl.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  return {
    text: body.text !== undefined || body.html === undefined ? `${body.text ?? ''}\n\n${trailerText(siteUrl)}` : undefined,
    html: body.html !== undefined ? `${body.html}<p style="color:#666;font-size:12px">Sent by an AI agent with <a href="${href}">Boxes</a></p>` : undefined,
  };
}

function appendSignature(body: { text?: string | undefined; html?: string | undefined }, signature: string | null) {
  if (!signature) return body;
  const escaped = signature.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`).replace(/\r?\n/g, '<br>');
  return {
    text: body.text !== undefined || body.html === undefined ? `${body.text ?? ''}\n\n${signature}` : undefined,
    html: body.html !== undefined ? `${body.html}<br><br>${escaped}` : undefined,
  };
}

async function resolveSender(svc: Services, caller: SendCaller, from: string | undefined): Promise<{ box: Box; mailbox: Mailbox }> {
  const mailbox = from ? parseMailbox(from, 'from') : { name: undefined, address: caller.account.primaryAddress };
  const domains = await svc.db.domain.findMany({
    where: { accountId: caller.account.id },
    select: { id: true, name: true, status: true, mode: true, checks: true, claimExpiresAt: true, dkimSelector: true, dkimPublicKey: true },
  });
  const fromDomain = domains.find((d) => d.name === domainOf(mailbox.address));
  if (!fromDomain) {
    throw new AppError('from_domain_mismatch', 'from-address domain must match your account domain', {
      from: mailbox.address,
      account_domains: domains.map((d) => d.name),
    });
  }
  assertSendable(svc.config, fromDomain);
  const box = await svc.db.box.findFirst({ where: { accountId: caller.account.id, address: mailbox.address } });
  if (!box) {
    throw new AppError('validation_error', `from: ${mailbox.address} is not a box of this account; create it with POST /boxes`, {
      fields: [{ path: 'from', message: 'no such box' }],
    });
  }
  if (caller.boxScope && !caller.boxScope.includes(box.id)) {
    throw new AppError('box_restricted_key', `This key may not send from ${box.address}`, { from: box.address });
  }
  return { box, mailbox };
}

export async function sendMessage(svc: Services, caller: SendCaller, input: Input): Promise<Output> {
  const accountId = caller.account.id;
  const { idempotency_key: idemKey, ...request } = input;
  const requestHash = sha256Hex(canonicalize(request) ?? '');

  if (idemKey) {
    const prior = await svc.db.message.findUnique({ where: { accountId_idempotencyKey: { accountId, idempotencyKey: idemKey } } });
    if (prior) return replay(prior, requestHash);
  }

  // Validation beyond the schema: addresses, headers, context size, recipients.
  const to = parseMailboxes(input.to, 'to');
  const cc = parseMailboxes(input.cc, 'cc');
  const bcc = parseMailboxes(input.bcc, 'bcc');
  const replyTo = parseMailboxes(input.reply_to, 'reply_to');
  if (to.length === 0) throw new AppError('validation_error', 'to: give at least one recipient', { fields: [{ path: 'to', message: 'required' }] });
  const headers = validateHeaders(input.headers);
  if (input.context !== undefined && Buffer.byteLength(JSON.stringify(input.context)) > MAX_CONTEXT_BYTES) {
    throw new AppError('validation_error', `context: at most ${MAX_CONTEXT_BYTES} bytes of JSON`, { fields: [{ path: 'context', message: 'too large' }] });
  }
  if (input.text === undefined && input.html === undefined && !input.attachments?.length) {
    throw new AppError('validation_error', 'give text, html or attachments', { fields: [{ path: 'text', message: 'the message has no body' }] });
  }
  // An address listed more than once across to, cc and bcc is delivered once (the first listing wins).
  const unique = new Map<string, Mailbox>();
  for (const m of [...to, ...cc, ...bcc]) if (!unique.has(m.address)) unique.set(m.address, m);
  if (unique.size > MAX_RECIPIENTS) {
    throw new AppError('validation_error', `at most ${MAX_RECIPIENTS} recipients per message (got ${unique.size}); use bulk send for more`, {
      fields: [{ path: 'to', message: 'too many recipients' }],
    });
  }
  const attachments = (input.attachments ?? []).map((a, i) => {
    const content = Buffer.from(a.content_b64, 'base64');
    if (content.length === 0 && a.content_b64.replace(/\s/g, '') !== '') {
      throw new AppError('validation_error', `attachments.${i}.content_b64: not valid base64`, { fields: [{ path: `attachments.${i}.content_b64`, message: 'not base64' }] });
    }
    return { filename: a.filename, content_type: a.content_type, content_id: a.content_id ?? null, content_b64: content.toString('base64') };
  });
  if (attachments.some((a) => a.content_id) && input.html === undefined) {
    throw new AppError('validation_error', 'attachments with content_id are inline images for the html body; give html', { fields: [{ path: 'html', message: 'required with content_id' }] });
  }

  const { box, mailbox: from } = await resolveSender(svc, caller, input.from);
  const suppressedRows = await svc.db.suppression.findMany({ where: { accountId, address: { in: [...unique.keys()] } }, select: { address: true } });
  const suppressed = new Set(suppressedRows.map((r) => r.address));
  const recipients = [...unique.keys()].filter((a) => !suppressed.has(a));
  // Local delivery only to live domains; mail to a pending claim's name goes out like any other domain's.
  const hostedRows = await svc.db.domain.findMany({ where: { liveName: { in: [...new Set(recipients.map(domainOf))] } }, select: { name: true } });
  const hosted = new Set(hostedRows.map((d) => d.name));

  const messageId = newId('msg');
  const domain = domainOf(from.address);
  const rfcMessageId = `<${messageId}@${domain}>`;
  const date = new Date();
  // The trailer follows the account's setting when the send is accepted; a message that carries it pays no
  // opt-out surcharge.
  const withTrailer = caller.account.trailerOptedOutAt === null;
  const signedOnly = appendSignature({ text: input.text, html: input.html }, box.signature);
  const signed = withTrailer ? appendTrailer(signedOnly, svc.config.siteUrl) : signedOnly;
  const body: StoredBody = {
    text: signed.text ?? null,
    html: signed.html ?? null,
    headers,
    attachments,
    from_name: from.name ?? null,
    reply_to: replyTo.map(formatMailbox),
    to_display: to.map(formatMailbox),
    cc_display: cc.map(formatMailbox),
    date: date.toISOString(),
    in_reply_to: headers['In-Reply-To'] ?? null,
  };
  const attachmentBytes = attachments.reduce((n, a) => n + Buffer.byteLength(a.content_b64, 'base64'), 0);
  const sizeBytes = Buffer.byteLength(body.text ?? '') + Buffer.byteLength(body.html ?? '') + attachmentBytes;
  const warning = await checkSendLoop(svc, accountId, recipients.length === 1 ? recipients[0]! : null);
  // Sealed before the transaction: encrypting a large body must not happen under the account's row lock.
  const bodyEnc = sealBody(svc.secretKey, body);

  let response: Output;
  let deliveryIds: string[] = [];
  try {
    response = await svc.db.$transaction(
      async (tx) => {
        const reservation = recipients.length ? await reserveMessages(svc, tx, accountId, recipients.length, { attachmentBytes, trailer: withTrailer }) : null;
        const status = recipients.length ? 'queued' : 'suppressed';
        const deliveries = recipients.map((r, i) => ({
          id: newId('dlv'),
          messageId,
          accountId,
          recipient: r,
          route: hosted.has(domainOf(r)) ? 'local' : 'remote',
          heldMicros: reservation!.perRecipient[i]!.micros,
          usedFree: reservation!.perRecipient[i]!.free,
          attachmentMicros: reservation!.perRecipient[i]!.attachmentMicros,
          surchargeMicros: reservation!.perRecipient[i]!.surchargeMicros,
        }));
        // The reservation read the locked account row; without one (every recipient suppressed), read it.
        const a =
          reservation?.after ??
          (await tx.account.findUniqueOrThrow({ where: { id: accountId }, select: { balanceMicros: true, freeMessagesLeft: true, heldFreeMessages: true } }));
        const freeUsed = reservation?.freeUsed ?? 0;
        const heldMicros = reservation?.heldMicros ?? 0n;
        const out: Output = {
          message_id: messageId,
          rfc_message_id: rfcMessageId,
          status,
          from: from.address,
          recipients,
          suppressed: [...unique.keys()].filter((r) => suppressed.has(r)),
          billing: {
            messages: recipients.length,
            free_messages_used: freeUsed,
            paid_messages: recipients.length - freeUsed,
            price_per_message_usd: microsToUsd(messagePrice(svc)),
            reserved_usd: microsToUsd(heldMicros),
            free_messages_left: Math.max(0, a.freeMessagesLeft - a.heldFreeMessages),
            credit_balance_cents: microsToCents(a.balanceMicros),
          },
          ...(warning ? { warning } : {}),
        };
        // Lists as { set }: Prisma parameterizes them then, so one query plan serves every message (given
        // directly, each new list of addresses compiles a new plan: about a millisecond of CPU per send).
        await tx.message.create({
          data: {
            id: messageId,
            accountId,
            boxId: box.id,
            direction: 'sent',
            status,
            rfcMessageId,
            providerMessageId: messageId,
            inReplyTo: body.in_reply_to,
            references: { set: headers.References ? headers.References.split(/\s+/).filter(Boolean) : [] },
            fromAddress: from.address,
            toAddresses: { set: to.map((m) => m.address) },
            ccAddresses: { set: cc.map((m) => m.address) },
            bccAddresses: { set: bcc.map((m) => m.address) },
            subject: input.subject,
            sizeBytes,
            bodyEnc,
            context: (input.context ?? Prisma.DbNull) as Prisma.InputJsonValue,
            idempotencyKey: idemKey ?? null,
            requestHash,
            response: out as unknown as Prisma.InputJsonValue,
            recordedAt: date,
          },
        });
        // One recipient (the usual case) as create: Prisma compiles every createMany anew, a create's plan is cached.
        if (deliveries.length === 1) await tx.delivery.create({ data: deliveries[0]!, select: { id: true } });
        else if (deliveries.length) await tx.delivery.createMany({ data: deliveries });
        await appendEvent({
          db: tx,
          accountId,
          type: 'mail.sent',
          boxId: box.id,
          data: {
            message_id: messageId,
            rfc_message_id: rfcMessageId,
            from: from.address,
            to: to.map((m) => m.address),
            cc: cc.map((m) => m.address),
            recipients: recipients.length,
            suppressed: out.suppressed,
            subject: input.subject,
            status,
            context: input.context ?? null,
          },
        });
        deliveryIds = deliveries.map((d) => d.id);
        return out;
      },
      { maxWait: 10_000, timeout: 20_000 },
    );
  } catch (err) {
    // Two sends with the same idempotency_key at once: the loser replays (or is rejected) like a later repeat.
    if (idemKey && err instanceof Prisma.PrismaClientKnownRequestError && err.code === 'P2002') {
      const prior = await svc.db.message.findUnique({ where: { accountId_idempotencyKey: { accountId, idempotencyKey: idemKey } } });
      if (prior) return replay(prior, requestHash);
    }
    throw err;
  }
  try {
    await svc.jobs.enqueueDeliveries(deliveryIds);
  } catch {
    // Committed but not enqueued (Redis down): the worker's sweeper enqueues queued deliveries it finds.
  }
  return response;
}

function replay(prior: Message, requestHash: string): Output {
  if (prior.requestHash !== requestHash) {
    throw new AppError('idempotency_key_reused', 'This idempotency_key was already used for a different message; nothing was sent. Use a new key for a new message.', {
      message_id: prior.id,
    });
  }
  return { ...(prior.response as unknown as Output), idempotent_replay: true };
}
