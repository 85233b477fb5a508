/** CAPABILITY (RFC 3501 6.1.1): what this server speaks, before and after login. */
import { CAPABILITIES, CAPABILITIES_BEFORE_LOGIN, type Session } from '../session';

export async function capability(s: Session) {
  s.untagged([`* CAPABILITY ${(s.state === 'not-authenticated' ? CAPABILITIES_BEFORE_LOGIN : CAPABILITIES).join(' ')}`]);
  return { text: 'CAPABILITY completed' };
}
