/**
 * SEARCH and UID SEARCH (RFC 3501 6.4.4; MODSEQ of RFC 7162): the matching sequence numbers or UIDs.
 *
 * TEXT and BODY keys that every match must satisfy (the query's top level) first ask the search index which
 * messages of the mailbox can match (core searchCandidates: every word of the value starting a word of the
 * message, or no vector at all); only those are read and tested by the exact rule (case-insensitive substring,
 * search.ts), so what the index answers is never trusted without the text. Where the index cannot answer, the
 * messages are read as before: a value without words (punctuation only, stop words only), TEXT/BODY under NOT
 * or OR, messages without a vector (not indexed yet, or an account that keeps no index). What the index misses:
 * a value found only inside a word ("voice" in "invoice"), and for TEXT a value found only in header fields
 * other than Subject, From, To and Cc.
 */
import { searchCandidates } from '@boxes/core';
import { matches, needsContent, parseSearch, SearchContent, type SearchKey } from '../search';
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
  const candidates = await indexCandidates(
    s,
    key,
    mailbox.entries.map((e) => e.messageId),
  );
  for (let k = 0; k < mailbox.entries.length; k += ROUND) {
    const round = mailbox.entries
      .slice(k, k + ROUND)
      .map((_, j) => k + j)
      .filter((i) => !candidates || candidates.has(mailbox.entries[i]!.messageId));
    if (content) await mailbox.messages(s.svc, round);
    for (const i of round) {
      const entry = mailbox.entries[i]!;
      const msg = !content ? null : mailbox.held(i) ? mailbox.message(s.svc, i) : await mailbox.opened(s.svc, i);
      if (await matches(key, { entry, seq: i + 1, content: content ? new SearchContent(msg?.raw ?? null) : null }, all)) {
        hits.push(uid ? entry.uid : i + 1);
        if (entry.modseq > highest) highest = entry.modseq;
      }
    }
  }
  s.untagged([`* SEARCH${hits.map((h) => ` ${h}`).join('')}${modseq && hits.length ? ` (MODSEQ ${highest})` : ''}`]);
  return { text: 'SEARCH completed' };
}

/** The messages the search index lets through for the query's top-level TEXT and BODY keys; null: all of them. */
async function indexCandidates(s: Session, key: SearchKey, messageIds: string[]): Promise<Set<string> | null> {
  const required = (key.op === 'and' ? key.keys : [key]).filter((k): k is Extract<SearchKey, { op: 'text' | 'body' }> => k.op === 'text' || k.op === 'body');
  const sets: Set<string>[] = [];
  for (const k of required) {
    const found = await searchCandidates(s.svc, messageIds, k.value);
    if (found) sets.push(found);
  }
  if (!sets.length) return null;
  return new Set(messageIds.filter((id) => sets.every((set) => set.has(id))));
}
