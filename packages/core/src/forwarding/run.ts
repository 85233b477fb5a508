/**
 * Forwarding one received message. receive.ts calls queueForwardRuns in the transaction that stores the
 * message (only for boxes flagged as forwarding): each active forward whose match the message meets gets a
 * forward run row, enqueued after commit (and swept up by the worker if that enqueue is lost). The worker's
 * job (runForward) then sends the copy.
 *
 * How a copy is made: a new message from the box to the target, with the original attached unchanged as
 * message/rfc822 (forwarded-message.eml), sent through POST /messages/send's own path. So it is DKIM-signed
 * by the box's domain and passes SPF/DMARC as the box (an SRS-rewritten resend would break the original
 * sender's DMARC alignment), it is charged, held and settled as a sent message, bounces come back to its own
 * delivery (which stops the forward: forwards.ts), and suppression applies. The original's bytes stay intact
 * inside it, signatures and all.
 *
 * Loops: every copy carries X-Boxes-Forwarded-By: <box address>, and a message that arrives carrying that
 * header is never forwarded again (its run is recorded as skipped, reason loop). Two boxes forwarding to each
 * other, or a person's mailbox forwarding back, stop after one copy.
 */
import type { Box, Tx } from '@boxes/db';
import type { ParsedMessage } from '@boxes/mail';
import type { SendInput } from '@boxes/schemas';
import type { ForwardRunStatus, ForwardStatus } from '@boxes/schemas';
import type { z } from 'zod';
import { appendEvent } from '../events/append';
import { sendMessage, sentMessage } from '../messages/send';
import type { Services } from '../shared/context';
import { open } from '../shared/crypto';
import { AppError } from '../shared/errors';
import { newId } from '../shared/ids';

export const FORWARDED_BY_HEADER = 'X-Boxes-Forwarded-By';

function matches(f: { matchFrom: string | null; matchSubject: string | null }, parsed: Pick<ParsedMessage, 'from' | 'subject'>): boolean {
  if (f.matchFrom && !(parsed.from ?? '').toLowerCase().includes(f.matchFrom)) return false;
  if (f.matchSubject && !(parsed.subject ?? '').toLowerCase().includes(f.matchSubject)) return false;
  return true;
}

/** In the receiving transaction: one run per active, matching forward. Returns the runs to enqueue. */
export async function queueForwardRuns(
  tx: Tx,
  input: { box: Pick<Box, 'id' | 'accountId' | 'address'>; messageId: string; parsed: ParsedMessage },
): Promise<string[]> {
  const forwards = await tx.boxForward.findMany({ where: { boxId: input.box.id, status: 'active' satisfies ForwardStatus } });
  const loop = Object.keys(input.parsed.headers).some((k) => k.toLowerCase() === FORWARDED_BY_HEADER.toLowerCase());
  const pending: string[] = [];
  for (const f of forwards) {
    if (!matches(f, input.parsed)) continue;
    const id = newId('fwr');
    await tx.forwardRun.create({
      data: {
        id,
        forwardId: f.id,
        messageId: input.messageId,
        status: (loop ? 'skipped' : 'pending') satisfies ForwardRunStatus,
        reason: loop ? 'loop' : null,
      },
    });
    if (loop) {
      await appendEvent({
        db: tx,
        accountId: f.accountId,
        type: 'box.forward.skipped',
        boxId: f.boxId,
        data: {
          id: f.id,
          box_id: f.boxId,
          to: f.target,
          message_id: input.messageId,
          reason: 'loop',
          detail: `the message was already forwarded by ${input.parsed.headers[FORWARDED_BY_HEADER.toLowerCase()] ?? 'a Boxes forward'}`,
        },
      });
    } else pending.push(id);
  }
  return pending;
}

export async function enqueueForwardRuns(svc: Services, runIds: string[]): Promise<void> {
  if (!runIds.length) return;
  try {
    await svc.jobs.billing.addBulk(
      runIds.map((forwardRunId) => ({
        name: 'forward',
        data: { forwardRunId },
        opts: {
          jobId: `forward-${forwardRunId}`,
          attempts: 8,
          backoff: { type: 'exponential', delay: 2_000 },
          removeOnComplete: { age: 3600 },
          removeOnFail: { age: 7 * 86_400 },
        },
      })),
    );
  } catch {
    // Committed but not enqueued (Redis away): sweepForwardRuns finds them.
  }
}

/** Pending runs older than graceMs (their enqueue lost): enqueued again; the job id makes that harmless. */
export async function sweepForwardRuns(svc: Services, graceMs = 30_000): Promise<number> {
  const rows = await svc.db.forwardRun.findMany({
    where: { status: 'pending' satisfies ForwardRunStatus, createdAt: { lt: new Date(Date.now() - graceMs) } },
    select: { id: true },
    take: 1000,
  });
  await enqueueForwardRuns(
    svc,
    rows.map((r) => r.id),
  );
  return rows.length;
}

async function skip(
  svc: Services,
  run: { id: string; forward: { id: string; accountId: string; boxId: string; target: string } },
  messageId: string,
  reason: string,
  detail?: string,
) {
  await svc.db.$transaction(async (tx) => {
    const done = await tx.forwardRun.updateMany({
      where: { id: run.id, status: 'pending' satisfies ForwardRunStatus },
      data: { status: 'skipped' satisfies ForwardRunStatus, reason },
    });
    if (done.count !== 1) return;
    const f = run.forward;
    await appendEvent({
      db: tx,
      accountId: f.accountId,
      type: 'box.forward.skipped',
      boxId: f.boxId,
      data: { id: f.id, box_id: f.boxId, to: f.target, message_id: messageId, reason, ...(detail ? { detail } : {}) },
    });
  });
}

/**
 * Sends one forwarded copy (the worker's forward job). Idempotent: the send's idempotency key is the run's id,
 * so a repeated job replays the first send instead of sending twice.
 */
export async function runForward(svc: Services, runId: string): Promise<'sent' | 'skipped' | 'done'> {
  const run = await svc.db.forwardRun.findUnique({ where: { id: runId }, include: { forward: { include: { box: true } } } });
  if (!run || run.status !== 'pending') return 'done';
  const f = run.forward;
  if (f.status !== 'active') {
    await skip(svc, run, run.messageId, 'forward_stopped');
    return 'skipped';
  }
  const original = await svc.db.message.findUnique({ where: { id: run.messageId }, select: { rawEnc: true, fromAddress: true, subject: true } });
  if (!original?.rawEnc) {
    await skip(svc, run, run.messageId, 'message_gone', 'the message was deleted before it could be forwarded');
    return 'skipped';
  }
  const account = await svc.db.account.findUniqueOrThrow({ where: { id: f.accountId } });
  if (account.status !== 'active') {
    await skip(svc, run, run.messageId, 'account_not_active');
    return 'skipped';
  }
  const raw = open(svc.secretKey, original.rawEnc);
  const subject = original.subject ?? '';
  const input: z.infer<typeof SendInput> = {
    from: f.box.address,
    to: f.target,
    subject: `Fwd: ${subject}`.slice(0, 998),
    text: [
      `Forwarded automatically by ${f.box.address}.`,
      `From: ${original.fromAddress ?? '(unknown)'}`,
      `Subject: ${subject}`,
      '',
      'The original message is attached unchanged (forwarded-message.eml).',
    ].join('\n'),
    attachments: [{ filename: 'forwarded-message.eml', content_type: 'message/rfc822', content_b64: raw.toString('base64') }],
    headers: { [FORWARDED_BY_HEADER]: f.box.address },
    idempotency_key: `forward-${run.id}`,
  };
  let messageId: string;
  try {
    // The forward's address confirmed these copies: owner review does not hold them.
    const sent = sentMessage(await sendMessage(svc, { account, boxScope: null, bypassReview: 'auto_forward' }, input));
    messageId = sent.message_id;
    if (sent.status === 'suppressed') {
      await svc.db.forwardRun.updateMany({ where: { id: run.id, status: 'pending' satisfies ForwardRunStatus }, data: { sentMessageId: messageId } });
      await skip(svc, run, run.messageId, 'suppressed', `${f.target} is on the suppression list`);
      return 'skipped';
    }
  } catch (err) {
    // What no retry can fix: no credit, the box's domain not live, the box gone.
    if (err instanceof AppError && err.status < 500) {
      await skip(svc, run, run.messageId, err.code, err.message);
      return 'skipped';
    }
    throw err;
  }
  await svc.db.forwardRun.updateMany({
    where: { id: run.id, status: 'pending' satisfies ForwardRunStatus },
    data: { status: 'sent' satisfies ForwardRunStatus, sentMessageId: messageId },
  });
  return 'sent';
}
