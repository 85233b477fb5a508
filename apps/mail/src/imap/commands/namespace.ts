/** NAMESPACE (RFC 2342): one personal namespace, no prefix, "/" as the delimiter. */
import type { Session } from '../session';

export async function namespace(s: Session) {
  s.untagged(['* NAMESPACE (("" "/")) NIL NIL']);
  return { text: 'NAMESPACE completed' };
}
