/**
 * STORE and UID STORE (RFC 3501 6.4.6; UNCHANGEDSINCE of RFC 7162): FLAGS, +FLAGS, -FLAGS (.SILENT) with
 * \Seen, \Answered, \Flagged, \Deleted, \Draft and keywords. Flags other than \Deleted belong to the message
 * and show on GET /messages.
 */
import { FLAG_BITS, LABEL_PATTERN, storeFlags, type SystemFlag } from '@boxes/core';
import type { Chunk } from '../encode';
import { flagList } from '../mailbox';
import { atom, BadArgs, list, type Command, type Token } from '../parser';
import { formatSet, parseSequenceSet, resolveSequence, resolveUids } from '../sequence';
import { ImapNo, type Session } from '../session';

export function parseFlags(tokens: Token[]): { bits: number; deleted: boolean; keywords: string[] } {
  let bits = 0;
  let deleted = false;
  const keywords: string[] = [];
  for (const t of tokens) {
    const f = atom(t, 'flag');
    const system = Object.keys(FLAG_BITS).find((k) => k.toLowerCase() === f.toLowerCase()) as SystemFlag | undefined;
    if (system) bits |= FLAG_BITS[system];
    else if (f.toLowerCase() === '\\deleted') deleted = true;
    else if (f.toLowerCase() === '\\recent') continue;
    else if (f.startsWith('\\')) throw new BadArgs(`Unknown system flag ${f.slice(0, 30)}`);
    // A keyword is a label over the API: the same rule (an atom of printable ASCII, at most 100 characters).
    else if (LABEL_PATTERN.test(f)) keywords.push(f);
    else throw new BadArgs(`Invalid keyword ${f.slice(0, 30)}`);
  }
  return { bits, deleted, keywords };
}

export async function store(s: Session, cmd: Command, uid: boolean) {
  const mailbox = s.selected!;
  if (mailbox.readOnly) throw new ImapNo('READ-ONLY', 'The mailbox is open read-only (EXAMINE)');
  const set = parseSequenceSet(atom(cmd.args[0], 'sequence set'));
  let rest = cmd.args.slice(1);
  let unchangedSince: bigint | undefined;
  if (rest[0]?.type === 'list') {
    const mods = list(rest[0], 'STORE modifiers');
    if (atom(mods[0], 'modifier').toUpperCase() !== 'UNCHANGEDSINCE') throw new BadArgs('Unknown STORE modifier');
    const v = atom(mods[1], 'mod-sequence');
    if (!/^\d{1,20}$/.test(v)) throw new BadArgs('UNCHANGEDSINCE needs a number');
    unchangedSince = BigInt(v);
    s.condstore = true;
    rest = rest.slice(1);
  }
  const m = /^([+-]?)FLAGS(\.SILENT)?$/i.exec(atom(rest[0], 'STORE item'));
  if (!m) throw new BadArgs('STORE takes FLAGS, +FLAGS or -FLAGS (optionally .SILENT)');
  const flagTokens = rest[1]?.type === 'list' ? rest[1].items : rest.slice(1);
  const flags = parseFlags(flagTokens);
  const mode = m[1] === '+' ? 'add' : m[1] === '-' ? 'remove' : 'set';
  const targets = uid ? resolveUids(set, mailbox.uids()) : resolveSequence(set, mailbox.entries.length);
  if (!targets.length) return { text: 'STORE completed' };
  const before = mailbox.highestModseq;
  const r = await storeFlags(s.svc, {
    accountId: s.login!.accountId,
    folderId: mailbox.folder.folderId,
    uids: targets.map((i) => mailbox.entries[i]!.uid),
    change: { mode, ...flags, unchangedSince },
    actor: { via: 'imap', appPasswordId: s.login!.appPasswordId },
  });
  mailbox.applyChanged(r.changed, r.highestModseq, r.highestModseq === before + (r.changed.length ? 1n : 0n));
  // A keyword new to the mailbox is announced (FLAGS, PERMANENTFLAGS) before the FETCH responses that carry it.
  for (const line of mailbox.announceNewKeywords()) s.untagged(line);
  const changed = new Set(r.changed.map((c) => c.uid));
  const modified = new Set(r.modified);
  for (const i of targets) {
    const e = mailbox.entries[i]!;
    if (modified.has(e.uid)) continue;
    // .SILENT: no FLAGS back; with CONDSTORE the new MODSEQ of changed messages is still sent (RFC 7162 3.1.3).
    if (m[2] && !(unchangedSince !== undefined && changed.has(e.uid))) continue;
    const parts: Chunk[] = [`* ${i + 1} FETCH (`];
    if (!m[2]) parts.push('FLAGS ', ...flagList(e));
    if (uid) parts.push(`${m[2] ? '' : ' '}UID ${e.uid}`);
    if (s.condstore) parts.push(` MODSEQ (${e.modseq})`);
    parts.push(')');
    s.untagged(parts);
  }
  if (r.modified.length) {
    const list = uid ? r.modified : r.modified.map((u) => mailbox.indexOfUid(u) + 1);
    return { code: `MODIFIED ${formatSet(list)}`, text: 'Conditional STORE failed for some messages' };
  }
  return { text: 'STORE completed' };
}
