/**
 * Pausing an account or a box: while paused, every send is refused (single sends, replies, auto-forwards,
 * bulk jobs, SMTP submission) with 403 account_paused or box_paused; scheduled messages that fall due wait and go
 * when it is resumed; bulk batches wait between batches. Inbound mail is not touched: it is received, stored and
 * pushed as usual (a pause stops what the agent sends, not what it is told).
 *
 * Who: the owner on the owner pages (paused_by owner: only the owner resumes it, so the agent holding even the
 * owner key cannot undo it), or an admin key (paused_by key: any admin key that may see it, or the owner,
 * resumes it). An owner pausing what a key paused takes it over; a key pausing what the owner paused changes
 * nothing.
 *
 * guardSend is the check at the start of every send path: the pauses first (403), then the caps (429, caps.ts).
 */
import type { ApiKey, Box } from '@boxes/db';
import { k, rows } from '@boxes/db';
import type { BulkStatus, DeliveryStatus, MessageStatus } from '@boxes/schemas';
import type { BoxScope } from '../boxes/boxes';
import { lockAccountCredit } from '../credit/ledger';
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';
import { AppError, notFound } from '../shared/errors';
import { newRecipientsOf } from '../reviews/reviews';
import { capsOf, takeCaps, type CapCharge, type CapTaken } from './caps';

export type PauseActor = { kind: 'owner' } | { kind: 'key'; keyId: string };

const OWNER = 'owner';

export function pauseView(row: { pausedAt: Date | null; pausedBy: string | null }) {
  const paused = row.pausedAt !== null;
  return {
    paused,
    paused_at: row.pausedAt?.toISOString() ?? null,
    paused_by: paused ? (row.pausedBy === OWNER ? ('owner' as const) : ('key' as const)) : null,
    paused_by_key_id: paused && row.pausedBy !== OWNER ? row.pausedBy : null,
  };
}

const actorValue = (a: PauseActor) => (a.kind === 'owner' ? OWNER : a.keyId);

function mayResume(pausedBy: string | null, actor: PauseActor, what: string): void {
  if (pausedBy === OWNER && actor.kind !== 'owner') {
    throw new AppError(
      'paused_by_owner',
      `The ${what} was paused by its owner on the owner pages; only the owner can resume it (sign in at /owner). No API key can.`,
    );
  }
}

/** Pauses or resumes the account. Idempotent: pausing a paused account (or resuming an active one) changes nothing. */
export async function setAccountPause(svc: Services, input: { accountId: string; actor: PauseActor; paused: boolean }) {
  const { accountId, actor } = input;
  const out = await svc.db.$transaction(async (tx) => {
    await lockAccountCredit(tx, accountId);
    const a = await tx.account.findUniqueOrThrow({ where: { id: accountId }, select: { pausedAt: true, pausedBy: true } });
    const byKeyId = actor.kind === 'key' ? actor.keyId : null;
    if (input.paused) {
      // A pause stands; the owner taking over a key's pause makes it the owner's.
      if (a.pausedAt && (a.pausedBy === OWNER || actor.kind !== 'owner')) return { state: a, changed: false };
      const state = await tx.account.update({
        where: { id: accountId },
        data: { pausedAt: a.pausedAt ?? svc.clock.now(), pausedBy: actorValue(actor) },
        select: { pausedAt: true, pausedBy: true },
      });
      await appendEvent({ db: tx, accountId, type: 'account.paused', data: { paused_by: actor.kind, by_key_id: byKeyId } });
      return { state, changed: true };
    }
    if (!a.pausedAt) return { state: a, changed: false };
    mayResume(a.pausedBy, actor, 'account');
    const state = await tx.account.update({ where: { id: accountId }, data: { pausedAt: null, pausedBy: null }, select: { pausedAt: true, pausedBy: true } });
    return { state, changed: true };
  });
  if (!input.paused && out.changed) {
    const released = await releaseHeld(svc, { accountId });
    await appendEvent({
      db: svc.db,
      accountId,
      type: 'account.resumed',
      data: { resumed_by: actor.kind, by_key_id: actor.kind === 'key' ? actor.keyId : null, released_scheduled: released },
    });
  }
  return pauseView(out.state);
}

/** Pauses or resumes one box (a box-restricted key only its own boxes). Idempotent as setAccountPause. */
export async function setBoxPause(svc: Services, input: { accountId: string; scope: BoxScope; boxId: string; actor: PauseActor; paused: boolean }) {
  const { accountId, actor } = input;
  const out = await svc.db.$transaction(async (tx) => {
    await lockAccountCredit(tx, accountId);
    const b = await tx.box.findFirst({ where: { id: input.boxId, accountId } });
    if (!b || (input.scope && !input.scope.includes(b.id))) throw notFound('box', input.boxId);
    const byKeyId = actor.kind === 'key' ? actor.keyId : null;
    if (input.paused) {
      if (b.pausedAt && (b.pausedBy === OWNER || actor.kind !== 'owner')) return { box: b, changed: false };
      const box = await tx.box.update({ where: { id: b.id }, data: { pausedAt: b.pausedAt ?? svc.clock.now(), pausedBy: actorValue(actor) } });
      await appendEvent({
        db: tx,
        accountId,
        type: 'box.paused',
        boxId: b.id,
        data: { box_id: b.id, address: b.address, paused_by: actor.kind, by_key_id: byKeyId },
      });
      return { box, changed: true };
    }
    if (!b.pausedAt) return { box: b, changed: false };
    mayResume(b.pausedBy, actor, `box ${b.address}`);
    const box = await tx.box.update({ where: { id: b.id }, data: { pausedAt: null, pausedBy: null } });
    return { box, changed: true };
  });
  if (!input.paused && out.changed) {
    const released = await releaseHeld(svc, { accountId, boxId: out.box.id });
    await appendEvent({
      db: svc.db,
      accountId,
      type: 'box.resumed',
      boxId: out.box.id,
      data: {
        box_id: out.box.id,
        address: out.box.address,
        resumed_by: actor.kind,
        by_key_id: actor.kind === 'key' ? actor.keyId : null,
        released_scheduled: released,
      },
    });
  }
  return boxPauseView(out.box);
}

export function boxPauseView(b: Pick<Box, 'id' | 'address' | 'pausedAt' | 'pausedBy'>) {
  return { box_id: b.id, address: b.address, ...pauseView(b) };
}

/** GET /account/pause: the account's pause and each visible box's. */
export async function pauseOverview(svc: Services, input: { accountId: string; scope: BoxScope }) {
  const [account, boxes] = await Promise.all([
    svc.db.account.findUniqueOrThrow({ where: { id: input.accountId }, select: { pausedAt: true, pausedBy: true } }),
    svc.db.box.findMany({
      where: { accountId: input.accountId, ...(input.scope ? { id: { in: input.scope } } : {}) },
      orderBy: { createdAt: 'asc' },
      select: { id: true, address: true, pausedAt: true, pausedBy: true },
    }),
  ]);
  return { account: pauseView(account), boxes: boxes.map(boxPauseView) };
}

/**
 * Scheduled messages that fell due while paused (their delivery job found them paused and left them scheduled):
 * their jobs are run again now, unless the account or their box is still paused. Returns how many messages.
 */
async function releaseHeld(svc: Services, input: { accountId: string; boxId?: string }): Promise<number> {
  const paused = (await svc.db.box.findMany({ where: { accountId: input.accountId, pausedAt: { not: null } }, select: { id: true } })).map((b) => b.id);
  const due = await svc.db.delivery.findMany({
    where: {
      accountId: input.accountId,
      status: 'scheduled' satisfies DeliveryStatus,
      message: {
        status: 'scheduled' satisfies MessageStatus,
        // Real time, as the delayed jobs and the sweeper that release scheduled sends use.
        sendAt: { lte: new Date() },
        account: { pausedAt: null },
        ...(input.boxId ? { boxId: input.boxId } : {}),
        OR: [{ boxId: null }, { boxId: { notIn: paused } }],
      },
    },
    select: { id: true, messageId: true },
  });
  await wakeBulkJobs(svc, input.accountId);
  if (!due.length) return 0;
  // A finished job keeps its id for a while (enqueueing again would do nothing): remove it first.
  await Promise.all(due.map((d) => svc.jobs.deliveries.remove(d.id).catch(() => undefined)));
  await svc.jobs.enqueueDeliveries(due.map((d) => d.id)).catch(() => undefined);
  return new Set(due.map((d) => d.messageId)).size;
}

/**
 * Bulk jobs of the account waiting out a pause (their next batch handed back with a delay): the batch's queue job
 * is run now instead of at its next look (BULK_PAUSE_POLL_MS); a job still held waits again.
 */
async function wakeBulkJobs(svc: Services, accountId: string): Promise<void> {
  const jobs = await svc.db.bulkJob.findMany({
    where: { accountId, status: { in: ['queued', 'sending', 'cooling_off'] satisfies BulkStatus[] } },
    select: { id: true, batchesDone: true, nextBatchAt: true },
  });
  // Real time, as bulk/run.ts schedules batches.
  const now = Date.now();
  for (const j of jobs) {
    // A job still in its cool-off waits for it; only a batch that is due was held by the pause.
    if (j.nextBatchAt && j.nextBatchAt.getTime() > now) continue;
    const queued = await svc.jobs.bulk.getJob(`${j.id}-${j.batchesDone}`).catch(() => undefined);
    if (queued && (await queued.isDelayed().catch(() => false))) await queued.promote().catch(() => undefined);
  }
}

/** Whether a scheduled message due now must wait: its account or its box is paused (messages/schedule.ts). */
export function heldByPause(row: { account_paused_at: Date | null; box_paused_at: Date | null }): boolean {
  return row.account_paused_at !== null || row.box_paused_at !== null;
}

function pausedError(what: 'account' | 'box', row: { paused_at: Date; paused_by: string | null; address?: string }): AppError {
  const since = row.paused_at.toISOString();
  const how =
    row.paused_by === OWNER
      ? 'by its owner on the owner pages; only the owner can resume it'
      : `by the admin key ${row.paused_by}; an admin key resumes it with POST ${what === 'account' ? '/account/resume' : '/boxes/{id}/resume'} (or the owner on the owner pages)`;
  const subject = what === 'account' ? 'This account' : `The box ${row.address}`;
  const message = `${subject} is paused (since ${since}) ${how}. Nothing was sent.`;
  const details = { paused_at: since, paused_by: row.paused_by === OWNER ? 'owner' : 'key' };
  return what === 'account' ? new AppError('account_paused', message, details) : new AppError('box_paused', message, details);
}

/** One send (or a bulk job's messages from one box) as the guard counts it. */
export interface GuardedSend {
  boxId: string;
  messages: number;
  recipients: string[];
}

/** What the guard reads: the account's pause, and each sending box's pause and caps (one row per box). */
export interface GuardRow {
  account_paused_at: Date | null;
  account_paused_by: string | null;
  box_id: string | null;
  address: string | null;
  paused_at: Date | null;
  paused_by: string | null;
  send_caps: unknown;
}

/**
 * The start of every send path: 403 account_paused or box_paused when the account or a sending box is paused,
 * then the caps of each box and of the key (429 cap_exceeded). Returns what was taken, to give back when the
 * send is refused after all. key: the API key that sends (none for the service's own sends, auto-forwards).
 * read: the guard's rows when the caller read them already, in its read before the send (messages/plan.ts
 * readSendState reads them for a single send), so the guard costs no statement of its own.
 */
export async function guardSend(
  svc: Services,
  input: { accountId: string; key?: Pick<ApiKey, 'id' | 'sendCaps'> | undefined; sends: GuardedSend[]; read?: GuardRow[] },
): Promise<CapTaken> {
  const boxIds = [...new Set(input.sends.map((s) => s.boxId))];
  const found: GuardRow[] =
    input.read ??
    (await rows(
      svc.db,
      k
        .selectFrom('accounts as a')
        .leftJoin('boxes as b', (j) => j.onRef('b.account_id', '=', 'a.id').on('b.id', 'in', boxIds.length ? boxIds : ['']))
        .select([
          'a.paused_at as account_paused_at',
          'a.paused_by as account_paused_by',
          'b.id as box_id',
          'b.address',
          'b.paused_at',
          'b.paused_by',
          'b.send_caps',
        ])
        .where('a.id', '=', input.accountId),
    ));
  const first = found[0];
  if (first?.account_paused_at) throw pausedError('account', { paused_at: first.account_paused_at, paused_by: first.account_paused_by });
  for (const b of found) {
    if (b.paused_at) throw pausedError('box', { paused_at: b.paused_at, paused_by: b.paused_by, address: b.address ?? '' });
  }
  const charges: CapCharge[] = [];
  const keyCaps = capsOf(input.key?.sendCaps);
  // The recipients cap counts new recipients only: addresses the sending box never wrote to nor heard from (the
  // rule of owner review's new_recipients). One query per box, and only when a recipients cap is set.
  const wantsNew = (caps: ReturnType<typeof capsOf>) => caps?.new_recipients_per_day != null;
  const newByBox = new Map<string, string[]>();
  const newOf = async (boxId: string): Promise<string[]> => {
    let fresh = newByBox.get(boxId);
    if (!fresh) {
      fresh = await newRecipientsOf(svc, boxId, [...new Set(input.sends.filter((s) => s.boxId === boxId).flatMap((s) => s.recipients))]);
      newByBox.set(boxId, fresh);
    }
    return fresh;
  };
  for (const b of found) {
    const caps = capsOf(b.send_caps as never);
    if (!caps || !b.box_id) continue;
    const mine = input.sends.filter((s) => s.boxId === b.box_id);
    charges.push({
      owner: { scope: 'box', id: b.box_id },
      caps,
      accountId: input.accountId,
      boxId: b.box_id,
      messages: mine.reduce((n, s) => n + s.messages, 0),
      recipients: wantsNew(caps) ? await newOf(b.box_id) : [],
    });
  }
  if (input.key && keyCaps) {
    const fresh: string[] = [];
    if (wantsNew(keyCaps)) for (const boxId of new Set(input.sends.map((s) => s.boxId))) fresh.push(...(await newOf(boxId)));
    charges.push({
      owner: { scope: 'key', id: input.key.id },
      caps: keyCaps,
      accountId: input.accountId,
      boxId: null,
      messages: input.sends.reduce((n, s) => n + s.messages, 0),
      recipients: fresh,
    });
  }
  return takeCaps(svc, charges);
}

/** How often a bulk job held by a pause looks again. */
export const BULK_PAUSE_POLL_MS = 15_000;

/** Whether a bulk job's next batch must wait: its account or one of its sending boxes is paused. */
export async function bulkHeldByPause(svc: Pick<Services, 'db'>, jobId: string): Promise<boolean> {
  const job = await svc.db.bulkJob.findUnique({ where: { id: jobId }, select: { accountId: true, boxIds: true, account: { select: { pausedAt: true } } } });
  if (!job) return false;
  if (job.account.pausedAt) return true;
  return (await svc.db.box.count({ where: { id: { in: job.boxIds }, pausedAt: { not: null } } })) > 0;
}
