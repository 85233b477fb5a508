/**
 * SEARCH (RFC 3501 6.4.4, and MODSEQ of RFC 7162): the keys are parsed into a tree, then each message is
 * tested. Flags, sizes, dates and UIDs come from the folder view; header and body keys read the stored message
 * (case-insensitive substring, on the raw header and on its decoded form, on the decoded text and html). Top-level
 * TEXT and BODY keys first narrow the messages to read through the search index (commands/search.ts).
 */
import type { FolderEntry } from '@boxes/core';
import { FLAG_BITS } from '@boxes/core';
import { parseMessage } from '@boxes/mail';
import { parseSearchDate } from './encode';
import { parseHeaders, type Header } from './mime';
import { astring, atom, BadArgs, number, type Token } from './parser';
import { isSequenceSet, parseSequenceSet, resolveSequence, resolveUids, type SequenceSet } from './sequence';

export type SearchKey =
  | { op: 'all' }
  | { op: 'none' }
  | { op: 'flag'; bit: number }
  | { op: 'deleted' }
  | { op: 'keyword'; name: string }
  | { op: 'seq'; set: SequenceSet }
  | { op: 'uid'; set: SequenceSet }
  | { op: 'not'; key: SearchKey }
  | { op: 'or'; a: SearchKey; b: SearchKey }
  | { op: 'and'; keys: SearchKey[] }
  | { op: 'larger' | 'smaller'; n: number }
  | { op: 'date'; field: 'internal' | 'sent'; cmp: 'before' | 'on' | 'since'; day: Date }
  | { op: 'header'; field: string; value: string }
  | { op: 'body' | 'text'; value: string }
  | { op: 'modseq'; n: bigint };

const FLAG_KEYS: Record<string, number> = {
  ANSWERED: FLAG_BITS['\\Answered'],
  FLAGGED: FLAG_BITS['\\Flagged'],
  SEEN: FLAG_BITS['\\Seen'],
  DRAFT: FLAG_BITS['\\Draft'],
};

class Cursor {
  i = 0;
  constructor(readonly tokens: Token[]) {}
  next(what: string): Token {
    const t = this.tokens[this.i++];
    if (!t) throw new BadArgs(`SEARCH: ${what} expected`);
    return t;
  }
  get done(): boolean {
    return this.i >= this.tokens.length;
  }
}

function keyOf(c: Cursor): SearchKey {
  const t = c.next('a search key');
  if (t.type === 'list') {
    const inner = new Cursor(t.items);
    const keys: SearchKey[] = [];
    while (!inner.done) keys.push(keyOf(inner));
    return keys.length === 1 ? keys[0]! : { op: 'and', keys };
  }
  const word = atom(t, 'search key');
  const k = word.toUpperCase();
  const str = () => astring(c.next(`a string after ${k}`), k);
  const date = () => {
    const d = parseSearchDate(astring(c.next(`a date after ${k}`), k));
    if (!d) throw new BadArgs(`${k}: a date such as 1-Feb-1994 was expected`);
    return d;
  };
  if (k in FLAG_KEYS) return { op: 'flag', bit: FLAG_KEYS[k]! };
  if (k.startsWith('UN') && k.slice(2) in FLAG_KEYS) return { op: 'not', key: { op: 'flag', bit: FLAG_KEYS[k.slice(2)]! } };
  switch (k) {
    case 'ALL':
    case 'OLD':
      return { op: 'all' };
    case 'NEW':
    case 'RECENT':
      // \Recent is not kept: no message is recent.
      return { op: 'none' };
    case 'DELETED':
      return { op: 'deleted' };
    case 'UNDELETED':
      return { op: 'not', key: { op: 'deleted' } };
    case 'KEYWORD':
      return { op: 'keyword', name: atom(c.next('a keyword'), 'keyword') };
    case 'UNKEYWORD':
      return { op: 'not', key: { op: 'keyword', name: atom(c.next('a keyword'), 'keyword') } };
    case 'NOT':
      return { op: 'not', key: keyOf(c) };
    case 'OR':
      return { op: 'or', a: keyOf(c), b: keyOf(c) };
    case 'LARGER':
      return { op: 'larger', n: number(c.next('a number'), 'LARGER') };
    case 'SMALLER':
      return { op: 'smaller', n: number(c.next('a number'), 'SMALLER') };
    case 'BEFORE':
    case 'ON':
    case 'SINCE':
      return { op: 'date', field: 'internal', cmp: k.toLowerCase() as 'before', day: date() };
    case 'SENTBEFORE':
    case 'SENTON':
    case 'SENTSINCE':
      return { op: 'date', field: 'sent', cmp: k.slice(4).toLowerCase() as 'before', day: date() };
    case 'FROM':
    case 'TO':
    case 'CC':
    case 'BCC':
    case 'SUBJECT':
      return { op: 'header', field: k.toLowerCase(), value: str() };
    case 'HEADER': {
      const field = str().toLowerCase();
      return { op: 'header', field, value: str() };
    }
    case 'BODY':
      return { op: 'body', value: str() };
    case 'TEXT':
      return { op: 'text', value: str() };
    case 'UID':
      return { op: 'uid', set: parseSequenceSet(atom(c.next('a UID set'), 'UID')) };
    case 'MODSEQ': {
      // MODSEQ [<entry-name> <entry-type>] <mod-sequence>
      let t2 = c.next('a mod-sequence');
      if (t2.type === 'string' || (t2.type === 'atom' && !/^\d+$/.test(t2.value))) {
        c.next('an entry type');
        t2 = c.next('a mod-sequence');
      }
      const v = atom(t2, 'mod-sequence');
      if (!/^\d{1,20}$/.test(v)) throw new BadArgs('MODSEQ: a number was expected');
      return { op: 'modseq', n: BigInt(v) };
    }
    default:
      if (isSequenceSet(word)) return { op: 'seq', set: parseSequenceSet(word) };
      throw new BadArgs(`Unknown search key ${word.slice(0, 40)}`);
  }
}

export interface ParsedSearch {
  key: SearchKey;
  /** Whether the query has a MODSEQ key (the answer then carries the highest mod-sequence). */
  modseq: boolean;
}

export function parseSearch(tokens: Token[]): ParsedSearch {
  const c = new Cursor(tokens);
  const first = tokens[0];
  if (first?.type === 'atom' && first.value.toUpperCase() === 'CHARSET') {
    c.next('CHARSET');
    const charset = astring(c.next('a charset'), 'CHARSET').toUpperCase();
    if (!['UTF-8', 'US-ASCII', 'UTF8'].includes(charset)) throw new BadArgs(`[BADCHARSET (UTF-8 US-ASCII)] ${charset} is not supported`);
  }
  const keys: SearchKey[] = [];
  while (!c.done) keys.push(keyOf(c));
  if (!keys.length) throw new BadArgs('SEARCH needs a key');
  const key: SearchKey = keys.length === 1 ? keys[0]! : { op: 'and', keys };
  return { key, modseq: JSON.stringify(key, (_k, v) => (typeof v === 'bigint' ? String(v) : v)).includes('"op":"modseq"') };
}

export function needsContent(key: SearchKey): boolean {
  switch (key.op) {
    case 'header':
    case 'body':
    case 'text':
      return true;
    case 'date':
      return key.field === 'sent';
    case 'not':
      return needsContent(key.key);
    case 'or':
      return needsContent(key.a) || needsContent(key.b);
    case 'and':
      return key.keys.some(needsContent);
    default:
      return false;
  }
}

/** What content keys read of one message, made on first use. */
export class SearchContent {
  private headers: Header[] | null = null;
  private decoded: Promise<{ text: string; body: string }> | null = null;
  constructor(private readonly raw: Buffer | null) {}

  headerList(): Header[] {
    if (!this.headers) {
      const text = this.raw ? this.raw.toString('latin1') : '';
      const end = text.search(/\r?\n\r?\n/);
      this.headers = parseHeaders(end === -1 ? text : text.slice(0, end));
    }
    return this.headers;
  }

  async bodyText(): Promise<string> {
    this.decoded ??= (async () => {
      if (!this.raw) return { text: '', body: '' };
      const p = await parseMessage(this.raw);
      const body = [p.text ?? '', p.html ?? ''].join('\n');
      return { text: body, body };
    })();
    return (await this.decoded).body;
  }
}

/** RFC 2047 encoded words decoded (for matching only). */
export function decodeWords(value: string): string {
  const bytes = Buffer.from(value, 'latin1').toString('utf8');
  return bytes.replace(/=\?([^?\s]+)\?([bBqQ])\?([^?\s]*)\?=(\s+(?==\?))?/g, (_all, charset: string, enc: string, data: string) => {
    try {
      const raw =
        enc.toUpperCase() === 'B'
          ? Buffer.from(data, 'base64')
          : Buffer.from(
              data.replace(/_/g, ' ').replace(/=([0-9A-Fa-f]{2})/g, (_m, h: string) => String.fromCharCode(parseInt(h, 16))),
              'latin1',
            );
      return new TextDecoder(charset.split('*')[0]!.toLowerCase()).decode(raw);
    } catch {
      return _all;
    }
  });
}

function contains(hay: string, needle: string): boolean {
  return hay.toLowerCase().includes(needle.toLowerCase());
}

function dayOf(d: Date): number {
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
}

export interface SearchTarget {
  entry: FolderEntry;
  /** 1-based. */
  seq: number;
  content: SearchContent | null;
}

/** Sequence and UID sets of a query, resolved once per query. */
const resolvedSets = new WeakMap<SearchKey, Set<number>>();

function inSet(key: Extract<SearchKey, { op: 'seq' | 'uid' }>, t: SearchTarget, all: { uids: number[]; count: number }): boolean {
  let set = resolvedSets.get(key);
  if (!set) {
    set = new Set(key.op === 'seq' ? resolveSequence(key.set, all.count) : resolveUids(key.set, all.uids));
    resolvedSets.set(key, set);
  }
  return set.has(t.seq - 1);
}

export async function matches(key: SearchKey, t: SearchTarget, all: { uids: number[]; count: number }): Promise<boolean> {
  switch (key.op) {
    case 'all':
      return true;
    case 'none':
      return false;
    case 'flag':
      return (t.entry.flags & key.bit) !== 0;
    case 'deleted':
      return t.entry.deleted;
    case 'keyword':
      return t.entry.keywords.some((k) => k.toLowerCase() === key.name.toLowerCase());
    case 'seq':
    case 'uid':
      return inSet(key, t, all);
    case 'not':
      return !(await matches(key.key, t, all));
    case 'or':
      return (await matches(key.a, t, all)) || (await matches(key.b, t, all));
    case 'and':
      for (const k of key.keys) if (!(await matches(k, t, all))) return false;
      return true;
    case 'larger':
      return t.entry.size > key.n;
    case 'smaller':
      return t.entry.size < key.n;
    case 'modseq':
      return t.entry.modseq >= key.n;
    case 'date': {
      let when: Date | null = t.entry.internalDate;
      if (key.field === 'sent') {
        const v = t.content?.headerList().find((h) => h.name === 'date')?.value;
        when = v ? new Date(v.replace(/\(.*?\)/g, '').trim()) : null;
        if (!when || Number.isNaN(when.getTime())) when = t.entry.internalDate;
      }
      const d = dayOf(when);
      const k = key.day.getTime();
      return key.cmp === 'before' ? d < k : key.cmp === 'on' ? d === k : d >= k;
    }
    case 'header': {
      const hs = t.content?.headerList() ?? [];
      const values = hs.filter((h) => h.name === key.field).map((h) => h.value);
      // HEADER name "" matches every message that has the field.
      if (!key.value) return values.length > 0;
      return values.some((v) => contains(v, key.value) || contains(decodeWords(v), key.value));
    }
    case 'body':
      return contains(await t.content!.bodyText(), key.value);
    case 'text': {
      const hs = t.content?.headerList() ?? [];
      if (hs.some((h) => contains(`${h.name}: ${h.value}`, key.value) || contains(decodeWords(h.value), key.value))) return true;
      return contains(await t.content!.bodyText(), key.value);
    }
  }
}
