/**
 * The messages of a folder as IMAP sees them (UID, flags, modseq, size, internal date), and the changes mail
 * clients make: flags, copy, move, expunge. Flags other than \Deleted belong to the message (and show on GET
 * /messages); \Deleted belongs to the folder entry. Every change moves the modseq of each folder it touches, so
 * open views (on any process) notice on their next look. Expunging a message from its last folder reclaims it as
 * DELETE /messages/{id} does.
 */
import type { Services } from '../shared/context';
import { exec, k, poolRows, rows, sql, tbl, type CopyRow, type RawBuilder } from '@boxes/db';
import { open } from '../shared/crypto';
import { ensureComposed } from '../messages/deliver';
import { deleteMessage } from '../messages/read';
import { appendLabelEvents, defaultFlags, diffLabels, labelsOf, type LabelActor, type LabelChange } from '../messages/labels';
import { appendToFolder } from './sync';

/** Message flag bits (message_flags.flags). */
export const FLAG_BITS = { '\\Seen': 1, '\\Answered': 2, '\\Flagged': 4, '\\Draft': 8 } as const;
export type SystemFlag = keyof typeof FLAG_BITS;

export interface FolderEntry {
  uid: number;
  messageId: string;
  /** FLAG_BITS of the message. */
  flags: number;
  /** Read-only: entries read without keywords share one frozen empty list (a change makes a new list). */
  keywords: readonly string[];
  deleted: boolean;
  modseq: bigint;
  /** Octets of the stored RFC 5322 message (RFC822.SIZE). */
  size: number;
  internalDate: Date;
}

/** An entry as entriesOf reads it: keywords null where the message has none. */
type RawEntry = Omit<FolderEntry, 'keywords'> & { keywords: readonly string[] | null };

const toEntry = (r: RawEntry): FolderEntry => ({
  uid: r.uid,
  messageId: r.messageId,
  flags: r.flags,
  keywords: r.keywords ?? [],
  deleted: r.deleted,
  modseq: BigInt(r.modseq),
  size: r.size,
  internalDate: r.internalDate,
});

/** `= ANY(values)` for one parameter holding any number of values (a list of parameters would need one each). */
const anyText = (values: readonly string[]) => sql<string>`ANY(${values}::text[])`;
const anyInt = (values: readonly number[]) => sql<number>`ANY(${values}::int[])`;

/** A folder's entries with their messages and flags (e, m, f), the columns named as FolderEntry names them. */
const entriesOf = (folderId: string) =>
  k
    .selectFrom('mail_folder_entries as e')
    .innerJoin('messages as m', 'm.id', 'e.message_id')
    .leftJoin('message_flags as f', 'f.message_id', 'e.message_id')
    .select((eb) => [
      'e.uid',
      'e.message_id as messageId',
      eb.fn.coalesce('f.flags', sql.lit(0)).as('flags'),
      'f.keywords',
      'e.deleted',
      'e.modseq',
      'm.size_bytes as size',
      'm.recorded_at as internalDate',
    ])
    .where('e.folder_id', '=', folderId);

/** A folder entry as the folder's read answers it: whether a sent message is still to be composed beside it. */
type EntryRow = FolderEntry & { needsCompose: boolean };

/** The one keyword list of every entry read without keywords (frozen: a change makes a new list, see STORE). */
const NO_KEYWORDS: readonly string[] = Object.freeze([]);

/**
 * Read on the pg pool under the client (poolRows), its columns named as FolderEntry names them, so each row is
 * the entry itself: a folder of 10,000 messages is 10,000 rows each time a mail client selects it, and an object
 * made again from each row (and a list for each row without keywords) was as many objects more to allocate,
 * most of them kept as long as the folder stays selected. Prisma's client turned each row into its own objects
 * first (values normalised as text, then converted again), most of the CPU and short-lived memory of a SELECT.
 */
async function readEntries(svc: Pick<Services, 'db'>, folderId: string): Promise<EntryRow[]> {
  const found: (RawEntry & { needsCompose: boolean })[] = await poolRows(
    svc.db,
    entriesOf(folderId)
      .select((eb) =>
        eb
          .and([eb('m.raw_enc', 'is', null), eb('m.body_enc', 'is not', null)])
          .$castTo<boolean>()
          .as('needsCompose'),
      )
      .orderBy('e.uid'),
  );
  for (let i = 0; i < found.length; i++) found[i]!.keywords ??= NO_KEYWORDS;
  return found as EntryRow[];
}

/**
 * Every message of a folder in UID order. A sent message not yet composed (queued before any delivery attempt)
 * is composed and signed now, as its delivery would, so its size is that of the bytes clients will fetch.
 */
export async function loadFolderEntries(svc: Services, folderId: string): Promise<FolderEntry[]> {
  let entries = await readEntries(svc, folderId);
  const pending = entries.filter((r) => r.needsCompose).map((r) => r.messageId);
  if (pending.length) {
    const messages = await svc.db.message.findMany({ where: { id: { in: pending } } });
    for (const m of messages) {
      try {
        await ensureComposed(svc, m);
      } catch {
        // Reclaimed in the meantime: it leaves the folder with the next fold.
      }
    }
    entries = await readEntries(svc, folderId);
  }
  const drafts = await draftEntries(svc.db, folderId);
  return drafts.length ? [...entries, ...drafts].sort((a, b) => a.uid - b.uid) : entries;
}

/**
 * The drafts of a Drafts folder as entries (drafts/drafts.ts): each under the UID its last save gave it, keyed
 * by draft id and UID (a changed draft is another message to a client's cache).
 */
async function draftEntries(db: Services['db'], folderId: string): Promise<FolderEntry[]> {
  const found = await rows(
    db,
    k
      .selectFrom('drafts')
      .select(['id', 'uid', 'flags', 'imap_deleted', 'modseq', 'size_bytes', 'updated_at'])
      .where('folder_id', '=', folderId)
      .orderBy('uid'),
  );
  return found.map((d) => ({
    uid: d.uid,
    messageId: draftKey(d.id, d.uid),
    flags: d.flags,
    keywords: [],
    deleted: d.imap_deleted,
    modseq: BigInt(d.modseq),
    size: d.size_bytes,
    internalDate: d.updated_at,
  }));
}

/** A draft's entry key (FolderEntry.messageId): its id and the UID of its current save. */
const draftKey = (id: string, uid: number) => `${id}.${uid}`;
const DRAFT_KEY = /^(drf_[0-9a-z]{20})\.(\d+)$/;

/** The rendered drafts of these entry keys; null for a draft gone or saved again since (another UID). */
async function loadDraftRaws(svc: Services, keys: string[]): Promise<Map<string, Buffer | null>> {
  const out = new Map<string, Buffer | null>();
  const ids = keys.flatMap((key) => {
    const m = DRAFT_KEY.exec(key);
    return m ? [m[1]!] : [];
  });
  const found = ids.length ? await rows(svc.db, k.selectFrom('drafts').select(['id', 'uid', 'raw_enc']).where('id', '=', anyText(ids))) : [];
  const byKey = new Map(found.map((d) => [draftKey(d.id, d.uid), d.raw_enc]));
  for (const key of keys) {
    const raw = byKey.get(key);
    out.set(key, raw ? open(svc.secretKey, raw) : null);
  }
  return out;
}

/**
 * Runs a query as a binary COPY and hands over each row (a pg Pool's client through copyOutBinary): for the one
 * read where the rows' decoding costs more CPU than PostgreSQL, the sealed raw messages a mail client downloads
 * one after another. Their bytes arrive as bytes (an ordinary node-pg result, Prisma's included, gives a bytea
 * as hex text to decode again).
 */
export type RawCopy = (query: string, onRow: (row: CopyRow) => void) => Promise<void>;

/** Message ids as newId makes them, the only values inlined into a COPY statement (it takes no parameters). */
const MESSAGE_ID = /^msg_[0-9a-z]{1,40}$/;

/**
 * What loadSealedMessages hands over for each message: its bytes as stored (sealed: open them with `open`, and
 * only during the call, as they may be a view into the connection's read buffer) or already opened (a draft);
 * null for a message whose body was reclaimed.
 */
export type TakeMessage = (id: string, bytes: Buffer | null, sealed: boolean) => void;

/**
 * The stored RFC 5322 bytes of messages and drafts, each handed to `take` as it arrives and left sealed: a reader
 * that keeps messages a while (read ahead) copies the sealed bytes into memory it reuses and opens each only when
 * it is used, so the opened bytes are let go young. Typed SQL on the path of every message a mail client
 * downloads; through `copy` when given (see RawCopy). Every id is handed over once.
 */
export async function loadSealedMessages(svc: Services, ids: string[], copy: RawCopy | undefined, take: TakeMessage): Promise<void> {
  // Drafts (in a Drafts folder) beside the messages.
  const drafts = ids.filter((id) => id.startsWith('drf_'));
  if (drafts.length) for (const [id, raw] of await loadDraftRaws(svc, drafts)) take(id, raw, false);
  const messageIds = drafts.length ? ids.filter((id) => !id.startsWith('drf_')) : ids;
  if (!messageIds.length) return;
  const given = new Set<string>();
  const give = (id: string, sealed: Buffer | null) => {
    given.add(id);
    take(id, sealed, sealed !== null);
  };
  if (copy && messageIds.every((id) => MESSAGE_ID.test(id))) {
    // COPY takes no parameters: the ids (checked above: letters and digits only) are inlined as literals. The
    // statement is written out rather than compiled from a query builder with one literal node per id: that took
    // about 0.05 ms of CPU per statement of 128 ids once optimised (the text takes 0.002) and much more before,
    // on the first syncs after a start.
    await copy(`SELECT "id", "raw_enc" FROM "messages" WHERE "id" IN ('${messageIds.join("', '")}')`, (row) =>
      give(row[0]!.toString('latin1'), row[1] ?? null),
    );
  } else {
    const found = await rows(svc.db, k.selectFrom('messages').select(['id', 'raw_enc']).where('id', '=', anyText(messageIds)));
    for (const r of found) give(r.id, r.raw_enc ? Buffer.from(r.raw_enc.buffer, r.raw_enc.byteOffset, r.raw_enc.byteLength) : null);
  }
  for (const id of messageIds) if (!given.has(id)) take(id, null, false);
}

/** A folder's modseq moves on (a change no entry records: entries went out of it). */
const bumpModseq = (folderId: string) =>
  k
    .updateTable('mail_folders')
    .set((eb) => ({ highest_modseq: eb('highest_modseq', '+', sql.lit(1n)) }))
    .where('id', '=', folderId);

/** The entries a STORE changed, as a recordset read from one JSON parameter. */
const changedSet = (payload: string): RawBuilder<unknown> =>
  sql`jsonb_to_recordset(${payload}::jsonb) AS x(uid int, message_id text, flags int, keywords text[], deleted boolean)`;

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

function applyKeywords(mode: FlagChange['mode'], current: readonly string[], given: readonly string[]): string[] {
  const lower = (xs: readonly string[]) => new Set(xs.map((k) => k.toLowerCase()));
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
      const raw: (RawEntry & { direction: string; box_id: string | null; thread_id: string })[] = await rows(
        tx,
        entriesOf(input.folderId).select(['m.direction', 'm.box_id', 'm.thread_id']).where('e.uid', '=', anyInt(input.uids)).orderBy('e.uid').forUpdate('e'),
      );
      const modified: number[] = [];
      const changed: FolderEntry[] = [];
      const labelChanges: LabelChange[] = [];
      const about = new Map(raw.map((r) => [r.messageId, r]));
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
      // Drafts of a Drafts folder: their flags and \Deleted are the draft row's.
      const drafts = await rows(
        tx,
        k
          .selectFrom('drafts')
          .select(['id', 'uid', 'flags', 'imap_deleted', 'modseq', 'size_bytes', 'updated_at'])
          .where('folder_id', '=', input.folderId)
          .where('uid', '=', anyInt(input.uids))
          .orderBy('uid')
          .forUpdate(),
      );
      const draftsChanged: (FolderEntry & { id: string })[] = [];
      for (const d of drafts) {
        if (change.unchangedSince !== undefined && BigInt(d.modseq) > change.unchangedSince) {
          modified.push(d.uid);
          continue;
        }
        const flags = apply(change.mode, d.flags, change.bits);
        const deleted =
          change.mode === 'add' ? d.imap_deleted || change.deleted : change.mode === 'remove' ? d.imap_deleted && !change.deleted : change.deleted;
        if (flags === d.flags && deleted === d.imap_deleted) continue;
        draftsChanged.push({
          id: d.id,
          uid: d.uid,
          messageId: draftKey(d.id, d.uid),
          flags,
          keywords: [],
          deleted,
          modseq: BigInt(d.modseq),
          size: d.size_bytes,
          internalDate: d.updated_at,
        });
      }
      const [head] = await rows(
        tx,
        k
          .updateTable('mail_folders')
          .set((eb) => ({ highest_modseq: eb('highest_modseq', '+', changed.length || draftsChanged.length ? 1n : 0n) }))
          .where('id', '=', input.folderId)
          .returning('highest_modseq'),
      );
      const modseq = BigInt(head!.highest_modseq);
      for (const d of draftsChanged) {
        await exec(tx, k.updateTable('drafts').set({ flags: d.flags, imap_deleted: d.deleted, modseq }).where('id', '=', d.id));
      }
      const draftEntriesChanged = draftsChanged.map(({ id: _id, ...e }) => ({ ...e, modseq }));
      if (!changed.length) return { changed: draftEntriesChanged, modified, highestModseq: modseq };
      const payload = JSON.stringify(changed.map((c) => ({ uid: c.uid, message_id: c.messageId, flags: c.flags, keywords: c.keywords, deleted: c.deleted })));
      const [e, fe] = [tbl('mail_folder_entries', 'e'), tbl('mail_folder_entries')];
      await exec(
        tx,
        sql`
        UPDATE ${e.$} SET ${fe.deleted} = x.deleted, ${fe.modseq} = ${modseq}
        FROM ${changedSet(payload)}
        WHERE ${e.folder_id} = ${input.folderId} AND ${e.uid} = x.uid`,
      );
      await exec(
        tx,
        k
          .insertInto('message_flags')
          .columns(['message_id', 'account_id', 'flags', 'keywords', 'updated_at'])
          .expression(sql`SELECT x.message_id, ${input.accountId}, x.flags, x.keywords, now() FROM ${changedSet(payload)}`)
          .onConflict((oc) =>
            oc.column('message_id').doUpdateSet((eb) => ({ flags: eb.ref('excluded.flags'), keywords: eb.ref('excluded.keywords'), updated_at: sql`now()` })),
          ),
      );
      // The same messages in other folders (copies) show the new flags there too.
      const [f, ff] = [tbl('mail_folders', 'f'), tbl('mail_folders')];
      await exec(
        tx,
        sql`
        WITH touched AS (
          UPDATE ${f.$} SET ${ff.highest_modseq} = ${f.highest_modseq} + 1
          WHERE ${f.id} IN (SELECT DISTINCT ${e.folder_id} FROM ${e.$} WHERE ${e.message_id} = ${anyText(changed.map((c) => c.messageId))} AND ${e.folder_id} <> ${input.folderId})
          RETURNING ${f.id}, ${f.highest_modseq}
        )
        UPDATE ${e.$} SET ${fe.modseq} = t.highest_modseq FROM touched t
        WHERE ${e.folder_id} = t.id AND ${e.message_id} = ${anyText(changed.map((c) => c.messageId))}`,
      );
      if (input.actor) await appendLabelEvents(tx, input.accountId, labelChanges, input.actor);
      return { changed: [...changed.map((c) => ({ ...c, modseq })), ...draftEntriesChanged].sort((a, b) => a.uid - b.uid), modified, highestModseq: modseq };
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
      const source = await rows(
        tx,
        k
          .selectFrom('mail_folder_entries')
          .select(['uid', 'message_id', 'deleted'])
          .where('folder_id', '=', input.fromFolderId)
          .where('uid', '=', anyInt(input.uids))
          .orderBy('uid')
          .forUpdate(),
      );
      const existing = await rows(
        tx,
        k
          .selectFrom('mail_folder_entries')
          .select(['uid', 'message_id'])
          .where('folder_id', '=', input.toFolderId)
          .where('message_id', '=', anyText(source.map((s) => s.message_id))),
      );
      const known = new Map(existing.map((e) => [e.message_id, e.uid]));
      const added = await appendToFolder(
        tx,
        input.toFolderId,
        source.filter((s) => !known.has(s.message_id)).map((s) => s.message_id),
      );
      for (const a of added) known.set(a.messageId, a.uid);
      // A draft moved out of its Drafts folder stops being a draft (a copy of one is not made: a draft is no
      // stored message); what clients move out of Drafts is what they delete.
      if (input.move) {
        const moved = await rows(
          tx,
          k.deleteFrom('drafts').where('folder_id', '=', input.fromFolderId).where('uid', '=', anyInt(input.uids)).returning(['uid']),
        );
        if (moved.length && !source.length) await exec(tx, bumpModseq(input.fromFolderId));
      }
      if (input.move && source.length) {
        await exec(
          tx,
          k
            .deleteFrom('mail_folder_entries')
            .where('folder_id', '=', input.fromFolderId)
            .where('uid', '=', anyInt(source.map((s) => s.uid))),
        );
        await exec(tx, bumpModseq(input.fromFolderId));
      }
      const [dest] = await rows(tx, k.selectFrom('mail_folders').select('uid_validity').where('id', '=', input.toFolderId));
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
      const marked = k
        .deleteFrom('mail_folder_entries')
        .where('folder_id', '=', input.folderId)
        .where((eb) => eb.ref('deleted'));
      const gone = await rows(tx, (input.uids ? marked.where('uid', '=', anyInt(input.uids)) : marked).returning(['uid', 'message_id']));
      // Drafts marked \Deleted in a Drafts folder are deleted (as DELETE /drafts/{id} deletes them).
      const markedDrafts = k
        .deleteFrom('drafts')
        .where('folder_id', '=', input.folderId)
        .where((eb) => eb.ref('imap_deleted'));
      const goneDrafts = await rows(tx, (input.uids ? markedDrafts.where('uid', '=', anyInt(input.uids)) : markedDrafts).returning(['uid']));
      if (gone.length || goneDrafts.length) await exec(tx, bumpModseq(input.folderId));
      const orphans = gone.length
        ? await rows(
            tx,
            k
              .selectFrom('messages as m')
              .select('m.id')
              .where('m.id', '=', anyText(gone.map((r) => r.message_id)))
              .where('m.body_reclaimed_at', 'is', null)
              .where((eb) => eb.not(eb.exists(eb.selectFrom('mail_folder_entries as e').select(sql.lit(1).as('one')).whereRef('e.message_id', '=', 'm.id')))),
          )
        : [];
      return { uids: [...gone, ...goneDrafts].map((r) => r.uid).sort((a, b) => a - b), orphans: orphans.map((o) => o.id) };
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
  const found = await rows(
    svc.db,
    k
      .selectFrom('messages as m')
      .leftJoin('message_flags as f', 'f.message_id', 'm.id')
      .select((eb) => ['m.id', eb.fn.coalesce('f.flags', defaultFlags('m')).as('flags'), 'f.keywords'])
      .where('m.id', '=', anyText(messageIds)),
  );
  for (const r of found) out.set(r.id, flagNames(r.flags, false, r.keywords ?? []));
  return out;
}

const FLAG_ENTRIES = Object.entries(FLAG_BITS) as [SystemFlag, number][];

/** IMAP flag names of a message's bits, \Deleted and keywords, in a stable order. */
export function flagNames(bits: number, deleted: boolean, keywords: readonly string[]): string[] {
  const names = FLAG_ENTRIES.filter(([, b]) => bits & b).map(([n]) => n);
  if (deleted) names.push('\\Deleted' as SystemFlag);
  return [...names, ...keywords];
}
