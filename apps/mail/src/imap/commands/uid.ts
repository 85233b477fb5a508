/** UID (RFC 3501 6.4.8, RFC 4315, RFC 6851): FETCH, STORE, SEARCH, COPY, MOVE and EXPUNGE by UID. */
import { COMMANDS, UID_COMMANDS } from '../command-table';
import { atom, BadArgs, type Command } from '../parser';
import type { Session } from '../session';

export async function uid(s: Session, cmd: Command) {
  const name = atom(cmd.args[0], 'command after UID').toUpperCase();
  if (!UID_COMMANDS.has(name)) throw new BadArgs(`UID ${name.slice(0, 20)} is not a command`);
  // Changes made elsewhere are reported at NOOP, CHECK and IDLE (and by EXPUNGE and MOVE), not after every UID
  // command: a client syncing message after message would pay two reads of the folder for each.
  const done = await COMMANDS[name]!.handler(s, { tag: cmd.tag, name, args: cmd.args.slice(1) }, true);
  return done && { ...done, text: `UID ${done.text}` };
}
