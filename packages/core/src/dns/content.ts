/**
 * Record content as stored in dns_records: the presentation format of PowerDNS's generic SQL backends, so that
 * apps/dns and PowerDNS read the same rows. Host names are absolute and written without the trailing dot
 * ("10 mail.example.com"); TXT is one or more quoted strings of at most 255 bytes each.
 */

const MAX_TXT_STRING = 255;

/** Quotes a TXT value for storage, split into strings of at most 255 bytes (UTF-8), escaping `"` and `\`. */
export function txtContent(text: string): string {
  const bytes = Buffer.from(text, 'utf8');
  const parts: string[] = [];
  for (let at = 0; at < bytes.length || parts.length === 0; ) {
    let end = Math.min(at + MAX_TXT_STRING, bytes.length);
    // Never cut a UTF-8 sequence: back off to the start of a character.
    while (end < bytes.length && end > at && (bytes[end]! & 0xc0) === 0x80) end--;
    parts.push(bytes.subarray(at, end).toString('utf8'));
    at = end;
    if (at >= bytes.length) break;
  }
  return parts.map((p) => `"${p.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`).join(' ');
}

/** The strings of a stored TXT content (unquoted, unescaped), in order. */
export function txtStrings(content: string): string[] {
  const out: string[] = [];
  const re = /"((?:[^"\\]|\\.)*)"/g;
  for (let m = re.exec(content); m; m = re.exec(content)) out.push(m[1]!.replace(/\\(.)/g, '$1'));
  return out.length ? out : [content];
}

/** The whole text of a stored TXT content: its strings joined (as DKIM and SPF verifiers read it). */
export const txtText = (content: string): string => txtStrings(content).join('');

/** A host name as stored: lower case, without the trailing dot. */
export const hostContent = (name: string): string => name.trim().toLowerCase().replace(/\.$/, '');
