/** SEARCH and UID SEARCH (RFC 3501 6.4.4; MODSEQ of RFC 7162): the matching sequence numbers or UIDs. */
import { matches, needsContent, parseSearch, SearchContent } from '../search';
import type { Command } from '../parser';
import type { Session } from '../session';

const ROUND = 100;

export async function search(s: Session, cmd: Command, uid: boolean) {
  const mailbox = s.selected!;
  const { key, modseq } = parseSearch(cmd.args);
  const content = needsContent(key);
  const all = { uids: mailbox.uids(), count: mailbox.entries.length };
  const hits: number[] = [];
  let highest = 0n;
  for (let k = 0; k < mailbox.entries.length; k += ROUND) {
    const round = mailbox.entries.slice(k, k + ROUND).map((_, j) => k + j);
    if (content) await mailbox.messages(s.svc, round);
    for (const i of round) {
      const entry = mailbox.entries[i]!;
      const msg = content ? mailbox.message(i) : null;
      if (await matches(key, { entry, seq: i + 1, content: content ? new SearchContent(msg?.raw ?? null) : null }, all)) {
        hits.push(uid ? entry.uid : i + 1);
        if (entry.modseq > highest) highest = entry.modseq;
      }
    }
  }
  s.untagged([`* SEARCH${hits.map((h) => ` ${h}`).join('')}${modseq && hits.length ? ` (MODSEQ ${highest})` : ''}`]);
  return { text: 'SEARCH completed' };
}
