/**
 * Closing an account (DELETE /account) and close protection.
 *
 * - confirm_domain must equal the account's (primary) domain; otherwise 400, nothing closes, the owner is
 *   mailed about the attempt (at most one such mail per 10 minutes) and account.close_refused is appended.
 * - With close protection on, a right confirm_domain creates a close request the owner approves from a
 *   single-use link (the owner pages, /owner/close/<id>); nothing closes before that.
 * - Closing, in one transaction: the account becomes closing, every key is revoked, every domain stops being
 *   live (the MX refuses its mail: 550) and its records are no longer served, queued, deferred and scheduled
 *   deliveries are stopped (mail.failed, holds released), a registered domain is held for transfer (auth code mailed to
 *   the owner), account.closing is appended and the owner is mailed; the worker then builds the data export
 *   and mails its link. After ACCOUNT_DELETION_GRACE_DAYS the audit job deletes everything.
 * Unfinished bulk jobs are cancelled in the same transaction (bulk/cancel.ts), so no later batch starts.
 */
import { randomBytes } from 'node:crypto';
import type { Tx } from '@boxes/db';
import { k, rows } from '@boxes/db';
import { appendEvent } from '../events/append';
import { markFailed } from '../messages/outcomes';
import { queueNotice } from '../notices/notices';
import { createOwnerLink } from '../payments/owner';
import type { Services } from '../shared/context';
import { seal, sha256Hex } from '../shared/crypto';
import { AppError } from '../shared/errors';
import { newId } from '../shared/ids';
import { stopBulkJobs } from '../bulk/cancel';
import type { AccountStatus, CloseRequestStatus, DeliveryStatus, DomainRegistrationStatus, DomainStatus, ExportStatus } from '@boxes/schemas';
import { CLOSE_REQUEST_STATUSES } from '@boxes/schemas';
import { narrowStatus } from '../shared/statuses';

export const CLOSE_REQUEST_TTL_MS = 24 * 60 * 60 * 1000;
const REFUSAL_MAIL_EVERY_MS = 10 * 60 * 1000;
const DAY_MS = 86_400_000;

export function closeProtectionOf(a: { closeProtectionAt: Date | null }) {
  return { enabled: a.closeProtectionAt !== null, enabled_at: a.closeProtectionAt?.toISOString() ?? null };
}

export async function enableCloseProtection(svc: Services, input: { accountId: string; actorKeyId: string }) {
  return svc.db.$transaction(async (tx) => {
    const set = await tx.account.updateManyAndReturn({
      where: { id: input.accountId, closeProtectionAt: null },
      data: { closeProtectionAt: new Date() },
      select: { closeProtectionAt: true },
    });
    if (set.length) {
      await appendEvent({ db: tx, accountId: input.accountId, type: 'account.close_protection.enabled', data: { by_key_id: input.actorKeyId } });
      return closeProtectionOf(set[0]!);
    }
    return closeProtectionOf(await tx.account.findUniqueOrThrow({ where: { id: input.accountId }, select: { closeProtectionAt: true } }));
  });
}

/** Support turns close protection off (operator CLI); the API cannot. */
export async function disableCloseProtection(svc: Pick<Services, 'db'>, accountId: string) {
  return svc.db.$transaction(async (tx) => {
    const a = await tx.account.findUnique({ where: { id: accountId }, select: { closeProtectionAt: true } });
    if (!a) throw new AppError('not_found', `account ${accountId} not found`);
    if (!a.closeProtectionAt) return { changed: false };
    await tx.account.update({ where: { id: accountId }, data: { closeProtectionAt: null } });
    await appendEvent({ db: tx, accountId, type: 'account.close_protection.disabled', data: { by: 'support' } });
    return { changed: true };
  });
}

const normalDomain = (d: string) => d.trim().toLowerCase().replace(/\.$/, '');

export const exportUrl = (svc: Services, token: string): string => `${svc.config.siteUrl}/exports/${token}`;

export type CloseResult = {
  status: 'closing' | 'pending_owner_approval';
  account_status: AccountStatus;
  message: string;
  closed_at: string | null;
  delete_after: string | null;
  keys_revoked: number;
  deliveries_stopped: number;
  domains_held_for_transfer: string[];
  export: { id: string; status: ExportStatus; download_url: string; expires_at: string; format: 'application/x-tar' } | null;
  close_request: { id: string; status: 'pending_owner_approval'; expires_at: string } | null;
};

/** DELETE /account. */
export async function requestClose(svc: Services, input: { accountId: string; keyId: string; confirmDomain: string | undefined }): Promise<CloseResult> {
  const account = await svc.db.account.findUniqueOrThrow({
    where: { id: input.accountId },
    select: { status: true, humanEmail: true, closeProtectionAt: true, domains: { where: { isPrimary: true }, select: { name: true } } },
  });
  const domain = account.domains[0]?.name ?? '';
  const given = input.confirmDomain === undefined ? null : normalDomain(input.confirmDomain);
  if (given !== domain) {
    const reason = given === null ? 'confirm_domain missing' : 'confirm_domain does not match';
    await svc.db.$transaction(async (tx) => {
      await appendEvent({ db: tx, accountId: input.accountId, type: 'account.close_refused', data: { reason, by_key_id: input.keyId } });
      const recent = await tx.notice.count({
        where: { accountId: input.accountId, kind: 'account.close_refused', createdAt: { gt: new Date(Date.now() - REFUSAL_MAIL_EVERY_MS) } },
      });
      if (recent === 0) {
        await queueNotice(tx, {
          accountId: input.accountId,
          kind: 'account.close_refused',
          to: account.humanEmail,
          subject: `Someone tried to close your Boxes account ${domain}`,
          text: `A request to close the Boxes account ${domain} was refused (${reason}) at ${new Date().toISOString()}.\nIt was made with the API key ${input.keyId}. Nothing was closed.\n\nIf this was not expected, the key may have leaked: revoke it (DELETE /account/keys/{id}) and consider turning on close protection (POST /account/close-protection).`,
        });
      }
    });
    throw new AppError(
      'validation_error',
      `${reason}: to close the account, send confirm_domain with the account's domain (GET /account shows it). Nothing was closed; the owner was told.`,
      {
        fields: [{ path: 'confirm_domain', message: given === null ? 'required' : "not the account's domain" }],
      },
    );
  }
  if (account.status !== 'active') throw new AppError('conflict', 'This account is already closing');
  if (!account.closeProtectionAt) return closeAccount(svc, { accountId: input.accountId, by: { keyId: input.keyId } });

  return svc.db.$transaction(async (tx) => {
    const now = svc.clock.now();
    await tx.accountCloseRequest.updateMany({
      where: { accountId: input.accountId, status: 'pending' satisfies CloseRequestStatus },
      data: { status: 'replaced' satisfies CloseRequestStatus, decidedAt: now },
    });
    const req = await tx.accountCloseRequest.create({
      data: { id: newId('clr'), accountId: input.accountId, requestedByKeyId: input.keyId, expiresAt: new Date(now.getTime() + CLOSE_REQUEST_TTL_MS) },
    });
    const link = await createOwnerLink(svc, tx, { email: account.humanEmail, purpose: 'close', closeRequestId: req.id, expiresAt: req.expiresAt });
    await queueNotice(tx, {
      accountId: input.accountId,
      kind: 'account.close_approval',
      to: account.humanEmail,
      subject: `Approve closing your Boxes account ${domain}?`,
      text: `Your agent asked to close the Boxes account ${domain} (key ${input.keyId}). Close protection is on, so nothing closes unless you approve:\n\n${link}\n\nThe link works once, until ${req.expiresAt.toISOString()}. If you do nothing, the account stays open.`,
    });
    await appendEvent({
      db: tx,
      accountId: input.accountId,
      type: 'account.close_requested',
      data: { close_request_id: req.id, by_key_id: input.keyId, expires_at: req.expiresAt.toISOString() },
    });
    return {
      status: 'pending_owner_approval' as const,
      account_status: 'active' as const,
      message:
        'Close protection is on: the owner was emailed a link to approve closing. Nothing closes until they do; then every key is revoked and the export link is mailed to the owner.',
      closed_at: null,
      delete_after: null,
      keys_revoked: 0,
      deliveries_stopped: 0,
      domains_held_for_transfer: [],
      export: null,
      close_request: { id: req.id, status: 'pending_owner_approval' as const, expires_at: req.expiresAt.toISOString() },
    };
  });
}

/** Closes the account now (no protection, or the owner approved request closeRequestId). */
export async function closeAccount(
  svc: Services,
  input: { accountId: string; by: { keyId: string } | { ownerEmail: string; closeRequestId: string } },
): Promise<CloseResult> {
  const token = randomBytes(32).toString('base64url');
  const result = await svc.db.$transaction(
    async (tx) => {
      const locked = await rows(tx, k.selectFrom('accounts').select('status').where('id', '=', input.accountId).forNoKeyUpdate());
      if (locked[0]?.status !== 'active') throw new AppError('conflict', 'This account is already closing');
      const now = svc.clock.now();
      const deleteAfter = new Date(now.getTime() + svc.config.audit.deletionGraceDays * DAY_MS);
      const account = await tx.account.update({
        where: { id: input.accountId },
        data: { status: 'closing' satisfies AccountStatus, closedAt: now, deleteAfter },
        select: { humanEmail: true, domains: { select: { id: true, name: true, status: true, isPrimary: true, registration: true } } },
      });
      const keys = await tx.apiKey.updateMany({ where: { accountId: input.accountId, revokedAt: null }, data: { revokedAt: now } });
      const stopped = await stopDeliveries(tx, input.accountId);
      const held = await holdAndUnpublish(svc, tx, account.domains);
      const primary = account.domains.find((d) => d.isPrimary)?.name ?? account.domains[0]?.name ?? input.accountId;
      if ('closeRequestId' in input.by) {
        await tx.accountCloseRequest.update({
          where: { id: input.by.closeRequestId },
          data: { status: 'approved' satisfies CloseRequestStatus, decidedAt: now },
        });
      }
      await tx.accountCloseRequest.updateMany({
        where: { accountId: input.accountId, status: 'pending' satisfies CloseRequestStatus },
        data: { status: 'replaced' satisfies CloseRequestStatus, decidedAt: now },
      });
      const exportExpires = new Date(Math.min(now.getTime() + svc.config.audit.exportLinkTtlDays * DAY_MS, deleteAfter.getTime()));
      const exp = await tx.accountExport.create({
        data: { id: newId('exp'), accountId: input.accountId, tokenHash: sha256Hex(token), tokenEnc: seal(svc.secretKey, token), expiresAt: exportExpires },
      });
      await appendEvent({
        db: tx,
        accountId: input.accountId,
        type: 'account.closing',
        data: {
          closed_at: now.toISOString(),
          delete_after: deleteAfter.toISOString(),
          ...('keyId' in input.by ? { by_key_id: input.by.keyId } : { approved_by_owner: true, close_request_id: input.by.closeRequestId }),
          keys_revoked: keys.count,
          deliveries_stopped: stopped,
          domains: account.domains.map((d) => d.name),
          domains_held_for_transfer: held.map((h) => h.name),
          export_id: exp.id,
          export_expires_at: exportExpires.toISOString(),
        },
      });
      await queueNotice(tx, {
        accountId: input.accountId,
        kind: 'account.closing',
        to: account.humanEmail,
        subject: `Your Boxes account ${primary} is closing`,
        text: [
          `The Boxes account ${primary} was closed at ${now.toISOString()}${'keyId' in input.by ? ` with the API key ${input.by.keyId}` : ' with your approval'}.`,
          `Every API key is revoked, mail to ${account.domains.map((d) => d.name).join(', ')} is refused, and ${stopped} pending deliveries were stopped.`,
          held.length ? `Held for transfer to another registrar:\n${held.map((h) => `  ${h.name}: auth code ${h.authCode}`).join('\n')}` : '',
          `A data export (every message as .eml, and the events, ledger, boxes and keys as JSON, in one tar archive) is being built; its download link follows in a separate mail and works until ${exportExpires.toISOString()}.`,
          `All the account's data is deleted for good on ${deleteAfter.toISOString()}.`,
        ]
          .filter(Boolean)
          .join('\n\n'),
      });
      return {
        status: 'closing' as const,
        account_status: 'closing' as const,
        message: `Closed. Every key is revoked. The export archive is being built; download it from export.download_url (it answers 202 until ready) before ${exportExpires.toISOString()}; the owner was mailed the link too. Data is deleted on ${deleteAfter.toISOString()}.`,
        closed_at: now.toISOString(),
        delete_after: deleteAfter.toISOString(),
        keys_revoked: keys.count,
        deliveries_stopped: stopped,
        domains_held_for_transfer: held.map((h) => h.name),
        export: {
          id: exp.id,
          status: 'building' as const,
          download_url: exportUrl(svc, token),
          expires_at: exportExpires.toISOString(),
          format: 'application/x-tar' as const,
        },
        close_request: null,
      };
    },
    { maxWait: 10_000, timeout: 60_000 },
  );
  await svc.jobs.enqueueExport(result.export!.id).catch(() => undefined); // the audit job picks up any left behind
  return result;
}

/** Bulk jobs are cancelled; queued, deferred and scheduled deliveries (and those waiting for a bulk batch) fail now (holds released, mail.failed each); returns how many. */
async function stopDeliveries(tx: Tx, accountId: string): Promise<number> {
  await stopBulkJobs(tx, accountId);
  const open = await tx.delivery.findMany({
    where: { accountId, status: { in: ['queued', 'deferred', 'bulk', 'scheduled'] satisfies DeliveryStatus[] } },
    select: { id: true, attempts: true },
  });
  for (const d of open) await markFailed(tx, d.id, { error: 'stopped: the account is closing', attempts: d.attempts });
  return open.length;
}

/** Every domain stops being live and served; a registered one is held for transfer (its auth code returned). */
async function holdAndUnpublish(
  svc: Services,
  tx: Tx,
  domains: { id: string; name: string; status: string; registration: { id: string; name: string; status: string } | null }[],
): Promise<{ name: string; authCode: string }[]> {
  const held: { name: string; authCode: string }[] = [];
  const ids = domains.map((d) => d.id);
  await tx.domain.updateMany({ where: { id: { in: ids } }, data: { status: 'closed' satisfies DomainStatus, liveName: null } });
  await tx.box.updateMany({ where: { domainId: { in: ids } }, data: { liveAddress: null } });
  await tx.dnsRecord.deleteMany({ where: { domainId: { in: ids } } });
  await tx.dnsZone.deleteMany({ where: { domainId: { in: ids } } });
  for (const d of domains) {
    if (d.registration && d.registration.status === 'active') {
      const { authCode } = await svc.registrar.holdForTransfer(tx, d.registration.name);
      await tx.domainRegistration.update({ where: { id: d.registration.id }, data: { status: 'held_for_transfer' satisfies DomainRegistrationStatus } });
      held.push({ name: d.registration.name, authCode });
    }
  }
  return held;
}

/** The owner's view of a close request (owner pages): only the account's own owner sees it. */
export async function ownerCloseRequest(svc: Services, ownerEmail: string, id: string) {
  const req = await svc.db.accountCloseRequest.findUnique({
    where: { id },
    include: {
      account: { select: { id: true, humanEmail: true, status: true, primaryAddress: true, domains: { where: { isPrimary: true }, select: { name: true } } } },
    },
  });
  if (!req || req.account.humanEmail.toLowerCase() !== ownerEmail.toLowerCase()) throw new AppError('not_found', 'No such close request for you.');
  let status = narrowStatus(CLOSE_REQUEST_STATUSES, req.status);
  if (status === 'pending' && req.expiresAt < svc.clock.now()) {
    await svc.db.accountCloseRequest.updateMany({
      where: { id, status: 'pending' satisfies CloseRequestStatus },
      data: { status: 'expired' satisfies CloseRequestStatus, decidedAt: svc.clock.now() },
    });
    status = 'expired';
  }
  return {
    id: req.id,
    status,
    expiresAt: req.expiresAt,
    accountId: req.account.id,
    domain: req.account.domains[0]?.name ?? '',
    primaryAddress: req.account.primaryAddress,
    requestedByKeyId: req.requestedByKeyId,
  };
}

/** The owner approves (the account closes now) or denies a pending close request. */
export async function decideCloseRequest(
  svc: Services,
  ownerEmail: string,
  id: string,
  action: 'approve' | 'deny',
): Promise<{ status: CloseRequestStatus; result: CloseResult | null }> {
  const req = await ownerCloseRequest(svc, ownerEmail, id);
  if (req.status !== 'pending') throw new AppError('conflict', `This request is ${req.status}; nothing to decide.`);
  if (action === 'deny') {
    await svc.db.$transaction(async (tx) => {
      const r = await tx.accountCloseRequest.updateMany({
        where: { id, status: 'pending' satisfies CloseRequestStatus },
        data: { status: 'denied' satisfies CloseRequestStatus, decidedAt: svc.clock.now() },
      });
      if (r.count === 1) await appendEvent({ db: tx, accountId: req.accountId, type: 'account.close_denied', data: { close_request_id: id } });
    });
    return { status: 'denied', result: null };
  }
  const result = await closeAccount(svc, { accountId: req.accountId, by: { ownerEmail, closeRequestId: id } });
  return { status: 'approved', result };
}
