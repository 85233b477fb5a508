/** SUBSCRIBE and UNSUBSCRIBE (RFC 3501 6.3.6, 6.3.7): every folder is always subscribed, so both just succeed. */
import { astring, type Command } from '../parser';
import type { Session } from '../session';
import { findFolder } from '../folders';
import { ImapNo } from '../session';

export async function subscribe(s: Session, cmd: Command) {
  const name = astring(cmd.args[0], 'mailbox name');
  if (!findFolder(await s.folders(), name)) throw new ImapNo('NONEXISTENT', 'No such mailbox');
  return { text: 'SUBSCRIBE completed' };
}

export async function unsubscribe(_s: Session, cmd: Command) {
  astring(cmd.args[0], 'mailbox name');
  return { text: 'UNSUBSCRIBE completed (every folder stays listed)' };
}
