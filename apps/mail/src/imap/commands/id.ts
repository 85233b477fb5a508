/** ID (RFC 2971): the client says who it is (ignored); the server answers its name. */
import type { Session } from '../session';

export async function id(s: Session) {
  s.untagged(['* ID ("name" "Boxes" "vendor" "Boxes")']);
  return { text: 'ID completed' };
}
