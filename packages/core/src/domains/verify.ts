/**
 * Proving a bring-your-own domain. A claim is not usable (no mail delivered into its boxes, no mail sent from
 * it) until the verifier sees, through the operator's resolvers (DNS_RESOLVERS), what only the domain's owner
 * can publish:
 *  - byo_manual: every record of domain.dns_required: MX to MAIL_HOST, SPF, the DKIM key generated for this
 *    claim (unique to it, so it is also the proof of which claim the owner made), DMARC;
 *  - byo_delegated: the parent zone's NS records naming this instance's nameservers. Where another account
 *    also claims the name, NS alone cannot tell the claims apart: the claim must also have had its DKIM key
 *    seen published (at the DNS the domain used before the switch).
 * The first claim proven wins (domains.live_name is unique); pending claims expire after DOMAIN_CLAIM_TTL_DAYS.
 * Checks back off per domain (1 min doubling to 1 h); `POST /account/domain/verify` checks at once.
 */
import { Resolver } from 'node:dns/promises';
import type { Config } from '@boxes/config';
import type { Prisma, Domain, Tx } from '@boxes/db';
import { k, rows } from '@boxes/db';
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';
import { AppError } from '../shared/errors';
import { DMARC_VALUE, dkimValue, spfValue } from '../dns/zones';
import { goLive, retireMovedDomains } from './live';
import { hostContent } from '../dns/content';
import type { DomainStatus } from '@boxes/schemas';
import { PUBLIC_DOMAIN_STATUSES } from '@boxes/schemas';
import { narrowStatus } from '../shared/statuses';

export type CheckState = 'found' | 'missing' | 'different';

export interface RecordCheck {
  name: string;
  type: 'MX' | 'TXT' | 'NS';
  purpose: string;
  expected: string[];
  found: string[];
  state: CheckState;
}

export interface DomainChecks {
  checked_at: string;
  records: RecordCheck[];
  /** Why a claim whose records are all there is still not live (another account proved the name first, ...). */
  blocked_by: string | null;
}

const MIN_BACKOFF_MS = 60_000;
const MAX_BACKOFF_MS = 60 * 60_000;
const DAY_MS = 24 * 60 * 60_000;

export const isPending = (status: string): boolean =>
  status === ('pending_dns' satisfies DomainStatus) || status === ('pending_delegation' satisfies DomainStatus);

export function claimDeadline(config: Config, from: Date): Date {
  return new Date(from.getTime() + config.dns.claimTtlDays * DAY_MS);
}

export function createResolver(config: Config): Resolver {
  const r = new Resolver({ timeout: 2000, tries: 2 });
  if (config.dns.resolvers.length) r.setServers(config.dns.resolvers);
  return r;
}

/** Answers of one lookup: the values, or [] when the name or the type does not exist. Other failures throw. */
async function lookup<T>(fn: () => Promise<T[]>): Promise<T[]> {
  try {
    return await fn();
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === 'ENODATA' || code === 'ENOTFOUND' || code === 'NXDOMAIN') return [];
    throw err;
  }
}

const squash = (s: string) => s.replace(/\s+/g, '');

function txtCheck(
  name: string,
  purpose: string,
  expected: string,
  found: string[],
  matches: (v: string) => boolean,
  related: (v: string) => boolean,
): RecordCheck {
  const relevant = found.filter(related);
  return {
    name,
    type: 'TXT',
    purpose,
    expected: [expected],
    found: relevant,
    state: relevant.some(matches) ? 'found' : relevant.length ? 'different' : 'missing',
  };
}

/** Looks up every record a claim needs; never throws for records that are missing or wrong. */
export async function checkRecords(
  config: Config,
  resolver: Resolver,
  d: Pick<Domain, 'name' | 'mode' | 'dkimSelector' | 'dkimPublicKey'>,
): Promise<RecordCheck[]> {
  const txt = async (name: string) => (await lookup(() => resolver.resolveTxt(name))).map((chunks) => chunks.join(''));
  const dkimName = `${d.dkimSelector}._domainkey.${d.name}`;
  const dkimKeyOf = (v: string) => /(?:^|;)\s*p=([^;]*)/.exec(v)?.[1];
  const dkim = txtCheck(
    dkimName,
    'DKIM: the key generated for this claim (also the proof that the claim is yours)',
    dkimValue(d.dkimPublicKey),
    await txt(dkimName),
    (v) => squash(dkimKeyOf(v) ?? '') === d.dkimPublicKey,
    (v) => /v=DKIM1/i.test(v) || dkimKeyOf(v) !== undefined,
  );
  if (d.mode === 'byo_delegated') {
    const ns = (await lookup(() => resolver.resolveNs(d.name))).map(hostContent);
    const want = config.nameservers.map(hostContent);
    const state: CheckState = want.every((n) => ns.includes(n)) ? 'found' : ns.length ? 'different' : 'missing';
    return [{ name: d.name, type: 'NS', purpose: 'delegation: the nameservers set at your registrar', expected: want, found: ns, state }, dkim];
  }
  const mx = (await lookup(() => resolver.resolveMx(d.name))).map((m) => `${m.priority} ${hostContent(m.exchange)}`);
  const mxState: CheckState = mx.some((m) => m.split(' ')[1] === hostContent(config.mailHost)) ? 'found' : mx.length ? 'different' : 'missing';
  const apexTxt = await txt(d.name);
  return [
    { name: d.name, type: 'MX', purpose: 'receive mail', expected: [`10 ${hostContent(config.mailHost)}`], found: mx, state: mxState },
    txtCheck(
      d.name,
      'SPF: authorise this instance to send',
      spfValue(config),
      apexTxt,
      (v) => v.toLowerCase().includes(`a:${hostContent(config.mailHost)}`),
      (v) => /^v=spf1\b/i.test(v),
    ),
    dkim,
    txtCheck(
      `_dmarc.${d.name}`,
      'DMARC policy',
      DMARC_VALUE,
      await txt(`_dmarc.${d.name}`),
      (v) => /^v=DMARC1\b/i.test(v),
      (v) => /^v=DMARC1\b/i.test(v),
    ),
  ];
}

/** The checks that decide: for byo_delegated the NS (the DKIM check there only records the proof). */
const deciding = (mode: string, records: RecordCheck[]) => (mode === 'byo_delegated' ? records.filter((r) => r.type === 'NS') : records);

/** Before the first check: every required record, as not seen yet. */
function notCheckedYet(config: Config, d: SendableDomain): Pick<RecordCheck, 'name' | 'type' | 'expected' | 'state'>[] {
  if (d.mode === 'byo_delegated') return [{ name: d.name, type: 'NS', expected: config.nameservers, state: 'missing' }];
  return [
    { name: d.name, type: 'MX', expected: [`10 ${hostContent(config.mailHost)}`], state: 'missing' },
    { name: d.name, type: 'TXT', expected: [spfValue(config)], state: 'missing' },
    { name: `${d.dkimSelector}._domainkey.${d.name}`, type: 'TXT', expected: [dkimValue(d.dkimPublicKey)], state: 'missing' },
    { name: `_dmarc.${d.name}`, type: 'TXT', expected: [DMARC_VALUE], state: 'missing' },
  ];
}

type SendableDomain = Pick<Domain, 'name' | 'status' | 'mode' | 'checks' | 'claimExpiresAt' | 'dkimSelector' | 'dkimPublicKey'>;

export const missingRecords = (d: Pick<Domain, 'mode' | 'checks'>): RecordCheck[] | null => {
  const checks = d.checks as unknown as DomainChecks | null;
  return checks ? deciding(d.mode, checks.records).filter((r) => r.state !== 'found') : null;
};

/**
 * Checks one pending claim now and records the outcome; makes it live when proven. Returns the domain as it
 * is afterwards. Safe to run from several workers at once (the state changes under the domain's row lock).
 */
export async function verifyDomain(svc: Services, domainId: string, resolver: Resolver = createResolver(svc.config)): Promise<Domain> {
  const d = await svc.db.domain.findUniqueOrThrow({ where: { id: domainId } });
  if (!isPending(d.status)) return d;
  const now = svc.clock.now();
  if (d.claimExpiresAt && d.claimExpiresAt <= now) return expireClaim(svc, d.id);
  let records: RecordCheck[];
  try {
    records = await checkRecords(svc.config, resolver, d);
  } catch (err) {
    // The resolvers failed (not a missing record): try again later, without counting it against the claim.
    return svc.db.domain.update({
      where: { id: d.id },
      data: {
        lastCheckedAt: now,
        nextCheckAt: new Date(now.getTime() + MIN_BACKOFF_MS),
        checks: { checked_at: now.toISOString(), records: [], blocked_by: `DNS lookup failed: ${(err as Error).message}` },
      },
    });
  }
  const proofSeen = records.some((r) => r.type === 'TXT' && r.name.includes('._domainkey.') && r.state === 'found');
  let blockedBy: string | null = null;
  const complete = deciding(d.mode, records).every((r) => r.state === 'found');
  if (complete) {
    const live = await svc.db.domain.findUnique({ where: { liveName: d.name }, select: { accountId: true } });
    if (live) blockedBy = 'another account proved this domain first';
    else if (d.mode === 'byo_delegated' && !proofSeen && !d.proofSeenAt) {
      const rivals = await svc.db.domain.count({
        where: { name: d.name, id: { not: d.id }, status: { in: ['pending_dns', 'pending_delegation'] satisfies DomainStatus[] } },
      });
      if (rivals)
        blockedBy = `another account also claims this domain: publish the DKIM record ${d.dkimSelector}._domainkey.${d.name} (see expected) where the domain's DNS is served, so the verifier can tell your claim apart`;
    }
  }
  const backoff = Math.min(MAX_BACKOFF_MS, MIN_BACKOFF_MS * 2 ** Math.min(d.checkAttempts, 10));
  const checks: DomainChecks = { checked_at: now.toISOString(), records, blocked_by: blockedBy };
  return svc.db.$transaction(async (tx) => {
    const locked = await lockDomain(tx, d.id);
    if (!locked || !isPending(locked.status)) return tx.domain.findUniqueOrThrow({ where: { id: d.id } });
    const updated = await tx.domain.update({
      where: { id: d.id },
      data: {
        checks: checks as unknown as Prisma.InputJsonValue,
        lastCheckedAt: now,
        checkAttempts: { increment: 1 },
        nextCheckAt: new Date(now.getTime() + backoff),
        proofSeenAt: proofSeen && !locked.proofSeenAt ? now : undefined,
      },
    });
    if (!complete || blockedBy) return updated;
    return goLive(svc, tx, updated);
  });
}

async function lockDomain(tx: Tx, id: string): Promise<{ status: string; proofSeenAt: Date | null } | undefined> {
  const [row] = await rows(tx, k.selectFrom('domains').select(['status', 'proof_seen_at']).where('id', '=', id).forUpdate());
  return row ? { status: row.status, proofSeenAt: row.proof_seen_at } : undefined;
}

/** A pending claim past its deadline: no longer checked; its SOA/NS-only zone goes unless another claim needs it. */
export async function expireClaim(svc: Services, domainId: string): Promise<Domain> {
  return svc.db.$transaction(async (tx) => {
    const locked = await lockDomain(tx, domainId);
    const d = await tx.domain.findUniqueOrThrow({ where: { id: domainId } });
    if (!locked || !isPending(locked.status)) return d;
    const expired = await tx.domain.update({ where: { id: domainId }, data: { status: 'expired' satisfies DomainStatus, nextCheckAt: null } });
    await appendEvent({
      db: tx,
      accountId: d.accountId,
      type: 'domain.claim_expired',
      data: { domain: d.name, mode: d.mode, expired_at: svc.clock.now().toISOString() },
    });
    const others = await tx.domain.count({
      where: { name: d.name, id: { not: d.id }, status: { in: ['pending_delegation', 'active'] satisfies DomainStatus[] } },
    });
    if (!others) await tx.dnsZone.deleteMany({ where: { name: d.name, domainId: null, kind: 'delegated' } });
    return expired;
  });
}

/** One pass of the verifier: every pending claim due for a check (oldest first, at most `limit`). */
export async function runDomainVerification(
  svc: Services,
  opts: { limit?: number; resolver?: Resolver } = {},
): Promise<{ checked: number; live: number; expired: number; retired: number }> {
  const now = svc.clock.now();
  const due = await svc.db.domain.findMany({
    where: {
      status: { in: ['pending_dns', 'pending_delegation'] },
      OR: [{ nextCheckAt: null }, { nextCheckAt: { lte: now } }, { claimExpiresAt: { lte: now } }],
    },
    orderBy: { nextCheckAt: 'asc' },
    take: opts.limit ?? 100,
    select: { id: true },
  });
  const resolver = opts.resolver ?? createResolver(svc.config);
  let live = 0;
  let expired = 0;
  for (const { id } of due) {
    const d = await verifyDomain(svc, id, resolver);
    if (d.status === ('active' satisfies DomainStatus)) live++;
    if (d.status === ('expired' satisfies DomainStatus)) expired++;
  }
  const retired = await retireMovedDomains(svc);
  return { checked: due.length, live, expired, retired };
}

/** The account's domains as GET /account/domain shows them, with each pending claim's record states. */
export async function accountDomains(svc: Services, accountId: string) {
  const domains = await svc.db.domain.findMany({ where: { accountId }, orderBy: { createdAt: 'asc' } });
  return domains.map((d) => presentDomain(svc.config, d));
}

export function presentDomain(config: Config, d: Domain) {
  const checks = d.checks as unknown as DomainChecks | null;
  return {
    id: d.id,
    name: d.name,
    mode: d.mode as 'subdomain' | 'byo_manual' | 'byo_delegated' | 'register',
    status: narrowStatus(PUBLIC_DOMAIN_STATUSES, d.status),
    primary: d.isPrimary,
    created_at: d.createdAt.toISOString(),
    verified_at: d.verifiedAt?.toISOString() ?? null,
    grace_until: d.graceUntil?.toISOString() ?? null,
    claim_expires_at: d.claimExpiresAt?.toISOString() ?? null,
    last_checked_at: d.lastCheckedAt?.toISOString() ?? null,
    next_check_at: d.nextCheckAt?.toISOString() ?? null,
    nameservers: d.mode === 'byo_delegated' ? config.nameservers : null,
    records: checks?.records.map((r) => ({ ...r, last_checked_at: checks.checked_at })) ?? null,
    blocked_by: checks?.blocked_by ?? null,
  };
}

/** POST /account/domain/verify: checks the account's pending claims now (or says why there is nothing to check). */
export async function verifyAccountDomains(svc: Services, accountId: string) {
  const pending = await svc.db.domain.findMany({
    where: { accountId, status: { in: ['pending_dns', 'pending_delegation', 'expired'] satisfies DomainStatus[] } },
  });
  if (!pending.length) return accountDomains(svc, accountId);
  const resolver = createResolver(svc.config);
  for (const d of pending) {
    if (d.status === 'expired') {
      throw new AppError(
        'domain_claim_expired',
        `The claim on ${d.name} expired on ${d.claimExpiresAt?.toISOString() ?? 'its deadline'} without proof; it is no longer checked. Start a new signup for it.`,
        { domain: d.name },
      );
    }
    await verifyDomain(svc, d.id, resolver);
  }
  return accountDomains(svc, accountId);
}

/** Refuses sending from a domain of the account that is not live, naming what is still missing. */
export function assertSendable(config: Config, d: SendableDomain): void {
  if (d.status === 'active') return;
  const missing = missingRecords(d) ?? notCheckedYet(config, d);
  throw new AppError(
    'domain_not_verified',
    `${d.name} is not verified yet: mail cannot be sent from it until ${d.mode === 'byo_delegated' ? 'its delegation to this instance' : 'its DNS records'} can be seen (GET /account/domain shows each record's state; POST /account/domain/verify checks now).`,
    {
      domain: d.name,
      domain_status: d.status,
      missing_records: missing,
      claim_expires_at: d.claimExpiresAt?.toISOString() ?? null,
    },
  );
}
