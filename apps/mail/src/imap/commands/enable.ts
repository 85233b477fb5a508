/** ENABLE (RFC 5161): CONDSTORE is the one extension that needs it here; others are ignored. */
import { atom, type Command } from '../parser';
import type { Session } from '../session';

export async function enable(s: Session, cmd: Command) {
  const enabled: string[] = [];
  for (const [i, t] of cmd.args.entries()) {
    const name = atom(t, `capability ${i + 1}`).toUpperCase();
    if (name === 'CONDSTORE' && !enabled.includes(name)) {
      s.condstore = true;
      enabled.push(name);
    }
  }
  s.untagged([`* ENABLED${enabled.map((e) => ` ${e}`).join('')}`]);
  return { text: 'ENABLE completed' };
}
