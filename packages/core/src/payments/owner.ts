/**
 * How a human owner is identified on the owner pages: a single-use link emailed to their address. Opening it
 * shows a Continue button (so a mail scanner's GET does not use it up); pressing it spends the link and starts
 * a short session (cookie) tied to that email. Tokens are stored as SHA-256 only.
 */
import { randomBytes } from 'node:crypto';
import type { Tx } from '@boxes/db';
import type { Services } from '../shared/context';
import { sha256Hex } from '../shared/crypto';
import { AppError } from '../shared/errors';
import { newId } from '../shared/ids';

export const OWNER_SESSION_TTL_MS = 60 * 60 * 1000;
export const OWNER_LINK_TTL_MS = 24 * 60 * 60 * 1000;

export type OwnerLinkPurpose = 'payment' | 'card' | 'home' | 'close' | 'review';

export function ownerLinkUrl(svc: Services, token: string): string {
  return `${svc.config.siteUrl}/owner/l/${token}`;
}

/** Creates a single-use link; returns its URL (to be emailed, never returned to an API caller). */
export async function createOwnerLink(
  svc: Services,
  tx: Tx,
  input: {
    email: string;
    purpose: OwnerLinkPurpose;
    paymentId?: string | null;
    closeRequestId?: string | null;
    reviewId?: string | null;
    expiresAt?: Date;
  },
): Promise<string> {
  const token = randomBytes(32).toString('base64url');
  await tx.ownerLink.create({
    data: {
      id: newId('ol'),
      tokenHash: sha256Hex(token),
      ownerEmail: input.email.toLowerCase(),
      purpose: input.purpose,
      paymentId: input.paymentId ?? null,
      closeRequestId: input.closeRequestId ?? null,
      reviewId: input.reviewId ?? null,
      expiresAt: input.expiresAt ?? new Date(svc.clock.now().getTime() + OWNER_LINK_TTL_MS),
    },
  });
  return ownerLinkUrl(svc, token);
}

export interface OwnerLinkInfo {
  email: string;
  purpose: OwnerLinkPurpose;
  paymentId: string | null;
  closeRequestId: string | null;
  reviewId: string | null;
}

/** What a link is for, without spending it; throws link_used / link_expired / not_found. */
export async function peekOwnerLink(svc: Services, token: string): Promise<OwnerLinkInfo> {
  const link = await svc.db.ownerLink.findUnique({ where: { tokenHash: sha256Hex(token) } });
  if (!link) throw new AppError('not_found', 'This link is not valid.');
  if (link.usedAt) throw new AppError('link_used', 'This link was already used. Each link works once; ask for a new one on the owner page.');
  if (link.expiresAt < svc.clock.now()) throw new AppError('link_expired', 'This link has expired; ask for a new one on the owner page.');
  return {
    email: link.ownerEmail,
    purpose: link.purpose as OwnerLinkPurpose,
    paymentId: link.paymentId,
    closeRequestId: link.closeRequestId,
    reviewId: link.reviewId,
  };
}

/** Spends a link (once, even under concurrent use) and starts a session; returns the session's cookie value. */
export async function consumeOwnerLink(svc: Services, token: string): Promise<OwnerLinkInfo & { session: string }> {
  const info = await peekOwnerLink(svc, token);
  const spent = await svc.db.ownerLink.updateMany({ where: { tokenHash: sha256Hex(token), usedAt: null }, data: { usedAt: svc.clock.now() } });
  if (spent.count !== 1) throw new AppError('link_used', 'This link was already used. Each link works once; ask for a new one on the owner page.');
  const session = randomBytes(32).toString('base64url');
  await svc.db.ownerSession.create({
    data: {
      id: newId('os'),
      tokenHash: sha256Hex(session),
      ownerEmail: info.email,
      formToken: randomBytes(24).toString('base64url'),
      expiresAt: new Date(svc.clock.now().getTime() + OWNER_SESSION_TTL_MS),
    },
  });
  return { ...info, session };
}

export interface OwnerSessionInfo {
  email: string;
  formToken: string;
}

export async function ownerSession(svc: Services, cookie: string | undefined | null): Promise<OwnerSessionInfo | null> {
  if (!cookie) return null;
  const s = await svc.db.ownerSession.findUnique({ where: { tokenHash: sha256Hex(cookie) } });
  if (!s || s.expiresAt < svc.clock.now()) return null;
  return { email: s.ownerEmail, formToken: s.formToken };
}

export async function endOwnerSession(svc: Services, cookie: string): Promise<void> {
  await svc.db.ownerSession.deleteMany({ where: { tokenHash: sha256Hex(cookie) } });
}
