/**
 * Writing IMAP response data: strings go out quoted when they can and as literals when they must (line
 * breaks, NUL, 8-bit bytes, or long values); NIL for absent values; lists in parentheses. A response is built
 * as a list of chunks (text and Buffers), so message bytes are never copied into strings.
 */

export type Chunk = string | Buffer;

const NEEDS_LITERAL = /[\r\n\0\x80-\xff]/;

/** A string (given as a latin1 string or as bytes) as an IMAP string. */
export function str(value: string | Buffer): Chunk[] {
  const bytes = typeof value === 'string' ? Buffer.from(value, 'latin1') : value;
  if (bytes.length > 1024 || NEEDS_LITERAL.test(bytes.toString('latin1'))) return [`{${bytes.length}}\r\n`, bytes];
  return [`"${bytes.toString('latin1').replace(/[\\"]/g, (c) => `\\${c}`)}"`];
}

/** A UTF-8 JavaScript string (a mailbox name, an ID value) as an IMAP string. */
export function ustr(value: string): Chunk[] {
  return str(Buffer.from(value, 'utf8'));
}

export function nstr(value: string | Buffer | null | undefined): Chunk[] {
  return value === null || value === undefined ? ['NIL'] : str(value);
}

/** Parenthesized, space-separated. */
export function paren(items: Chunk[][]): Chunk[] {
  const out: Chunk[] = ['('];
  items.forEach((item, i) => {
    if (i) out.push(' ');
    out.push(...item);
  });
  out.push(')');
  return out;
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** INTERNALDATE: "17-Jul-1996 09:44:25 +0000" (in UTC). */
export function internalDate(d: Date): string {
  const p = (n: number) => String(n).padStart(2, '0');
  return `"${p(d.getUTCDate())}-${MONTHS[d.getUTCMonth()]}-${d.getUTCFullYear()} ${p(d.getUTCHours())}:${p(d.getUTCMinutes())}:${p(d.getUTCSeconds())} +0000"`;
}

/** A date of SEARCH (1-Feb-1994) as the UTC midnight starting that day, or null. */
export function parseSearchDate(s: string): Date | null {
  const m = /^"?(\d{1,2})-([A-Za-z]{3})-(\d{4})"?$/.exec(s);
  if (!m) return null;
  const month = MONTHS.findIndex((x) => x.toLowerCase() === m[2]!.toLowerCase());
  if (month === -1) return null;
  return new Date(Date.UTC(Number(m[3]), month, Number(m[1])));
}

/** Mailbox names on the wire are modified UTF-7 (RFC 3501 5.1.3); ours are ASCII, so only "&" needs it. */
export function mailboxName(name: string): string {
  return name.replace(/&/g, '&-');
}
