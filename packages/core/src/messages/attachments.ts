/**
 * Attachments of stored messages as files with an id and their text. The bytes stay where they always were, in
 * the message's sealed body (attachments[idx]), so each is stored once and reclaimed with the body; the
 * message_attachments table names them (id, type, size, SHA-256) and holds the text the worker extracted,
 * sealed like bodies. The store writer (store/write.ts) writes the rows of every message it stores (attachmentRows); a
 * message stored before the table existed gets its rows on first read (attachmentsOf, recordAttachments), so old
 * mail reads the same.
 *
 * Downloads over a signed URL (signAttachmentUrl): HMAC-SHA-256 with the instance secret over the account,
 * the message, the attachment and the expiry; valid ATTACHMENT_URL_TTL_SECONDS, no API key needed.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { k, rows as sqlRows, type DB, type Db, type Insertable, type Message, type MessageAttachment, type Tx } from '@boxes/db';
import { ATTACHMENT_TEXT_STATUSES, type AttachmentTextStatus } from '@boxes/schemas';
import { narrowStatus } from '../shared/statuses';
import type { BoxScope } from '../boxes/boxes';
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';
import { open, seal, sha256Hex } from '../shared/crypto';
import { AppError, notFound } from '../shared/errors';
import { newId } from '../shared/ids';
import { openBody, type StoredAttachment, type StoredBody } from './body';
import { searchDocs, writeSearchVectors } from '../search/vector';

/** How long a signed download URL is valid: 10 minutes. */
export const ATTACHMENT_URL_TTL_SECONDS = 600;

/**
 * What a row says of an attachment: name, declared type, size and SHA-256. Made before any transaction
 * (describeAttachments), so hashing a large file never holds a lock.
 */
export interface AttachmentMeta {
  filename: string | null;
  contentType: string;
  contentId: string | null;
  sizeBytes: number;
  sha256: string;
}

/** The metadata of a message's attachments, in body order. */
export function describeAttachments(
  list: readonly { filename: string | null; contentType: string; contentId: string | null; content: Buffer }[],
): AttachmentMeta[] {
  return list.map((a) => ({
    filename: a.filename,
    contentType: a.contentType,
    contentId: a.contentId,
    sizeBytes: a.content.length,
    sha256: sha256Hex(a.content),
  }));
}

/** describeAttachments of the attachments of a sealed body (base64). */
export const describeStored = (list: readonly StoredAttachment[]): AttachmentMeta[] =>
  describeAttachments(
    list.map((a) => ({ filename: a.filename, contentType: a.content_type, contentId: a.content_id, content: Buffer.from(a.content_b64, 'base64') })),
  );

/** The rows naming a message's attachments (text_status pending), each keyed by its place in the body. */
export function attachmentRows(messageId: string, accountId: string, attachments: readonly AttachmentMeta[]): Insertable<DB['message_attachments']>[] {
  return attachments.map((a, idx) => ({
    id: newId('att'),
    message_id: messageId,
    account_id: accountId,
    idx,
    filename: a.filename,
    content_type: a.contentType,
    content_id: a.contentId,
    size_bytes: a.sizeBytes,
    sha256: a.sha256,
  }));
}

/**
 * Attachment rows for messages already stored (those stored before the table existed, on first read: attachmentsOf),
 * none twice (a message's attachment is keyed by its place in the body). New messages get theirs from the store
 * writer, in the statement that writes them. Returns the rows it wrote: enqueue their extraction once the
 * transaction commits (enqueueAttachmentText).
 */
export async function recordAttachments(
  tx: Tx | Db,
  messages: readonly { messageId: string; accountId: string; attachments: readonly AttachmentMeta[] }[],
): Promise<{ id: string; messageId: string }[]> {
  const rows = messages.flatMap((m) => attachmentRows(m.messageId, m.accountId, m.attachments));
  if (!rows.length) return [];
  const written = await sqlRows(
    tx,
    k
      .insertInto('message_attachments')
      .values(rows)
      .onConflict((oc) => oc.columns(['message_id', 'idx']).doNothing())
      .returning(['id', 'message_id']),
  );
  return written.map((r) => ({ id: r.id, messageId: r.message_id }));
}

/** After commit: the worker extracts their text. A lost enqueue is found by the worker's sweep (pending rows). */
export async function enqueueAttachmentText(svc: Services, ids: readonly string[]): Promise<void> {
  if (!ids.length) return;
  try {
    await svc.jobs.enqueueAttachmentText([...ids]);
  } catch {
    // Redis away: the worker's sweep enqueues pending attachments it finds.
  }
}

/**
 * The attachment rows of a message whose body is open, in body order. A message stored before attachments had
 * rows (or whose rows were not written) gets them now, and their extraction is enqueued: the one fallback.
 */
export async function attachmentsOf(svc: Services, m: Pick<Message, 'id' | 'accountId'>, body: StoredBody): Promise<MessageAttachment[]> {
  if (!body.attachments.length) return [];
  let rows = await svc.db.messageAttachment.findMany({ where: { messageId: m.id }, orderBy: { idx: 'asc' } });
  if (rows.length < body.attachments.length) {
    const written = await recordAttachments(svc.db, [{ messageId: m.id, accountId: m.accountId, attachments: describeStored(body.attachments) }]);
    await enqueueAttachmentText(
      svc,
      written.map((w) => w.id),
    );
    rows = await svc.db.messageAttachment.findMany({ where: { messageId: m.id }, orderBy: { idx: 'asc' } });
  }
  return rows;
}

/** The many-message form of attachmentsOf, for a page of messages: one query, the fallback only where needed. */
export async function attachmentsOfMany(svc: Services, list: { m: Pick<Message, 'id' | 'accountId'>; body: StoredBody }[]) {
  const withFiles = list.filter((x) => x.body.attachments.length);
  const out = new Map<string, MessageAttachment[]>();
  if (!withFiles.length) return out;
  const rows = await svc.db.messageAttachment.findMany({ where: { messageId: { in: withFiles.map((x) => x.m.id) } }, orderBy: { idx: 'asc' } });
  for (const r of rows) out.set(r.messageId, [...(out.get(r.messageId) ?? []), r]);
  for (const x of withFiles) {
    if ((out.get(x.m.id)?.length ?? 0) < x.body.attachments.length) out.set(x.m.id, await attachmentsOf(svc, x.m, x.body));
  }
  return out;
}

export function presentAttachment(row: MessageAttachment, content?: StoredAttachment) {
  return {
    id: row.id,
    filename: row.filename,
    content_type: row.contentType,
    size_bytes: row.sizeBytes,
    sha256: row.sha256,
    content_id: row.contentId,
    text_status: narrowStatus(ATTACHMENT_TEXT_STATUSES, row.textStatus),
    text_bytes: row.textStatus === 'ready' ? row.textBytes : null,
    detected_type: row.detectedType,
    ...(content ? { content_b64: content.content_b64 } : {}),
  };
}

/** The attachment (and its message) a caller may see, or 404 (a box-restricted key sees only its boxes' mail). */
async function findAttachment(svc: Services, input: { accountId: string; scope: BoxScope; messageId: string; attachmentId: string }) {
  const row = await svc.db.messageAttachment.findFirst({
    where: { id: input.attachmentId, messageId: input.messageId, accountId: input.accountId },
    include: { message: { select: { id: true, boxId: true, bodyEnc: true, bodyReclaimedAt: true, accountId: true } } },
  });
  if (!row || (input.scope && (!row.message.boxId || !input.scope.includes(row.message.boxId)))) {
    throw notFound('attachment', input.attachmentId);
  }
  return row;
}

const reclaimed = (messageId: string) =>
  new AppError('body_reclaimed', `The body of message ${messageId} was reclaimed (DELETE /messages/{id} or the retention window): its attachments are gone`, {
    message_id: messageId,
  });

function signatureOf(svc: Services, accountId: string, messageId: string, attachmentId: string, expires: number): string {
  return createHmac('sha256', svc.secretKey).update(`attachment-url:${accountId}:${messageId}:${attachmentId}:${expires}`).digest('base64url');
}

/** The content URL of an attachment (GET with an API key), and the same with a signature that needs none. */
export function signAttachmentUrl(svc: Services, a: { accountId: string; messageId: string; id: string }, now = new Date()) {
  const expires = Math.floor(now.getTime() / 1000) + ATTACHMENT_URL_TTL_SECONDS;
  const contentUrl = `${svc.config.apiBaseUrl}/messages/${encodeURIComponent(a.messageId)}/attachments/${encodeURIComponent(a.id)}/content`;
  const sig = signatureOf(svc, a.accountId, a.messageId, a.id, expires);
  return { contentUrl, signedUrl: `${contentUrl}?expires=${expires}&signature=${sig}`, expiresAt: new Date(expires * 1000) };
}

/** GET /messages/{id}/attachments/{attachment_id}: what it is, and a signed URL to download it. */
export async function getAttachment(svc: Services, input: { accountId: string; scope: BoxScope; messageId: string; attachmentId: string }) {
  const row = await findAttachment(svc, input);
  if (!row.message.bodyEnc) throw reclaimed(row.messageId);
  const url = signAttachmentUrl(svc, { accountId: row.accountId, messageId: row.messageId, id: row.id }, svc.clock.now());
  return {
    message_id: row.messageId,
    ...presentAttachment(row),
    content_url: url.contentUrl,
    download_url: url.signedUrl,
    download_url_expires_at: url.expiresAt.toISOString(),
  };
}

/** The bytes of an attachment, from its message's sealed body. */
function bytesOf(svc: Services, row: MessageAttachment & { message: { bodyEnc: string | null } }) {
  if (!row.message.bodyEnc) throw reclaimed(row.messageId);
  const stored = openBody(svc.secretKey, row.message.bodyEnc).attachments[row.idx];
  if (!stored) throw notFound('attachment', row.id);
  return Buffer.from(stored.content_b64, 'base64');
}

export interface AttachmentDownload {
  filename: string | null;
  contentType: string;
  sha256: string;
  content: Buffer;
}

/** The content route with an API key (the caller's scope already checked). */
export async function attachmentContent(
  svc: Services,
  input: { accountId: string; scope: BoxScope; messageId: string; attachmentId: string },
): Promise<AttachmentDownload> {
  const row = await findAttachment(svc, input);
  return { filename: row.filename, contentType: row.contentType, sha256: row.sha256, content: bytesOf(svc, row) };
}

/**
 * The content route with a signed URL instead of a key: 403 invalid_signature when the signature does not
 * match (a changed expiry, message or attachment), 410 link_expired once it has, 404 for an attachment that is
 * not there.
 */
export async function signedAttachmentContent(
  svc: Services,
  input: { messageId: string; attachmentId: string; expires: string | undefined; signature: string | undefined },
): Promise<AttachmentDownload> {
  const bad = () => new AppError('invalid_signature', 'The signed URL is not valid: ask GET /messages/{id}/attachments/{attachment_id} for a new one');
  if (!input.expires || !/^\d{1,12}$/.test(input.expires) || !input.signature || !/^[A-Za-z0-9_-]{43}$/.test(input.signature)) throw bad();
  const row = await svc.db.messageAttachment.findFirst({
    where: { id: input.attachmentId, messageId: input.messageId },
    include: { message: { select: { bodyEnc: true } } },
  });
  if (!row) throw bad();
  const expected = Buffer.from(signatureOf(svc, row.accountId, row.messageId, row.id, Number(input.expires)));
  const given = Buffer.from(input.signature);
  if (expected.length !== given.length || !timingSafeEqual(expected, given)) throw bad();
  if (Number(input.expires) * 1000 <= svc.clock.now().getTime()) {
    throw new AppError('link_expired', `This signed URL expired at ${new Date(Number(input.expires) * 1000).toISOString()}; ask for a new one`, {
      expired_at: new Date(Number(input.expires) * 1000).toISOString(),
    });
  }
  return { filename: row.filename, contentType: row.contentType, sha256: row.sha256, content: bytesOf(svc, row) };
}

/** GET /messages/{id}/attachments/{attachment_id}/text: the extracted text once ready, and where it stands. */
export async function getAttachmentText(svc: Services, input: { accountId: string; scope: BoxScope; messageId: string; attachmentId: string }) {
  const row = await findAttachment(svc, input);
  if (!row.message.bodyEnc) throw reclaimed(row.messageId);
  return {
    message_id: row.messageId,
    attachment_id: row.id,
    filename: row.filename,
    text_status: narrowStatus(ATTACHMENT_TEXT_STATUSES, row.textStatus),
    detected_type: row.detectedType,
    text: row.textEnc ? open(svc.secretKey, row.textEnc).toString('utf8') : null,
    text_bytes: row.textStatus === 'ready' ? row.textBytes : null,
    truncated: row.textTruncated,
    error: row.textError,
  };
}

/** An attachment's extracted plain text, decrypted (null until ready, or once reclaimed). For search. */
export async function attachmentPlainText(svc: Services, attachmentId: string): Promise<string | null> {
  const row = await svc.db.messageAttachment.findUnique({ where: { id: attachmentId }, select: { textEnc: true } });
  return row?.textEnc ? open(svc.secretKey, row.textEnc).toString('utf8') : null;
}

/** What the worker extracts from: the bytes and the declared type, or null when there is nothing left to do. */
export async function attachmentForExtraction(svc: Services, attachmentId: string) {
  const row = await svc.db.messageAttachment.findUnique({ where: { id: attachmentId }, include: { message: { select: { bodyEnc: true } } } });
  if (!row || row.textStatus !== ('pending' satisfies AttachmentTextStatus)) return null;
  if (!row.message.bodyEnc) {
    // Reclaimed before its turn: nothing to read; the extraction ends as failed (and says so).
    return { row, content: null };
  }
  return { row, content: bytesOf(svc, row) };
}

export interface ExtractionResult {
  status: Exclude<AttachmentTextStatus, 'pending'>;
  detectedType: string | null;
  text?: string;
  truncated?: boolean;
  error?: string;
}

/**
 * Records the end of an extraction (once: only a pending row moves) with its text sealed, and announces
 * attachment.text_ready whatever the status, in one transaction.
 */
export async function finishAttachmentText(svc: Services, attachmentId: string, result: ExtractionResult): Promise<boolean> {
  const text = result.status === 'ready' ? (result.text ?? '') : null;
  return svc.db.$transaction(async (tx) => {
    const row = await tx.messageAttachment.findUnique({ where: { id: attachmentId }, include: { message: { select: { boxId: true, bodyEnc: true } } } });
    if (!row || row.textStatus !== ('pending' satisfies AttachmentTextStatus)) return false;
    // A body reclaimed meanwhile keeps no text.
    const keep = text !== null && row.message.bodyEnc !== null;
    const moved = await tx.messageAttachment.updateMany({
      where: { id: attachmentId, textStatus: 'pending' satisfies AttachmentTextStatus },
      data: {
        textStatus: result.status,
        detectedType: result.detectedType,
        textEnc: keep ? seal(svc.secretKey, text) : null,
        textBytes: text !== null ? Buffer.byteLength(text) : null,
        textTruncated: result.truncated ?? false,
        textError: result.error?.slice(0, 500) ?? null,
        textDoneAt: svc.clock.now(),
      },
    });
    if (moved.count === 0) return false;
    // The message's search vector takes the new text before the event says it is ready, so a search made on
    // hearing of it finds it.
    if (keep) await writeSearchVectors(tx, await searchDocs(svc, tx, [{ id: row.messageId, bodyEnc: row.message.bodyEnc }]));
    await appendEvent({
      db: tx,
      accountId: row.accountId,
      type: 'attachment.text_ready',
      boxId: row.message.boxId,
      data: {
        message_id: row.messageId,
        attachment_id: row.id,
        filename: row.filename,
        status: result.status,
        detected_type: result.detectedType,
        text_bytes: text !== null ? Buffer.byteLength(text) : null,
        truncated: result.truncated ?? false,
      },
    });
    return true;
  });
}

/** Pending attachments older than graceMs (a lost job), for the worker's sweep. */
export async function pendingAttachments(svc: Services, graceMs: number, take = 1000): Promise<string[]> {
  const rows = await svc.db.messageAttachment.findMany({
    where: { textStatus: 'pending' satisfies AttachmentTextStatus, createdAt: { lt: new Date(Date.now() - graceMs) } },
    select: { id: true },
    orderBy: { createdAt: 'asc' },
    take,
  });
  return rows.map((r) => r.id);
}

/** Reclaiming bodies reclaims their attachments' text (the bytes go with the body). */
export async function reclaimAttachmentText(tx: Tx, messageIds: readonly string[]): Promise<void> {
  if (!messageIds.length) return;
  await tx.messageAttachment.updateMany({ where: { messageId: { in: [...messageIds] }, textEnc: { not: null } }, data: { textEnc: null } });
}
