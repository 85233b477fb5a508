/** Reading and deleting stored messages. Box-restricted keys see only their boxes' mail. */
import type { Db, Delivery, Message } from '@boxes/db';
import { Prisma } from '@boxes/db';
import { appendEvent } from '../events/append';
import type { BoxScope } from '../boxes/boxes';
import type { Services } from '../shared/context';
import { AppError, notFound } from '../shared/errors';
import { openBody } from './body';
import { dropSearchVectors } from '../search/vector';
import { bodyReclaimDueAt, rawSha256Of, retentionOf } from '../audit/retention';
import type { Authentication } from '../trust/authenticate';
import type { SpamVerdict } from '../trust/spam';
import { extractReplyText } from '../trust/extract';

/** retentionDays: the account's audit retention window, to say when an available body is due to be reclaimed. */
export function presentMessage(m: Message, retentionDays?: number) {
  return {
    id: m.id,
    direction: m.direction as 'sent' | 'received',
    status: m.status,
    box_id: m.boxId,
    from: m.fromAddress,
    to: m.toAddresses,
    cc: m.ccAddresses,
    bcc: m.direction === 'sent' ? m.bccAddresses : [],
    subject: m.subject,
    size_bytes: m.sizeBytes,
    rfc_message_id: m.rfcMessageId,
    provider_message_id: m.providerMessageId,
    in_reply_to: m.inReplyTo,
    thread_id: m.threadId,
    send_at: m.sendAt?.toISOString() ?? null,
    context: (m.context as Record<string, unknown> | null) ?? null,
    recorded_at: m.recordedAt.toISOString(),
    body_state: (m.bodyReclaimedAt ? 'reclaimed' : 'available') as 'available' | 'reclaimed',
    body_reclaimed_at_utc: m.bodyReclaimedAt?.toISOString() ?? null,
    body_reclaim_due_at_utc: retentionDays === undefined ? null : (bodyReclaimDueAt(m, retentionDays)?.toISOString() ?? null),
    purged: Boolean(m.purgedAt),
    authentication: m.direction === 'received' ? ((m.authentication as unknown as Authentication | null) ?? null) : null,
    spam: m.direction === 'received' ? ((m.spam as unknown as SpamVerdict | null) ?? null) : null,
  };
}

export function presentBody(svc: Services, m: Message) {
  if (!m.bodyEnc) return null;
  const b = openBody(svc.secretKey, m.bodyEnc);
  return {
    text: b.text,
    extracted_text: m.direction === 'received' ? extractReplyText(b.text) : null,
    html: b.html,
    headers: b.headers,
    attachments: b.attachments.map((a) => ({
      filename: a.filename,
      content_type: a.content_type,
      size_bytes: Buffer.from(a.content_b64, 'base64').length,
      content_id: a.content_id,
      content_b64: a.content_b64,
    })),
  };
}

const presentDelivery = (d: Delivery) => ({
  recipient: d.recipient,
  status: d.status,
  attempts: d.attempts,
  last_error: d.lastError,
  delivered_at: d.deliveredAt?.toISOString() ?? null,
});

function encodeCursor(m: Message): string {
  return Buffer.from(JSON.stringify([m.recordedAt.toISOString(), m.id])).toString('base64url');
}

function decodeCursor(cursor: string): { at: Date; id: string } {
  try {
    const [at, id] = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as [string, string];
    const date = new Date(at);
    if (Number.isNaN(date.getTime()) || typeof id !== 'string') throw new Error('bad');
    return { at: date, id };
  } catch {
    throw new AppError('invalid_cursor', 'cursor must be a next_cursor returned by GET /messages', { field: 'cursor' });
  }
}

function parseTime(value: string | undefined, field: string): Date | undefined {
  if (value === undefined) return undefined;
  const d = new Date(value);
  if (Number.isNaN(d.getTime()))
    throw new AppError('validation_error', `${field}: must be an ISO 8601 time`, { fields: [{ path: field, message: 'not a time' }] });
  return d;
}

export async function listMessages(
  svc: Services,
  input: {
    accountId: string;
    scope: BoxScope;
    include?: 'body' | undefined;
    direction?: 'sent' | 'received' | undefined;
    box?: string | undefined;
    since?: string | undefined;
    before?: string | undefined;
    limit: number;
    cursor?: string | undefined;
  },
) {
  const where: Prisma.MessageWhereInput = { accountId: input.accountId };
  if (input.direction) where.direction = input.direction;
  const boxIds: string[] | null = input.scope;
  if (input.box) {
    const b = await svc.db.box.findFirst({
      where: { accountId: input.accountId, OR: [{ id: input.box }, { address: input.box.toLowerCase() }] },
      select: { id: true },
    });
    if (!b || (boxIds && !boxIds.includes(b.id))) throw notFound('box', input.box);
    where.boxId = b.id;
  } else if (boxIds) {
    where.boxId = { in: boxIds };
  }
  const since = parseTime(input.since, 'since');
  const before = parseTime(input.before, 'before');
  const and: Prisma.MessageWhereInput[] = [];
  if (since) and.push({ recordedAt: { gte: since } });
  if (before) and.push({ recordedAt: { lt: before } });
  if (input.cursor) {
    const c = decodeCursor(input.cursor);
    and.push({ OR: [{ recordedAt: { lt: c.at } }, { recordedAt: c.at, id: { lt: c.id } }] });
  }
  if (and.length) where.AND = and;
  const [rows, days] = await Promise.all([
    svc.db.message.findMany({ where, orderBy: [{ recordedAt: 'desc' }, { id: 'desc' }], take: input.limit + 1 }),
    retentionDaysOf(svc, input.accountId),
  ]);
  const page = rows.slice(0, input.limit);
  return {
    messages: page.map((m) => ({ ...presentMessage(m, days), ...(input.include === 'body' ? { body: presentBody(svc, m) } : {}) })),
    next_cursor: rows.length > input.limit ? encodeCursor(page[page.length - 1]!) : null,
  };
}

export async function retentionDaysOf(svc: Services, accountId: string): Promise<number> {
  const a = await svc.db.account.findUniqueOrThrow({ where: { id: accountId }, select: { auditRetentionDays: true } });
  return retentionOf(a).audit_retention_days;
}

async function findVisible(db: Db | Parameters<Parameters<Db['$transaction']>[0]>[0], accountId: string, scope: BoxScope, id: string) {
  const m = await db.message.findFirst({ where: { id, accountId } });
  if (!m || (scope && (!m.boxId || !scope.includes(m.boxId)))) throw notFound('message', id);
  return m;
}

export async function getMessage(svc: Services, input: { accountId: string; scope: BoxScope; id: string }) {
  // One snapshot, so the message's status and its deliveries agree.
  const { m, deliveries } = await svc.db.$transaction(
    async (tx) => {
      const m = await findVisible(tx, input.accountId, input.scope, input.id);
      const deliveries = m.direction === 'sent' ? await tx.delivery.findMany({ where: { messageId: m.id }, orderBy: { recipient: 'asc' } }) : [];
      return { m, deliveries };
    },
    { isolationLevel: 'RepeatableRead' },
  );
  const days = await retentionDaysOf(svc, input.accountId);
  return { ...presentMessage(m, days), body: presentBody(svc, m), deliveries: deliveries.map(presentDelivery) };
}

/** Reclaims the body (and raw) of a message; with purge also subject, from, to and cc. */
export async function deleteMessage(svc: Services, input: { accountId: string; scope: BoxScope; id: string; purge: boolean; actorKeyId: string }) {
  return svc.db.$transaction(async (tx) => {
    const m = await findVisible(tx, input.accountId, input.scope, input.id);
    // The body of a scheduled send is what will be sent: it goes away only with the send.
    if (m.status === 'scheduled') {
      throw new AppError('conflict', `message ${m.id} is scheduled (send_at ${m.sendAt?.toISOString()}); cancel it first with POST /messages/${m.id}/cancel`, {
        status: m.status,
      });
    }
    const at = m.bodyReclaimedAt ?? new Date();
    await tx.message.update({
      where: { id: m.id },
      data: {
        bodyEnc: null,
        rawEnc: null,
        bodyReclaimedAt: at,
        // The raw bytes go, their SHA-256 stays: audit bundles still name what was stored.
        rawSha256: rawSha256Of(svc.secretKey, m),
        ...(input.purge
          ? {
              subject: null,
              fromAddress: null,
              toAddresses: [],
              ccAddresses: [],
              bccAddresses: [],
              purgedAt: m.purgedAt ?? new Date(),
              response: Prisma.DbNull,
            }
          : {}),
      },
    });
    // The search vector holds the body's words: it goes with the body.
    await dropSearchVectors(tx, [m.id]);
    await appendEvent({
      db: tx,
      accountId: input.accountId,
      type: 'message.deleted',
      boxId: m.boxId,
      data: { message_id: m.id, purged: input.purge, reclaimed_at_utc: at.toISOString(), by_key_id: input.actorKeyId },
    });
    return { id: m.id, body_state: { reclaimed_at_utc: at.toISOString() }, purged: input.purge || Boolean(m.purgedAt) };
  });
}
