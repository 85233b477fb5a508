/** Boxes: addresses on the account's domain. Box-restricted keys see and change only their own boxes. */
import type { Box, Db, DbClient } from '@boxes/db';
import { Prisma } from '@boxes/db';
import { REVIEW_POLICIES, type ReviewPolicy } from '@boxes/schemas';
import { appendEvent } from '../events/append';
import { inTransaction } from '../shared/context';
import { AppError, notFound } from '../shared/errors';
import { newId } from '../shared/ids';
import { queueNotice } from '../notices/notices';
import { narrowStatus } from '../shared/statuses';

/** RFC 5322 dot-atom-text, at most 64 octets. */
const DOT_ATOM = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$/;

export interface BoxView {
  id: string;
  address: string;
  local_part: string;
  domain: string;
  is_primary: boolean;
  signature: string | null;
  review: ReviewPolicy;
  created_at: string;
}

export function presentBox(b: Box): BoxView {
  return {
    id: b.id,
    address: b.address,
    local_part: b.localPart,
    domain: b.address.slice(b.localPart.length + 1),
    is_primary: b.isPrimary,
    signature: b.signature,
    review: narrowStatus(REVIEW_POLICIES, b.review),
    created_at: b.createdAt.toISOString(),
  };
}

/** null means every box (an unrestricted key). */
export type BoxScope = string[] | null;

function visible(scope: BoxScope, boxId: string): boolean {
  return scope === null || scope.includes(boxId);
}

/** Validates a local part, or a full address whose domain is `domain`; returns the lower-cased local part. */
export function parseLocalPart(input: string, domain: string): string {
  let local = input.trim();
  const at = local.lastIndexOf('@');
  if (at !== -1) {
    const d = local.slice(at + 1).toLowerCase();
    if (d !== domain) {
      throw new AppError('validation_error', `address: the box must be on your domain ${domain}, not ${d}`, {
        fields: [{ path: 'address', message: `domain must be ${domain}` }],
      });
    }
    local = local.slice(0, at);
  }
  if (!local || local.length > 64 || !DOT_ATOM.test(local)) {
    throw new AppError(
      'validation_error',
      "address: a local part is 1 to 64 characters of letters, digits and !#$%&'*+/=?^_`{|}~- with single dots between them (no leading, trailing or double dot)",
      { fields: [{ path: 'address', message: 'not a valid local part (RFC 5322 dot-atom)' }] },
    );
  }
  return local.toLowerCase();
}

export async function createBox(input: {
  db: DbClient;
  accountId: string;
  address: string;
  isPrimary?: boolean;
  domainId?: string;
  /** Send caps (guard/caps.ts). */
  sendCaps?: Record<string, number | null> | null;
  review?: ReviewPolicy;
}): Promise<Box> {
  return inTransaction(input.db, async (tx) => {
    const domain = input.domainId
      ? await tx.domain.findUniqueOrThrow({ where: { id: input.domainId } })
      : await tx.domain.findFirstOrThrow({ where: { accountId: input.accountId, isPrimary: true } });
    const localPart = parseLocalPart(input.address, domain.name);
    const address = `${localPart}@${domain.name}`;
    let box: Box;
    try {
      box = await tx.box.create({
        data: {
          id: newId('box'),
          accountId: input.accountId,
          domainId: domain.id,
          localPart,
          address,
          // Mail is routed to a box only while its domain is live (a pending claim's boxes receive nothing).
          liveAddress: domain.status === 'active' ? address : null,
          isPrimary: input.isPrimary ?? false,
          ...(input.sendCaps ? { sendCaps: input.sendCaps } : {}),
          review: input.review ?? 'none',
        },
      });
    } catch (err) {
      if (err instanceof Prisma.PrismaClientKnownRequestError && err.code === 'P2002') {
        throw new AppError('box_exists', `The box ${address} already exists`, { address });
      }
      throw err;
    }
    await appendEvent({ db: tx, accountId: input.accountId, type: 'box.created', boxId: box.id, data: { box: presentBox(box) } });
    return box;
  });
}

export async function listBoxes(input: { db: Db; accountId: string; scope: BoxScope }): Promise<Box[]> {
  return input.db.box.findMany({
    where: { accountId: input.accountId, ...(input.scope ? { id: { in: input.scope } } : {}) },
    orderBy: { createdAt: 'asc' },
  });
}

async function findVisible(db: DbClient, accountId: string, scope: BoxScope, boxId: string): Promise<Box> {
  const box = await db.box.findFirst({ where: { id: boxId, accountId } });
  if (!box || !visible(scope, box.id)) throw notFound('box', boxId);
  return box;
}

export async function deleteBox(input: { db: Db; accountId: string; scope: BoxScope; boxId: string }) {
  return inTransaction(input.db, async (tx) => {
    const box = await findVisible(tx, input.accountId, input.scope, input.boxId);
    if (box.isPrimary) {
      throw new AppError('primary_box', `${box.address} is the primary box and cannot be deleted`, { box_id: box.id });
    }
    await tx.box.delete({ where: { id: box.id } });
    await appendEvent({ db: tx, accountId: input.accountId, type: 'box.deleted', boxId: box.id, data: { box_id: box.id, address: box.address } });
    return { id: box.id, deleted: true as const };
  });
}

export async function setSignature(input: { db: Db; accountId: string; scope: BoxScope; boxId: string; signature: string | null }) {
  return inTransaction(input.db, async (tx) => {
    const box = await findVisible(tx, input.accountId, input.scope, input.boxId);
    const updated = await tx.box.update({ where: { id: box.id }, data: { signature: input.signature } });
    await appendEvent({
      db: tx,
      accountId: input.accountId,
      type: 'box.signature_updated',
      boxId: box.id,
      data: { box_id: box.id, address: box.address, signature: input.signature },
    });
    return updated;
  });
}

const STRICTNESS: Record<ReviewPolicy, number> = { none: 0, new_recipients: 1, all: 2 };

/**
 * PATCH /boxes/{id}: the box's owner review policy (reviews/reviews.ts). A change is recorded
 * (box.review_updated); one that makes it less strict is also mailed to the owner, who set it for a reason.
 */
export async function setBoxReview(input: { db: Db; accountId: string; scope: BoxScope; boxId: string; review: ReviewPolicy; keyId: string }): Promise<Box> {
  return inTransaction(input.db, async (tx) => {
    const box = await findVisible(tx, input.accountId, input.scope, input.boxId);
    const previous = narrowStatus(REVIEW_POLICIES, box.review);
    if (previous === input.review) return box;
    const updated = await tx.box.update({ where: { id: box.id }, data: { review: input.review } });
    await appendEvent({
      db: tx,
      accountId: input.accountId,
      type: 'box.review_updated',
      boxId: box.id,
      data: { box_id: box.id, address: box.address, review: input.review, previous, by_key_id: input.keyId },
    });
    if (STRICTNESS[input.review] < STRICTNESS[previous]) {
      const account = await tx.account.findUniqueOrThrow({ where: { id: input.accountId }, select: { humanEmail: true } });
      await queueNotice(tx, {
        accountId: input.accountId,
        kind: 'box.review_updated',
        to: account.humanEmail,
        subject: `Owner review of ${box.address} was lowered to ${input.review}`,
        text: `The owner review policy of ${box.address} changed from ${previous} to ${input.review} at ${new Date().toISOString()}, with the API key ${input.keyId}.\n\n${input.review === 'none' ? 'Its messages now go out without your approval.' : 'Only messages to new recipients now wait for your approval.'}\n\nIf this was not expected, the key may have leaked: revoke it and set the policy again (PATCH /boxes/{id} with {"review": "all"}).`,
      });
    }
    return updated;
  });
}
