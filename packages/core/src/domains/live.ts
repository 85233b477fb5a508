/**
 * A domain going live: a proven claim takes its name (one live domain per name), its boxes start receiving,
 * its zone is served and domain.ready is appended; the target of a move then becomes the account's primary
 * domain. Used by the verifier (domains/verify.ts), registrations and moves (domains/move.ts).
 */
import { Prisma, type Domain, type Tx } from '@boxes/db';
import { exec, k, sql, tbl } from '@boxes/db';
import { appendEvent } from '../events/append';
import { publishLiveDomain } from '../dns/zones';
import type { Services } from '../shared/context';
import type { DomainChecks } from './verify';
import type { DomainStatus } from '@boxes/schemas';

const DAY_MS = 24 * 60 * 60_000;

/** Makes a proven domain live: it takes the name, its boxes take their addresses, its zone is served. */
export async function goLive(svc: Services, tx: Tx, d: Domain): Promise<Domain> {
  const now = svc.clock.now();
  let live: Domain;
  try {
    // A savepoint, so that losing the race for the name leaves the transaction usable.
    await exec(tx, sql`SAVEPOINT go_live`);
    live = await tx.domain.update({
      where: { id: d.id },
      data: { status: 'active' satisfies DomainStatus, liveName: d.name, verifiedAt: now, nextCheckAt: null, claimExpiresAt: null },
    });
    await exec(
      tx,
      k
        .updateTable('boxes')
        .set((eb) => ({ live_address: eb.ref('address') }))
        .where('domain_id', '=', d.id),
    );
  } catch (err) {
    if (err instanceof Prisma.PrismaClientKnownRequestError && err.code === 'P2002') {
      await exec(tx, sql`ROLLBACK TO SAVEPOINT go_live`);
      const checks = {
        ...((d.checks as unknown as DomainChecks | null) ?? { checked_at: now.toISOString(), records: [] }),
        blocked_by: 'another account proved this domain first',
      };
      return tx.domain.update({ where: { id: d.id }, data: { checks: checks as unknown as Prisma.InputJsonValue } });
    }
    throw err;
  }
  await publishLiveDomain(tx, svc.config, live);
  await appendEvent({ db: tx, accountId: d.accountId, type: 'domain.ready', data: { domain: d.name, mode: d.mode, verified_at: now.toISOString() } });
  // The target of a move (POST /account/domain) takes over as the primary domain.
  if (!live.isPrimary) await completeMove(svc, tx, live);
  return await tx.domain.findUniqueOrThrow({ where: { id: d.id } });
}

/**
 * The new domain of a move went live: it becomes primary, every box moves onto it (same ids), the old domain
 * retires after the grace period. Runs inside goLive's transaction.
 */
export async function completeMove(svc: Services, tx: Tx, target: Domain): Promise<void> {
  const old = await tx.domain.findFirst({ where: { accountId: target.accountId, isPrimary: true } });
  if (!old || old.id === target.id) return;
  const graceUntil = new Date(svc.clock.now().getTime() + svc.config.dns.moveGraceDays * DAY_MS);
  await tx.domain.update({ where: { id: old.id }, data: { isPrimary: false, status: 'retiring' satisfies DomainStatus, graceUntil } });
  await tx.domain.update({ where: { id: target.id }, data: { isPrimary: true } });
  const box = tbl('boxes');
  await exec(
    tx,
    k
      .updateTable('boxes')
      .set({
        domain_id: target.id,
        address: sql<string>`${box.local_part} || '@' || ${target.name}`,
        live_address: sql<string>`${box.local_part} || '@' || ${target.name}`,
      })
      .where('account_id', '=', target.accountId)
      .where('domain_id', '=', old.id),
  );
  await tx.account.update({ where: { id: target.accountId }, data: { primaryAddress: `agent@${target.name}` } });
  await appendEvent({
    db: tx,
    accountId: target.accountId,
    type: 'domain.moved',
    data: { from: old.name, to: target.name, grace_until: graceUntil.toISOString() },
  });
}

/** Retiring domains past their grace period: retired, their name freed and their records no longer served. */
export async function retireMovedDomains(svc: Services): Promise<number> {
  const due = await svc.db.domain.findMany({
    where: { status: 'retiring' satisfies DomainStatus, graceUntil: { lte: svc.clock.now() } },
    select: { id: true },
  });
  for (const { id } of due) {
    await svc.db.$transaction(async (tx) => {
      const d = await tx.domain.findUniqueOrThrow({ where: { id } });
      if (d.status !== 'retiring') return;
      await tx.domain.update({ where: { id }, data: { status: 'retired' satisfies DomainStatus, liveName: null } });
      await tx.dnsRecord.deleteMany({ where: { domainId: id } });
      await tx.dnsZone.deleteMany({ where: { domainId: id } });
      await appendEvent({ db: tx, accountId: d.accountId, type: 'domain.retired', data: { domain: d.name, retired_at: svc.clock.now().toISOString() } });
    });
  }
  return due.length;
}
