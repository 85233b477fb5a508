/**
 * The messages of a folder as IMAP sees them (UID, flags, modseq, size, internal date), and the changes mail
 * clients make: flags, copy, move, expunge. Flags other than \Deleted belong to the message (and show on GET
 * /messages); \Deleted belongs to the folder entry. Every change moves the modseq of each folder it touches, so
 * open views (on any process) notice on their next look. Expunging a message from its last folder reclaims it as
 * DELETE /messages/{id} does.
 */
import type { Services } from '../shared/context';
import type { CopyRow } from '@boxes/db';
import { open } from '../shared/crypto';
import { ensureComposed } from '../messages/deliver';
import { deleteMessage } from '../messages/read';
import { appendLabelEvents, diffLabels, labelsOf, type LabelActor, type LabelChange } from '../messages/labels';
import { appendToFolder } from './sync';

/** Message flag bits (message_flags.flags). */
export const FLAG_BITS = { '\\Seen': 1, '\\Answered': 2, '\\Flagged': 4, '\\Draft': 8 } as const;
export type SystemFlag = keyof typeof FLAG_BITS;

export interface FolderEntry {
  uid: number;
  messageId: string;
  /** FLAG_BITS of the message. */
  flags: number;
  keywords: string[];
  deleted: boolean;
  modseq: bigint;
  /** Octets of the stored RFC 5322 message (RFC822.SIZE). */
  size: number;
  internalDate: Date;
}

interface RawEntry {
  uid: number;
  message_id: string;
  flags: number;
  keywords: string[] | null;
  deleted: boolean;
  modseq: bigint;
  size_bytes: number;
  recorded_at: Date;
  needs_compose: boolean;
}

const toEntry = (r: RawEntry): FolderEntry => ({
  uid: r.uid,
  messageId: r.message_id,
  flags: r.flags,
  keywords: r.keywords ?? [],
  deleted: r.deleted,
  modseq: BigInt(r.modseq),
  size: r.size_bytes,
  internalDate: r.recorded_at,
});

async function readEntries(svc: Pick<Services, 'db'>, folderId: string): Promise<RawEntry[]> {
  return svc.db.$queryRaw<RawEntry[]>`
    SELECT e.uid, e.message_id, COALESCE(f.flags, 0) AS flags, f.keywords, e.deleted, e.modseq, m.size_bytes, m.recorded_at,
      (m.raw_enc IS NULL AND m.body_enc IS NOT NULL) AS needs_compose
    FROM mail_folder_entries e JOIN messages m ON m.id = e.message_id LEFT JOIN message_flags f ON f.message_id = e.message_id
    WHERE e.folder_id = ${folderId} ORDER BY e.uid`;
}

/**
 * Every message of a folder in UID order. A sent message not yet composed (queued before any delivery attempt)
 * is composed and signed now, as its delivery would, so its size is that of the bytes clients will fetch.
 */
export async function loadFolderEntries(svc: Services, folderId: string): Promise<FolderEntry[]> {
  let rows = await readEntries(svc, folderId);
  const pending = rows.filter((r) => r.needs_compose).map((r) => r.message_id);
  if (pending.length) {
    const messages = await svc.db.message.findMany({ where: { id: { in: pending } } });
    for (const m of messages) {
      try {
        await ensureComposed(svc, m);
      } catch {
        // Reclaimed in the meantime: it leaves the folder with the next fold.
      }
    }
    rows = await readEntries(svc, folderId);
  }
  return rows.map(toEntry);
}

/**
 * Runs a query as a binary COPY and hands over each row (a pg Pool's client through copyOutBinary): for the one
 * read where the rows' decoding costs more CPU than PostgreSQL, the sealed raw messages a mail client downloads
 * one after another. Their bytes arrive as bytes (an ordinary node-pg result, Prisma's included, gives a bytea
 * as hex text to decode again), and each is decrypted as its row arrives.
 */
export type RawCopy = (query: string, onRow: (row: CopyRow) => void) => Promise<void>;

/** Message ids as newId makes them, the only values inlined into a COPY statement (it takes no parameters). */
const MESSAGE_ID = /^msg_[0-9a-z]{1,40}$/;

/**
 * The stored RFC 5322 bytes of messages (decrypted); null for a message whose body was reclaimed. Typed SQL on
 * the path of every message a mail client downloads; through `copy` when given (see RawCopy).
 */
export async function loadRawMessages(svc: Services, messageIds: string[], copy?: RawCopy): Promise<Map<string, Buffer | null>> {
  const out = new Map<string, Buffer | null>();
  if (!messageIds.length) return out;
  if (copy && messageIds.every((id) => MESSAGE_ID.test(id))) {
    await copy(`SELECT id, raw_enc FROM messages WHERE id IN (${messageIds.map((id) => `'${id}'`).join(',')})`, (row) => {
      out.set(row[0]!.toString('latin1'), row[1] ? open(svc.secretKey, row[1]) : null);
    });
  } else {
    const rows = await svc.db.$queryRaw<{ id: string; raw_enc: Uint8Array | null }[]>`SELECT id, raw_enc FROM messages WHERE id = ANY(${messageIds}::text[])`;
    for (const r of rows) out.set(r.id, r.raw_enc ? open(svc.secretKey, r.raw_enc) : null);
  }
  for (const id of messageIds) if (!out.has(id)) out.set(id, null);
  return out;
}

export interface FlagChange {
  /** add: +FLAGS, remove: -FLAGS, set: FLAGS. */
  mode: 'add' | 'remove' | 'set';
  /** FLAG_BITS to add, remove or set. */
  bits: number;
  /** \Deleted: added, removed or (set) present. */
  deleted: boolean;
  keywords: string[];
  /** CONDSTORE UNCHANGEDSINCE: entries modified after this are left alone and reported. */
  unchangedSince?: bigint | undefined;
}

export interface StoreResult {
  /** Entries whose flags changed, with their new values. */
  changed: FolderEntry[];
  /** UIDs left alone because they changed after unchangedSince. */
  modified: number[];
  /** The folder's modseq after the change. */
  highestModseq: bigint;
}

function apply(mode: FlagChange['mode'], current: number, bits: number): number {
  return mode === 'add' ? current | bits : mode === 'remove' ? current & ~bits : bits;
}

function applyKeywords(mode: FlagChange['mode'], current: string[], given: string[]): string[] {
  const lower = (xs: string[]) => new Set(xs.map((k) => k.toLowerCase()));
  if (mode === 'set') return [...new Map(given.map((k) => [k.toLowerCase(), k])).values()];
  if (mode === 'remove') {
    const drop = lower(given);
    return current.filter((k) => !drop.has(k.toLowerCase()));
  }
  const out = [...current];
  const have = lower(current);
  for (const k of given) {
    if (have.has(k.toLowerCase())) continue;
    have.add(k.toLowerCase());
    out.push(k);
  }
  return out;
}

/**
 * STORE: changes the flags of these UIDs of a folder. Changes a label shows (every flag but \Deleted) append
 * message.labels_changed, by the actor's app-password.
 */
export async function storeFlags(
  svc: Pick<Services, 'db'>,
  input: { accountId: string; folderId: string; uids: number[]; change: FlagChange; actor?: LabelActor | undefined },
): Promise<StoreResult> {
  const { change } = input;
  return svc.db.$transaction(
    async (tx) => {
      const raw = await tx.$queryRaw<(RawEntry & { direction: string; box_id: string | null; thread_id: string })[]>`
        SELECT e.uid, e.message_id, COALESCE(f.flags, 0) AS flags, f.keywords, e.deleted, e.modseq, m.size_bytes, m.recorded_at, false AS needs_compose,
          m.direction, m.box_id, m.thread_id
        FROM mail_folder_entries e JOIN messages m ON m.id = e.message_id LEFT JOIN message_flags f ON f.message_id = e.message_id
        WHERE e.folder_id = ${input.folderId} AND e.uid = ANY(${input.uids}::int[]) ORDER BY e.uid FOR UPDATE OF e`;
      const modified: number[] = [];
      const changed: FolderEntry[] = [];
      const labelChanges: LabelChange[] = [];
      const about = new Map(raw.map((r) => [r.message_id, r]));
      for (const r of raw.map(toEntry)) {
        if (change.unchangedSince !== undefined && r.modseq > change.unchangedSince) {
          modified.push(r.uid);
          continue;
        }
        const flags = apply(change.mode, r.flags, change.bits);
        const deleted = change.mode === 'add' ? r.deleted || change.deleted : change.mode === 'remove' ? r.deleted && !change.deleted : change.deleted;
        const keywords = applyKeywords(change.mode, r.keywords, change.keywords);
        const same = flags === r.flags && deleted === r.deleted && keywords.length === r.keywords.length && keywords.every((k, i) => k === r.keywords[i]);
        if (same) continue;
        changed.push({ ...r, flags, deleted, keywords });
        const m = about.get(r.messageId)!;
        const diff = diffLabels(labelsOf(r.flags, r.keywords, m.direction), labelsOf(flags, keywords, m.direction));
        if (diff.added.length || diff.removed.length) labelChanges.push({ ...diff, messageId: r.messageId, threadId: m.thread_id, boxId: m.box_id });
      }
      const [head] = await tx.$queryRaw<{ highest_modseq: bigint }[]>`
        UPDATE mail_folders SET highest_modseq = highest_modseq + ${changed.length ? 1 : 0} WHERE id = ${input.folderId} RETURNING highest_modseq`;
      const modseq = BigInt(head!.highest_modseq);
      if (!changed.length) return { changed, modified, highestModseq: modseq };
      const payload = JSON.stringify(changed.map((c) => ({ uid: c.uid, message_id: c.messageId, flags: c.flags, keywords: c.keywords, deleted: c.deleted })));
      await tx.$executeRaw`
        UPDATE mail_folder_entries e SET deleted = x.deleted, modseq = ${modseq}
        FROM jsonb_to_recordset(${payload}::jsonb) AS x(uid int, message_id text, flags int, keywords text[], deleted boolean)
        WHERE e.folder_id = ${input.folderId} AND e.uid = x.uid`;
      await tx.$executeRaw`
        INSERT INTO message_flags (message_id, account_id, flags, keywords, updated_at)
        SELECT x.message_id, ${input.accountId}, x.flags, x.keywords, now()
        FROM jsonb_to_recordset(${payload}::jsonb) AS x(uid int, message_id text, flags int, keywords text[], deleted boolean)
        ON CONFLICT (message_id) DO UPDATE SET flags = EXCLUDED.flags, keywords = EXCLUDED.keywords, updated_at = now()`;
      // The same messages in other folders (copies) show the new flags there too.
      await tx.$executeRaw`
        WITH touched AS (
          UPDATE mail_folders f SET highest_modseq = f.highest_modseq + 1
          WHERE f.id IN (SELECT DISTINCT e.folder_id FROM mail_folder_entries e WHERE e.message_id = ANY(${changed.map((c) => c.messageId)}::text[]) AND e.folder_id <> ${input.folderId})
          RETURNING f.id, f.highest_modseq
        )
        UPDATE mail_folder_entries e SET modseq = t.highest_modseq FROM touched t
        WHERE e.folder_id = t.id AND e.message_id = ANY(${changed.map((c) => c.messageId)}::text[])`;
      if (input.actor) await appendLabelEvents(tx, input.accountId, labelChanges, input.actor);
      return { changed: changed.map((c) => ({ ...c, modseq })), modified, highestModseq: modseq };
    },
    { maxWait: 10_000, timeout: 20_000 },
  );
}

export interface CopyResult {
  /** Source UID to destination UID, in source UID order. */
  pairs: { from: number; to: number }[];
  destUidValidity: number;
}

/**
 * COPY and MOVE between two folders of the same box. A message already in the destination keeps its UID there
 * (it is reported as the copy). MOVE takes the messages out of the source in the same transaction.
 */
export async function copyEntries(
  svc: Pick<Services, 'db'>,
  input: { fromFolderId: string; toFolderId: string; uids: number[]; move: boolean },
): Promise<CopyResult> {
  return svc.db.$transaction(
    async (tx) => {
      const source = await tx.$queryRaw<{ uid: number; message_id: string; deleted: boolean }[]>`
        SELECT uid, message_id, deleted FROM mail_folder_entries WHERE folder_id = ${input.fromFolderId} AND uid = ANY(${input.uids}::int[]) ORDER BY uid FOR UPDATE`;
      const existing = await tx.$queryRaw<{ uid: number; message_id: string }[]>`
        SELECT uid, message_id FROM mail_folder_entries WHERE folder_id = ${input.toFolderId} AND message_id = ANY(${source.map((s) => s.message_id)}::text[])`;
      const known = new Map(existing.map((e) => [e.message_id, e.uid]));
      const added = await appendToFolder(
        tx,
        input.toFolderId,
        source.filter((s) => !known.has(s.message_id)).map((s) => s.message_id),
      );
      for (const a of added) known.set(a.messageId, a.uid);
      if (input.move && source.length) {
        await tx.$executeRaw`DELETE FROM mail_folder_entries WHERE folder_id = ${input.fromFolderId} AND uid = ANY(${source.map((s) => s.uid)}::int[])`;
        await tx.$executeRaw`UPDATE mail_folders SET highest_modseq = highest_modseq + 1 WHERE id = ${input.fromFolderId}`;
      }
      const [dest] = await tx.$queryRaw<{ uid_validity: number }[]>`SELECT uid_validity FROM mail_folders WHERE id = ${input.toFolderId}`;
      return {
        pairs: source.filter((s) => known.has(s.message_id)).map((s) => ({ from: s.uid, to: known.get(s.message_id)! })),
        destUidValidity: dest?.uid_validity ?? 0,
      };
    },
    { maxWait: 10_000, timeout: 20_000 },
  );
}

/**
 * EXPUNGE: removes the entries marked \Deleted (only those of `uids` when given, UID EXPUNGE). A message that
 * is then in no folder at all is reclaimed as DELETE /messages/{id} reclaims it (body and raw message removed,
 * message.deleted appended). Returns the UIDs removed.
 */
export async function expungeEntries(
  svc: Services,
  input: { accountId: string; folderId: string; uids?: number[] | undefined; actorId: string },
): Promise<number[]> {
  const removed = await svc.db.$transaction(
    async (tx) => {
      const rows = input.uids
        ? await tx.$queryRaw<{ uid: number; message_id: string }[]>`
            DELETE FROM mail_folder_entries WHERE folder_id = ${input.folderId} AND deleted AND uid = ANY(${input.uids}::int[]) RETURNING uid, message_id`
        : await tx.$queryRaw<{ uid: number; message_id: string }[]>`
            DELETE FROM mail_folder_entries WHERE folder_id = ${input.folderId} AND deleted RETURNING uid, message_id`;
      if (rows.length) await tx.$executeRaw`UPDATE mail_folders SET highest_modseq = highest_modseq + 1 WHERE id = ${input.folderId}`;
      const orphans = rows.length
        ? await tx.$queryRaw<{ id: string }[]>`
            SELECT m.id FROM messages m WHERE m.id = ANY(${rows.map((r) => r.message_id)}::text[]) AND m.body_reclaimed_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM mail_folder_entries e WHERE e.message_id = m.id)`
        : [];
      return { uids: rows.map((r) => r.uid).sort((a, b) => a - b), orphans: orphans.map((o) => o.id) };
    },
    { maxWait: 10_000, timeout: 20_000 },
  );
  for (const id of removed.orphans) {
    try {
      await deleteMessage(svc, { accountId: input.accountId, scope: null, id, purge: false, actorKeyId: input.actorId });
    } catch {
      // Gone already (deleted over the API at the same moment): nothing left to reclaim.
    }
  }
  return removed.uids;
}

/** The flags of messages as GET /messages shows them (a sent message is \Seen until a client says otherwise). */
export async function messageFlags(svc: Pick<Services, 'db'>, messageIds: string[]): Promise<Map<string, string[]>> {
  const out = new Map<string, string[]>();
  if (!messageIds.length) return out;
  const rows = await svc.db.$queryRaw<{ id: string; flags: number; keywords: string[] | null }[]>`
    SELECT m.id, COALESCE(f.flags, CASE WHEN m.direction = 'sent' THEN 1 ELSE 0 END) AS flags, f.keywords
    FROM messages m LEFT JOIN message_flags f ON f.message_id = m.id WHERE m.id = ANY(${messageIds}::text[])`;
  for (const r of rows) out.set(r.id, flagNames(r.flags, false, r.keywords ?? []));
  return out;
}

/** IMAP flag names of a message's bits, \Deleted and keywords, in a stable order. */
export function flagNames(bits: number, deleted: boolean, keywords: string[]): string[] {
  const names = (Object.entries(FLAG_BITS) as [SystemFlag, number][]).filter(([, b]) => bits & b).map(([n]) => n);
  if (deleted) names.push('\\Deleted' as SystemFlag);
  return [...names, ...keywords];
}
