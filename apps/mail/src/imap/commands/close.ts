/** CLOSE (RFC 3501 6.4.2: expunges \Deleted messages silently, unless read-only) and UNSELECT (RFC 3691: does not). */
import { expungeEntries } from '@boxes/core';
import type { Session } from '../session';

export async function close(s: Session) {
  const mailbox = s.selected!;
  if (!mailbox.readOnly) await expungeEntries(s.svc, { accountId: s.login!.accountId, folderId: mailbox.folder.folderId, actorId: s.login!.appPasswordId });
  s.selected = null;
  s.state = 'authenticated';
  return { text: 'CLOSE completed' };
}

export async function unselect(s: Session) {
  s.selected = null;
  s.state = 'authenticated';
  return { text: 'UNSELECT completed' };
}
