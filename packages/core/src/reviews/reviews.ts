/**
 * Owner review of sends. A box and an API key each have a policy (none | new_recipients | all); the stricter
 * of the two applies to a send. The send path asks reviewDecision once the message passed validation; a send
 * that needs review is held (holdForReview): the request as the agent made it, attachments included, is
 * sealed (AES-256-GCM, like stored bodies) in send_reviews, the owner is emailed a single-use link to the
 * owner page, and the API answers 202 with the review. Nothing is reserved or charged while it waits.
 *
 * Then one of: the owner approves (approveReview: the request goes through sendMessage as written, credit
 * checked and reserved then; a refusal then, such as payment_required, leaves it pending with last_error),
 * the owner denies, the agent withdraws, or REVIEW_TTL_HOURS pass (the worker's sweep expires it). Each is an
 * event (review.requested, .approved, .denied, .withdrawn, .expired).
 *
 * "New recipient" (new_recipients): an address in to, cc or bcc that never was a recipient (to, cc or bcc) of
 * a message the sending box sent, nor the sender of a message it received. One query answers it for all the
 * recipients (messages_box_id_from_address_idx and messages_recipients_gin_idx).
 */
import type { Account, ApiKey, SendReview } from '@boxes/db';
import { Prisma, rows as run, sql, tbl } from '@boxes/db';
import { REVIEW_POLICIES, REVIEW_REASONS, REVIEW_STATUSES, type ReviewPolicy, type ReviewReason, type ReviewStatus, type SendInput } from '@boxes/schemas';
import type { z } from 'zod';
import type { BoxScope } from '../boxes/boxes';
import { appendEvent } from '../events/append';
import { queueNotice } from '../notices/notices';
import { createOwnerLink } from '../payments/owner';
import type { Services } from '../shared/context';
import { open, seal } from '../shared/crypto';
import { AppError, isUniqueViolation, notFound } from '../shared/errors';
import { newId } from '../shared/ids';
import { narrowStatus } from '../shared/statuses';

type Input = z.infer<typeof SendInput>;

const RANK: Record<ReviewPolicy, number> = { none: 0, new_recipients: 1, all: 2 };

/** The stricter of two policies (a box's and a key's). */
export function stricterPolicy(a: ReviewPolicy, b: ReviewPolicy): ReviewPolicy {
  return RANK[a] >= RANK[b] ? a : b;
}

export const reviewPolicyOf = (value: string): ReviewPolicy => narrowStatus(REVIEW_POLICIES, value);

/**
 * The recipients the box never wrote to (to, cc or bcc of a message it sent) nor heard from (the sender of a
 * message it received), in the order given. One query, on indexes: (box_id, from_address) for the senders, the
 * GIN over the recipient arrays for each array apart (one OR over the three would scan every message the box
 * sent: 66 ms against 2 ms at 40,000 messages of one box).
 */
export async function newRecipientsOf(svc: Pick<Services, 'db'>, boxId: string, recipients: readonly string[]): Promise<string[]> {
  if (recipients.length === 0) return [];
  const m = tbl('messages');
  const found = await run(
    svc.db,
    sql<{ address: string }>`
    SELECT r.address FROM unnest(${[...recipients]}::text[]) WITH ORDINALITY AS r(address, n)
    WHERE NOT EXISTS (SELECT 1 FROM ${m.$} WHERE ${m.box_id} = ${boxId} AND ${m.direction} = 'received' AND ${m.from_address} = r.address)
      AND NOT EXISTS (SELECT 1 FROM ${m.$} WHERE ${m.to_addresses} @> ARRAY[r.address] AND ${m.box_id} = ${boxId} AND ${m.direction} = 'sent')
      AND NOT EXISTS (SELECT 1 FROM ${m.$} WHERE ${m.cc_addresses} @> ARRAY[r.address] AND ${m.box_id} = ${boxId} AND ${m.direction} = 'sent')
      AND NOT EXISTS (SELECT 1 FROM ${m.$} WHERE ${m.bcc_addresses} @> ARRAY[r.address] AND ${m.box_id} = ${boxId} AND ${m.direction} = 'sent')
    ORDER BY r.n`,
  );
  return found.map((r) => r.address);
}

export interface ReviewDecision {
  reason: ReviewReason;
  newRecipients: string[];
}

/**
 * Whether a send waits for the owner: null to send now. The send path calls this once the message passed
 * validation (sender, recipients, lists), before any credit is reserved. No query unless a policy is set.
 */
export async function reviewDecision(
  svc: Pick<Services, 'db'>,
  send: { box: { id: string; review: string }; key?: Pick<ApiKey, 'review'> | undefined; recipients: readonly string[] },
): Promise<ReviewDecision | null> {
  const policy = stricterPolicy(reviewPolicyOf(send.box.review), reviewPolicyOf(send.key?.review ?? 'none'));
  if (policy === 'none') return null;
  const fresh = await newRecipientsOf(svc, send.box.id, send.recipients);
  if (policy === 'all') return { reason: 'all', newRecipients: fresh };
  return fresh.length ? { reason: 'new_recipients', newRecipients: fresh } : null;
}

/** A review as the API shows it (schemas Review). */
export interface ReviewView {
  id: string;
  status: ReviewStatus;
  reason: ReviewReason;
  new_recipients: string[];
  box_id: string;
  from: string;
  to: string[];
  cc: string[];
  bcc: string[];
  subject: string | null;
  send_at: string | null;
  created_at: string;
  expires_at: string;
  decided_at: string | null;
  message_id: string | null;
  last_error: { code: string; message: string } | null;
  idempotent_replay?: boolean;
}

export function presentReview(r: SendReview): ReviewView {
  return {
    id: r.id,
    status: narrowStatus(REVIEW_STATUSES, r.status),
    reason: narrowStatus(REVIEW_REASONS, r.reason),
    new_recipients: r.newRecipients,
    box_id: r.boxId,
    from: r.fromAddress,
    to: r.toAddresses,
    cc: r.ccAddresses,
    bcc: r.bccAddresses,
    subject: r.subject,
    send_at: r.sendAt?.toISOString() ?? null,
    created_at: r.createdAt.toISOString(),
    expires_at: r.expiresAt.toISOString(),
    decided_at: r.decidedAt?.toISOString() ?? null,
    message_id: r.messageId,
    last_error: (r.lastError as { code: string; message: string } | null) ?? null,
  };
}

/** What every review.* event says of the send. */
const facts = (r: SendReview) => ({ review_id: r.id, from: r.fromAddress, to: r.toAddresses, cc: r.ccAddresses, subject: r.subject });

/** The held send: the message as the planner made it (addresses as delivered) and the request to replay. */
export interface HeldSend {
  account: Pick<Account, 'id' | 'humanEmail'>;
  keyId: string | null;
  boxId: string;
  from: string;
  to: string[];
  cc: string[];
  bcc: string[];
  subject: string | null;
  sendAt: Date | null;
  /** The request as the agent made it (idempotency_key included): what an approval sends. */
  input: Input;
  requestHash: string;
}

function replayReview(r: SendReview, requestHash: string): ReviewView {
  if (r.requestHash !== requestHash) {
    throw new AppError(
      'idempotency_key_reused',
      'This idempotency_key was already used for a different message (held for review); nothing was sent. Use a new key for a new message.',
      { review_id: r.id },
    );
  }
  return { ...presentReview(r), idempotent_replay: true };
}

/**
 * Holds a send for the owner: the sealed request, a single-use owner link mailed to the owner, and
 * review.requested, in one transaction. A repeat with the same idempotency_key answers the same review.
 */
export async function holdForReview(svc: Services, send: HeldSend, decision: ReviewDecision): Promise<ReviewView> {
  const accountId = send.account.id;
  const idemKey = send.input.idempotency_key ?? null;
  const prior = () => (idemKey ? svc.db.sendReview.findUnique({ where: { accountId_idempotencyKey: { accountId, idempotencyKey: idemKey } } }) : null);
  const before = await prior();
  if (before) return replayReview(before, send.requestHash);
  const now = svc.clock.now();
  const expiresAt = new Date(now.getTime() + svc.config.review.ttlMs);
  try {
    return await svc.db.$transaction(async (tx) => {
      const r = await tx.sendReview.create({
        data: {
          id: newId('rev'),
          accountId,
          boxId: send.boxId,
          keyId: send.keyId,
          reason: decision.reason,
          newRecipients: decision.newRecipients,
          fromAddress: send.from,
          toAddresses: send.to,
          ccAddresses: send.cc,
          bccAddresses: send.bcc,
          subject: send.subject,
          sendAt: send.sendAt,
          requestEnc: seal(svc.secretKey, JSON.stringify(send.input)),
          requestHash: send.requestHash,
          idempotencyKey: idemKey,
          expiresAt,
          createdAt: now,
        },
      });
      const link = await createOwnerLink(svc, tx, { email: send.account.humanEmail, purpose: 'review', reviewId: r.id, expiresAt });
      const why =
        decision.reason === 'all'
          ? 'Every message from this box (or this API key) waits for your approval.'
          : `It is addressed to ${decision.newRecipients.join(', ')}, whom ${send.from} has never written to nor heard from.`;
      await queueNotice(tx, {
        accountId,
        kind: 'review.requested',
        to: send.account.humanEmail,
        subject: `Approve a message from ${send.from}?`,
        text: [
          `Your agent wants to send a message from ${send.from}. ${why}`,
          '',
          `To: ${send.to.join(', ')}`,
          ...(send.cc.length ? [`Cc: ${send.cc.join(', ')}`] : []),
          ...(send.bcc.length ? [`Bcc: ${send.bcc.join(', ')}`] : []),
          `Subject: ${send.subject ?? '(none)'}`,
          '',
          `See the whole message and approve or deny it: ${link}`,
          '',
          `The link works once, until ${expiresAt.toISOString()}. If you do nothing, the message is not sent.`,
        ].join('\n'),
      });
      await appendEvent({
        db: tx,
        accountId,
        boxId: send.boxId,
        type: 'review.requested',
        data: {
          ...facts(r),
          reason: decision.reason,
          new_recipients: decision.newRecipients,
          expires_at: expiresAt.toISOString(),
          by_key_id: send.keyId,
        },
      });
      return presentReview(r);
    });
  } catch (err) {
    // Two sends with the same idempotency_key at once: the loser answers the winner's review.
    if (idemKey && isUniqueViolation(err)) {
      const winner = await prior();
      if (winner) return replayReview(winner, send.requestHash);
    }
    throw err;
  }
}

/** Leaves pending for a final status, once (whoever moves it first wins); appends its event. */
async function settle(svc: Services, r: SendReview, status: 'denied' | 'expired' | 'withdrawn', byKeyId: string | null = null): Promise<SendReview | null> {
  return svc.db.$transaction(async (tx) => {
    const now = svc.clock.now();
    const moved = await tx.sendReview.updateMany({
      where: { id: r.id, status: 'pending' satisfies ReviewStatus },
      data: { status: status satisfies ReviewStatus, decidedAt: now },
    });
    if (moved.count !== 1) return null;
    const data = facts(r);
    const base = { db: tx, accountId: r.accountId, boxId: r.boxId };
    if (status === 'withdrawn') await appendEvent({ ...base, type: 'review.withdrawn', data: { ...data, by_key_id: byKeyId } });
    else if (status === 'denied') await appendEvent({ ...base, type: 'review.denied', data });
    else await appendEvent({ ...base, type: 'review.expired', data });
    return { ...r, status, decidedAt: now };
  });
}

/** A pending review past its time expires now (the sweep does the same for all of them). */
async function current(svc: Services, r: SendReview): Promise<SendReview> {
  if (r.status !== ('pending' satisfies ReviewStatus) || r.expiresAt > svc.clock.now()) return r;
  return (await settle(svc, r, 'expired')) ?? (await svc.db.sendReview.findUniqueOrThrow({ where: { id: r.id } }));
}

/** The worker's sweep: every pending review past expires_at becomes expired (review.expired). Returns how many. */
export async function expireReviews(svc: Services, opts: { accountId?: string; limit?: number } = {}): Promise<number> {
  const due = await svc.db.sendReview.findMany({
    where: { status: 'pending' satisfies ReviewStatus, expiresAt: { lte: svc.clock.now() }, ...(opts.accountId ? { accountId: opts.accountId } : {}) },
    orderBy: { expiresAt: 'asc' },
    take: opts.limit ?? 500,
  });
  let n = 0;
  for (const r of due) if (await settle(svc, r, 'expired')) n++;
  return n;
}

async function findVisible(svc: Services, accountId: string, scope: BoxScope, id: string): Promise<SendReview> {
  const r = await svc.db.sendReview.findFirst({ where: { id, accountId } });
  if (!r || (scope && !scope.includes(r.boxId))) throw notFound('review', id);
  return current(svc, r);
}

/** GET /reviews: newest first, optionally one status; a box-restricted key sees its boxes' reviews. */
export async function listReviews(
  svc: Services,
  input: { accountId: string; scope: BoxScope; status?: ReviewStatus | undefined; limit: number },
): Promise<ReviewView[]> {
  await expireReviews(svc, { accountId: input.accountId });
  const found = await svc.db.sendReview.findMany({
    where: {
      accountId: input.accountId,
      ...(input.status ? { status: input.status } : {}),
      ...(input.scope ? { boxId: { in: input.scope } } : {}),
    },
    orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
    take: input.limit,
  });
  return found.map(presentReview);
}

export async function getReview(svc: Services, input: { accountId: string; scope: BoxScope; id: string }): Promise<ReviewView> {
  return presentReview(await findVisible(svc, input.accountId, input.scope, input.id));
}

/** POST /reviews/{id}/withdraw: the agent takes a pending send back; nothing is sent. */
export async function withdrawReview(svc: Services, input: { accountId: string; scope: BoxScope; id: string; keyId: string }): Promise<ReviewView> {
  const r = await findVisible(svc, input.accountId, input.scope, input.id);
  if (r.status !== 'pending') throw new AppError('conflict', `This review is ${r.status}; only a pending one can be withdrawn.`, { status: r.status });
  const done = await settle(svc, r, 'withdrawn', input.keyId);
  if (!done) {
    const now = await svc.db.sendReview.findUniqueOrThrow({ where: { id: r.id } });
    throw new AppError('conflict', `This review is ${now.status}; only a pending one can be withdrawn.`, { status: now.status });
  }
  return presentReview(done);
}

// --- the owner's side --------------------------------------------------------------------------------------

/** The request of a review, opened: what the owner page shows (and what an approval sends). */
export function reviewRequest(svc: Pick<Services, 'secretKey'>, r: Pick<SendReview, 'requestEnc'>): Input {
  return JSON.parse(open(svc.secretKey, r.requestEnc).toString('utf8')) as Input;
}

export interface OwnerReview {
  review: SendReview;
  request: Input;
  account: { id: string; primaryAddress: string; humanEmail: string };
}

/** A review of an account the owner (by email) owns; not_found otherwise. */
export async function ownerReview(svc: Services, ownerEmail: string, id: string): Promise<OwnerReview> {
  const found = await svc.db.sendReview.findUnique({
    where: { id },
    include: { account: { select: { id: true, primaryAddress: true, humanEmail: true } } },
  });
  if (!found || found.account.humanEmail.toLowerCase() !== ownerEmail.toLowerCase()) throw new AppError('not_found', 'No such message to review for you.');
  const { account, ...row } = found;
  const review = await current(svc, row);
  return { review, request: reviewRequest(svc, review), account };
}

/** The owner denies a pending review: nothing is sent or charged. */
export async function denyReview(svc: Services, ownerEmail: string, id: string): Promise<SendReview> {
  const { review } = await ownerReview(svc, ownerEmail, id);
  if (review.status !== 'pending') throw new AppError('conflict', `This message is already ${review.status}; nothing to decide.`);
  const done = await settle(svc, review, 'denied');
  if (!done) throw new AppError('conflict', 'This message was decided meanwhile; open the page again.');
  return done;
}

/**
 * The owner approves: the request goes through the send path exactly as the agent made it (sendFn is
 * sendMessage, passed in to keep this module out of the send path's imports). The review is claimed first
 * (pending to approved, once), so two approvals never send twice. If the send is refused now (credit short:
 * payment_required; the domain no longer live; a recipient blocked since), nothing is sent, the review goes
 * back to pending with last_error, and the owner may approve again until it expires.
 */
export async function approveReview(
  svc: Services,
  ownerEmail: string,
  id: string,
  sendFn: (account: Account, input: Input) => Promise<{ message_id: string }>,
): Promise<SendReview> {
  const { review, request } = await ownerReview(svc, ownerEmail, id);
  if (review.status !== 'pending') throw new AppError('conflict', `This message is already ${review.status}; nothing to decide.`);
  const owner = await svc.db.account.findUniqueOrThrow({ where: { id: review.accountId }, select: { status: true } });
  // A closed account sends nothing, whoever approves (its keys and deliveries were stopped when it closed).
  if (owner.status !== 'active') throw new AppError('conflict', 'This account is closed: nothing can be sent from it.');
  const claimed = await svc.db.sendReview.updateMany({
    where: { id, status: 'pending' satisfies ReviewStatus, expiresAt: { gt: svc.clock.now() } },
    data: { status: 'approved' satisfies ReviewStatus, decidedAt: svc.clock.now() },
  });
  if (claimed.count !== 1) throw new AppError('conflict', 'This message was decided meanwhile (or expired); open the page again.');
  // A scheduled send whose time passed while it waited goes now.
  const input: Input = { ...request };
  if (input.send_at !== undefined && new Date(input.send_at).getTime() <= Date.now() + 1000) delete input.send_at;
  let messageId: string;
  try {
    const account = await svc.db.account.findUniqueOrThrow({ where: { id: review.accountId } });
    messageId = (await sendFn(account, input)).message_id;
  } catch (err) {
    const lastError = err instanceof AppError ? { code: err.code, message: err.message } : { code: 'internal', message: 'The send failed; try again.' };
    await svc.db.sendReview.updateMany({
      where: { id, status: 'approved' satisfies ReviewStatus, messageId: null },
      data: { status: 'pending' satisfies ReviewStatus, decidedAt: null, lastError },
    });
    throw err;
  }
  return svc.db.$transaction(async (tx) => {
    const done = await tx.sendReview.update({ where: { id }, data: { messageId, lastError: Prisma.DbNull } });
    await appendEvent({ db: tx, accountId: review.accountId, boxId: review.boxId, type: 'review.approved', data: { ...facts(review), message_id: messageId } });
    return done;
  });
}

/**
 * A bulk job is never held for review as a whole: from a box (or with a key) whose policy is all it is refused
 * (403 review_required), and under new_recipients it is refused when any message names an address its box
 * never wrote to nor heard from (one query per sending box). Without a policy nothing is read.
 */
export async function assertBulkNeedsNoReview(
  svc: Pick<Services, 'db'>,
  key: Pick<ApiKey, 'review'>,
  messages: readonly { box: { id: string; address: string; review: string }; recipients: readonly string[] }[],
): Promise<void> {
  const byBox = new Map<string, { address: string; policy: ReviewPolicy; recipients: Set<string> }>();
  for (const m of messages) {
    const policy = stricterPolicy(reviewPolicyOf(m.box.review), reviewPolicyOf(key.review));
    if (policy === 'none') continue;
    const entry = byBox.get(m.box.id) ?? { address: m.box.address, policy, recipients: new Set<string>() };
    for (const r of m.recipients) entry.recipients.add(r);
    byBox.set(m.box.id, entry);
  }
  for (const [boxId, b] of byBox) {
    if (b.policy === 'all') {
      throw new AppError(
        'review_required',
        `Every send from ${b.address} (or with this key) waits for the owner's review (policy all), and a bulk job cannot wait: send the messages one by one with POST /messages/send (each answers 202 with a review), or use a box without review. Nothing was queued.`,
        { box_id: boxId, review: 'all' },
      );
    }
    const fresh = await newRecipientsOf(svc, boxId, [...b.recipients]);
    if (fresh.length) {
      throw new AppError(
        'review_required',
        `${fresh.length} recipient(s) of this job never heard from nor wrote to ${b.address}, whose sends to new recipients wait for the owner's review (policy new_recipients); a bulk job cannot wait. Write to them one by one with POST /messages/send (each held for the owner), or leave them out. Nothing was queued.`,
        { box_id: boxId, review: 'new_recipients', new_recipients: fresh.slice(0, 50), new_recipients_count: fresh.length },
      );
    }
  }
}
