/** STATUS (RFC 3501 6.3.10, with HIGHESTMODSEQ of RFC 7162 and SIZE of RFC 8438) of a folder, selected or not. */
import { folderStatus } from '@boxes/core';
import { ustr } from '../encode';
import { findFolder } from '../folders';
import { astring, atom, BadArgs, list, type Command } from '../parser';
import { ImapNo, type Session } from '../session';

export async function status(s: Session, cmd: Command) {
  const name = astring(cmd.args[0], 'mailbox name');
  const items = list(cmd.args[1], 'status items').map((t, i) => atom(t, `status item ${i + 1}`).toUpperCase());
  const folder = findFolder(await s.folders(), name);
  if (!folder?.folderId) throw new ImapNo('NONEXISTENT', 'No such mailbox');
  const st = (await folderStatus(s.svc.db, [folder.folderId])).get(folder.folderId);
  if (!st) throw new ImapNo('NONEXISTENT', 'No such mailbox');
  const values: Record<string, string> = {
    MESSAGES: String(st.messages),
    RECENT: '0',
    UIDNEXT: String(st.uidNext),
    UIDVALIDITY: String(st.uidValidity),
    UNSEEN: String(st.unseen),
    HIGHESTMODSEQ: String(st.highestModseq),
    SIZE: String(st.size),
  };
  const out: string[] = [];
  for (const item of items) {
    const v = values[item];
    if (v === undefined) throw new BadArgs(`Unknown status item ${item.slice(0, 30)}`);
    out.push(`${item} ${v}`);
  }
  s.untagged(['* STATUS ', ...ustr(folder.name), ` (${out.join(' ')})`]);
  return { text: 'STATUS completed' };
}
