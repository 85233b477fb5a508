/**
 * LIST and LSUB (RFC 3501 6.3.8, 6.3.9), with the selection and return options clients send for SPECIAL-USE
 * (RFC 6154): LIST (SPECIAL-USE) "" "*" lists the special folders only. Every folder counts as subscribed.
 */
import { ustr } from '../encode';
import { DELIMITER, listMatcher } from '../folders';
import { astring, type Command, type Token } from '../parser';
import type { Session } from '../session';

function options(t: Token | undefined): string[] {
  return t?.type === 'list' ? t.items.map((x) => (x.type === 'atom' ? x.value.toUpperCase() : '')) : [];
}

async function listing(s: Session, cmd: Command, kind: 'LIST' | 'LSUB') {
  let args = cmd.args;
  const selection = kind === 'LIST' && args[0]?.type === 'list' ? options(args[0]) : [];
  if (kind === 'LIST' && args[0]?.type === 'list') args = args.slice(1);
  const reference = astring(args[0], 'reference');
  const pattern = astring(args[1], 'mailbox pattern');
  const returns = args[2]?.type === 'atom' && args[2].value.toUpperCase() === 'RETURN' ? options(args[3]) : [];
  if (pattern === '') {
    s.untagged([`* ${kind} (\\Noselect) "${DELIMITER}" ""`]);
    return { text: `${kind} completed` };
  }
  const match = listMatcher(reference, pattern);
  const specialOnly = selection.includes('SPECIAL-USE');
  const subscribed = selection.includes('SUBSCRIBED') || returns.includes('SUBSCRIBED') || kind === 'LSUB';
  for (const f of await s.folders()) {
    if (!match(f.name)) continue;
    if (specialOnly && !f.attributes.some((a) => ['\\Sent', '\\Drafts', '\\Trash', '\\Archive', '\\Junk'].includes(a))) continue;
    const attrs = [...f.attributes, ...(subscribed && kind === 'LIST' && f.folderId ? ['\\Subscribed'] : [])];
    s.untagged([`* ${kind} (${attrs.join(' ')}) "${DELIMITER}" `, ...ustr(f.name)]);
  }
  return { text: `${kind} completed` };
}

export const list = (s: Session, cmd: Command) => listing(s, cmd, 'LIST');
export const lsub = (s: Session, cmd: Command) => listing(s, cmd, 'LSUB');
