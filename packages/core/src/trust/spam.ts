/**
 * Spam scoring through rspamd's HTTP protocol (POST /checkv2 on its normal worker), when RSPAMD_URL is set.
 * The verdict is advice stored with the message; a box decides whether it refuses spam or only labels it
 * (spam_action). When rspamd does not answer in time the message is stored unscored (spam null): mail is
 * never lost because the filter is down.
 */
import type { Config } from '@boxes/config';

export interface SpamVerdict {
  /** spam: rspamd's action was reject, rewrite subject or add header; ham otherwise. */
  verdict: 'spam' | 'ham';
  score: number;
  required_score: number;
  /** rspamd's action: no action, greylist, add header, rewrite subject, soft reject, reject. */
  action: string;
  /** The rules that matched, highest score first (at most 20). */
  symbols: string[];
}

const SPAM_ACTIONS = new Set(['reject', 'rewrite subject', 'add header']);

interface RspamdReply {
  score?: number;
  required_score?: number;
  action?: string;
  symbols?: Record<string, { name?: string; score?: number }>;
}

export async function scoreMessage(
  config: Config,
  input: { raw: Buffer; ip: string | null; helo: string | null; mailFrom: string | null; recipients: string[] },
): Promise<SpamVerdict | null> {
  const url = config.trust.rspamdUrl;
  if (!url) return null;
  const headers: Record<string, string> = { 'content-type': 'message/rfc822' };
  if (input.ip) headers.IP = input.ip;
  if (input.helo) headers.Helo = input.helo;
  if (input.mailFrom) headers.From = input.mailFrom;
  // rspamd reads one Rcpt header per recipient; fetch joins repeated names with commas, which it also splits.
  if (input.recipients.length) headers.Rcpt = input.recipients.join(',');
  headers.Hostname = config.mailHost;
  const res = await fetch(`${url}/checkv2`, {
    method: 'POST',
    headers,
    body: new Uint8Array(input.raw),
    signal: AbortSignal.timeout(config.trust.rspamdTimeoutMs),
  });
  if (!res.ok) throw new Error(`rspamd answered ${res.status}`);
  const body = (await res.json()) as RspamdReply;
  const action = body.action ?? 'no action';
  const symbols = Object.entries(body.symbols ?? {})
    .sort((a, b) => (b[1].score ?? 0) - (a[1].score ?? 0))
    .slice(0, 20)
    .map(([name]) => name);
  return {
    verdict: SPAM_ACTIONS.has(action) ? 'spam' : 'ham',
    score: Math.round((body.score ?? 0) * 100) / 100,
    required_score: Math.round((body.required_score ?? 0) * 100) / 100,
    action,
    symbols,
  };
}
