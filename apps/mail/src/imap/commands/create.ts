/**
 * CREATE, DELETE and RENAME (RFC 3501 6.3.3 to 6.3.5): the folders of a box are fixed (INBOX, Sent, Drafts,
 * Trash, Archive, Junk), so these are refused with [CANNOT], or [ALREADYEXISTS] for a folder that exists.
 */
import { astring, type Command } from '../parser';
import { findFolder } from '../folders';
import { ImapNo, type Session } from '../session';

const FIXED = 'Folders are fixed: INBOX, Sent, Drafts, Trash, Archive and Junk of each box';

export async function create(s: Session, cmd: Command): Promise<never> {
  const name = astring(cmd.args[0], 'mailbox name').replace(/\/$/, '');
  if (findFolder(await s.folders(), name)) throw new ImapNo('ALREADYEXISTS', 'That folder exists');
  throw new ImapNo('CANNOT', FIXED);
}

export async function deleteMailbox(_s: Session, cmd: Command): Promise<never> {
  astring(cmd.args[0], 'mailbox name');
  throw new ImapNo('CANNOT', FIXED);
}

export async function rename(_s: Session, cmd: Command): Promise<never> {
  astring(cmd.args[0], 'mailbox name');
  astring(cmd.args[1], 'new mailbox name');
  throw new ImapNo('CANNOT', FIXED);
}
