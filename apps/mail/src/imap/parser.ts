/**
 * The IMAP command parser (RFC 3501 section 9, with LITERAL+ of RFC 7888). Two stages:
 *
 * - CommandFramer cuts the byte stream into whole commands: a command is a line, unless the line ends in a
 *   literal announcement {n} or {n+}, in which case n bytes and the rest of the command follow. It says when a
 *   synchronizing literal needs the server's "+" continuation, and also hands out bare lines (IDLE's DONE, an
 *   AUTHENTICATE response).
 * - parseCommand turns one command's bytes into its tag, name and arguments: atoms, strings (quoted or literal)
 *   and parenthesized lists. An atom may carry a bracketed section with spaces, lists and quoted strings inside
 *   (BODY.PEEK[HEADER.FIELDS (From "X-Foo")]<0.100>), which FETCH parses further.
 */

export type Token = { type: 'atom'; value: string } | { type: 'string'; value: Buffer; literal: boolean } | { type: 'list'; items: Token[] };

export interface Command {
  tag: string;
  /** Upper case. */
  name: string;
  args: Token[];
}

/** A command the server answers with BAD (its tag, when one could be read). */
export class ParseError extends Error {
  constructor(
    message: string,
    readonly tag: string | null = null,
  ) {
    super(message);
  }
}

export type Frame =
  | { kind: 'command'; bytes: Buffer }
  | { kind: 'line'; text: string }
  /** A synchronizing literal is announced: send "+ ..." so the client sends it. */
  | { kind: 'continue' }
  /** The command cannot be taken (a literal or a line too long); answer BAD with the tag, the rest was dropped. */
  | { kind: 'too-big'; tag: string | null; message: string };

const LITERAL_AT_END = /\{(\d{1,10})(\+)?\}$/;
const CRLF = Buffer.from('\r\n');

export class CommandFramer {
  /**
   * Input not yet consumed is arena[start, end): appending copies only the new bytes (the arena grows by
   * doubling, consumed space is reused), so a client that pipelines thousands of commands costs linear time.
   */
  private arena: Buffer = Buffer.allocUnsafe(16 * 1024);
  private start = 0;
  private end = 0;
  /** Where the current command's next line starts, relative to buf. */
  private lineStart = 0;
  /** Offset of the literal whose continuation was already sent. */
  private continued = -1;
  /** Bytes still to drop (a too-big non-synchronizing literal being sent anyway), then the rest of its line. */
  private skip = 0;
  private discardLine = false;
  /** arena[0, end), for searching (see crlfFrom). */
  private filled: Buffer = Buffer.alloc(0);
  private filledOf: Buffer | null = null;

  constructor(private readonly limits: { maxLine: number; maxLiteral: number }) {}

  private get buf(): Buffer {
    return this.arena.subarray(this.start, this.end);
  }

  push(chunk: Buffer): void {
    if (this.skip > 0) {
      const n = Math.min(this.skip, chunk.length);
      this.skip -= n;
      chunk = chunk.subarray(n);
      if (!chunk.length) return;
    }
    if (this.end + chunk.length > this.arena.length) {
      const used = this.end - this.start;
      if (used + chunk.length <= this.arena.length / 2) {
        this.arena.copyWithin(0, this.start, this.end);
      } else {
        const bigger = Buffer.allocUnsafe(Math.max(this.arena.length * 2, used + chunk.length));
        this.arena.copy(bigger, 0, this.start, this.end);
        this.arena = bigger;
      }
      this.start = 0;
      this.end = used;
    }
    chunk.copy(this.arena, this.end);
    this.end += chunk.length;
  }

  get buffered(): number {
    return this.buf.length;
  }

  /** The next bare line (without CRLF), or null when none is complete yet. */
  nextLine(): Frame | null {
    const end = this.buf.indexOf('\r\n');
    if (end === -1) {
      if (this.buf.length > this.limits.maxLine) return this.drop(null, 'Line too long');
      return null;
    }
    const text = this.buf.subarray(0, end).toString('utf8');
    this.consume(end + 2);
    return { kind: 'line', text };
  }

  /** The next whole command, a continuation request, or null when more bytes are needed. */
  next(): Frame | null {
    if (this.discardLine && this.skip === 0) {
      const end = this.buf.indexOf('\r\n');
      if (end === -1) {
        this.start = this.end = 0;
        return null;
      }
      this.discardLine = false;
      this.consume(end + 2);
    }
    for (;;) {
      const crlf = this.crlfFrom(this.lineStart);
      if (crlf === -1) {
        if (this.end - this.start - this.lineStart > this.limits.maxLine) return this.drop(this.tagOf(), 'Line too long');
        return null;
      }
      // Most lines end without a literal: only one ending in "}" is looked at as text.
      const m =
        crlf > this.lineStart && this.arena[this.start + crlf - 1] === 0x7d
          ? LITERAL_AT_END.exec(this.textOf(Math.max(this.lineStart, crlf - 16), crlf))
          : null;
      if (!m) {
        // A copy: the arena is reused for what comes next, and a command's strings outlive that.
        const bytes = Buffer.allocUnsafe(crlf);
        this.arena.copy(bytes, 0, this.start, this.start + crlf);
        this.consume(crlf + 2);
        return { kind: 'command', bytes };
      }
      const size = Number(m[1]);
      const literalStart = crlf + 2;
      if (size > this.limits.maxLiteral) {
        const tag = this.tagOf();
        // A synchronizing literal was never sent; a non-synchronizing one is on its way and must be dropped.
        if (m[2]) {
          this.skip = Math.max(0, literalStart + size - this.buf.length);
          this.discardLine = true;
        }
        this.consume(Math.min(this.buf.length, literalStart + size));
        return { kind: 'too-big', tag, message: `Literal too big (at most ${this.limits.maxLiteral} octets)` };
      }
      if (this.buf.length < literalStart + size) {
        if (!m[2] && this.continued !== literalStart) {
          this.continued = literalStart;
          return { kind: 'continue' };
        }
        return null;
      }
      this.lineStart = literalStart + size;
    }
  }

  /** Where the first CRLF at or after `from` (relative to buf) starts, or -1: read in the arena, no view made. */
  private crlfFrom(from: number): number {
    // A view of the arena up to `end` (beyond it lies stale input), made again only when either moved.
    if (this.filledOf !== this.arena || this.filled.length !== this.end) {
      this.filled = this.arena.subarray(0, this.end);
      this.filledOf = this.arena;
    }
    const at = this.filled.indexOf(CRLF, this.start + from);
    return at === -1 ? -1 : at - this.start;
  }

  private textOf(from: number, to: number): string {
    return this.arena.toString('latin1', this.start + from, this.start + to);
  }

  private tagOf(): string | null {
    const sp = this.buf.indexOf(' ');
    const tag = this.buf.subarray(0, sp === -1 ? Math.min(this.buf.length, 64) : Math.min(sp, 64)).toString('latin1');
    return /^[!#$&'*,-.0-9:;<=>?@A-Z[^_`a-z|~]+$/.test(tag) ? tag : null;
  }

  private drop(tag: string | null, message: string): Frame {
    const crlf = this.buf.indexOf('\r\n', this.lineStart);
    this.consume(crlf === -1 ? this.buf.length : crlf + 2);
    return { kind: 'too-big', tag, message };
  }

  private consume(n: number): void {
    this.start += n;
    if (this.start >= this.end) this.start = this.end = 0;
    this.lineStart = 0;
    this.continued = -1;
  }
}

/** Characters that end an atom (RFC 3501 atom-specials, less the list wildcards and "]" which atoms of some commands use). */
const ATOM_END = new Set([0x20, 0x28, 0x29, 0x7b, 0x22, 0x0d, 0x0a]);

class Reader {
  constructor(
    readonly buf: Buffer,
    public pos = 0,
  ) {}

  get done(): boolean {
    return this.pos >= this.buf.length;
  }

  peek(): number {
    return this.buf[this.pos]!;
  }

  skipSpaces(): void {
    while (this.pos < this.buf.length && this.buf[this.pos] === 0x20) this.pos++;
  }

  atom(): string {
    const start = this.pos;
    let depth = 0;
    let quoted = false;
    while (this.pos < this.buf.length) {
      const c = this.buf[this.pos]!;
      if (quoted) {
        if (c === 0x5c) this.pos++;
        else if (c === 0x22) quoted = false;
        this.pos++;
        continue;
      }
      if (c === 0x5b) depth++;
      else if (c === 0x5d) depth = Math.max(0, depth - 1);
      else if (depth > 0 && c === 0x22) quoted = true;
      else if (depth === 0 && ATOM_END.has(c)) break;
      else if (c < 0x20 || c === 0x7f) throw new ParseError('Control character in an atom');
      this.pos++;
    }
    if (depth > 0 || quoted) throw new ParseError('Unterminated [ in an atom');
    if (this.pos === start) throw new ParseError(`Unexpected character ${JSON.stringify(String.fromCharCode(this.buf[this.pos] ?? 0))}`);
    return this.buf.toString('latin1', start, this.pos);
  }

  quoted(): Buffer {
    this.pos++; // "
    const out: number[] = [];
    while (this.pos < this.buf.length) {
      const c = this.buf[this.pos++]!;
      if (c === 0x22) return Buffer.from(out);
      if (c === 0x5c) {
        const n = this.buf[this.pos++];
        if (n !== 0x22 && n !== 0x5c) throw new ParseError('Only \\" and \\\\ may be escaped in a quoted string');
        out.push(n);
        continue;
      }
      if (c === 0x0d || c === 0x0a) break;
      out.push(c);
    }
    throw new ParseError('Unterminated quoted string');
  }

  literal(): Buffer {
    const m = /^\{(\d{1,10})\+?\}\r\n/.exec(this.buf.subarray(this.pos, this.pos + 16).toString('latin1'));
    if (!m) throw new ParseError('Malformed literal');
    this.pos += m[0].length;
    const size = Number(m[1]);
    if (this.pos + size > this.buf.length) throw new ParseError('Literal shorter than announced');
    const value = this.buf.subarray(this.pos, this.pos + size);
    this.pos += size;
    return value;
  }

  tokens(inList: boolean): Token[] {
    const out: Token[] = [];
    for (;;) {
      this.skipSpaces();
      if (this.done) {
        if (inList) throw new ParseError('Unterminated list');
        return out;
      }
      const c = this.peek();
      if (c === 0x29) {
        if (!inList) throw new ParseError('Unexpected )');
        this.pos++;
        return out;
      }
      if (c === 0x28) {
        this.pos++;
        out.push({ type: 'list', items: this.tokens(true) });
      } else if (c === 0x22) {
        out.push({ type: 'string', value: this.quoted(), literal: false });
      } else if (c === 0x7b) {
        out.push({ type: 'string', value: this.literal(), literal: true });
      } else {
        out.push({ type: 'atom', value: this.atom() });
      }
    }
  }
}

const TAG = /^[!#$&'*,-.0-9:;<=>?@A-Z[^_`a-z|~\]]+$/;

export function parseCommand(bytes: Buffer): Command {
  const sp = bytes.indexOf(0x20);
  const tag = bytes.toString('latin1', 0, sp === -1 ? bytes.length : sp);
  if (!tag || !TAG.test(tag) || tag.includes('+')) throw new ParseError('Missing or malformed tag');
  if (sp === -1) throw new ParseError('Missing command', tag);
  const r = new Reader(bytes, sp + 1);
  let name: string;
  try {
    name = r.atom().toUpperCase();
    if (!/^[A-Z][A-Z0-9.-]*$/.test(name)) throw new ParseError('Malformed command name');
    return { tag, name, args: r.tokens(false) };
  } catch (err) {
    if (err instanceof ParseError) throw new ParseError(err.message, tag);
    throw err;
  }
}

// Readers of arguments, used by the command handlers.

export class BadArgs extends Error {}

export function astring(t: Token | undefined, what: string): string {
  if (!t) throw new BadArgs(`Missing ${what}`);
  if (t.type === 'atom') return t.value;
  if (t.type === 'string') return t.value.toString('utf8');
  throw new BadArgs(`${what}: a string was expected`);
}

/** An nstring argument: NIL gives null. */
export function nstring(t: Token | undefined, what: string): string | null {
  if (t?.type === 'atom' && t.value.toUpperCase() === 'NIL') return null;
  return astring(t, what);
}

export function atom(t: Token | undefined, what: string): string {
  if (!t || t.type !== 'atom') throw new BadArgs(`Missing or malformed ${what}`);
  return t.value;
}

export function list(t: Token | undefined, what: string): Token[] {
  if (!t || t.type !== 'list') throw new BadArgs(`${what}: a parenthesized list was expected`);
  return t.items;
}

export function number(t: Token | undefined, what: string): number {
  const v = atom(t, what);
  if (!/^\d{1,10}$/.test(v)) throw new BadArgs(`${what}: a number was expected`);
  return Number(v);
}
