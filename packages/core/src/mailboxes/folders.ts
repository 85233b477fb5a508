/**
 * IMAP folders of a box: INBOX (mail the box received), Sent (mail sent from it), and Drafts, Trash, Archive and
 * Junk for mail clients to move messages into. Created on first use, one set per box; UIDVALIDITY is chosen at
 * creation and never changes, uidNext only grows. Mail stays in its own box's folders.
 */
import { randomInt } from 'node:crypto';
import { k, rows as run, sql, tbl, type DbClient, type DB, type Insertable } from '@boxes/db';
import { recordsetJson } from '../store/rows';
import { newId } from '../shared/ids';

export const FOLDER_ROLES = ['inbox', 'sent', 'drafts', 'trash', 'archive', 'junk'] as const;
export type FolderRole = (typeof FOLDER_ROLES)[number];

export interface FolderRow {
  id: string;
  boxId: string;
  role: FolderRole;
  uidValidity: number;
  uidNext: number;
  highestModseq: bigint;
}

interface RawFolder {
  id: string;
  box_id: string;
  role: string;
  uid_validity: number;
  uid_next: number;
  highest_modseq: bigint;
}

const toRow = (r: RawFolder): FolderRow => ({
  id: r.id,
  boxId: r.box_id,
  role: r.role as FolderRole,
  uidValidity: r.uid_validity,
  uidNext: r.uid_next,
  highestModseq: BigInt(r.highest_modseq),
});

/** The folders of these boxes of the account (made if missing), by box then role. Boxes of other accounts give none. */
export async function ensureBoxFolders(db: DbClient, accountId: string, boxIds: string[]): Promise<FolderRow[]> {
  if (!boxIds.length) return [];
  const wanted = boxIds.flatMap((boxId) => FOLDER_ROLES.map((role) => ({ id: newId('fld'), box_id: boxId, role, uid_validity: randomInt(1, 2 ** 31 - 1) })));
  const [set, w, b, f] = [tbl('mail_folders'), tbl('mail_folders', 'w'), tbl('boxes', 'b'), tbl('mail_folders', 'f')];
  const made: Insertable<DB['mail_folders']>[] = wanted.map((x) => ({ ...x, account_id: accountId, uid_next: 1, highest_modseq: 1n }));
  const cols = [f.id, f.box_id, f.role, f.uid_validity, f.uid_next, f.highest_modseq];
  const rows = await run(
    db,
    sql<RawFolder>`
    WITH ins AS (
      INSERT INTO ${set.$} (${sql.join([set.id, set.account_id, set.box_id, set.role, set.uid_validity, set.uid_next, set.highest_modseq, set.created_at])})
      SELECT ${sql.join([w.id, w.account_id, w.box_id, w.role, w.uid_validity, w.uid_next, w.highest_modseq])}, now()
      FROM jsonb_populate_recordset(NULL::${set.$}, ${recordsetJson(made)}::jsonb) AS w
      JOIN ${b.$} ON ${b.id} = ${w.box_id} AND ${b.account_id} = ${accountId}
      ON CONFLICT (${set.box_id}, ${set.role}) DO NOTHING
      RETURNING ${sql.join([set.id, set.box_id, set.role, set.uid_validity, set.uid_next, set.highest_modseq])}
    )
    SELECT * FROM ins
    UNION ALL
    SELECT ${sql.join(cols)} FROM ${f.$} WHERE ${f.account_id} = ${accountId} AND ${f.box_id} = ANY(${boxIds}::text[])`,
  );
  const order = new Map(boxIds.map((id, i) => [id, i]));
  const seen = new Set<string>();
  return rows
    .map(toRow)
    .filter((r) => (seen.has(r.id) ? false : (seen.add(r.id), true)))
    .sort((a, b) => order.get(a.boxId)! - order.get(b.boxId)! || FOLDER_ROLES.indexOf(a.role) - FOLDER_ROLES.indexOf(b.role));
}

export interface FolderStatus {
  id: string;
  uidValidity: number;
  uidNext: number;
  highestModseq: bigint;
  messages: number;
  unseen: number;
  /** Octets of every message in the folder (STATUS SIZE). */
  size: number;
}

/** Counts for STATUS and the folder head, in one round trip. */
export async function folderStatus(db: DbClient, folderIds: string[]): Promise<Map<string, FolderStatus>> {
  if (!folderIds.length) return new Map();
  const [f, e, mf, m, d] = [tbl('mail_folders', 'f'), tbl('mail_folder_entries', 'e'), tbl('message_flags', 'mf'), tbl('messages', 'm'), tbl('drafts', 'd')];
  // A Drafts folder also holds the box's drafts (drafts/drafts.ts), counted beside its messages.
  const rows = await run(
    db,
    sql<{ id: string; uid_validity: number; uid_next: number; highest_modseq: bigint; messages: bigint; unseen: bigint; size: bigint | null }>`
    SELECT ${f.id}, ${f.uid_validity}, ${f.uid_next}, ${f.highest_modseq},
      (SELECT count(*) FROM ${e.$} WHERE ${e.folder_id} = ${f.id}) + (SELECT count(*) FROM ${d.$} WHERE ${d.folder_id} = ${f.id}) AS messages,
      (SELECT count(*) FROM ${e.$} LEFT JOIN ${mf.$} ON ${mf.message_id} = ${e.message_id}
        WHERE ${e.folder_id} = ${f.id} AND COALESCE(${mf.flags}, 0) & 1 = 0)
        + (SELECT count(*) FROM ${d.$} WHERE ${d.folder_id} = ${f.id} AND ${d.flags} & 1 = 0) AS unseen,
      COALESCE((SELECT sum(${m.size_bytes}) FROM ${e.$} JOIN ${m.$} ON ${m.id} = ${e.message_id} WHERE ${e.folder_id} = ${f.id}), 0)
        + COALESCE((SELECT sum(${d.size_bytes}) FROM ${d.$} WHERE ${d.folder_id} = ${f.id}), 0) AS size
    FROM ${f.$} WHERE ${f.id} = ANY(${folderIds}::text[])`,
  );
  return new Map(
    rows.map((r) => [
      r.id,
      {
        id: r.id,
        uidValidity: r.uid_validity,
        uidNext: r.uid_next,
        highestModseq: BigInt(r.highest_modseq),
        messages: Number(r.messages),
        unseen: Number(r.unseen),
        size: Number(r.size ?? 0),
      },
    ]),
  );
}

/** The head of one folder (UIDVALIDITY, UIDNEXT, HIGHESTMODSEQ), or null when it is gone (its box was deleted). */
export async function folderHead(db: DbClient, folderId: string): Promise<FolderRow | null> {
  const rows: RawFolder[] = await run(
    db,
    k.selectFrom('mail_folders').select(['id', 'box_id', 'role', 'uid_validity', 'uid_next', 'highest_modseq']).where('id', '=', folderId),
  );
  return rows[0] ? toRow(rows[0]) : null;
}
