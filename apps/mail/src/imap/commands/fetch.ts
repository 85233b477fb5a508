/**
 * FETCH and UID FETCH (RFC 3501 6.4.5, 7.4.2; CHANGEDSINCE and MODSEQ of RFC 7162). Everything is served from
 * the stored raw message, decrypted when read: UID, FLAGS, INTERNALDATE, RFC822.SIZE, ENVELOPE, BODYSTRUCTURE,
 * BODY, BODY[section]<partial>, BODY.PEEK, RFC822, RFC822.HEADER, RFC822.TEXT, MODSEQ and the macros ALL, FAST
 * and FULL. BODY[...] (not PEEK), RFC822 and RFC822.TEXT set \Seen, unless the mailbox is read-only.
 */
import { FLAG_BITS, storeFlags, type FolderEntry } from '@boxes/core';
import { internalDate, str, type Chunk } from '../encode';
import { flagList, type SelectedMailbox } from '../mailbox';
import { bodyStructure, envelope, ParsedMessage, sectionBytes, type Section } from '../mime';
import { atom, BadArgs, list, type Command, type Token } from '../parser';
import { parseSequenceSet, resolveSequence, resolveUids } from '../sequence';
import type { Done, Session } from '../session';

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

/** A FETCH's data items as a command runs them (UID first under UID FETCH), and what they ask for. */
interface FetchItems {
  items: Item[];
  /** Some item needs the message's bytes. */
  withMessage: boolean;
  /** Some item sets \Seen (unless the mailbox is read-only). */
  setsSeen: boolean;
  flags: boolean;
  modseq: boolean;
}

/**
 * FetchItems by the text of a one-item list, under FETCH and UID FETCH: a download sends the same
 * `(BODY.PEEK[])` with every command, and each one made the list again (its key, a copy, UID put in front).
 */
const oneItem: [Map<string, FetchItems>, Map<string, FetchItems>] = [new Map(), new Map()];

function fetchItems(t: Token | undefined, uid: boolean): FetchItems {
  const first = t?.type === 'list' && t.items.length === 1 ? t.items[0]! : null;
  const single = first?.type === 'atom' ? first.value : null;
  const cache = oneItem[uid ? 1 : 0];
  const known = single === null ? undefined : cache.get(single);
  if (known) return known;
  const items = parseItems(t);
  if (uid && !items.some((i) => i.kind === 'UID')) items.unshift({ kind: 'UID' });
  const made: FetchItems = {
    items,
    withMessage: needsMessage(items),
    setsSeen: setsSeen(items),
    flags: items.some((i) => i.kind === 'FLAGS'),
    modseq: items.some((i) => i.kind === 'MODSEQ'),
  };
  if (single !== null) {
    if (cache.size >= PARSED_ITEMS_KEPT) cache.clear();
    cache.set(single, made);
  }
  return made;
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

const FETCH_DONE: Done = Object.freeze({ text: 'FETCH completed' });

/** Messages handled per round: read together, written, then the next. */
const ROUND = 100;

/**
 * FETCH. A command whose messages are all at hand (a download's next message, read ahead) and that sets no flag
 * is answered at once, without a promise or an await; any other goes through fetchRounds.
 */
export function fetch(s: Session, cmd: Command, uid: boolean): Done | Promise<Done> {
  const mailbox = s.selected!;
  const set = parseSequenceSet(atom(cmd.args[0], 'sequence set'));
  const asked = fetchItems(cmd.args[1], uid);
  let items = asked.items;
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
  // The list may be shared by later commands: a copy gets MODSEQ.
  if (changedSince !== null && !asked.modseq) items = [...items, { kind: 'MODSEQ' }];
  let targets = uid ? resolveUids(set, mailbox.uids()) : resolveSequence(set, mailbox.entries.length);
  // A sequence number beyond the mailbox (not "*", which may name nothing in an empty one): the client's view is wrong.
  if (!uid && !targets.length && set.some(([a, b]) => a > mailbox.entries.length || b > mailbox.entries.length)) throw new BadArgs('Invalid sequence number');
  if (changedSince !== null) targets = targets.filter((i) => mailbox.entries[i]!.modseq > changedSince);
  const markSeen = asked.setsSeen && !mailbox.readOnly;
  const job: FetchJob = { s, mailbox, targets, items, withMessage: asked.withMessage, markSeen, flagsAsked: asked.flags };
  const first = targets.length <= ROUND ? targets : targets.slice(0, ROUND);
  const reading = job.withMessage ? mailbox.messages(s.svc, first) : null;
  if (targets.length > ROUND || reading || (markSeen && someUnseen(mailbox, first)) || (job.withMessage && !allHeld(mailbox, first))) {
    return fetchRounds(job, first, reading);
  }
  writeRound(job, first, job.withMessage ? openHeld(job, first) : null, null);
  return s.backlogged ? s.drained().then(() => FETCH_DONE) : FETCH_DONE;
}

interface FetchJob {
  s: Session;
  mailbox: SelectedMailbox;
  targets: number[];
  items: Item[];
  withMessage: boolean;
  markSeen: boolean;
  flagsAsked: boolean;
}

function someUnseen(mailbox: SelectedMailbox, round: number[]): boolean {
  for (let r = 0; r < round.length; r++) if (!(mailbox.entries[round[r]!]!.flags & FLAG_BITS['\\Seen'])) return true;
  return false;
}

function allHeld(mailbox: SelectedMailbox, round: number[]): boolean {
  for (let r = 0; r < round.length; r++) if (!mailbox.held(round[r]!)) return false;
  return true;
}

/** The round's messages, every one held by the cache (see allHeld), opened. */
function openHeld(job: FetchJob, round: number[]): ParsedMessage[] {
  const opened: ParsedMessage[] = [];
  for (let r = 0; r < round.length; r++) opened.push(job.mailbox.message(job.s.svc, round[r]!) ?? EMPTY);
  return opened;
}

/** The rounds of a FETCH, the first one's reading (from messages()) already started. */
async function fetchRounds(job: FetchJob, first: number[], firstReading: Promise<void> | null): Promise<Done> {
  const { s, mailbox, targets, withMessage, markSeen } = job;
  for (let k = 0; k < targets.length; k += ROUND) {
    const round = k === 0 ? first : targets.slice(k, k + ROUND);
    if (withMessage) {
      const reading = k === 0 ? firstReading : mailbox.messages(s.svc, round);
      if (reading) await reading;
    }
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
    writeRound(job, round, opened, seenNow);
    if (s.backlogged) await s.drained();
  }
  return FETCH_DONE;
}

/** Writes a round's responses; `opened` holds its messages (null when no item needs them). */
function writeRound(job: FetchJob, round: number[], opened: ParsedMessage[] | null, seenNow: Set<number> | null): void {
  const { s, mailbox, items, flagsAsked } = job;
  // One list of chunks for every response, emptied once written.
  const line: Chunk[] = [];
  for (let r = 0; r < round.length; r++) {
    const i = round[r]!;
    const e = mailbox.entries[i]!;
    const msg = opened ? opened[r]! : EMPTY;
    // One list of chunks per response, without a list per item in between.
    line.push(`* ${i + 1} FETCH (`);
    for (let j = 0; j < items.length; j++) {
      if (j) line.push(' ');
      render(items[j]!, e, msg, line);
    }
    if (seenNow?.has(e.uid) && !flagsAsked) line.push(' FLAGS ', ...flagList(e));
    line.push(')\r\n');
    s.write(line);
    line.length = 0;
  }
}
