/**
 * Auto-forwarding of a box's mail to a person (POST/GET /boxes/{id}/forwards, DELETE
 * /boxes/{id}/forwards/{forward_id}). A forward starts pending_confirmation: its target gets a link (mailed by
 * the service, uncharged) to a page served by apps/server, and nothing is forwarded until the target presses
 * Confirm there, so Boxes cannot be used to send a stranger mail they did not ask for. Confirmed, it is active
 * and copies matching inbound mail (run.ts); a bounce of a copy stops it for good (status stopped, reason
 * bounced), as does the target's Decline.
 */
import { createHash, randomBytes } from 'node:crypto';
import { exec, k, rows, sql, type BoxForward, type Tx } from '@boxes/db';
import type { BoxScope } from '../boxes/boxes';
import { appendEvent } from '../events/append';
import { queueNotice } from '../notices/notices';
import type { Services } from '../shared/context';
import { AppError } from '../shared/errors';
import { newId } from '../shared/ids';
import { parseMailbox } from '../messages/addresses';
import type { ForwardStatus } from '@boxes/schemas';
import { FORWARD_STATUSES } from '@boxes/schemas';
import { narrowStatus, statusLit } from '../shared/statuses';

/** Forwards a box may have at once (pending and active). */
export const MAX_FORWARDS_PER_BOX = 10;
/** How long the target's confirmation link works. */
export const FORWARD_CONFIRM_TTL_DAYS = 7;

const hashToken = (token: string) => createHash('sha256').update(token).digest('hex');
export const forwardConfirmUrl = (svc: Services, token: string) => `${svc.config.siteUrl}/forwards/confirm/${token}`;

export function presentForward(f: BoxForward & { box?: { address: string } }) {
  return {
    id: f.id,
    box_id: f.boxId,
    ...(f.box ? { box: f.box.address } : {}),
    to: f.target,
    match: { from_contains: f.matchFrom, subject_contains: f.matchSubject },
    status: narrowStatus(FORWARD_STATUSES, f.status),
    stop_reason: f.stopReason,
    confirmation_expires_at: f.status === 'pending_confirmation' ? f.confirmExpiresAt.toISOString() : null,
    confirmed_at: f.confirmedAt?.toISOString() ?? null,
    stopped_at: f.stoppedAt?.toISOString() ?? null,
    created_at: f.createdAt.toISOString(),
  };
}
export type ForwardView = ReturnType<typeof presentForward>;

async function visibleBox(svc: Services, accountId: string, scope: BoxScope, boxId: string) {
  const box = await svc.db.box.findFirst({ where: { id: boxId, accountId } });
  if (!box || (scope && !scope.includes(box.id))) throw new AppError('not_found', `box ${boxId} not found`);
  return box;
}

/** Case-insensitive substring or null (matches everything). */
const normaliseMatch = (s: string | null | undefined) => {
  const v = s?.trim().toLowerCase();
  return v ? v : null;
};

export async function createForward(
  svc: Services,
  input: { accountId: string; scope: BoxScope; boxId: string; to: string; fromContains?: string | null; subjectContains?: string | null },
): Promise<ForwardView> {
  const box = await visibleBox(svc, input.accountId, input.scope, input.boxId);
  const target = parseMailbox(input.to, 'to').address;
  if (target === box.address) {
    throw new AppError('validation_error', 'to: a box cannot forward to itself', { fields: [{ path: 'to', message: 'the box itself' }] });
  }
  const token = randomBytes(32).toString('base64url');
  const now = svc.clock.now();
  const row = await svc.db.$transaction(async (tx) => {
    // Serialises forward changes of one box.
    await rows(tx, k.selectFrom('boxes').select('id').where('id', '=', box.id).forUpdate());
    const open = await tx.boxForward.findMany({ where: { boxId: box.id, status: { in: ['pending_confirmation', 'active'] satisfies ForwardStatus[] } } });
    const same = open.find((f) => f.target === target);
    if (same)
      throw new AppError('forward_exists', `${box.address} already forwards to ${target} (${same.status})`, { forward_id: same.id, status: same.status });
    // Counted from the outbox, so deleting forwards does not reset it.
    const recent = await tx.notice.count({
      where: { accountId: input.accountId, kind: 'forward_confirmation', createdAt: { gt: new Date(Date.now() - 86_400_000) } },
    });
    const perDay = svc.config.smtp.forwardConfirmationsPerDay;
    if (recent >= perDay) {
      throw new AppError('rate_limited', `At most ${perDay} forwards (confirmation mails) per account a day; try again later`, {
        retry_after_seconds: 3600,
        limit: perDay,
      });
    }
    if (open.length >= MAX_FORWARDS_PER_BOX) {
      throw new AppError('validation_error', `to: a box has at most ${MAX_FORWARDS_PER_BOX} forwards; delete one first`, {
        fields: [{ path: 'to', message: 'too many forwards' }],
      });
    }
    const created = await tx.boxForward.create({
      data: {
        id: newId('fwd'),
        accountId: input.accountId,
        boxId: box.id,
        target,
        matchFrom: normaliseMatch(input.fromContains),
        matchSubject: normaliseMatch(input.subjectContains),
        confirmTokenHash: hashToken(token),
        confirmExpiresAt: new Date(now.getTime() + FORWARD_CONFIRM_TTL_DAYS * 86_400_000),
        createdAt: now,
      },
    });
    await queueNotice(tx, {
      accountId: input.accountId,
      kind: 'forward_confirmation',
      to: target,
      subject: `Forward mail from ${box.address} to you?`,
      text: [
        `The address ${box.address} asks to forward copies of its incoming mail${created.matchFrom || created.matchSubject ? ' (some of it)' : ''} to ${target}.`,
        '',
        `Nothing is forwarded unless you confirm. To confirm (or decline), open:`,
        forwardConfirmUrl(svc, token),
        '',
        `The link works for ${FORWARD_CONFIRM_TTL_DAYS} days. If you did not expect this, ignore this mail: nothing more will be sent to you.`,
      ].join('\n'),
    });
    await appendEvent({
      db: tx,
      accountId: input.accountId,
      type: 'box.forward.created',
      boxId: box.id,
      data: {
        id: created.id,
        box_id: box.id,
        box: box.address,
        to: target,
        match: { from_contains: created.matchFrom, subject_contains: created.matchSubject },
        status: created.status,
      },
    });
    return created;
  });
  return presentForward({ ...row, box });
}

export async function listForwards(svc: Services, input: { accountId: string; scope: BoxScope; boxId: string }): Promise<ForwardView[]> {
  const box = await visibleBox(svc, input.accountId, input.scope, input.boxId);
  const rows = await svc.db.boxForward.findMany({ where: { boxId: box.id }, orderBy: { createdAt: 'asc' } });
  return rows.map((r) => presentForward({ ...r, box }));
}

/** Recomputes the box's forwarding flag (read by inbound mail) from its active forwards. */
async function refreshBoxFlag(tx: Tx, boxId: string) {
  await exec(
    tx,
    k
      .updateTable('boxes')
      .set((eb) => ({
        forwarding: eb
          .exists(
            eb.selectFrom('box_forwards').select(sql.lit(1).as('one')).where('box_id', '=', boxId).where('status', '=', statusLit(FORWARD_STATUSES, 'active')),
          )
          .$castTo<boolean>(),
      }))
      .where('id', '=', boxId),
  );
}

export async function deleteForward(
  svc: Services,
  input: { accountId: string; scope: BoxScope; boxId: string; forwardId: string },
): Promise<{ deleted: true; id: string }> {
  const box = await visibleBox(svc, input.accountId, input.scope, input.boxId);
  return svc.db.$transaction(async (tx) => {
    const f = await tx.boxForward.findFirst({ where: { id: input.forwardId, boxId: box.id } });
    if (!f) throw new AppError('not_found', `forward ${input.forwardId} not found`);
    await tx.boxForward.delete({ where: { id: f.id } });
    await refreshBoxFlag(tx, box.id);
    await appendEvent({ db: tx, accountId: input.accountId, type: 'box.forward.deleted', boxId: box.id, data: { id: f.id, box_id: box.id, to: f.target } });
    return { deleted: true as const, id: f.id };
  });
}

/** The forward a confirmation link names, for the page that shows it (nothing changes). */
export async function peekForwardConfirmation(svc: Services, token: string) {
  const f = await svc.db.boxForward.findUnique({ where: { confirmTokenHash: hashToken(token) }, include: { box: { select: { address: true } } } });
  if (!f) throw new AppError('not_found', 'This confirmation link is not valid');
  if (f.status === 'pending_confirmation' && f.confirmExpiresAt <= svc.clock.now())
    throw new AppError('link_expired', 'This confirmation link has expired; nothing will be forwarded');
  return presentForward(f);
}

/** The target's answer: confirm (the forward becomes active) or decline (stopped). Repeating an answer is harmless. */
export async function answerForwardConfirmation(svc: Services, token: string, answer: 'confirm' | 'decline') {
  const now = svc.clock.now();
  return svc.db.$transaction(async (tx) => {
    const f = await tx.boxForward.findUnique({ where: { confirmTokenHash: hashToken(token) }, include: { box: { select: { address: true } } } });
    if (!f) throw new AppError('not_found', 'This confirmation link is not valid');
    if (f.status !== 'pending_confirmation') return presentForward(f);
    if (f.confirmExpiresAt <= now) throw new AppError('link_expired', 'This confirmation link has expired; nothing will be forwarded');
    const updated =
      answer === 'confirm'
        ? await tx.boxForward.update({
            where: { id: f.id },
            data: { status: 'active' satisfies ForwardStatus, confirmedAt: now },
            include: { box: { select: { address: true } } },
          })
        : await tx.boxForward.update({
            where: { id: f.id },
            data: { status: 'stopped' satisfies ForwardStatus, stopReason: 'declined', stoppedAt: now },
            include: { box: { select: { address: true } } },
          });
    await refreshBoxFlag(tx, f.boxId);
    const ref = { id: f.id, box_id: f.boxId, to: f.target };
    await appendEvent({
      db: tx,
      accountId: f.accountId,
      boxId: f.boxId,
      ...(answer === 'confirm' ? { type: 'box.forward.confirmed', data: ref } : { type: 'box.forward.stopped', data: { ...ref, reason: 'declined' } }),
    });
    return presentForward(updated);
  });
}

/** Stops a forward for good and says why (box.forward.stopped). */
export async function stopForward(tx: Tx, f: Pick<BoxForward, 'id' | 'accountId' | 'boxId' | 'target'>, reason: string, detail: Record<string, unknown> = {}) {
  const done = await tx.boxForward.updateMany({
    where: { id: f.id, status: { not: 'stopped' satisfies ForwardStatus } },
    data: { status: 'stopped' satisfies ForwardStatus, stopReason: reason, stoppedAt: new Date() },
  });
  if (done.count !== 1) return;
  await refreshBoxFlag(tx, f.boxId);
  await appendEvent({
    db: tx,
    accountId: f.accountId,
    type: 'box.forward.stopped',
    boxId: f.boxId,
    data: { id: f.id, box_id: f.boxId, to: f.target, reason, ...detail },
  });
}

/** markBounced's hook: when the bounced message was an auto-forwarded copy, its forward stops. */
export async function stopForwardOnBounce(tx: Tx, d: { messageId: string; recipient: string; response: string }) {
  const run = await tx.forwardRun.findUnique({ where: { sentMessageId: d.messageId }, include: { forward: true } });
  if (!run || run.forward.target !== d.recipient) return;
  await stopForward(tx, run.forward, 'bounced', { message_id: d.messageId, response: d.response.slice(0, 500) });
}
