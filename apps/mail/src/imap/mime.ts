/**
 * The MIME structure of a stored message with byte offsets, for what FETCH serves from the raw bytes: body
 * sections (BODY[1.2.MIME], BODY[HEADER.FIELDS (...)], partial ranges), BODYSTRUCTURE and ENVELOPE (RFC 3501
 * 6.4.5 and 7.4.2). The message is read as a latin1 string, so string offsets are byte offsets and every byte
 * goes back out unchanged.
 */
import { nstr, paren, str, type Chunk } from './encode';

export interface Header {
  /** Lower-case name. */
  name: string;
  /** The value with folding removed (CRLF before whitespace dropped), as raw bytes in a latin1 string. */
  value: string;
}

export interface MimeNode {
  /** [start, end) of the header block, the blank line included. */
  headerStart: number;
  headerEnd: number;
  /** [start, end) of the body. */
  bodyStart: number;
  bodyEnd: number;
  headers: Header[];
  type: string;
  subtype: string;
  params: [string, string][];
  children: MimeNode[];
  /** For message/rfc822: the encapsulated message. */
  message: MimeNode | null;
}

/** A stored message; its text and MIME tree are made on first use (BODY[] needs neither). */
export class ParsedMessage {
  private textCache: string | null = null;
  private rootCache: MimeNode | null = null;

  constructor(readonly raw: Buffer) {}

  get text(): string {
    this.textCache ??= this.raw.toString('latin1');
    return this.textCache;
  }

  get root(): MimeNode {
    this.rootCache ??= parseEntity(this.text, 0, this.text.length, { type: 'text', subtype: 'plain' }, 0);
    return this.rootCache;
  }

  private headerCache: { end: number; headers: Header[] } | null = null;

  /**
   * The message's own header block (its end, the blank line included, and its fields), found without reading
   * the body: ENVELOPE and BODY[HEADER...] of many messages (a client's first look at a folder) stay cheap.
   */
  get header(): { end: number; headers: Header[] } {
    if (!this.headerCache) {
      if (this.rootCache) {
        this.headerCache = { end: this.rootCache.headerEnd, headers: this.rootCache.headers };
      } else {
        const head = this.raw.subarray(0, Math.min(this.raw.length, 1024 * 1024)).toString('latin1');
        const { headerEnd } = findHeaderEnd(head, 0, head.length);
        const end = headerEnd === head.length && head.length < this.raw.length ? this.raw.length : headerEnd;
        this.headerCache = { end, headers: parseHeaders(head.slice(0, end)) };
      }
    }
    return this.headerCache;
  }

  bytes(start: number, end: number): Buffer {
    return this.raw.subarray(start, end);
  }
}

const MAX_DEPTH = 20;

function findHeaderEnd(text: string, start: number, end: number): { headerEnd: number; bodyStart: number } {
  // An entity that starts with an empty line has an empty header.
  if (text.startsWith('\r\n', start)) return { headerEnd: start + 2, bodyStart: start + 2 };
  if (text[start] === '\n') return { headerEnd: start + 1, bodyStart: start + 1 };
  let i = start;
  while (i < end) {
    const nl = text.indexOf('\n', i);
    if (nl === -1 || nl >= end) break;
    const next = nl + 1;
    if (text.startsWith('\r\n', next) && next + 2 <= end) return { headerEnd: next + 2, bodyStart: next + 2 };
    if (text[next] === '\n') return { headerEnd: next + 1, bodyStart: next + 1 };
    i = next;
  }
  return { headerEnd: end, bodyStart: end };
}

export function parseHeaders(block: string): Header[] {
  const out: Header[] = [];
  for (const line of block.split(/\r?\n(?![ \t])/)) {
    if (!line.trim()) continue;
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    out.push({
      name: line.slice(0, colon).trim().toLowerCase(),
      value: line
        .slice(colon + 1)
        .replace(/\r?\n/g, '')
        .replace(/^[ \t]+/, ''),
    });
  }
  return out;
}

function headerValue(headers: Header[], name: string): string | null {
  return headers.find((h) => h.name === name)?.value ?? null;
}

/** A structured header value: "type/subtype; a=b; c="d"" into its value and parameters (comments dropped). */
export function parseParams(value: string): { value: string; params: [string, string][] } {
  const parts: string[] = [];
  let cur = '';
  let quoted = false;
  let comment = 0;
  for (let i = 0; i < value.length; i++) {
    const c = value[i]!;
    if (quoted) {
      if (c === '\\' && i + 1 < value.length) {
        cur += value[++i];
        continue;
      }
      if (c === '"') quoted = false;
      cur += c;
      continue;
    }
    if (comment) {
      if (c === '(') comment++;
      else if (c === ')') comment--;
      continue;
    }
    if (c === '"') {
      quoted = true;
      cur += c;
    } else if (c === '(') comment = 1;
    else if (c === ';') {
      parts.push(cur);
      cur = '';
    } else cur += c;
  }
  parts.push(cur);
  const params: [string, string][] = [];
  for (const p of parts.slice(1)) {
    const eq = p.indexOf('=');
    if (eq <= 0) continue;
    let v = p.slice(eq + 1).trim();
    if (v.startsWith('"') && v.endsWith('"') && v.length >= 2) v = v.slice(1, -1);
    params.push([p.slice(0, eq).trim().toLowerCase(), v]);
  }
  return { value: parts[0]!.trim(), params };
}

function parseEntity(text: string, start: number, end: number, fallback: { type: string; subtype: string }, depth: number): MimeNode {
  const { headerEnd, bodyStart } = findHeaderEnd(text, start, end);
  const headers = parseHeaders(text.slice(start, headerEnd));
  const ct = headerValue(headers, 'content-type');
  let type = fallback.type;
  let subtype = fallback.subtype;
  let params: [string, string][] = fallback.type === 'text' ? [['charset', 'us-ascii']] : [];
  if (ct) {
    const parsed = parseParams(ct);
    const m = /^([^/\s]+)\s*\/\s*([^\s;]+)$/.exec(parsed.value);
    if (m) {
      type = m[1]!.toLowerCase();
      subtype = m[2]!.toLowerCase();
      params = parsed.params;
      // Text without a charset is US-ASCII (RFC 2045 5.2).
      if (type === 'text' && !params.some(([k]) => k === 'charset')) params = [['charset', 'us-ascii'], ...params];
    }
  }
  const node: MimeNode = { headerStart: start, headerEnd, bodyStart, bodyEnd: end, headers, type, subtype, params, children: [], message: null };
  if (depth >= MAX_DEPTH) return node;
  if (type === 'multipart') {
    const boundary = params.find(([k]) => k === 'boundary')?.[1];
    if (boundary) node.children = splitMultipart(text, bodyStart, end, boundary, subtype === 'digest', depth);
    // A multipart without parts (or boundary) is shown as one empty text part, as other servers do.
    if (!node.children.length) node.children = [{ ...emptyText(bodyStart), bodyEnd: bodyStart }];
  } else if (type === 'message' && (subtype === 'rfc822' || subtype === 'global')) {
    node.message = parseEntity(text, bodyStart, end, { type: 'text', subtype: 'plain' }, depth + 1);
  }
  return node;
}

function emptyText(at: number): MimeNode {
  return {
    headerStart: at,
    headerEnd: at,
    bodyStart: at,
    bodyEnd: at,
    headers: [],
    type: 'text',
    subtype: 'plain',
    params: [['charset', 'us-ascii']],
    children: [],
    message: null,
  };
}

function splitMultipart(text: string, start: number, end: number, boundary: string, digest: boolean, depth: number): MimeNode[] {
  const delimiter = `--${boundary}`;
  const parts: MimeNode[] = [];
  // Positions of delimiter lines: a line that starts with --boundary.
  let partStart = -1;
  let i = start;
  for (;;) {
    const at = text.indexOf(delimiter, i);
    if (at === -1 || at >= end) break;
    const lineStart = at === start || text[at - 1] === '\n';
    if (!lineStart) {
      i = at + delimiter.length;
      continue;
    }
    const after = at + delimiter.length;
    const closing = text.startsWith('--', after);
    // The CRLF before a delimiter belongs to the delimiter.
    const partEnd = at >= 2 && text[at - 2] === '\r' ? at - 2 : at >= 1 && text[at - 1] === '\n' ? at - 1 : at;
    if (partStart !== -1)
      parts.push(
        parseEntity(
          text,
          partStart,
          Math.max(partStart, partEnd),
          digest ? { type: 'message', subtype: 'rfc822' } : { type: 'text', subtype: 'plain' },
          depth + 1,
        ),
      );
    if (closing) return parts;
    const nl = text.indexOf('\n', after);
    if (nl === -1 || nl >= end) return parts;
    partStart = nl + 1;
    i = partStart;
  }
  // No closing delimiter: the last part runs to the end.
  if (partStart !== -1 && partStart <= end) parts.push(parseEntity(text, partStart, end, { type: 'text', subtype: 'plain' }, depth + 1));
  return parts;
}

// Sections (RFC 3501 6.4.5).

export interface Section {
  /** Part numbers: [] is the whole message. */
  path: number[];
  /** '' (the part's body, or the whole message), HEADER, TEXT, MIME, HEADER.FIELDS, HEADER.FIELDS.NOT. */
  specifier: '' | 'HEADER' | 'TEXT' | 'MIME' | 'HEADER.FIELDS' | 'HEADER.FIELDS.NOT';
  /** Field names (upper case as given) of HEADER.FIELDS and HEADER.FIELDS.NOT. */
  fields: string[];
}

function part(node: MimeNode, n: number): MimeNode | null {
  if (node.type === 'multipart') return node.children[n - 1] ?? null;
  return n === 1 ? node : null;
}

/** The node a section path names (null when the message has no such part). */
export function resolvePart(root: MimeNode, path: number[]): MimeNode | null {
  let cur: MimeNode | null = root;
  for (const [i, n] of path.entries()) {
    if (!cur) return null;
    // Below a message/rfc822 part, numbers count the parts of the encapsulated message.
    if (i > 0 && cur.message) cur = cur.message;
    cur = part(cur, n);
  }
  return cur;
}

/** The bytes of a section, or null when the message has no such part (then NIL... or an empty string; see FETCH). */
export function sectionBytes(msg: ParsedMessage, section: Section): Buffer | null {
  // BODY[] is the stored bytes, BODY[HEADER...] the header block: no need to parse the body for those.
  if (!section.path.length && section.specifier === '') return msg.raw;
  if (!section.path.length && section.specifier.startsWith('HEADER')) {
    const { end } = msg.header;
    if (section.specifier === 'HEADER') return msg.bytes(0, end);
    return Buffer.from(filterHeader(msg.raw.subarray(0, end).toString('latin1'), section.fields, section.specifier === 'HEADER.FIELDS.NOT'), 'latin1');
  }
  const node = section.path.length ? resolvePart(msg.root, section.path) : msg.root;
  if (!node) return null;
  const spec = section.specifier;
  if (spec === '') {
    if (!section.path.length) return msg.raw;
    // BODY[n] of a message/rfc822 part is the whole encapsulated message; of others, the part's body.
    return msg.bytes(node.bodyStart, node.bodyEnd);
  }
  if (spec === 'MIME') {
    if (!section.path.length) return null;
    return msg.bytes(node.headerStart, node.headerEnd);
  }
  // HEADER and TEXT of the message itself or of an encapsulated message.
  const target = section.path.length ? node.message : msg.root;
  if (!target) return null;
  if (spec === 'TEXT') return msg.bytes(target.bodyStart, target.bodyEnd);
  const header = msg.text.slice(target.headerStart, target.headerEnd);
  if (spec === 'HEADER') return msg.bytes(target.headerStart, target.headerEnd);
  return Buffer.from(filterHeader(header, section.fields, spec === 'HEADER.FIELDS.NOT'), 'latin1');
}

/** The header lines (with their folding) whose names are (or, with not, are not) in fields, and the blank line. */
export function filterHeader(header: string, fields: string[], not: boolean): string {
  const want = new Set(fields.map((f) => f.toLowerCase()));
  const lines = header.split(/(?<=\n)(?![ \t])/);
  let out = '';
  for (const line of lines) {
    if (line === '\r\n' || line === '\n') continue;
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    if (want.has(name) !== not) out += line.endsWith('\n') ? line : `${line}\r\n`;
  }
  return `${out}\r\n`;
}

// BODYSTRUCTURE and BODY.

function paramsList(params: [string, string][]): Chunk[] {
  return params.length ? paren(params.flatMap(([k, v]) => [str(k.toUpperCase()), str(v)])) : ['NIL'];
}

/** Lines of a body: its line feeds, and a last line that has none. */
function countLines(msg: ParsedMessage, node: MimeNode): number {
  let n = 0;
  for (let i = msg.text.indexOf('\n', node.bodyStart); i !== -1 && i < node.bodyEnd; i = msg.text.indexOf('\n', i + 1)) n++;
  if (node.bodyEnd > node.bodyStart && msg.text[node.bodyEnd - 1] !== '\n') n++;
  return n;
}

function disposition(node: MimeNode): Chunk[] {
  const d = headerValue(node.headers, 'content-disposition');
  if (!d) return ['NIL'];
  const p = parseParams(d);
  return paren([str(p.value.toLowerCase() || 'attachment'), paramsList(p.params)]);
}

function language(node: MimeNode): Chunk[] {
  const l = headerValue(node.headers, 'content-language');
  if (!l) return ['NIL'];
  const tags = l
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
  return tags.length === 1 ? str(tags[0]!) : paren(tags.map((x) => str(x)));
}

function trimmedHeader(node: MimeNode, name: string): string | null {
  const v = headerValue(node.headers, name);
  return v === null ? null : v.trim();
}

/** BODYSTRUCTURE (extensible) or BODY (without the extension data). */
export function bodyStructure(msg: ParsedMessage, node: MimeNode, extensible: boolean): Chunk[] {
  if (node.type === 'multipart') {
    const out: Chunk[] = ['('];
    for (const child of node.children) out.push(...bodyStructure(msg, child, extensible));
    out.push(' ', ...str(node.subtype.toUpperCase()));
    if (extensible)
      out.push(' ', ...paramsList(node.params), ' ', ...disposition(node), ' ', ...language(node), ' ', ...nstr(trimmedHeader(node, 'content-location')));
    out.push(')');
    return out;
  }
  const fields: Chunk[][] = [
    str(node.type.toUpperCase()),
    str(node.subtype.toUpperCase()),
    paramsList(node.params),
    nstr(trimmedHeader(node, 'content-id')),
    nstr(trimmedHeader(node, 'content-description')),
    str((trimmedHeader(node, 'content-transfer-encoding') ?? '7bit').toUpperCase()),
    [String(node.bodyEnd - node.bodyStart)],
  ];
  if (node.type === 'message' && node.message && (node.subtype === 'rfc822' || node.subtype === 'global')) {
    fields.push(envelope(node.message.headers), bodyStructure(msg, node.message, extensible), [String(countLines(msg, node))]);
  } else if (node.type === 'text') {
    fields.push([String(countLines(msg, node))]);
  }
  if (extensible) fields.push(nstr(trimmedHeader(node, 'content-md5')), disposition(node), language(node), nstr(trimmedHeader(node, 'content-location')));
  return paren(fields);
}

// ENVELOPE and addresses.

export interface Address {
  name: string | null;
  mailbox: string | null;
  host: string | null;
}

type AddrToken = { kind: 'word' | 'quoted' | 'comment' | 'angle'; text: string } | { kind: 'special'; text: ',' | ':' | ';' };

function tokenizeAddresses(value: string): AddrToken[] {
  const out: AddrToken[] = [];
  let i = 0;
  while (i < value.length) {
    const c = value[i]!;
    if (c === ' ' || c === '\t' || c === '\r' || c === '\n') {
      i++;
    } else if (c === '"') {
      let s = '';
      i++;
      while (i < value.length && value[i] !== '"') {
        if (value[i] === '\\' && i + 1 < value.length) i++;
        s += value[i++];
      }
      i++;
      out.push({ kind: 'quoted', text: s });
    } else if (c === '(') {
      let depth = 1;
      let s = '';
      i++;
      while (i < value.length) {
        const d = value[i]!;
        if (d === '\\' && i + 1 < value.length) {
          s += value[i + 1];
          i += 2;
          continue;
        }
        if (d === '(') depth++;
        if (d === ')' && --depth === 0) break;
        s += d;
        i++;
      }
      i++;
      out.push({ kind: 'comment', text: s.trim() });
    } else if (c === '<') {
      const close = value.indexOf('>', i);
      out.push({ kind: 'angle', text: value.slice(i + 1, close === -1 ? value.length : close).trim() });
      i = close === -1 ? value.length : close + 1;
    } else if (c === ',' || c === ':' || c === ';') {
      out.push({ kind: 'special', text: c });
      i++;
    } else {
      let s = '';
      while (i < value.length && !' \t\r\n"(<,:;'.includes(value[i]!)) s += value[i++];
      out.push({ kind: 'word', text: s });
    }
  }
  return out;
}

function mailboxOf(tokens: AddrToken[]): Address | null {
  const angleAt = tokens.findIndex((t) => t.kind === 'angle');
  let addr: string;
  let name: string | null;
  if (angleAt !== -1) {
    addr = tokens[angleAt]!.text;
    name =
      tokens
        .slice(0, angleAt)
        .filter((t) => t.kind === 'word' || t.kind === 'quoted')
        .map((t) => t.text)
        .join(' ')
        .trim() || null;
  } else {
    addr = tokens
      .filter((t) => t.kind === 'word' || t.kind === 'quoted')
      .map((t) => t.text)
      .join('');
    name = [...tokens].reverse().find((t) => t.kind === 'comment' && t.text)?.text ?? null;
  }
  // A source route (@a,@b:user@host) keeps only the address.
  if (addr.startsWith('@') && addr.includes(':')) addr = addr.slice(addr.lastIndexOf(':') + 1);
  if (!addr && !name) return null;
  const at = addr.lastIndexOf('@');
  return { name, mailbox: (at === -1 ? addr : addr.slice(0, at)) || null, host: at === -1 ? 'missing.host.invalid' : addr.slice(at + 1) };
}

/**
 * Parses an address-list header (RFC 5322 3.4): mailboxes, display names (atoms, quoted strings, encoded words
 * left as they are), angle addresses, and groups (IMAP's start and end markers). A comment is the name of an
 * address that has no other.
 */
export function parseAddressList(value: string): Address[] {
  const tokens = tokenizeAddresses(value);
  const out: Address[] = [];
  let cur: AddrToken[] = [];
  let inGroup = false;
  const flush = () => {
    const a = mailboxOf(cur);
    if (a) out.push(a);
    cur = [];
  };
  for (const t of tokens) {
    if (t.kind === 'special' && t.text === ':' && !inGroup && !cur.some((x) => x.kind === 'angle')) {
      const groupName = cur
        .filter((x) => x.kind === 'word' || x.kind === 'quoted')
        .map((x) => x.text)
        .join(' ');
      out.push({ name: null, mailbox: groupName, host: null });
      cur = [];
      inGroup = true;
    } else if (t.kind === 'special' && t.text === ';' && inGroup) {
      flush();
      out.push({ name: null, mailbox: null, host: null });
      inGroup = false;
    } else if (t.kind === 'special' && t.text === ',') {
      flush();
    } else {
      cur.push(t);
    }
  }
  flush();
  if (inGroup) out.push({ name: null, mailbox: null, host: null });
  return out;
}

function addresses(headers: Header[], name: string): Chunk[] {
  const v = headerValue(headers, name);
  if (v === null) return ['NIL'];
  const list = parseAddressList(v);
  if (!list.length) return ['NIL'];
  // env-to = "(" 1*address ")": addresses follow each other without spaces.
  return ['(', ...list.flatMap((a) => paren([nstr(a.name), ['NIL'], nstr(a.mailbox), nstr(a.host)])), ')'];
}

export function envelope(headers: Header[]): Chunk[] {
  const h = (n: string) => headerValue(headers, n);
  const from = addresses(headers, 'from');
  return paren([
    nstr(h('date')?.trim() ?? null),
    nstr(h('subject')),
    from,
    h('sender') !== null ? addresses(headers, 'sender') : from,
    h('reply-to') !== null ? addresses(headers, 'reply-to') : from,
    addresses(headers, 'to'),
    addresses(headers, 'cc'),
    addresses(headers, 'bcc'),
    nstr(h('in-reply-to')?.trim() ?? null),
    nstr(h('message-id')?.trim() ?? null),
  ]);
}
