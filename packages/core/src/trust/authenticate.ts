/**
 * Who really sent an inbound message: SPF, DKIM, DMARC and ARC checked with mailauth through the operator's
 * resolvers (DNS_RESOLVERS, the same ones the domain verifier asks), except for the zones this instance is the
 * authority for, whose records it reads itself (dns/resolve.ts: it is their authority, and a local instance's zones are known
 * to no resolver, so mail between its own boxes would never verify), reduced to the summary stored on the
 * message and shown in the API, mail.received and (as an Authentication-Results header) over IMAP.
 * `sender_verified` is the one field an agent acts on: DMARC passed, so the From domain is aligned with a
 * domain that proved itself (a passing DKIM signature or SPF).
 */
import { Resolver } from 'node:dns/promises';
import type { AuthenticateResult } from 'mailauth';
import type { Config } from '@boxes/config';
import type { Db } from '@boxes/db';
import { resolveOwnZones, type ResolvedRecords } from '../dns/resolve';

export interface DkimSignatureResult {
  domain: string;
  selector: string;
  result: string;
  aligned: boolean;
  /** Why, when it did not pass (mailauth's comment: "body hash did not verify", ...). */
  comment: string | null;
}

export interface Authentication {
  spf: { result: string; domain: string | null; client_ip: string | null };
  dkim: DkimSignatureResult[];
  dmarc: { result: string; policy: string | null; from_domain: string | null; alignment: { spf: boolean; dkim: boolean } };
  arc: { result: string; instance: number; sealer: string | null };
  sender_verified: boolean;
  /** The authserv-id of the Authentication-Results header (MAIL_HOST). */
  checked_by: string;
}

export type DnsLookup = (name: string, rrtype: string) => Promise<string[][] | string[]>;

const resolvers = new Map<string, DnsLookup>();

/** How long an answer (or a "no such name") is reused: mail from one domain comes in bursts. */
const CACHE_MS = 60_000;
const CACHE_MAX = 10_000;
const NEGATIVE = new Set(['ENOTFOUND', 'ENODATA', 'NXDOMAIN']);

/**
 * mailauth's resolver: node:dns against DNS_RESOLVERS (the system's when unset), one per resolver list, with a
 * small cache in front. Every message asks for its sender's SPF and DMARC records (and DKIM keys); without the
 * cache each one waits for the resolvers, and a resolver that drops a packet stalls the SMTP reply for a
 * second. Answers and "no such name/record" are kept CACHE_MS; failures (timeouts, SERVFAIL) are not kept.
 */
export function dnsLookupFor(config: Config): DnsLookup {
  const key = config.dns.resolvers.join(',');
  let lookup = resolvers.get(key);
  if (!lookup) {
    const r = new Resolver({ timeout: 2000, tries: 2 });
    if (config.dns.resolvers.length) r.setServers(config.dns.resolvers);
    const cache = new Map<string, { at: number; answer: Promise<string[][] | string[]> }>();
    lookup = (name, rrtype) => {
      const k = `${rrtype} ${name.toLowerCase()}`;
      const hit = cache.get(k);
      if (hit && Date.now() - hit.at < CACHE_MS) return hit.answer;
      const answer = r.resolve(name, rrtype) as Promise<string[][] | string[]>;
      if (cache.size >= CACHE_MAX) cache.delete(cache.keys().next().value!);
      cache.set(k, { at: Date.now(), answer });
      answer.catch((err: { code?: string }) => {
        if (!NEGATIVE.has(err.code ?? '') && cache.get(k)?.answer === answer) cache.delete(k);
      });
      return answer;
    };
    resolvers.set(key, lookup);
  }
  return lookup;
}

export function summarize(r: AuthenticateResult, mailHost: string): Authentication {
  const dmarc = r.dmarc || null;
  const dkim = (r.dkim.results ?? [])
    .filter((s) => s.signingDomain)
    .map((s) => ({
      domain: s.signingDomain!,
      selector: s.selector ?? '',
      result: s.status.result,
      aligned: s.status.result === 'pass' && Boolean(s.status.aligned),
      comment: s.status.comment ?? null,
    }));
  const arcSealer = r.arc && r.arc.signature ? (r.arc.signature.signingDomain ?? null) : null;
  return {
    spf: r.spf
      ? { result: r.spf.status.result, domain: r.spf.domain ?? null, client_ip: r.spf['client-ip'] ?? null }
      : { result: 'none', domain: null, client_ip: null },
    dkim,
    dmarc: {
      result: dmarc?.status.result ?? 'none',
      policy: dmarc?.policy ?? null,
      from_domain: dmarc?.status.header?.from ?? null,
      alignment: { spf: Boolean(dmarc?.alignment?.spf?.result), dkim: Boolean(dmarc?.alignment?.dkim?.result) },
    },
    arc: r.arc
      ? { result: r.arc.status.result, instance: typeof r.arc.i === 'number' ? r.arc.i : 0, sealer: arcSealer }
      : { result: 'none', instance: 0, sealer: null },
    // DMARC is not evaluated for a message with no From domain or several (dmarc false): never verified.
    sender_verified: dmarc?.status.result === 'pass' && Boolean(dmarc.alignment?.spf?.result || dmarc.alignment?.dkim?.result),
    checked_by: mailHost,
  };
}

/**
 * The lookup the checks use: the zones served here from their rows (never cached, so a changed key counts at
 * once, as apps/dns serves it), every other name through dnsLookupFor (a name found not to be ours is not asked
 * of the database again for a few seconds: dns/resolve.ts).
 */
export function ownZonesFirst(config: Config, db: Db): DnsLookup {
  const outside = dnsLookupFor(config);
  const asResolved = (name: string, rrtype: string) => outside(name, rrtype) as Promise<ResolvedRecords>;
  return async (name, rrtype) => {
    // mailauth asks with the type's name as node:dns takes it; our rows keep types upper-case.
    const own = await resolveOwnZones(db, name, rrtype.toUpperCase(), asResolved);
    // MX answers are objects, as node:dns gives them (mailauth's type names only the TXT and address shapes).
    return own === null ? outside(name, rrtype) : (own as string[][] | string[]);
  };
}

export interface AuthenticateInput {
  raw: Buffer;
  /** The SMTP client's address; null for mail delivered inside this instance. */
  ip: string | null;
  helo: string | null;
  mailFrom: string | null;
}

/**
 * mailauth, loaded by the first message verified: it brings undici and joi along (about 1.7 MB of sources, and
 * what they build when loaded), which a process that receives no mail (the worker alone, an idle server) never
 * uses. Once loaded, every later message reuses the same module.
 */
let mailauth: Promise<typeof import('mailauth')> | undefined;

/** Verifies one message. Never throws for what the message or DNS contains; mailauth reports that as results. */
export async function verifyMessage(
  config: Config,
  db: Db,
  input: AuthenticateInput,
): Promise<{ authentication: Authentication; headers: string; fromAddresses: string[] }> {
  mailauth ??= import('mailauth');
  const { authenticate } = await mailauth;
  const r = await authenticate(input.raw, {
    resolver: ownZonesFirst(config, db),
    mta: config.mailHost,
    // Mail between boxes of this instance never crossed SMTP: it left from this instance's own address.
    ip: input.ip ?? config.dns.publicAddresses[0] ?? '127.0.0.1',
    ...(input.helo ? { helo: input.helo } : input.ip ? {} : { helo: config.mailHost }),
    ...(input.mailFrom ? { sender: input.mailFrom } : {}),
    disableBimi: true,
  });
  const fromAddresses = ((r.dkim as { headerFrom?: string[] }).headerFrom ?? []).map((a) => a.toLowerCase());
  return { authentication: summarize(r, config.mailHost), headers: r.headers, fromAddresses };
}
