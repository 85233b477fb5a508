/**
 * Drafts: a message being written, saved as often as wanted (POST /drafts, PUT /drafts/{id}, or a mail client's
 * APPEND to a box's Drafts folder), then sent once with POST /drafts/{id}/send.
 *
 * Saving is lenient about what is missing (no recipient, no subject, no body yet) and strict about what is
 * there: addresses must parse, the subject carries no line break, attachments are base64, the rendered message
 * fits the size a sent one may have, the sending box is the account's and the key's, the message answered is
 * one the key sees. The body and attachments are sealed as message bodies are (body_enc), and so is the RFC
 * 5322 rendering the box's Drafts folder serves (raw_enc). Every save gives the draft the next UID of that
 * folder: mail clients see a changed draft as a new message, as they expect.
 *
 * Sending goes through the send path itself (messages/send.ts sendMessage; messages/reply.ts for a draft that
 * answers a message), so every rule of a send applies: credit, suppression, lists, scopes, box restrictions,
 * send_at (a scheduled send). The message names the draft (messages.draft_id, unique): two sends of one draft,
 * at once or one after the other, store one message, and the second answers the first's response
 * (idempotent_replay). The draft row is deleted once its message is stored.
 */
import type { Account, Draft } from '@boxes/db';
import { exec, k, rows, sql } from '@boxes/db';
import { composeMessage, parseMessage, type ParsedMessage } from '@boxes/mail';
import { MAX_RECIPIENTS, type CreateDraftInput, type SendInput, type SendOutput, type UpdateDraftInput } from '@boxes/schemas';
import type { z } from 'zod';
import type { BoxScope } from '../boxes/boxes';
import { ensureBoxFolders } from '../mailboxes/folders';
import { domainOf, formatMailbox, parseMailbox, parseMailboxes } from '../messages/addresses';
import type { StoredAttachment } from '../messages/body';
import { replySendInput } from '../messages/reply';
import { visibleMessage } from '../messages/read';
import { scheduledTime } from '../messages/schedule';
import { heldForReview, sendMessage, type SendCaller, type SendOrHeld } from '../messages/send';
import type { ReviewView } from '../reviews/reviews';
import type { Services } from '../shared/context';
import { open, seal, sealBytes } from '../shared/crypto';
import { AppError, invalidField, isUniqueViolation, notFound } from '../shared/errors';
import { EVENTS_CHANNEL } from '../events/append';
import { newId } from '../shared/ids';

type Tx = Parameters<Parameters<Services['db']['$transaction']>[0]>[0];
type SendOut = z.infer<typeof SendOutput>;

/** Who saves, reads or sends a draft: the account and the key's boxes (null: every box). */
export interface DraftCaller {
  account: Pick<Account, 'id' | 'primaryAddress'>;
  boxScope: BoxScope;
}

/** What a draft holds, checked. */
interface DraftContent {
  box: { id: string; address: string };
  fromName: string | null;
  to: string[];
  cc: string[];
  bcc: string[];
  subject: string | null;
  text: string | null;
  html: string | null;
  attachments: StoredAttachment[];
  inReplyTo: string | null;
  sendAt: Date | null;
}

/** The sealed part of a draft (body_enc). */
interface DraftBody {
  text: string | null;
  html: string | null;
  attachments: StoredAttachment[];
}

/** The fields a save gives; undefined keeps the current value, null clears it (PUT /drafts/{id}). */
type DraftPatch = Omit<z.infer<typeof UpdateDraftInput>, 'id'>;

const list = (v: string | string[] | null | undefined): string[] => (v === undefined || v === null ? [] : Array.isArray(v) ? v : [v]);

/** The sending box named by from (an address or Name <address>), of the account and the key. */
async function resolveBox(svc: Services, caller: DraftCaller, from: string | undefined) {
  const m = from === undefined ? { name: undefined, address: caller.account.primaryAddress } : parseMailbox(from, 'from');
  const box = await svc.db.box.findFirst({ where: { accountId: caller.account.id, address: m.address }, select: { id: true, address: true } });
  if (!box) throw invalidField('from', `${m.address} is not a box of this account; create it with POST /boxes`);
  if (caller.boxScope && !caller.boxScope.includes(box.id)) {
    throw new AppError('box_restricted_key', `This key may not write drafts from ${box.address}`, {
      from: box.address,
      fields: [{ path: 'from', message: "outside the key's boxes" }],
    });
  }
  return { box, name: m.name ?? null };
}

/** The message a draft answers: one of the account the key sees (404 otherwise, as for a reply). */
async function resolveParent(svc: Services, caller: DraftCaller, id: string) {
  const parent = await svc.db.message.findFirst({
    where: { id, accountId: caller.account.id },
    select: { id: true, boxId: true, rfcMessageId: true, references: true },
  });
  return visibleMessage(parent, caller.boxScope, id);
}

/** Recipients checked for format (each parses as address or Name <address>) and kept in the form given. */
function recipients(value: string | string[] | null | undefined, field: string): string[] {
  const given = list(value);
  return parseMailboxes(given, field).map(formatMailbox);
}

function checkContent(c: DraftContent): void {
  if (c.subject !== null && /[\r\n\0]/.test(c.subject)) throw invalidField('subject', 'line breaks are not allowed in a subject');
  const distinct = new Set([...c.to, ...c.cc, ...c.bcc].map((s) => parseMailbox(s, 'to').address));
  if (distinct.size > MAX_RECIPIENTS) throw invalidField('to', `at most ${MAX_RECIPIENTS} recipients per message (got ${distinct.size})`);
}

/** Attachments as a send takes them, checked (base64) and normalised as a send stores them. */
function attachmentsOf(input: z.infer<typeof CreateDraftInput>['attachments'] | null): StoredAttachment[] {
  return (input ?? []).map((a, i) => {
    const content = Buffer.from(a.content_b64, 'base64');
    if (content.length === 0 && a.content_b64.replace(/\s/g, '') !== '') throw invalidField(`attachments.${i}.content_b64`, 'not valid base64');
    return { filename: a.filename, content_type: a.content_type, content_id: a.content_id ?? null, content_b64: content.toString('base64') };
  });
}

/** The RFC 5322 message mail clients see in the Drafts folder (not signed; Bcc kept, as clients keep it). */
async function render(d: DraftContent, id: string, date: Date, parent: { rfcMessageId: string; references: string[] } | null): Promise<Buffer> {
  return composeMessage({
    from: { name: d.fromName ?? undefined, address: d.box.address },
    to: d.to,
    cc: d.cc,
    bcc: d.bcc,
    replyTo: [],
    subject: d.subject ?? '',
    text: d.text ?? (d.html === null ? '' : undefined),
    html: d.html ?? undefined,
    headers: { 'X-Boxes-Draft-Id': id },
    attachments: d.attachments.map((a) => ({
      filename: a.filename ?? 'attachment',
      content: Buffer.from(a.content_b64, 'base64'),
      contentType: a.content_type,
      contentId: a.content_id ?? undefined,
    })),
    messageId: `<${id}@${domainOf(d.box.address)}>`,
    date,
    ...(parent ? { inReplyTo: parent.rfcMessageId, references: [...parent.references.filter((r) => r !== parent.rfcMessageId), parent.rfcMessageId] } : {}),
  });
}

/**
 * The next UID of the box's Drafts folder (made if missing), with the folder's next modseq: a saved draft is a
 * new message there.
 */
async function nextDraftsUid(tx: Tx, accountId: string, boxId: string): Promise<{ folderId: string; uid: number; modseq: bigint }> {
  const folders = await ensureBoxFolders(tx, accountId, [boxId]);
  const folder = folders.find((f) => f.role === 'drafts');
  if (!folder) throw notFound('box', boxId);
  const [row] = await rows(
    tx,
    k
      .updateTable('mail_folders')
      .set((eb) => ({ uid_next: eb('uid_next', '+', 1), highest_modseq: eb('highest_modseq', '+', 1n) }))
      .where('id', '=', folder.id)
      .returning([sql<number>`uid_next - 1`.as('uid'), 'highest_modseq']),
  );
  return { folderId: folder.id, uid: row!.uid, modseq: BigInt(row!.highest_modseq) };
}

/**
 * Tells the IMAP servers the account's folders changed (the NOTIFY an event append makes): an idling mail client
 * hears of a draft saved or deleted over the API at once, not at its next NOOP.
 */
async function notifyFolders(tx: Tx, accountId: string): Promise<void> {
  await rows(tx, sql<{ notified: string }>`SELECT pg_notify(${EVENTS_CHANNEL}, ${accountId})::text AS notified`);
}

/** A folder's modseq moves on: a draft left it (deleted, sent, moved to another box). */
export async function bumpFolder(db: Tx | Services['db'], folderId: string): Promise<void> {
  await exec(
    db,
    k
      .updateTable('mail_folders')
      .set((eb) => ({ highest_modseq: eb('highest_modseq', '+', 1n) }))
      .where('id', '=', folderId),
  );
}

/** Saves a draft: a new one (existing: null) or a change to one (the row locked), re-rendered under a new UID. */
async function save(svc: Services, caller: DraftCaller, existing: Draft | null, patch: DraftPatch & { reply_all?: boolean | undefined }): Promise<Draft> {
  const before: DraftBody | null = existing ? openDraftBody(svc, existing) : null;
  const { box, name } =
    patch.from !== undefined
      ? await resolveBox(svc, caller, patch.from)
      : existing
        ? await resolveBox(svc, caller, await currentFrom(svc, existing))
        : await resolveBox(svc, caller, undefined);
  const inReplyTo = patch.in_reply_to === undefined ? (existing?.inReplyTo ?? null) : patch.in_reply_to;
  const parent = inReplyTo ? await resolveParent(svc, caller, inReplyTo) : null;
  const content: DraftContent = {
    box,
    fromName: patch.from !== undefined ? name : (existing?.fromName ?? null),
    to: patch.to === undefined ? (existing?.toAddresses ?? []) : recipients(patch.to, 'to'),
    cc: patch.cc === undefined ? (existing?.ccAddresses ?? []) : recipients(patch.cc, 'cc'),
    bcc: patch.bcc === undefined ? (existing?.bccAddresses ?? []) : recipients(patch.bcc, 'bcc'),
    subject: patch.subject === undefined ? (existing?.subject ?? null) : patch.subject,
    text: patch.text === undefined ? (before?.text ?? null) : patch.text,
    html: patch.html === undefined ? (before?.html ?? null) : patch.html,
    attachments: patch.attachments === undefined ? (before?.attachments ?? []) : attachmentsOf(patch.attachments),
    inReplyTo,
    sendAt: patch.send_at === undefined ? (existing?.sendAt ?? null) : patch.send_at === null ? null : scheduledTime(patch.send_at, new Date()),
  };
  // A new answer to a message without recipients takes the reply's: whom a reply goes to, and "Re:".
  if (!existing && parent && content.to.length === 0) {
    const reply = await replySendInput(svc, caller, { id: parent.id, from: box.address, ...(patch.reply_all ? { reply_all: true } : {}) }).catch(
      (err: unknown) => {
        // A message that names nobody to answer leaves the recipients to the writer.
        if (err instanceof AppError && err.code === 'validation_error') return null;
        throw err;
      },
    );
    if (reply) {
      content.to = list(reply.to);
      if (content.cc.length === 0) content.cc = list(reply.cc);
      content.subject ??= reply.subject ?? null;
    }
  }
  checkContent(content);
  const id = existing?.id ?? newId('drf');
  const now = new Date();
  const raw = await render(content, id, now, parent);
  const max = svc.config.smtp.maxMessageBytes;
  if (raw.length > max) {
    throw new AppError('validation_error', `attachments: the draft would be ${raw.length} bytes as a message; at most ${max}`, {
      fields: [{ path: 'attachments', message: `at most ${max} bytes in all` }],
      size_bytes: raw.length,
      max_bytes: max,
    });
  }
  const body: DraftBody = { text: content.text, html: content.html, attachments: content.attachments };
  const data = {
    boxId: box.id,
    fromName: content.fromName,
    toAddresses: content.to,
    ccAddresses: content.cc,
    bccAddresses: content.bcc,
    subject: content.subject,
    inReplyTo: content.inReplyTo,
    sendAt: content.sendAt,
    bodyEnc: seal(svc.secretKey, JSON.stringify(body)),
    attachments: content.attachments.map((a) => ({
      filename: a.filename,
      content_type: a.content_type,
      content_id: a.content_id,
      size_bytes: Buffer.byteLength(a.content_b64, 'base64'),
    })),
    rawEnc: sealBytes(svc.secretKey, raw),
    sizeBytes: raw.length,
    updatedAt: now,
  };
  return svc.db.$transaction(
    async (tx) => {
      const place = await nextDraftsUid(tx, caller.account.id, box.id);
      await notifyFolders(tx, caller.account.id);
      if (!existing) {
        return tx.draft.create({ data: { id, accountId: caller.account.id, ...data, ...place, flags: 9, createdAt: now } });
      }
      // The row as it stands, locked: a draft sent or deleted meanwhile is gone; one saved meanwhile is saved
      // again from what it is now (updateDraft), so no change is lost.
      const [locked] = await rows(tx, k.selectFrom('drafts').select(['id', 'folder_id', 'updated_at']).where('id', '=', existing.id).forUpdate());
      if (!locked) throw notFound('draft', existing.id);
      if (locked.updated_at.getTime() !== existing.updatedAt.getTime()) throw new SavedMeanwhile();
      if (locked.folder_id !== place.folderId) await bumpFolder(tx, locked.folder_id);
      // A changed draft is a new message to mail clients: new UID, flags kept, \Deleted cleared.
      return tx.draft.update({ where: { id: existing.id }, data: { ...data, ...place, imapDeleted: false } });
    },
    { maxWait: 10_000, timeout: 20_000 },
  );
}

/** The from of a stored draft as a save would take it again. */
async function currentFrom(svc: Services, d: Draft): Promise<string> {
  const box = await svc.db.box.findUnique({ where: { id: d.boxId }, select: { address: true } });
  if (!box) throw notFound('draft', d.id);
  return box.address;
}

export function openDraftBody(svc: Pick<Services, 'secretKey'>, d: Pick<Draft, 'bodyEnc'>): DraftBody {
  return JSON.parse(open(svc.secretKey, d.bodyEnc).toString('utf8')) as DraftBody;
}

/** A draft of the account the key sees, or 404. */
async function findDraft(svc: Services, caller: DraftCaller, id: string): Promise<Draft> {
  const d = await svc.db.draft.findFirst({ where: { id, accountId: caller.account.id } });
  if (!d || (caller.boxScope && !caller.boxScope.includes(d.boxId))) throw notFound('draft', id);
  return d;
}

type DraftAttachmentMeta = { filename: string | null; content_type: string; content_id: string | null; size_bytes: number };

export async function presentDraft(svc: Services, d: Draft, opts: { body: boolean; content?: boolean }, boxAddress?: string) {
  const address = boxAddress ?? (await svc.db.box.findUnique({ where: { id: d.boxId }, select: { address: true } }))?.address ?? '';
  const body = openDraftBody(svc, d);
  const meta = d.attachments as unknown as DraftAttachmentMeta[];
  return {
    id: d.id,
    box_id: d.boxId,
    from: formatMailbox({ name: d.fromName ?? undefined, address }),
    to: d.toAddresses,
    cc: d.ccAddresses,
    bcc: d.bccAddresses,
    subject: d.subject,
    ...(opts.body ? { text: body.text, html: body.html } : {}),
    attachments: meta.map((a, i) => ({ ...a, ...(opts.content ? { content_b64: body.attachments[i]?.content_b64 ?? '' } : {}) })),
    in_reply_to: d.inReplyTo,
    send_at: d.sendAt?.toISOString() ?? null,
    ready: d.toAddresses.length > 0 && (meta.length > 0 || body.text !== null || body.html !== null),
    imap_uid: d.uid,
    size_bytes: d.sizeBytes,
    created_at: d.createdAt.toISOString(),
    updated_at: d.updatedAt.toISOString(),
  };
}

/** POST /drafts. */
export async function createDraft(svc: Services, caller: DraftCaller, input: z.infer<typeof CreateDraftInput>) {
  const { reply_all, ...patch } = input;
  const d = await save(svc, caller, null, { ...patch, reply_all });
  return presentDraft(svc, d, { body: true });
}

/** A save found the draft changed since it read it. */
class SavedMeanwhile extends Error {}

/**
 * PUT /drafts/{id}: the fields given replace the draft's (null clears one); the others stay. Two changes at once
 * both apply: the later one is made again on top of the earlier.
 */
export async function updateDraft(svc: Services, caller: DraftCaller, input: z.infer<typeof UpdateDraftInput>) {
  const { id, ...patch } = input;
  for (let attempt = 1; ; attempt++) {
    try {
      const d = await save(svc, caller, await findDraft(svc, caller, id), patch);
      return presentDraft(svc, d, { body: true });
    } catch (err) {
      if (!(err instanceof SavedMeanwhile) || attempt >= 5)
        throw err instanceof SavedMeanwhile ? new AppError('conflict', `draft ${id} is being changed by another call; try again`) : err;
    }
  }
}

/** GET /drafts/{id}. */
export async function getDraft(svc: Services, caller: DraftCaller, input: { id: string; include?: 'attachment_content' | undefined }) {
  return presentDraft(svc, await findDraft(svc, caller, input.id), { body: true, content: input.include === 'attachment_content' });
}

const CURSOR = /^(\d+)\.(drf_[0-9a-z]{20})$/;

/** GET /drafts: newest first, the account's (the key's boxes) or one box's, paged like GET /messages/send/bulk. */
export async function listDrafts(
  svc: Services,
  caller: DraftCaller,
  input: { box?: string | undefined; include?: 'body' | undefined; limit: number; cursor?: string | undefined },
) {
  let boxIds: string[] | null = caller.boxScope;
  if (input.box) {
    const b = await svc.db.box.findFirst({
      where: { accountId: caller.account.id, OR: [{ id: input.box }, { address: input.box.toLowerCase() }] },
      select: { id: true },
    });
    if (!b || (boxIds && !boxIds.includes(b.id))) throw notFound('box', input.box);
    boxIds = [b.id];
  }
  let before: { createdAt: Date; id: string } | null = null;
  if (input.cursor) {
    const m = CURSOR.exec(input.cursor);
    if (!m) throw new AppError('invalid_cursor', 'cursor: not a next_cursor of this list');
    before = { createdAt: new Date(Number(m[1])), id: m[2]! };
  }
  const found = await svc.db.draft.findMany({
    where: {
      accountId: caller.account.id,
      ...(boxIds ? { boxId: { in: boxIds } } : {}),
      ...(before ? { OR: [{ createdAt: { lt: before.createdAt } }, { createdAt: before.createdAt, id: { lt: before.id } }] } : {}),
    },
    orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
    take: input.limit + 1,
  });
  const page = found.slice(0, input.limit);
  const boxes = new Map(
    (await svc.db.box.findMany({ where: { id: { in: [...new Set(page.map((d) => d.boxId))] } }, select: { id: true, address: true } })).map((b) => [
      b.id,
      b.address,
    ]),
  );
  const last = page[page.length - 1];
  return {
    drafts: await Promise.all(page.map((d) => presentDraft(svc, d, { body: input.include === 'body' }, boxes.get(d.boxId)))),
    next_cursor: found.length > input.limit && last ? `${last.createdAt.getTime()}.${last.id}` : null,
  };
}

/** Deletes a draft's row and tells its folder (a draft deleted or sent leaves the Drafts folder). */
async function dropDraft(svc: Services, d: Pick<Draft, 'id' | 'folderId' | 'accountId'>): Promise<boolean> {
  return svc.db.$transaction(async (tx) => {
    const gone = await tx.draft.deleteMany({ where: { id: d.id } });
    if (gone.count) {
      await bumpFolder(tx, d.folderId);
      await notifyFolders(tx, d.accountId);
    }
    return gone.count > 0;
  });
}

/** DELETE /drafts/{id}. */
export async function deleteDraft(svc: Services, caller: DraftCaller, id: string) {
  const d = await findDraft(svc, caller, id);
  if (!(await dropDraft(svc, d))) throw notFound('draft', id);
  return { id, deleted: true as const };
}

/** The send a draft makes: a reply's when it answers a message (with the draft's recipients and subject). */
async function draftSendInput(svc: Services, caller: SendCaller, d: Draft, body: DraftBody): Promise<z.infer<typeof SendInput>> {
  const from = formatMailbox({ name: d.fromName ?? undefined, address: await currentFrom(svc, d) });
  const attachments = body.attachments.map((a) => ({
    filename: a.filename ?? 'attachment',
    content_type: a.content_type,
    content_b64: a.content_b64,
    ...(a.content_id ? { content_id: a.content_id } : {}),
  }));
  const common = {
    from,
    ...(d.bccAddresses.length ? { bcc: d.bccAddresses } : {}),
    ...(body.text !== null ? { text: body.text } : {}),
    ...(body.html !== null ? { html: body.html } : {}),
    ...(attachments.length ? { attachments } : {}),
    ...(d.sendAt ? { send_at: d.sendAt.toISOString() } : {}),
  };
  if (d.inReplyTo) {
    const reply = await replySendInput(svc, caller, { id: d.inReplyTo, ...common });
    return {
      ...reply,
      ...(d.toAddresses.length ? { to: d.toAddresses } : {}),
      ...(d.ccAddresses.length ? { cc: d.ccAddresses } : {}),
      ...(d.subject !== null ? { subject: d.subject } : {}),
    };
  }
  return {
    ...common,
    // A draft without recipients is refused by the send's own rule (400 validation_error on to).
    to: d.toAddresses as [string, ...string[]],
    ...(d.ccAddresses.length ? { cc: d.ccAddresses } : {}),
    subject: d.subject ?? '',
  };
}

/** The stored answer of the message a draft became, as a repeated send answers it. */
function replayOf(m: { response: unknown }, draftId: string): SendOut & { draft_id: string } {
  return { ...(m.response as SendOut), idempotent_replay: true, draft_id: draftId };
}

/**
 * POST /drafts/{id}/send: the draft through the send path (every rule of POST /messages/send, or of a reply);
 * with send_at, a scheduled send. A draft already sent answers its message's response again (200,
 * idempotent_replay: true); two sends at once store one message (messages.draft_id is unique). The draft is
 * deleted once its message is stored, or once owner review holds the send (the review then holds its content).
 */
export async function sendDraft(svc: Services, caller: SendCaller, id: string): Promise<(SendOut & { draft_id: string }) | ReviewView> {
  const accountId = caller.account.id;
  const visible = (boxId: string | null) => !caller.boxScope || (boxId !== null && caller.boxScope.includes(boxId));
  const sentAs = () => svc.db.message.findFirst({ where: { accountId, draftId: id }, select: { response: true, boxId: true } });
  const prior = await sentAs();
  if (prior) {
    if (!visible(prior.boxId)) throw notFound('draft', id);
    // Sent before, its row left behind (the process stopped in between): it goes now.
    const left = await svc.db.draft.findFirst({ where: { id, accountId }, select: { id: true, folderId: true, accountId: true } });
    if (left) await dropDraft(svc, left);
    return replayOf(prior, id);
  }
  const d = await findDraft(svc, caller, id);
  const send = await draftSendInput(svc, caller, d, openDraftBody(svc, d));
  let out: SendOrHeld;
  try {
    out = await sendMessage(svc, { ...caller, draftId: id }, send);
  } catch (err) {
    // The same draft sent at the same moment: the other call stored its message first.
    if (isUniqueViolation(err)) {
      const m = await sentAs();
      if (m) return replayOf(m, id);
    }
    throw err;
  }
  await dropDraft(svc, d);
  // Held for the owner's review: the review now holds what the draft held (GET /reviews/{id}).
  if (heldForReview(out)) return out;
  return { ...out, draft_id: id };
}

/** Mailboxes of a parsed address header, as Name <address> (entries without an address left out). */
function headerAddresses(v: ParsedMessage['mail']['to']): string[] {
  const all = Array.isArray(v) ? v : v ? [v] : [];
  return all
    .flatMap((a) => a.value.flatMap((e) => (e.group ? e.group : [e])))
    .filter((e) => e.address)
    .map((e) => formatMailbox({ name: e.name || undefined, address: e.address! }));
}

/**
 * A message a mail client APPENDs to a box's Drafts folder becomes a draft of that box (parsed with
 * mailparser): its recipients, subject, text, html and attachments, and In-Reply-To when it names a message of
 * the account. The same checks as POST /drafts apply. Returns the draft and its UID in the folder.
 */
export async function appendDraft(
  svc: Services,
  input: { accountId: string; boxId: string; raw: Buffer },
): Promise<{ id: string; uid: number; uidValidity: number }> {
  const account = await svc.db.account.findUniqueOrThrow({ where: { id: input.accountId }, select: { id: true, primaryAddress: true } });
  const box = await svc.db.box.findFirst({ where: { id: input.boxId, accountId: input.accountId }, select: { address: true } });
  if (!box) throw notFound('box', input.boxId);
  const parsed = await parseMessage(input.raw);
  const mail = parsed.mail;
  const fromName = mail.from?.value[0]?.name || undefined;
  const parent = parsed.inReplyTo
    ? await svc.db.message.findFirst({ where: { accountId: input.accountId, rfcMessageId: parsed.inReplyTo }, select: { id: true } })
    : null;
  const d = await save(svc, { account, boxScope: null }, null, {
    from: formatMailbox({ name: fromName, address: box.address }),
    to: headerAddresses(mail.to),
    cc: headerAddresses(mail.cc),
    bcc: headerAddresses(mail.bcc),
    ...(parsed.subject !== null ? { subject: parsed.subject.replace(/[\r\n\0]+/g, ' ') } : {}),
    ...(parsed.text !== null ? { text: parsed.text } : {}),
    ...(parsed.html !== null ? { html: parsed.html } : {}),
    attachments: parsed.attachments.map((a) => ({
      filename: a.filename ?? 'attachment',
      content_type: a.contentType,
      content_b64: a.content.toString('base64'),
      ...(a.contentId ? { content_id: a.contentId.replace(/^<|>$/g, '') } : {}),
    })),
    ...(parent ? { in_reply_to: parent.id } : {}),
  });
  const folder = await svc.db.mailFolder.findUniqueOrThrow({ where: { id: d.folderId }, select: { uidValidity: true } });
  return { id: d.id, uid: d.uid, uidValidity: folder.uidValidity };
}
