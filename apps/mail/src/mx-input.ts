/**
 * The MX's input rules, the same as the API's input guard where they apply: an envelope address with a
 * control character (NUL included) or longer than an address can be is refused (553) before anything looks it
 * up, and a message whose header section carries a NUL is refused (554) instead of being stored: PostgreSQL
 * cannot hold NUL in the fields parsed from headers, and RFC 5322 allows none.
 */

/** RFC 5321: a path is at most 256 octets; 320 leaves room for what clients send around it. */
export const MAX_ENVELOPE_ADDRESS = 320;

export function envelopeAddressProblem(address: string): string | null {
  if (address.length > MAX_ENVELOPE_ADDRESS) return `address longer than ${MAX_ENVELOPE_ADDRESS} characters`;
  // Control characters and DEL, NUL included; smtp-server has already taken the line apart.
  if (/[\u0000-\u001f\u007f]/.test(address)) return 'control characters in the address';
  return null;
}

/** The header section (up to the first empty line): whether it holds a NUL byte. */
export function headerHasNul(raw: Buffer): boolean {
  const crlf = raw.indexOf('\r\n\r\n');
  const lf = raw.indexOf('\n\n');
  const ends = [crlf, lf].filter((i) => i >= 0);
  const end = ends.length ? Math.min(...ends) : raw.length;
  return raw.subarray(0, end).includes(0);
}
