/**
 * Folders follow the account's event stream: mail.received puts the message in its box's INBOX, mail.sent in
 * its box's Sent (marked \Seen), message.deleted (DELETE /messages/{id}, or an IMAP EXPUNGE) takes it out of
 * every folder. A cursor per account (mail_sync_state, locked while folding) records how far the stream has been
 * folded in, so any process may fold, each event is folded once, and UIDs are given in the stream's order. The
 * hot paths (send, receive) pay nothing for it: whoever reads folders folds first.
 */
import { exec, k, rows, sql, tbl } from '@boxes/db';
import { EVENT_MESSAGE_ID } from '../events/payload-sql';
import type { Services } from '../shared/context';
import type { EventType } from '@boxes/schemas';
import { ensureBoxFolders } from './folders';

/**
 * NOTIFY channel (payload: an account id) saying an account now uses mail clients: the IMAP servers start
 * following it (folding its mail as it arrives, see apps/mail's imap/server.ts).
 */
export const MAIL_FOLLOW_CHANNEL = 'boxes_mail_follow';

/**
 * Gives an account a fold cursor (at the start of its stream, if it had none) and tells the IMAP servers to
 * follow it, when the transaction commits.
 */
export async function followMailboxes(tx: Tx, accountId: string): Promise<void> {
  await ensureCursor(tx, accountId);
  await rows(tx, sql`SELECT pg_notify(${MAIL_FOLLOW_CHANNEL}, ${accountId})::text`);
}

/** The account's fold cursor, at the start of its stream if it had none. */
async function ensureCursor(tx: Tx, accountId: string): Promise<void> {
  await exec(
    tx,
    k
      .insertInto('mail_sync_state')
      .values({ account_id: accountId, seq: 0, updated_at: sql`now()` })
      .onConflict((oc) => oc.column('account_id').doNothing()),
  );
}

/** Events folded per transaction (a first fold of a large account takes several). */
const BATCH = 20_000;

interface StreamRow {
  seq: number;
  type: string;
  box_id: string | null;
  message_id: string | null;
}

/** The event types a fold acts on (the cursor moves past the others). */
const FOLDED_TYPES = ['mail.received', 'mail.sent', 'message.deleted'] as const satisfies readonly EventType[];
const FOLDED = sql`(${sql.join(FOLDED_TYPES.map((t) => sql.lit(t)))})`;

/**
 * Folds every event up to the stream's head into the account's folders. Returns whether anything was folded.
 * The fast path (nothing new) is one read.
 *
 * When no folded type lies beyond the cursor (an app-password's use, a label change, an API key made: most of
 * what moves an account's stream while its clients are connected), the cursor is moved past those events with
 * one conditional update instead of a transaction that reads the cursor, the head and the events again. If
 * someone moved the cursor meanwhile, a fold someone waits for goes on as below (that other fold may have
 * stopped short of the head read here).
 *
 * background: a fold nobody waits for (an IMAP server following an account with no session open). It gives way
 * when another fold of the account is running (SKIP LOCKED) instead of holding a connection to wait for it:
 * that fold, the next event, the next sweep or the next login does the rest.
 */
export async function syncMailboxes(svc: Pick<Services, 'db'>, accountId: string, opts: { background?: boolean } = {}): Promise<boolean> {
  const background = opts.background === true;
  const [a, st, e] = [tbl('accounts', 'a'), tbl('mail_sync_state', 's'), tbl('events', 'e')];
  const head = await rows(
    svc.db,
    sql<{ chain_seq: number; seq: number | null; foldable: boolean }>`
    WITH h AS (SELECT ${a.id}, ${a.chain_seq}, ${st.seq} FROM ${a.$} LEFT JOIN ${st.$} ON ${st.account_id} = ${a.id} WHERE ${a.id} = ${accountId})
    SELECT h.chain_seq, h.seq,
      EXISTS (SELECT 1 FROM ${e.$} WHERE ${e.account_id} = h.id AND ${e.seq} > COALESCE(h.seq, 0) AND ${e.seq} <= h.chain_seq AND ${e.type} IN ${FOLDED}) AS foldable
    FROM h`,
  );
  if (!head[0] || head[0].chain_seq === (head[0].seq ?? 0)) return false;
  if (!head[0].foldable) {
    // Nothing to fold up to the head read: every event up to it is committed, so the cursor may pass them.
    const moved =
      head[0].seq !== null &&
      (await exec(
        svc.db,
        k
          .updateTable('mail_sync_state')
          .set({ seq: head[0].chain_seq, updated_at: sql`now()` })
          .where('account_id', '=', accountId)
          .where('seq', '=', head[0].seq),
      )) > 0;
    if (moved || background) return false;
  }
  let folded = false;
  for (;;) {
    const more = await svc.db.$transaction(
      async (tx) => {
        await ensureCursor(tx, accountId);
        const cursor = k.selectFrom('mail_sync_state').select('seq').where('account_id', '=', accountId).forUpdate();
        const [state] = await rows(tx, background ? cursor.skipLocked() : cursor);
        if (!state) return false; // background: another fold is at it
        // Every event up to the head read now is committed (appends serialise on the head), so the cursor may
        // move to it even past events of other types.
        const [acct] = await rows(tx, k.selectFrom('accounts').select('chain_seq').where('id', '=', accountId));
        const from = state.seq;
        const to = Math.min(acct!.chain_seq, from + BATCH);
        if (to <= from) return false;
        const stream: StreamRow[] = await rows(
          tx,
          k
            .selectFrom('events')
            .select(['seq', 'type', 'box_id', EVENT_MESSAGE_ID.as('message_id')])
            .where('account_id', '=', accountId)
            .where('seq', '>', from)
            .where('seq', '<=', to)
            .where('type', 'in', FOLDED_TYPES)
            .orderBy('seq'),
        );
        await fold(tx, accountId, stream);
        await exec(tx, k.updateTable('mail_sync_state').set({ seq: to, updated_at: sql`now()` }).where('account_id', '=', accountId));
        folded ||= stream.length > 0;
        return to < acct!.chain_seq;
      },
      { maxWait: 10_000, timeout: 60_000 },
    );
    if (!more) return folded;
  }
}

type Tx = Parameters<Parameters<Services['db']['$transaction']>[0]>[0];

async function fold(tx: Tx, accountId: string, rows: StreamRow[]): Promise<void> {
  // Runs of additions are folded together; a deletion in between is applied in its place in the order.
  let adds: StreamRow[] = [];
  for (const row of rows) {
    if (!row.message_id) continue;
    if (row.type === 'message.deleted') {
      await addAll(tx, accountId, adds);
      adds = [];
      await removeEverywhere(tx, [row.message_id]);
    } else if (row.box_id) {
      adds.push(row);
    }
  }
  await addAll(tx, accountId, adds);
}

async function addAll(tx: Tx, accountId: string, rows: StreamRow[]): Promise<void> {
  if (!rows.length) return;
  const folders = await ensureBoxFolders(tx, accountId, [...new Set(rows.map((r) => r.box_id!))]);
  const byTarget = new Map<string, string[]>();
  const sent: string[] = [];
  const folderOf = new Map(folders.map((f) => [`${f.boxId}/${f.role}`, f.id]));
  for (const r of rows) {
    const role = r.type === 'mail.received' ? 'inbox' : 'sent';
    const folderId = folderOf.get(`${r.box_id}/${role}`);
    if (!folderId) continue; // the box is gone: its mail has no folders any more
    const ids = byTarget.get(folderId);
    if (ids) ids.push(r.message_id!);
    else byTarget.set(folderId, [r.message_id!]);
    if (role === 'sent') sent.push(r.message_id!);
  }
  if (sent.length) {
    // What you sent you have read.
    await exec(
      tx,
      k
        .insertInto('message_flags')
        .columns(['message_id', 'account_id', 'flags', 'keywords', 'updated_at'])
        .expression(
          k
            .selectFrom('messages')
            .select(['id', sql.val(accountId).as('account_id'), sql.lit(1).as('flags'), sql`'{}'::text[]`.as('keywords'), sql`now()`.as('updated_at')])
            .where('id', '=', sql<string>`ANY(${sent}::text[])`),
        )
        .onConflict((oc) => oc.column('message_id').doNothing()),
    );
  }
  for (const [folderId, messageIds] of byTarget) await appendToFolder(tx, folderId, messageIds, { returning: false });
}

/**
 * Puts messages into a folder under new UIDs, in the given order (messages already there, repeated, no longer
 * existing or whose body was reclaimed are skipped; their UIDs are simply not used). Returns the UIDs given, in
 * order (nothing with returning: false).
 *
 * The folder's row is updated first: every writer of a folder's entries holds it, so "already there" is read
 * with nobody else adding (the unique (message, folder) index stays a backstop that is never hit), without the
 * speculative insertion of ON CONFLICT, which cost a fold of 10,000 messages a third more.
 */
export async function appendToFolder(
  tx: Tx,
  folderId: string,
  messageIds: string[],
  opts: { returning?: boolean } = {},
): Promise<{ messageId: string; uid: number }[]> {
  const ids = [...new Set(messageIds)];
  if (!ids.length) return [];
  const [folder] = await rows(
    tx,
    k
      .updateTable('mail_folders')
      .set((eb) => ({ uid_next: eb('uid_next', '+', ids.length), highest_modseq: eb('highest_modseq', '+', 1n) }))
      .where('id', '=', folderId)
      .returning([sql<number>`uid_next - ${ids.length}`.as('first'), 'highest_modseq as modseq']),
  );
  if (!folder) return [];
  // A folder that never held anything (a first fold) has nothing to compare with.
  const fresh = folder.first === 1;
  const [fe, y, m] = [tbl('mail_folder_entries'), tbl('mail_folder_entries', 'y'), tbl('messages', 'm')];
  const insert = sql`
    INSERT INTO ${fe.$} (${sql.join([fe.folder_id, fe.uid, fe.message_id, fe.deleted, fe.modseq])})
    SELECT ${folderId}, ${folder.first}::int + (x.ord::int - 1), x.id, false, ${folder.modseq}
    FROM unnest(${ids}::text[]) WITH ORDINALITY AS x(id, ord)
    JOIN ${m.$} ON ${m.id} = x.id AND ${m.body_reclaimed_at} IS NULL
    ${fresh ? sql`` : sql`WHERE NOT EXISTS (SELECT 1 FROM ${y.$} WHERE ${y.message_id} = x.id AND ${y.folder_id} = ${folderId})`}`;
  // A first fold of a large account adds thousands at once: nothing is read back.
  if (opts.returning === false) {
    await exec(tx, insert);
    return [];
  }
  const added = await rows(tx, sql<{ uid: number; message_id: string }>`${insert} RETURNING ${fe.uid}, ${fe.message_id}`);
  return added.map((r) => ({ messageId: r.message_id, uid: r.uid })).sort((a, b) => a.uid - b.uid);
}

/** Takes messages out of every folder they are in (each folder's modseq moves, so open views notice). */
export async function removeEverywhere(tx: Tx, messageIds: string[]): Promise<void> {
  const [fe, f] = [tbl('mail_folder_entries'), tbl('mail_folders')];
  await exec(
    tx,
    sql`WITH gone AS (DELETE FROM ${fe.$} WHERE ${fe.message_id} = ANY(${messageIds}::text[]) RETURNING ${fe.folder_id})
    UPDATE ${f.$} SET ${f.highest_modseq} = ${f.highest_modseq} + 1 WHERE ${f.id} IN (SELECT folder_id FROM gone)`,
  );
}
