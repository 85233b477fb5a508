/**
 * APPEND (RFC 3501 6.3.11). Mail enters a box by being received or sent, so APPEND stores no new message. A
 * message appended to a Drafts folder becomes a draft of its box (drafts/drafts.ts appendDraft: POST /drafts
 * sees it, POST /drafts/{id}/send sends it), answered with its UID ([APPENDUID], RFC 4315). The one APPEND
 * clients make by habit, a copy of a message they have just submitted to the Sent folder, is answered with the
 * copy Boxes already filed there; anything else is refused with [CANNOT].
 */
import { AppError, appendDraft, syncMailboxes } from '@boxes/core';
import { k, rows as run } from '@boxes/db';
import { findFolder } from '../folders';
import { astring, BadArgs, type Command } from '../parser';
import { ImapNo, type Session } from '../session';
import { submittedCopy } from '../../submission/recent';

export async function append(s: Session, cmd: Command) {
  const name = astring(cmd.args[0], 'mailbox name');
  const message = cmd.args[cmd.args.length - 1];
  if (!message || message.type !== 'string') throw new BadArgs('APPEND needs the message as a literal');
  const folder = findFolder(await s.folders(), name);
  if (!folder) throw new ImapNo('TRYCREATE', 'No such mailbox');
  if (!folder.folderId) throw new ImapNo('CANNOT', 'That name only groups folders; it holds no messages');
  if (folder.role === 'drafts' && folder.boxId) {
    try {
      const d = await appendDraft(s.svc, { accountId: s.login!.accountId, boxId: folder.boxId, raw: message.value });
      return { code: `APPENDUID ${d.uidValidity} ${d.uid}`, text: `APPEND completed: saved as draft ${d.id}` };
    } catch (err) {
      if (err instanceof AppError && err.status < 500) throw new ImapNo('CANNOT', `This draft cannot be saved: ${err.message}`);
      throw err;
    }
  }
  if (folder.role === 'sent') {
    const copy = await submittedCopy(s.svc, s.login!.accountId, message.value);
    if (copy) {
      await syncMailboxes(s.svc, s.login!.accountId);
      const rows = await run(
        s.svc.db,
        k
          .selectFrom('mail_folder_entries as e')
          .innerJoin('mail_folders as f', 'f.id', 'e.folder_id')
          .select(['e.uid', 'f.uid_validity'])
          .where('e.folder_id', '=', folder.folderId)
          .where('e.message_id', '=', copy),
      );
      if (rows[0])
        return { code: `APPENDUID ${rows[0].uid_validity} ${rows[0].uid}`, text: 'APPEND completed: the copy sent through SMTP submission is already here' };
    }
  }
  throw new ImapNo('CANNOT', 'Mail enters a box by being received or sent (SMTP submission files a copy in Sent itself); APPEND is not supported');
}
