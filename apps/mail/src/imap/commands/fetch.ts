/**
 * FETCH and UID FETCH (RFC 3501 6.4.5, 7.4.2; CHANGEDSINCE and MODSEQ of RFC 7162). Everything is served from
 * the stored raw message, decrypted when read: UID, FLAGS, INTERNALDATE, RFC822.SIZE, ENVELOPE, BODYSTRUCTURE,
 * BODY, BODY[section]<partial>, BODY.PEEK, RFC822, RFC822.HEADER, RFC822.TEXT, MODSEQ and the macros ALL, FAST
 * and FULL. BODY[...] (not PEEK), RFC822 and RFC822.TEXT set \Seen, unless the mailbox is read-only.
 */
import { FLAG_BITS, storeFlags, type FolderEntry } from '@boxes/core';
import { internalDate, str, type Chunk } from '../encode';
import { flagList } from '../mailbox';
import { bodyStructure, envelope, ParsedMessage, sectionBytes, type Section } from '../mime';
import { atom, BadArgs, list, type Command, type Token } from '../parser';
import { parseSequenceSet, resolveSequence, resolveUids } from '../sequence';
import type { Session } from '../session';

type Item =
  | { kind: 'UID' | 'FLAGS' | 'INTERNALDATE' | 'RFC822.SIZE' | 'ENVELOPE' | 'BODYSTRUCTURE' | 'BODY' | 'MODSEQ' }
  | { kind: 'RFC822' | 'RFC822.HEADER' | 'RFC822.TEXT' }
  | { kind: 'section'; name: string; section: Section; peek: boolean; partial: { start: number; length: number | null } | null };

const MACROS: Record<string, string[]> = {
  ALL: ['FLAGS', 'INTERNALDATE', 'RFC822.SIZE', 'ENVELOPE'],
  FAST: ['FLAGS', 'INTERNALDATE', 'RFC822.SIZE'],
  FULL: ['FLAGS', 'INTERNALDATE', 'RFC822.SIZE', 'ENVELOPE', 'BODY'],
};

const SECTION_ATT = /^(BODY(?:\.PEEK)?)\[(.*)\](?:<(\d{1,10})(?:\.(\d{1,10}))?>)?$/is;
const SECTION = /^((?:[1-9]\d{0,4})(?:\.[1-9]\d{0,4})*)?(?:\.?(HEADER\.FIELDS\.NOT|HEADER\.FIELDS|HEADER|TEXT|MIME))?$/i;

/** Field names of HEADER.FIELDS (...): atoms or quoted strings. */
function fieldNames(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(/"((?:[^"\\]|\\.)*)"|([^\s"()]+)/g)) out.push(m[1] !== undefined ? m[1].replace(/\\(.)/g, '$1') : m[2]!);
  return out;
}

export function parseSection(att: string): Item {
  const m = SECTION_ATT.exec(att);
  if (!m) throw new BadArgs(`Unknown FETCH item ${att.slice(0, 40)}`);
  const inner = m[2]!.trim();
  const open = inner.indexOf('(');
  const head = (open === -1 ? inner : inner.slice(0, open)).trim();
  const s = SECTION.exec(head);
  if (!s) throw new BadArgs(`Invalid section [${inner.slice(0, 40)}]`);
  const path = s[1] ? s[1].split('.').map(Number) : [];
  const specifier = (s[2]?.toUpperCase() ?? '') as Section['specifier'];
  let fields: string[] = [];
  if (specifier === 'HEADER.FIELDS' || specifier === 'HEADER.FIELDS.NOT') {
    if (open === -1 || !inner.endsWith(')')) throw new BadArgs(`${specifier} needs a list of field names`);
    fields = fieldNames(inner.slice(open + 1, -1));
    if (!fields.length) throw new BadArgs(`${specifier} needs at least one field name`);
  } else if (open !== -1) throw new BadArgs(`Invalid section [${inner.slice(0, 40)}]`);
  if (specifier === 'MIME' && !path.length) throw new BadArgs('MIME needs a part number');
  const sectionName = [path.join('.'), specifier].filter(Boolean).join('.') + (fields.length ? ` (${fields.map((f) => f.toUpperCase()).join(' ')})` : '');
  const partial = m[3] !== undefined ? { start: Number(m[3]), length: m[4] !== undefined ? Number(m[4]) : null } : null;
  return { kind: 'section', name: `BODY[${sectionName}]`, section: { path, specifier, fields }, peek: m[1]!.toUpperCase() === 'BODY.PEEK', partial };
}

/**
 * Data items parsed before, by their text: a client downloading message after message sends the same items with
 * each FETCH, and parsing them (section syntax by regular expressions) made new strings and objects every time.
 * Items are never changed once parsed; callers get a copy of the list, which they may extend.
 */
const parsedItems = new Map<string, Item[]>();
const PARSED_ITEMS_KEPT = 64;

export function parseItems(t: Token | undefined): Item[] {
  if (!t) throw new BadArgs('FETCH needs data items');
  const atoms = t.type === 'list' ? t.items.map((x, i) => atom(x, `data item ${i + 1}`)) : [atom(t, 'data item')];
  const key = t.type === 'list' ? `(${atoms.join(' ')})` : atoms[0]!;
  let items = parsedItems.get(key);
  if (!items) {
    items = parseItemNames(t.type === 'atom' && MACROS[t.value.toUpperCase()] ? MACROS[t.value.toUpperCase()]! : atoms);
    if (parsedItems.size >= PARSED_ITEMS_KEPT) parsedItems.clear();
    parsedItems.set(key, items);
  }
  return items.slice();
}

function parseItemNames(names: string[]): Item[] {
  return names.map((name): Item => {
    const k = name.toUpperCase();
    switch (k) {
      case 'UID':
      case 'FLAGS':
      case 'INTERNALDATE':
      case 'RFC822.SIZE':
      case 'ENVELOPE':
      case 'BODYSTRUCTURE':
      case 'BODY':
      case 'MODSEQ':
      case 'RFC822':
      case 'RFC822.HEADER':
      case 'RFC822.TEXT':
        return { kind: k };
      default:
        return parseSection(name);
    }
  });
}

const EMPTY = new ParsedMessage(Buffer.alloc(0));

/** Items answered from the folder entry alone. */
const ENTRY_ONLY = new Set<Item['kind']>(['UID', 'FLAGS', 'INTERNALDATE', 'RFC822.SIZE', 'MODSEQ']);

function needsMessage(items: Item[]): boolean {
  return items.some((i) => !ENTRY_ONLY.has(i.kind));
}

function setsSeen(items: Item[]): boolean {
  return items.some((i) => i.kind === 'RFC822' || i.kind === 'RFC822.TEXT' || (i.kind === 'section' && !i.peek));
}

const EMPTY_BYTES = Buffer.alloc(0);

/** Appends chunks to a response (no list per item to spread into it). */
function append(out: Chunk[], chunks: Chunk[]): void {
  for (const c of chunks) out.push(c);
}

/** An item's name, then bytes as a literal. */
function literal(out: Chunk[], name: string, bytes: Buffer): void {
  out.push(name, ` {${bytes.length}}\r\n`, bytes);
}

/** Appends one data item of a FETCH response to `out`. */
function render(item: Item, e: FolderEntry, msg: ParsedMessage, out: Chunk[]): void {
  switch (item.kind) {
    case 'UID':
      out.push(`UID ${e.uid}`);
      return;
    case 'FLAGS':
      out.push('FLAGS ');
      append(out, flagList(e));
      return;
    case 'INTERNALDATE':
      out.push(`INTERNALDATE ${internalDate(e.internalDate)}`);
      return;
    case 'RFC822.SIZE':
      out.push(`RFC822.SIZE ${e.size}`);
      return;
    case 'MODSEQ':
      out.push(`MODSEQ (${e.modseq})`);
      return;
    case 'ENVELOPE':
      out.push('ENVELOPE ');
      append(out, envelope(msg.header.headers));
      return;
    case 'BODYSTRUCTURE':
      out.push('BODYSTRUCTURE ');
      append(out, bodyStructure(msg, msg.root, true));
      return;
    case 'BODY':
      out.push('BODY ');
      append(out, bodyStructure(msg, msg.root, false));
      return;
    case 'RFC822':
      literal(out, 'RFC822', msg.raw);
      return;
    case 'RFC822.HEADER':
      literal(out, 'RFC822.HEADER', sectionBytes(msg, { path: [], specifier: 'HEADER', fields: [] }) ?? EMPTY_BYTES);
      return;
    case 'RFC822.TEXT':
      literal(out, 'RFC822.TEXT', sectionBytes(msg, { path: [], specifier: 'TEXT', fields: [] }) ?? EMPTY_BYTES);
      return;
    case 'section': {
      const bytes = sectionBytes(msg, item.section);
      if (!bytes) {
        out.push(`${item.name} `);
        append(out, str(''));
        return;
      }
      if (!item.partial) {
        literal(out, item.name, bytes);
        return;
      }
      const { start, length } = item.partial;
      const part = start >= bytes.length ? EMPTY_BYTES : bytes.subarray(start, length === null ? undefined : start + length);
      literal(out, `${item.name}<${start}>`, part);
      return;
    }
  }
}

/** Messages handled per round: read together, written, then the next. */
const ROUND = 100;

export async function fetch(s: Session, cmd: Command, uid: boolean) {
  const mailbox = s.selected!;
  const set = parseSequenceSet(atom(cmd.args[0], 'sequence set'));
  const items = parseItems(cmd.args[1]);
  let changedSince: bigint | null = null;
  if (cmd.args[2]) {
    const mods = list(cmd.args[2], 'FETCH modifiers');
    for (let i = 0; i < mods.length; i++) {
      const name = atom(mods[i], 'modifier').toUpperCase();
      if (name === 'CHANGEDSINCE') {
        const v = atom(mods[++i], 'mod-sequence');
        if (!/^\d{1,20}$/.test(v)) throw new BadArgs('CHANGEDSINCE needs a number');
        changedSince = BigInt(v);
        s.condstore = true;
      } else throw new BadArgs(`Unknown FETCH modifier ${name.slice(0, 30)}`);
    }
  }
  if (uid && !items.some((i) => i.kind === 'UID')) items.unshift({ kind: 'UID' });
  if (changedSince !== null && !items.some((i) => i.kind === 'MODSEQ')) items.push({ kind: 'MODSEQ' });
  let targets = uid ? resolveUids(set, mailbox.uids()) : resolveSequence(set, mailbox.entries.length);
  // A sequence number beyond the mailbox (not "*", which may name nothing in an empty one): the client's view is wrong.
  if (!uid && !targets.length && set.some(([a, b]) => a > mailbox.entries.length || b > mailbox.entries.length)) throw new BadArgs('Invalid sequence number');
  if (changedSince !== null) targets = targets.filter((i) => mailbox.entries[i]!.modseq > changedSince);
  const withMessage = needsMessage(items);
  const markSeen = setsSeen(items) && !mailbox.readOnly;
  const flagsAsked = items.some((i) => i.kind === 'FLAGS');

  for (let k = 0; k < targets.length; k += ROUND) {
    const round = targets.slice(k, k + ROUND);
    if (withMessage) await mailbox.messages(s.svc, round);
    let seenNow: Set<number> | null = null;
    if (markSeen) {
      const unseen = round.map((i) => mailbox.entries[i]!).filter((e) => !(e.flags & FLAG_BITS['\\Seen']));
      if (unseen.length) {
        const before = mailbox.highestModseq;
        const r = await storeFlags(s.svc, {
          accountId: s.login!.accountId,
          folderId: mailbox.folder.folderId,
          uids: unseen.map((e) => e.uid),
          change: { mode: 'add', bits: FLAG_BITS['\\Seen'], deleted: false, keywords: [] },
          actor: { via: 'imap', appPasswordId: s.login!.appPasswordId },
        });
        mailbox.applyChanged(r.changed, r.highestModseq, r.highestModseq === before + 1n);
        seenNow = new Set(r.changed.map((c) => c.uid));
      }
    }
    // The round's messages are opened before any of its responses is written (one that does not open fails the
    // command before its round is answered), and let go once written.
    let opened: ParsedMessage[] | null = null;
    if (withMessage) {
      opened = [];
      for (const i of round) opened.push((mailbox.held(i) ? mailbox.message(s.svc, i) : await mailbox.opened(s.svc, i)) ?? EMPTY);
    }
    for (let r = 0; r < round.length; r++) {
      const i = round[r]!;
      const e = mailbox.entries[i]!;
      const msg = opened ? opened[r]! : EMPTY;
      // One list of chunks per response, without a list per item in between.
      const line: Chunk[] = [`* ${i + 1} FETCH (`];
      for (let j = 0; j < items.length; j++) {
        if (j) line.push(' ');
        render(items[j]!, e, msg, line);
      }
      if (seenNow?.has(e.uid) && !flagsAsked) line.push(' FLAGS ', ...flagList(e));
      line.push(')\r\n');
      s.write(line);
    }
    await s.drained();
  }
  return { text: 'FETCH completed' };
}
