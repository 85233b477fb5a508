/**
 * IDLE (RFC 2177): the client waits and hears new mail (EXISTS), expunges and flag changes as they happen on
 * any process, within a second of the event (the hub follows the event stream); DONE ends it.
 */
import type { Command } from '../parser';
import type { Session } from '../session';

export async function idle(s: Session, cmd: Command) {
  s.enterIdle(cmd.tag);
  return null;
}
