/**
 * Moving a live account onto a new domain (POST /account/domain). The new domain goes through its mode's own
 * path (byo_manual: records and proof; byo_delegated: delegation; register: registration, paid from the
 * account's credit) while the old one stays live. When the new one is live it becomes the primary domain in one
 * transaction: every box moves onto it (same ids, so box-restricted keys keep working), agent@<new> becomes the
 * primary address, `domain.moved` is appended. The old domain is then `retiring`: mail to any of its addresses
 * is still delivered to the box of the same local part for DOMAIN_MOVE_GRACE_DAYS (30), then it is retired
 * (its name freed, its records no longer served). A second move while one is pending replaces it.
 */
import { lockAccountCredit, paymentRequired } from '../credit/ledger';
import { postEntries } from '../store/ledger';
import { centsToMicros, microsToUsd } from '../credit/prices';
import { appendEvent } from '../events/append';
import { createDkimKey } from './dkim';
import { normalizeDomain } from './names';
import { requiredRecords } from './records';
import { claimDeadline, presentDomain } from './verify';
import { goLive } from './live';
import { domainSuggestions, liveDomainCovering, registerDomain } from '../accounts/signup';
import { ensureOwnZone } from '../dns/zones';
import type { Services } from '../shared/context';
import { AppError } from '../shared/errors';
import { newId } from '../shared/ids';
import type { DomainStatus } from '@boxes/schemas';

export type MoveMode = 'byo_manual' | 'byo_delegated' | 'register';

export async function startDomainMove(svc: Services, accountId: string, input: { mode: MoveMode; domain: string }) {
  const name = normalizeDomain(input.domain);
  if (!name)
    throw new AppError('validation_error', 'domain: must be a domain name such as example.com', { fields: [{ path: 'domain', message: 'not a domain name' }] });
  if (name === svc.config.baseDomain || name.endsWith(`.${svc.config.baseDomain}`)) {
    throw new AppError('validation_error', `domain: ${name} is under this service's shared domain`, {
      fields: [{ path: 'domain', message: 'under the shared domain' }],
    });
  }
  const current = await svc.db.domain.findFirstOrThrow({ where: { accountId, isPrimary: true } });
  if (current.name === name) throw new AppError('conflict', `${name} is already this account's domain`);
  if (current.status !== 'active') {
    throw new AppError(
      'conflict',
      `The account's domain ${current.name} is not live yet (${current.status}); a move starts from a live domain. Prove it first (GET /account/domain).`,
    );
  }
  // The name itself, or a parent of it, live on an account (a claim inside it would shadow its records).
  const covering = await liveDomainCovering(svc, name);
  const liveElsewhere = covering && (covering.name === name || covering.accountId !== accountId) ? covering : null;
  let priceCents: number | null = null;
  if (input.mode === 'register') {
    const quote = await svc.registrar.quote(svc.db, name);
    if (!quote.available || liveElsewhere) {
      throw new AppError(
        'domain_taken',
        `${name} cannot be registered: ${quote.available ? 'it is live on another account here' : quote.reason} (${svc.registrar.label})`,
        {
          registrar: svc.registrar.label,
          suggestions: (await svc.registrar.suggest(svc.db, name)).map((o) => ({
            domain: o.name,
            mode: 'register' as const,
            price_cents_per_year: o.priceCentsPerYear,
          })),
        },
      );
    }
    priceCents = quote.priceCentsPerYear!;
  } else if (liveElsewhere) {
    throw new AppError(
      'domain_taken',
      `${name} is already verified by ${liveElsewhere.accountId === accountId ? 'this' : 'another'} account on this instance`,
      {
        suggestions: await domainSuggestions(svc, name),
      },
    );
  }
  const dkim = await createDkimKey(svc.secretKey);
  const now = svc.clock.now();
  return svc.db.$transaction(
    async (tx) => {
      // One move at a time: a pending one is replaced (its claim withdrawn).
      const replaced = await tx.domain.findMany({
        where: { accountId, isPrimary: false, status: { in: ['pending_dns', 'pending_delegation'] satisfies DomainStatus[] } },
      });
      if (replaced.length) {
        await tx.domain.deleteMany({ where: { id: { in: replaced.map((d) => d.id) } } });
        await appendEvent({ db: tx, accountId, type: 'domain.move_replaced', data: { replaced: replaced.map((d) => d.name), by: name } });
      }
      const registering = input.mode === 'register';
      if (registering) {
        const a = await lockAccountCredit(tx, accountId);
        const need = centsToMicros(priceCents!);
        if (a.balance_micros - a.held_micros < need) {
          throw paymentRequired(
            svc,
            `Registering ${name} for a year costs ${microsToUsd(need)} USD from the credit, and ${microsToUsd(a.balance_micros - a.held_micros)} USD is available. Nothing was registered.`,
            {
              required_usd: microsToUsd(need),
            },
          );
        }
      }
      const domain = await tx.domain.create({
        data: {
          id: newId('dom'),
          accountId,
          name,
          mode: input.mode,
          status: (registering ? 'pending_dns' : input.mode === 'byo_delegated' ? 'pending_delegation' : 'pending_dns') satisfies DomainStatus,
          isPrimary: false,
          dkimSelector: dkim.selector,
          dkimPublicKey: dkim.publicKey,
          dkimPrivateKeyEnc: dkim.privateKeyEnc,
          claimExpiresAt: registering ? null : claimDeadline(svc.config, now),
          nextCheckAt: registering ? null : now,
        },
      });
      await appendEvent({ db: tx, accountId, type: 'domain.move_started', data: { from: current.name, to: name, mode: input.mode } });
      if (registering) {
        await registerDomain(svc, tx, {
          domainId: domain.id,
          name,
          registrant: (await tx.account.findUniqueOrThrow({ where: { id: accountId } })).humanEmail,
          priceCentsPerYear: priceCents!,
        });
        const reg = await tx.domainRegistration.findUniqueOrThrow({ where: { domainId: domain.id } });
        await postEntries(svc, tx, accountId, [
          {
            type: 'domain_registration',
            amountMicros: -centsToMicros(priceCents!),
            idempotencyKey: `domain_registration:${reg.id}`,
            quantity: 1n,
            description: `${name}: registration for one year, until ${reg.expiresAt.toISOString().slice(0, 10)} (${svc.registrar.label})`,
          },
        ]);
        await appendEvent({
          db: tx,
          accountId,
          type: 'domain.registered',
          data: { domain: name, registrar: svc.registrar.label, expires_at: reg.expiresAt.toISOString(), price_cents_per_year: priceCents },
        });
        // Registered here, so proven: live (and the move completes) at once.
        await goLive(svc, tx, domain);
      } else if (input.mode === 'byo_manual') {
        await appendEvent({
          db: tx,
          accountId,
          type: 'domain.dns_required',
          data: { domain: name, records: requiredRecords(svc.config, domain), claim_expires_at: domain.claimExpiresAt?.toISOString() ?? null },
        });
      } else {
        await ensureOwnZone(tx, svc.config, name, 'delegated');
        await appendEvent({
          db: tx,
          accountId,
          type: 'domain.delegation_required',
          data: { domain: name, nameservers: svc.config.nameservers, claim_expires_at: domain.claimExpiresAt?.toISOString() ?? null },
        });
      }
      const domains = await tx.domain.findMany({ where: { accountId, status: { not: 'retired' satisfies DomainStatus } }, orderBy: { createdAt: 'asc' } });
      return { domains: domains.map((d) => presentDomain(svc.config, d)) };
    },
    { maxWait: 10_000, timeout: 30_000 },
  );
}
