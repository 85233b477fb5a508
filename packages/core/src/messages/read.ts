/** Reading and deleting stored messages. Box-restricted keys see only their boxes' mail. */
import type { Db, Delivery, Message, MessageAttachment } from '@boxes/db';
import { Prisma, rows as run, sql, tbl, type RawBuilder } from '@boxes/db';
import { appendEvent } from '../events/append';
import type { BoxScope } from '../boxes/boxes';
import type { Services } from '../shared/context';
import { AppError, notFound } from '../shared/errors';
import { openBody, type StoredBody } from './body';
import { attachmentsOfMany, presentAttachment, reclaimAttachmentText } from './attachments';
import { dropSearchVectors } from '../search/vector';
import { bodyReclaimDueAt, rawSha256Of, retentionOf } from '../audit/retention';
import type { Authentication } from '../trust/authenticate';
import type { SpamVerdict } from '../trust/spam';
import { extractReplyText } from '../trust/extract';
import { labelWhere } from './labels';

/**
 * A message row as the read paths load it: without the raw bytes (as large as the message, attachments included),
 * which only delivery, IMAP FETCH, deletion (for their SHA-256), the export, forwarding and the audit bundle read.
 */
export type MessageRead = Omit<Message, 'rawEnc'>;

/** What a read path passes as Prisma's `omit` to load a MessageRead. */
export const WITHOUT_RAW = { rawEnc: true } as const;

/** A message row without its sealed body either (which holds the attachments too): what a listing without bodies reads. */
export type MessageMeta = Omit<Message, 'rawEnc' | 'bodyEnc'>;

const WITHOUT_BODIES = { rawEnc: true, bodyEnc: true } as const;

/** retentionDays: the account's audit retention window, to say when an available body is due to be reclaimed. */
export function presentMessage(m: MessageMeta, retentionDays?: number) {
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
    draft_id: m.draftId ?? null,
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

/**
 * The body of a message, its attachments listed with their ids (rows), their bytes only when asked
 * (withContent: include=attachment_content).
 */
export function presentBody(svc: Services, m: MessageRead, b: StoredBody, rows: MessageAttachment[], withContent: boolean) {
  return {
    text: b.text,
    extracted_text: m.direction === 'received' ? extractReplyText(b.text) : null,
    html: b.html,
    headers: b.headers,
    attachments: rows.map((r) => presentAttachment(r, withContent ? b.attachments[r.idx] : undefined)),
  };
}

/**
 * A page of messages (limit of them, and whether there are more) with their bodies when asked (bodies: whether
 * with the attachments' content); without, the sealed bodies are not read at all.
 */
export async function messagePage(
  svc: Services,
  q: { where: Prisma.MessageWhereInput; orderBy: Prisma.MessageOrderByWithRelationInput[]; limit: number },
  bodies: { withContent: boolean } | null,
): Promise<{ page: MessageMeta[]; more: boolean; bodies: Awaited<ReturnType<typeof presentBodies>> | null }> {
  const args = { where: q.where, orderBy: q.orderBy, take: q.limit + 1 };
  if (!bodies) {
    const rows = await svc.db.message.findMany({ ...args, omit: WITHOUT_BODIES });
    return { page: rows.slice(0, q.limit), more: rows.length > q.limit, bodies: null };
  }
  const rows = await svc.db.message.findMany({ ...args, omit: WITHOUT_RAW });
  const page = rows.slice(0, q.limit);
  return { page, more: rows.length > q.limit, bodies: await presentBodies(svc, page, bodies.withContent) };
}

/** The bodies of some messages, each opened once, with their attachment rows (one query for them all). */
export async function presentBodies(svc: Services, list: MessageRead[], withContent: boolean) {
  const open = list.flatMap((m) => (m.bodyEnc ? [{ m, body: openBody(svc.secretKey, m.bodyEnc) }] : []));
  const rows = await attachmentsOfMany(svc, open);
  const out = new Map<string, ReturnType<typeof presentBody>>();
  for (const { m, body } of open) out.set(m.id, presentBody(svc, m, body, rows.get(m.id) ?? [], withContent));
  return out;
}

const presentDelivery = (d: Delivery) => ({
  recipient: d.recipient,
  status: d.status,
  attempts: d.attempts,
  last_error: d.lastError,
  delivered_at: d.deliveredAt?.toISOString() ?? null,
});

function encodeCursor(m: Pick<Message, 'recordedAt' | 'id'>): string {
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

/** A time filter (since, before, after) as a Date, or 400 validation_error naming the field. */
export function parseTime(value: string | undefined, field: string): Date | undefined {
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
    include?: 'body' | 'attachment_content' | undefined;
    direction?: 'sent' | 'received' | undefined;
    box?: string | undefined;
    since?: string | undefined;
    before?: string | undefined;
    limit: number;
    cursor?: string | undefined;
    label?: string | undefined;
  },
) {
  const label = input.label === undefined ? undefined : labelWhere(input.label);
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
  if (label) {
    // Labels live in message_flags (flag bits, keywords compared case-insensitively): the page's ids are picked
    // in SQL with the same conditions, then read as usual.
    const [m, f] = [tbl('messages', 'm'), tbl('message_flags', 'f')];
    const conds: RawBuilder<unknown>[] = [sql`${m.account_id} = ${input.accountId}`, label];
    if (input.direction) conds.push(sql`${m.direction} = ${input.direction}`);
    if (typeof where.boxId === 'string') conds.push(sql`${m.box_id} = ${where.boxId}`);
    else if (boxIds) conds.push(sql`${m.box_id} = ANY(${boxIds}::text[])`);
    if (since) conds.push(sql`${m.recorded_at} >= ${since}`);
    if (before) conds.push(sql`${m.recorded_at} < ${before}`);
    if (input.cursor) {
      const c = decodeCursor(input.cursor);
      conds.push(sql`(${m.recorded_at}, ${m.id}) < (${c.at}::timestamptz, ${c.id}::text)`);
    }
    const ids = await run(
      svc.db,
      sql<{ id: string }>`SELECT ${m.id} FROM ${m.$} LEFT JOIN ${f.$} ON ${f.message_id} = ${m.id}
      WHERE ${sql.join(conds, sql` AND `)} ORDER BY ${m.recorded_at} DESC, ${m.id} DESC LIMIT ${input.limit + 1}`,
    );
    where.id = { in: ids.map((r) => r.id) };
  }
  const [{ page, more, bodies }, days] = await Promise.all([
    messagePage(
      svc,
      { where, orderBy: [{ recordedAt: 'desc' }, { id: 'desc' }], limit: input.limit },
      input.include ? { withContent: input.include === 'attachment_content' } : null,
    ),
    retentionDaysOf(svc, input.accountId),
  ]);
  return {
    messages: page.map((m) => ({ ...presentMessage(m, days), ...(bodies ? { body: bodies.get(m.id) ?? null } : {}) })),
    next_cursor: more ? encodeCursor(page[page.length - 1]!) : null,
  };
}

export async function retentionDaysOf(svc: Services, accountId: string): Promise<number> {
  const a = await svc.db.account.findUniqueOrThrow({ where: { id: accountId }, select: { auditRetentionDays: true } });
  return retentionOf(a).audit_retention_days;
}

/** The message if the caller's key may see it (a box-restricted key: only its boxes'), else 404 (as if absent). */
export function visibleMessage<M extends { boxId: string | null }>(m: M | null, scope: BoxScope, id: string): M {
  if (!m || (scope && (!m.boxId || !scope.includes(m.boxId)))) throw notFound('message', id);
  return m;
}

async function findVisible(db: Db | Parameters<Parameters<Db['$transaction']>[0]>[0], accountId: string, scope: BoxScope, id: string) {
  return visibleMessage(await db.message.findFirst({ where: { id, accountId } }), scope, id);
}

export async function getMessage(svc: Services, input: { accountId: string; scope: BoxScope; id: string; include?: 'attachment_content' | undefined }) {
  // One snapshot, so the message's status and its deliveries agree.
  const { m, deliveries } = await svc.db.$transaction(
    async (tx) => {
      const m = visibleMessage(await tx.message.findFirst({ where: { id: input.id, accountId: input.accountId }, omit: WITHOUT_RAW }), input.scope, input.id);
      const deliveries = m.direction === 'sent' ? await tx.delivery.findMany({ where: { messageId: m.id }, orderBy: { recipient: 'asc' } }) : [];
      return { m, deliveries };
    },
    { isolationLevel: 'RepeatableRead' },
  );
  const days = await retentionDaysOf(svc, input.accountId);
  const bodies = await presentBodies(svc, [m], input.include === 'attachment_content');
  return { ...presentMessage(m, days), body: bodies.get(m.id) ?? null, deliveries: deliveries.map(presentDelivery) };
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
    await reclaimAttachmentText(tx, [m.id]);
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
