/** NOOP and CHECK (RFC 3501 6.1.2, 6.4.1): the moments a client hears what changed in its mailbox. */
import type { Session } from '../session';

export async function noop(s: Session) {
  await s.reportChanges();
  return { text: 'NOOP completed' };
}

export async function check(s: Session) {
  await s.reportChanges();
  return { text: 'CHECK completed' };
}
