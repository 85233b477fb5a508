/**
 * COPY and MOVE (RFC 3501 6.4.7, RFC 6851) with COPYUID (RFC 4315). Mail stays within its own box: the
 * destination is another folder of the same box (INBOX, Sent, Drafts, Trash, Archive, Junk). MOVE reports the
 * moved messages as expunged here.
 */
import { copyEntries } from '@boxes/core';
import { findFolder } from '../folders';
import { astring, atom, type Command } from '../parser';
import { formatSet, parseSequenceSet, resolveSequence, resolveUids } from '../sequence';
import { ImapNo, type Session } from '../session';

async function transfer(s: Session, cmd: Command, uid: boolean, move: boolean) {
  const mailbox = s.selected!;
  const set = parseSequenceSet(atom(cmd.args[0], 'sequence set'));
  const name = astring(cmd.args[1], 'mailbox name');
  if (move && mailbox.readOnly) throw new ImapNo('READ-ONLY', 'The mailbox is open read-only (EXAMINE)');
  const dest = findFolder(await s.folders(false), name);
  if (!dest) throw new ImapNo('TRYCREATE', 'No such mailbox');
  if (!dest.folderId) throw new ImapNo('CANNOT', 'That name only groups folders; it holds no messages');
  if (dest.boxId !== mailbox.folder.boxId) throw new ImapNo('CANNOT', "Messages stay in their own box's folders");
  if (dest.folderId === mailbox.folder.folderId) {
    if (move) throw new ImapNo('CANNOT', 'The messages are already in that folder');
  }
  const targets = uid ? resolveUids(set, mailbox.uids()) : resolveSequence(set, mailbox.entries.length);
  if (!targets.length) return { text: `${move ? 'MOVE' : 'COPY'} completed (no messages)` };
  const r = await copyEntries(s.svc, {
    fromFolderId: mailbox.folder.folderId,
    toFolderId: dest.folderId,
    uids: targets.map((i) => mailbox.entries[i]!.uid),
    move,
  });
  const copyuid = r.pairs.length ? `COPYUID ${r.destUidValidity} ${formatSet(r.pairs.map((p) => p.from))} ${formatSet(r.pairs.map((p) => p.to))}` : undefined;
  if (!move) return { ...(copyuid ? { code: copyuid } : {}), text: 'COPY completed' };
  if (copyuid) s.untagged([`* OK [${copyuid}] Moved`]);
  for (const line of mailbox.remove(r.pairs.map((p) => p.from))) s.untagged(line);
  await s.reportChanges();
  return { text: 'MOVE completed' };
}

export const copy = (s: Session, cmd: Command, uid: boolean) => transfer(s, cmd, uid, false);
export const move = (s: Session, cmd: Command, uid: boolean) => transfer(s, cmd, uid, true);
