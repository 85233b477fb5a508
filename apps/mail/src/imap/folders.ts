/**
 * Which folders a login sees, and their names. A box login (username = a box address) sees that box: INBOX
 * (mail it received), Sent (mail sent from it), Drafts, Trash, Archive, Junk. An account login (username = the
 * owner's email) sees the primary box under those names and every other box under Boxes/<local part>/INBOX,
 * Boxes/<local part>/Sent, ... ("Boxes" and "Boxes/<local part>" only group them). The hierarchy delimiter is
 * "/"; a "/" inside a local part shows as "_".
 */
import { ensureBoxFolders, type FolderRole, type MailLogin, type Services } from '@boxes/core';
import { k, poolRows } from '@boxes/db';
import { mailboxName } from './encode';

export interface ImapFolder {
  /** The name on the wire (modified UTF-7). */
  name: string;
  folderId: string | null;
  boxId: string | null;
  role: FolderRole | null;
  /** LIST attributes, special use included. */
  attributes: string[];
}

const ROLE_NAMES: Record<FolderRole, string> = { inbox: 'INBOX', sent: 'Sent', drafts: 'Drafts', trash: 'Trash', archive: 'Archive', junk: 'Junk' };
const SPECIAL_USE: Partial<Record<FolderRole, string>> = { sent: '\\Sent', drafts: '\\Drafts', trash: '\\Trash', archive: '\\Archive', junk: '\\Junk' };

export const DELIMITER = '/';

/**
 * The folders of a login, in order. Read on the pg pool (poolRows): a client's LIST and SELECT each read them, and
 * Prisma's client compiled its query of the boxes first (the first time in a process, tens of milliseconds on the
 * login's path) and then cost about three times the CPU of the statement's own client side.
 */
export async function foldersOf(svc: Services, login: MailLogin): Promise<ImapFolder[]> {
  const ofAccount = k.selectFrom('boxes').select(['id', 'local_part as localPart']).where('account_id', '=', login.accountId);
  const boxes =
    login.kind === 'box'
      ? await poolRows(svc.db, ofAccount.where('id', '=', login.boxId!))
      : await poolRows(svc.db, ofAccount.orderBy('is_primary', 'desc').orderBy('created_at', 'asc').orderBy('id'));
  if (!boxes.length) return [];
  const folders = await ensureBoxFolders(
    svc.db,
    login.accountId,
    boxes.map((b) => b.id),
  );
  const out: ImapFolder[] = [];
  const leaf = (prefix: string, f: (typeof folders)[number]): ImapFolder => ({
    name: `${prefix}${ROLE_NAMES[f.role]}`,
    folderId: f.id,
    boxId: f.boxId,
    role: f.role,
    attributes: ['\\HasNoChildren', ...(SPECIAL_USE[f.role] ? [SPECIAL_USE[f.role]!] : [])],
  });
  const [first, ...others] = boxes;
  for (const f of folders.filter((x) => x.boxId === first!.id)) out.push(leaf('', f));
  if (others.length) {
    out.push({ name: 'Boxes', folderId: null, boxId: null, role: null, attributes: ['\\Noselect', '\\HasChildren'] });
    const used = new Set<string>();
    for (const box of others) {
      let segment = mailboxName(box.localPart.replace(/\//g, '_'));
      while (used.has(segment)) segment += '_';
      used.add(segment);
      const prefix = `Boxes${DELIMITER}${segment}${DELIMITER}`;
      out.push({ name: `Boxes${DELIMITER}${segment}`, folderId: null, boxId: box.id, role: null, attributes: ['\\Noselect', '\\HasChildren'] });
      // Special-use attributes mark the primary box's folders only, so clients pick those as Sent, Trash, ...
      for (const f of folders.filter((x) => x.boxId === box.id)) out.push({ ...leaf(prefix, f), attributes: ['\\HasNoChildren'] });
    }
  }
  return out;
}

/** The folder a client names (INBOX in any case), or undefined. */
export function findFolder(folders: ImapFolder[], name: string): ImapFolder | undefined {
  if (name.toUpperCase() === 'INBOX') return folders.find((f) => f.name === 'INBOX');
  return folders.find((f) => f.name === name);
}

/** LIST pattern matching (RFC 3501 6.3.8): "*" matches anything, "%" anything but the delimiter. */
export function listMatcher(reference: string, pattern: string): (name: string) => boolean {
  const full = reference + pattern;
  let re = '^';
  for (const c of full) {
    if (c === '*') re += '.*';
    else if (c === '%') re += '[^/]*';
    else re += c.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  }
  const rx = new RegExp(`${re}$`);
  const inbox = /^inbox$/i;
  return (name) => rx.test(name) || (name === 'INBOX' && inbox.test(full));
}
