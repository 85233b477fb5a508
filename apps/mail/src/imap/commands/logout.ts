/** LOGOUT (RFC 3501 6.1.3). */
import type { Command } from '../parser';
import type { Session } from '../session';

export async function logout(s: Session, cmd: Command) {
  s.write(['* BYE Logging out\r\n', `${cmd.tag} OK LOGOUT completed\r\n`]);
  s.end();
  return null;
}
