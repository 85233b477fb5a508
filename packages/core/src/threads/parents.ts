/**
 * Which thread a new message joins. A reply joins the thread of the message it answers, looked up by
 * Message-ID in the account's own mail: In-Reply-To first, then References from the newest. The lookup rides
 * on a read the hot path makes anyway (sendMessage's context query, receiveMessage's context query), so
 * threading costs no extra round trip.
 */
import { newId } from '../shared/ids';

/** At most this many Message-IDs are looked up (a long References chain is cut to its newest entries). */
const MAX_PARENT_IDS = 50;

/**
 * The Message-IDs a message points at, most specific first. own: the message's own Message-ID (a received copy
 * of a message this account sent, or a second copy for another box, joins the thread of the first copy).
 */
export function parentIds(input: { inReplyTo: string | null | undefined; references: readonly string[]; own?: string | null | undefined }): string[] {
  const ids: string[] = [];
  for (const id of [input.own, input.inReplyTo, ...[...input.references].reverse()]) {
    if (id && !ids.includes(id)) ids.push(id);
  }
  return ids.slice(0, MAX_PARENT_IDS);
}

/** A header of a send request's custom headers, by name in any case (mail clients spell In-Reply-To as they like). */
export function headerValue(headers: Record<string, string>, name: string): string | undefined {
  const lower = name.toLowerCase();
  for (const [k, v] of Object.entries(headers)) if (k.toLowerCase() === lower) return v;
  return undefined;
}

/** The References header value of a message: whitespace-separated Message-IDs. */
export const splitReferences = (value: string | undefined): string[] => (value ? value.split(/\s+/).filter(Boolean) : []);

/** Of the stored messages matched by Message-ID, the thread of the first in the order of ids; else a new thread. */
export function pickThread(ids: readonly string[], found: readonly { rfcMessageId: string; threadId: string }[]): string {
  for (const id of ids) {
    const hit = found.find((m) => m.rfcMessageId === id);
    if (hit) return hit.threadId;
  }
  return newId('thr');
}
