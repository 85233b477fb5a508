/**
 * The trust checks of an inbound message, shared by the MX and local delivery between boxes: verify (SPF,
 * DKIM, DMARC, ARC) and score (rspamd) in parallel before anything is stored, decide per box whether its lists
 * and policy refuse the message, and stamp the stored copy with our Authentication-Results header (so mail
 * clients over IMAP see the verdict too). A refused message is only counted on its box: never stored, never
 * charged, never announced.
 */
import type { Box, Db, DbClient } from '@boxes/db';
import { exec, k, sql } from '@boxes/db';
import type { Config } from '@boxes/config';
import type { Services } from '../shared/context';
import { verifyMessage, type Authentication } from './authenticate';
import { scoreMessage, type SpamVerdict } from './spam';
import { isAllowed, isBlocked, matchingEntries, type ListedRow } from './lists';

export interface InboundTrust {
  authentication: Authentication;
  spam: SpamVerdict | null;
  /** Received-SPF and Authentication-Results header lines (CRLF-terminated) to put on top of the stored copy. */
  headers: string;
  /** The From header's addresses, lower-case. */
  fromAddresses: string[];
  /** Why scoring failed (rspamd unreachable or slow): the message is stored unscored. */
  spamError: string | null;
}

export interface Refusal {
  code: number;
  message: string;
  reason: 'blocked' | 'not_allowed' | 'not_verified' | 'spam';
}

export async function inspectInbound(
  config: Config,
  db: Db,
  input: { raw: Buffer; ip: string | null; helo: string | null; mailFrom: string | null; recipients: string[] },
): Promise<InboundTrust> {
  const [verified, scored] = await Promise.all([
    verifyMessage(config, db, input),
    scoreMessage(config, input).then(
      (spam) => ({ spam, error: null }),
      (err: Error) => ({ spam: null, error: err.message }),
    ),
  ]);
  return { ...verified, spam: scored.spam, spamError: scored.error };
}

/** RCPT time: the envelope sender against the box's and the account's block lists (one indexed query). */
export async function checkEnvelopeSender(
  db: DbClient,
  box: Box,
  mailFrom: string | null,
  /** The entries already read for this box and sender (resolveMxRecipient): no query then. */
  known?: ListedRow[] | null,
): Promise<{ refusal: Refusal | null; rows: ListedRow[] }> {
  if (!mailFrom) return { refusal: null, rows: [] };
  const rows = known ?? (await matchingEntries(db, box.accountId, [box.id], 'receive', [mailFrom]));
  if (isBlocked(rows, box.id, mailFrom)) {
    return {
      refusal: { code: 550, message: `5.7.1 <${box.address}>: mail from <${mailFrom}> is refused by the recipient's block list`, reason: 'blocked' },
      rows,
    };
  }
  return { refusal: null, rows };
}

/**
 * DATA time, per box: block lists against the envelope sender and the From header, allow_list mode (the From
 * header must be listed, and verified with require_verified_sender), spam with spam_action refuse.
 * `known` are rows already read at RCPT time for the envelope sender: the From header is looked up only when
 * it differs from it, so the common case adds no round trip.
 */
export async function refusalsFor(
  db: DbClient,
  boxes: Box[],
  trust: InboundTrust,
  mailFrom: string | null,
  known?: Map<string, ListedRow[]>,
): Promise<Map<string, Refusal>> {
  const out = new Map<string, Refusal>();
  if (!boxes.length) return out;
  const envelope = mailFrom?.toLowerCase() ?? null;
  const senders = [...new Set([...(envelope ? [envelope] : []), ...trust.fromAddresses])];
  const reuse = known !== undefined && boxes.every((b) => known.has(b.id)) && trust.fromAddresses.every((a) => a === envelope);
  const rowsOf = new Map<string, ListedRow[]>();
  if (reuse) {
    for (const b of boxes) rowsOf.set(b.id, known.get(b.id)!);
  } else {
    const byAccount = new Map<string, Box[]>();
    for (const b of boxes) byAccount.set(b.accountId, [...(byAccount.get(b.accountId) ?? []), b]);
    for (const [accountId, list] of byAccount) {
      const rows = await matchingEntries(
        db,
        accountId,
        list.map((b) => b.id),
        'receive',
        senders,
      );
      for (const b of list)
        rowsOf.set(
          b.id,
          rows.filter((r) => r.box_id === null || r.box_id === b.id),
        );
    }
  }
  for (const box of boxes) {
    const mine = rowsOf.get(box.id) ?? [];
    const blocked = senders.find((s) => isBlocked(mine, box.id, s));
    if (blocked) {
      out.set(box.id, { code: 550, message: `5.7.1 <${box.address}>: mail from <${blocked}> is refused by the recipient's block list`, reason: 'blocked' });
      continue;
    }
    if (box.receiveMode === 'allow_list') {
      const from = trust.fromAddresses[0];
      if (trust.fromAddresses.length !== 1 || !from || !isAllowed(mine, box.id, from)) {
        out.set(box.id, { code: 550, message: `5.7.1 <${box.address}>: this box accepts mail only from senders on its allow list`, reason: 'not_allowed' });
        continue;
      }
      if (box.requireVerifiedSender && !trust.authentication.sender_verified) {
        out.set(box.id, {
          code: 550,
          message: `5.7.1 <${box.address}>: this box accepts mail only from verified senders (DMARC ${trust.authentication.dmarc.result} for ${from})`,
          reason: 'not_verified',
        });
        continue;
      }
    }
    if (box.spamAction === 'refuse' && trust.spam?.verdict === 'spam') {
      out.set(box.id, { code: 550, message: `5.7.1 <${box.address}>: message refused as spam (score ${trust.spam.score})`, reason: 'spam' });
    }
  }
  return out;
}

/** Counts refused messages on their boxes (one statement). */
export async function countRefused(db: DbClient, boxIds: string[]): Promise<void> {
  if (!boxIds.length) return;
  await exec(
    db,
    k
      .updateTable('boxes')
      .set((eb) => ({ refused_count: eb('refused_count', '+', sql.lit(1)), refused_at: sql<Date>`now()` }))
      .where('id', '=', sql<string>`ANY(${boxIds}::text[])`),
  );
}

/** An Authentication-Results header line in mailHost's name, made once per host (the same for every message). */
const oursPatterns = new Map<string, RegExp>();
function oursPattern(mailHost: string): RegExp {
  let re = oursPatterns.get(mailHost);
  if (!re) {
    // The obsolete syntax's blanks before the colon and RFC 8601's version after the authserv-id included.
    re = new RegExp(`^authentication-results[ \\t]*:\\s*${mailHost.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?:\\s+\\d+)?\\s*(;|$)`, 'i');
    oursPatterns.set(mailHost, re);
  }
  return re;
}

/**
 * The stored copy: our Authentication-Results on top, and any Authentication-Results a sender wrote in our
 * name removed (RFC 8601 section 5), so a client trusting our authserv-id cannot be fooled by a forged one.
 */
export function stampRaw(raw: Buffer, trust: InboundTrust, mailHost: string): Buffer {
  let end = raw.indexOf('\r\n\r\n');
  let eol = '\r\n';
  if (end === -1) {
    end = raw.indexOf('\n\n');
    eol = '\n';
  }
  const headEnd = end === -1 ? raw.length : end + eol.length;
  const head = raw.subarray(0, headEnd).toString('latin1');
  const stamp = eol === '\r\n' ? trust.headers : trust.headers.replace(/\r\n/g, '\n');
  // No Authentication-Results header at all (the common case): nothing to drop, the head is not taken apart.
  if (!/(?:^|\n)authentication-results[ \t]*:/i.test(head)) return Buffer.concat([Buffer.from(stamp, 'utf8'), raw]);
  const lines = head.split(/(?<=\n)/);
  const kept: string[] = [];
  const ours = oursPattern(mailHost);
  let dropping = false;
  for (const line of lines) {
    // A folded line belongs to the header above it.
    if (!/^[ \t]/.test(line)) dropping = ours.test(line);
    if (!dropping) kept.push(line);
  }
  // Nothing dropped (only other servers' results): the message follows the stamp as it came, not rebuilt from its lines.
  if (kept.length === lines.length) return Buffer.concat([Buffer.from(stamp, 'utf8'), raw]);
  return Buffer.concat([Buffer.from(stamp, 'utf8'), Buffer.from(kept.join(''), 'latin1'), raw.subarray(headEnd)]);
}

/** What receiveMessage stores and announces (the message's authentication and spam fields). */
export const storedTrust = (trust: InboundTrust | null | undefined) => ({ authentication: trust?.authentication ?? null, spam: trust?.spam ?? null });

/** One call for local delivery between boxes: inspect, decide, stamp. */
export async function checkLocalDelivery(svc: Services, input: { raw: Buffer; box: Box; mailFrom: string | null }) {
  const trust = await inspectInbound(svc.config, svc.db, { raw: input.raw, ip: null, helo: null, mailFrom: input.mailFrom, recipients: [input.box.address] });
  const refusal = (await refusalsFor(svc.db, [input.box], trust, input.mailFrom)).get(input.box.id) ?? null;
  return { trust, refusal, raw: refusal ? input.raw : stampRaw(input.raw, trust, svc.config.mailHost) };
}
