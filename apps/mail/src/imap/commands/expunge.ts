/**
 * EXPUNGE and UID EXPUNGE (RFC 3501 6.4.3, RFC 4315 2.1): removes the messages marked \Deleted (of the UID set,
 * for UID EXPUNGE). A message removed from its last folder is reclaimed as DELETE /messages/{id} reclaims it.
 */
import { expungeEntries } from '@boxes/core';
import { atom, type Command } from '../parser';
import { parseSequenceSet, resolveUids } from '../sequence';
import { ImapNo, type Session } from '../session';

export async function expunge(s: Session, cmd: Command, uid: boolean) {
  const mailbox = s.selected!;
  if (mailbox.readOnly) throw new ImapNo('READ-ONLY', 'The mailbox is open read-only (EXAMINE)');
  let uids: number[] | undefined;
  if (uid) {
    const set = parseSequenceSet(atom(cmd.args[0], 'UID set'));
    uids = resolveUids(set, mailbox.uids()).map((i) => mailbox.entries[i]!.uid);
    if (!uids.length) return { text: 'EXPUNGE completed (nothing to expunge)' };
  }
  const removed = await expungeEntries(s.svc, { accountId: s.login!.accountId, folderId: mailbox.folder.folderId, uids, actorId: s.login!.appPasswordId });
  for (const line of mailbox.remove(removed)) s.untagged(line);
  await s.reportChanges();
  return { text: 'EXPUNGE completed' };
}
