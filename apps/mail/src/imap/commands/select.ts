/**
 * SELECT and EXAMINE (RFC 3501 6.3.1, 6.3.2; CONDSTORE's HIGHESTMODSEQ, RFC 7162). EXAMINE opens read-only:
 * nothing it does changes flags.
 */
import { findFolder } from '../folders';
import { SelectedMailbox } from '../mailbox';
import { astring, type Command } from '../parser';
import { ImapNo, type Session } from '../session';

async function open(s: Session, cmd: Command, readOnly: boolean) {
  const name = astring(cmd.args[0], 'mailbox name');
  const params = cmd.args[1]?.type === 'list' ? cmd.args[1].items.map((t) => (t.type === 'atom' ? t.value.toUpperCase() : '')) : [];
  if (params.includes('CONDSTORE')) s.condstore = true;
  // Selecting closes the mailbox selected before, even when the new one cannot be opened.
  s.selected = null;
  s.state = 'authenticated';
  const folder = findFolder(await s.folders(), name);
  if (!folder) throw new ImapNo('NONEXISTENT', 'No such mailbox');
  if (!folder.folderId) throw new ImapNo('CANNOT', 'That name only groups folders; it holds no messages');
  const mailbox = await SelectedMailbox.open(s.svc, { ...folder, folderId: folder.folderId }, readOnly, s.hub.rawCopy);
  if (!mailbox) throw new ImapNo('NONEXISTENT', 'No such mailbox');
  for (const line of mailbox.flagsAtSelect()) s.untagged(line);
  s.untagged([`* ${mailbox.entries.length} EXISTS`]);
  s.untagged(['* 0 RECENT']);
  const unseen = mailbox.entries.findIndex((e) => !(e.flags & 1));
  if (unseen !== -1) s.untagged([`* OK [UNSEEN ${unseen + 1}] First unseen`]);
  s.untagged([`* OK [UIDVALIDITY ${mailbox.uidValidity}] UIDs valid`]);
  s.untagged([`* OK [UIDNEXT ${mailbox.uidNext}] Predicted next UID`]);
  s.untagged([`* OK [HIGHESTMODSEQ ${mailbox.highestModseq}] Highest`]);
  s.selected = mailbox;
  s.state = 'selected';
  return { code: readOnly ? 'READ-ONLY' : 'READ-WRITE', text: `${readOnly ? 'EXAMINE' : 'SELECT'} completed` };
}

export const select = (s: Session, cmd: Command) => open(s, cmd, false);
export const examine = (s: Session, cmd: Command) => open(s, cmd, true);
