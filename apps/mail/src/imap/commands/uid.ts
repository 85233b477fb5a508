/** UID (RFC 3501 6.4.8, RFC 4315, RFC 6851): FETCH, STORE, SEARCH, COPY, MOVE and EXPUNGE by UID. */
import { COMMANDS, UID_COMMANDS } from '../command-table';
import { atom, BadArgs, type Command } from '../parser';
import type { Done, Session } from '../session';

/** Answers without a code, by their text (a download answers "UID FETCH completed" to every command). */
const plainDone = new Map<string, Done>();

export function uid(s: Session, cmd: Command): Done | null | Promise<Done | null> {
  const name = atom(cmd.args[0], 'command after UID').toUpperCase();
  if (!UID_COMMANDS.has(name)) throw new BadArgs(`UID ${name.slice(0, 20)} is not a command`);
  // Changes made elsewhere are reported at NOOP, CHECK and IDLE (and by EXPUNGE and MOVE), not after every UID
  // command: a client syncing message after message would pay two reads of the folder for each.
  const done = COMMANDS[name]!.handler(s, { tag: cmd.tag, name, args: cmd.args.slice(1) }, true);
  return done instanceof Promise ? done.then(uidDone) : uidDone(done);
}

function uidDone(done: Done | null): Done | null {
  if (!done) return done;
  if (done.code) return { ...done, text: `UID ${done.text}` };
  let plain = plainDone.get(done.text);
  if (!plain) {
    if (plainDone.size >= 64) plainDone.clear();
    plain = Object.freeze({ text: `UID ${done.text}` });
    plainDone.set(done.text, plain);
  }
  return plain;
}
