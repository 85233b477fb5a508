/**
 * GET /threads and GET /threads/{id}: conversations as the calling key sees them. A thread is the set of the
 * account's messages sharing a thread_id; a box-restricted key (or the box filter) sees only the messages of
 * those boxes, so a thread's counts and participants are of what the caller may read.
 */
import { rows as run, sql, tbl, type Prisma, type RawBuilder } from '@boxes/db';
import type { BoxScope } from '../boxes/boxes';
import type { Services } from '../shared/context';
import { AppError, notFound } from '../shared/errors';
import { messagePage, presentMessage, retentionDaysOf } from '../messages/read';
import { labelWhere, threadLabels } from '../messages/labels';

interface ThreadRow {
  thread_id: string;
  subject: string | null;
  messages: number;
  received: number;
  sent: number;
  participants: string[] | null;
  box_ids: string[] | null;
  started_at: Date;
  last_activity_at: Date;
  last_message_id: string;
}

function presentThread(r: ThreadRow, labels: Map<string, string[]>) {
  return {
    id: r.thread_id,
    subject: r.subject,
    message_count: r.messages,
    received_count: r.received,
    sent_count: r.sent,
    participants: r.participants ?? [],
    box_ids: r.box_ids ?? [],
    started_at: r.started_at.toISOString(),
    last_activity_at: r.last_activity_at.toISOString(),
    last_message_id: r.last_message_id,
    labels: labels.get(r.thread_id) ?? [],
  };
}

function encodeCursor(at: Date, id: string): string {
  return Buffer.from(JSON.stringify([at.toISOString(), id])).toString('base64url');
}

function decodeCursor(cursor: string, route: string): { at: Date; id: string } {
  try {
    const [at, id] = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as [unknown, unknown];
    const date = new Date(String(at));
    if (Number.isNaN(date.getTime()) || typeof id !== 'string') throw new Error('bad');
    return { at: date, id };
  } catch {
    throw new AppError('invalid_cursor', `cursor must be a next_cursor returned by ${route}`, { field: 'cursor' });
  }
}

/** The boxes whose messages the caller sees: the key's restriction, narrowed by a box filter (id or address). */
async function visibleBoxes(svc: Services, accountId: string, scope: BoxScope, box: string | undefined): Promise<string[] | null> {
  if (!box) return scope;
  const b = await svc.db.box.findFirst({ where: { accountId, OR: [{ id: box }, { address: box.toLowerCase() }] }, select: { id: true } });
  if (!b || (scope && !scope.includes(b.id))) throw notFound('box', box);
  return [b.id];
}

/** The condition that a message (under this alias) is in one of the visible boxes; none without a restriction. */
const inBoxes = (alias: ReturnType<typeof tbl<'messages'>>, boxes: string[] | null): RawBuilder<unknown> =>
  boxes ? sql`AND ${alias.box_id} = ANY(${boxes}::text[])` : sql``;

/** One aggregate per thread (these threads) over the visible messages, with the participants of each. */
async function threadRows(svc: Services, q: { accountId: string; boxes: string[] | null; threadIds: string[] }): Promise<ThreadRow[]> {
  const [m, x] = [tbl('messages', 'm'), tbl('messages', 'x')];
  return run(
    svc.db,
    sql<ThreadRow>`
    WITH t AS (
      SELECT ${m.thread_id},
        (array_agg(${m.subject} ORDER BY ${m.recorded_at}, ${m.id}))[1] AS subject,
        count(*)::int AS messages,
        (count(*) FILTER (WHERE ${m.direction} = 'received'))::int AS received,
        (count(*) FILTER (WHERE ${m.direction} = 'sent'))::int AS sent,
        array_remove(array_agg(DISTINCT ${m.box_id}), NULL) AS box_ids,
        min(${m.recorded_at}) AS started_at,
        max(${m.recorded_at}) AS last_activity_at,
        (array_agg(${m.id} ORDER BY ${m.recorded_at} DESC, ${m.id} DESC))[1] AS last_message_id
      FROM ${m.$}
      WHERE ${m.account_id} = ${q.accountId} ${inBoxes(m, q.boxes)} AND ${m.thread_id} = ANY(${q.threadIds}::text[])
      GROUP BY ${m.thread_id}
    )
    SELECT t.*,
      (SELECT array_agg(DISTINCT lower(p) ORDER BY lower(p))
         FROM ${x.$}, unnest(ARRAY[${x.from_address}] || ${x.to_addresses} || ${x.cc_addresses}) AS p
        WHERE ${x.account_id} = ${q.accountId} AND ${x.thread_id} = t.thread_id AND p IS NOT NULL ${inBoxes(x, q.boxes)}) AS participants
    FROM t ORDER BY t.last_activity_at DESC, t.thread_id DESC`,
  );
}

/** Messages read per step of the walk in newestThreads. */
const WALK_STEP = 250;

/** Sort order of threads: newest activity first, then thread_id descending (the cursor's order). */
const byActivity = (a: Pick<ThreadRow, 'last_activity_at' | 'thread_id'>, b: Pick<ThreadRow, 'last_activity_at' | 'thread_id'>) =>
  b.last_activity_at.getTime() - a.last_activity_at.getTime() || (a.thread_id < b.thread_id ? 1 : a.thread_id > b.thread_id ? -1 : 0);

/**
 * The `limit` threads with the newest activity after the cursor (last_activity_at, thread_id), newest first, and
 * where the next page starts (null on the last page). Rather than group every message of the account (a page took
 * ~250 ms at 100,000 messages), it walks the visible messages newest first along (account_id, recorded_at),
 * WALK_STEP at a time, and reads the last activity of only the threads it meets (lastActivity). A thread's last
 * activity is the first of its messages the walk meets, so once the walk has gone below the last activity of the
 * limit-th thread found, no thread it has not met can sort before that one. Threads met below the cursor whose
 * last activity is above it were on earlier pages and are left out. The whole aggregate, with the participants,
 * is made for the page's threads alone: deep in a long list most threads met were on earlier pages.
 */
async function newestThreads(
  svc: Services,
  q: { accountId: string; boxes: string[] | null; after?: { at: Date; id: string }; limit: number; label?: RawBuilder<boolean> },
): Promise<{ page: ThreadRow[]; next: { at: Date; id: string } | null }> {
  const cursor = q.after ? { last_activity_at: q.after.at, thread_id: q.after.id } : null;
  // A label filter walks the messages of the threads holding a labelled (visible) message: the walk stays that
  // of every visible message, over fewer threads, so a thread's last activity is still the first message met.
  const [m, m2, f2] = [tbl('messages', 'm'), tbl('messages', 'm2'), tbl('message_flags', 'f2')];
  const labelled = q.label
    ? sql`AND EXISTS (SELECT 1 FROM ${m2.$} LEFT JOIN ${f2.$} ON ${f2.message_id} = ${m2.id}
        WHERE ${m2.account_id} = ${q.accountId} AND ${m2.thread_id} = ${m.thread_id}
          ${inBoxes(m2, q.boxes)} AND ${q.label})`
    : sql``;
  const met = new Set<string>();
  const found: Activity[] = [];
  let pos: { at: Date; id: string } | null = null;
  // One thread more than the page: whether there is a next page.
  const wanted = q.limit + 1;
  for (;;) {
    const from: RawBuilder<unknown> = pos
      ? sql`AND (${m.recorded_at}, ${m.id}) < (${pos.at}::timestamptz, ${pos.id}::text)`
      : q.after
        ? sql`AND ${m.recorded_at} <= ${q.after.at}::timestamptz`
        : sql``;
    const step: { id: string; thread_id: string; recorded_at: Date }[] = await run(
      svc.db,
      sql<{ id: string; thread_id: string; recorded_at: Date }>`
      SELECT ${m.id}, ${m.thread_id}, ${m.recorded_at} FROM ${m.$}
      WHERE ${m.account_id} = ${q.accountId} ${inBoxes(m, q.boxes)} ${from} ${labelled}
      ORDER BY ${m.recorded_at} DESC, ${m.id} DESC LIMIT ${WALK_STEP}`,
    );
    const fresh = [...new Set(step.map((r) => r.thread_id))].filter((id) => !met.has(id));
    for (const id of fresh) met.add(id);
    if (fresh.length) {
      for (const r of await lastActivity(svc, { accountId: q.accountId, boxes: q.boxes, threadIds: fresh }))
        if (!cursor || byActivity(r, cursor) > 0) found.push(r);
      found.sort(byActivity);
    }
    const lastRow = step[step.length - 1];
    if (step.length < WALK_STEP || !lastRow) break;
    pos = { at: lastRow.recorded_at, id: lastRow.id };
    const boundary = found[wanted - 1];
    if (boundary && lastRow.recorded_at.getTime() < boundary.last_activity_at.getTime()) break;
  }
  const chosen = found.slice(0, q.limit);
  const last = chosen[chosen.length - 1];
  // The next page starts where the walk placed this page's last thread, whatever changes in the page's threads
  // between the walk and their aggregate (a message arriving, a box deleted).
  const next = found.length > q.limit && last ? { at: last.last_activity_at, id: last.thread_id } : null;
  if (!chosen.length) return { page: [], next };
  const page = await threadRows(svc, { accountId: q.accountId, boxes: q.boxes, threadIds: chosen.map((r) => r.thread_id) });
  return { page: page.sort(byActivity), next };
}

type Activity = Pick<ThreadRow, 'thread_id' | 'last_activity_at'>;

/**
 * The last activity of each of these threads over the visible messages: per thread, the newest entry of the index
 * on (account_id, thread_id, recorded_at) that is visible (the first one without a box filter). Threads with no
 * visible message are left out.
 */
async function lastActivity(svc: Services, q: { accountId: string; boxes: string[] | null; threadIds: string[] }): Promise<Activity[]> {
  const m = tbl('messages', 'm');
  return run(
    svc.db,
    sql<Activity>`
    SELECT t.thread_id, l.last_activity_at FROM unnest(${q.threadIds}::text[]) AS t(thread_id)
    CROSS JOIN LATERAL (
      SELECT ${m.recorded_at} AS last_activity_at FROM ${m.$}
      WHERE ${m.account_id} = ${q.accountId} AND ${m.thread_id} = t.thread_id ${inBoxes(m, q.boxes)}
      ORDER BY ${m.recorded_at} DESC LIMIT 1
    ) AS l`,
  );
}

export async function listThreads(
  svc: Services,
  input: { accountId: string; scope: BoxScope; box?: string | undefined; limit: number; cursor?: string | undefined; label?: string | undefined },
) {
  const label = input.label === undefined ? undefined : labelWhere(input.label, 'm2', 'f2');
  const boxes = await visibleBoxes(svc, input.accountId, input.scope, input.box);
  const after = input.cursor ? decodeCursor(input.cursor, 'GET /threads') : undefined;
  const { page, next } = await newestThreads(svc, {
    accountId: input.accountId,
    boxes,
    limit: input.limit,
    ...(after ? { after } : {}),
    ...(label ? { label } : {}),
  });
  const labels = await threadLabels(svc, { accountId: input.accountId, boxes, threadIds: page.map((r) => r.thread_id) });
  return {
    threads: page.map((r) => presentThread(r, labels)),
    next_cursor: next ? encodeCursor(next.at, next.id) : null,
  };
}

const THREAD_ID = /^thr_[0-9a-z]{20}$/;

/** One thread with its messages, oldest first (paged with cursor for a long conversation). */
export async function getThread(
  svc: Services,
  input: { accountId: string; scope: BoxScope; id: string; include?: 'body' | undefined; limit: number; cursor?: string | undefined },
) {
  if (!THREAD_ID.test(input.id)) throw notFound('thread', input.id.slice(0, 40));
  const [row] = await threadRows(svc, { accountId: input.accountId, boxes: input.scope, threadIds: [input.id] });
  if (!row) throw notFound('thread', input.id);
  const after = input.cursor ? decodeCursor(input.cursor, 'GET /threads/{id}') : undefined;
  const where: Prisma.MessageWhereInput = {
    accountId: input.accountId,
    threadId: input.id,
    ...(input.scope ? { boxId: { in: input.scope } } : {}),
    ...(after ? { OR: [{ recordedAt: { gt: after.at } }, { recordedAt: after.at, id: { gt: after.id } }] } : {}),
  };
  const [{ page, more, bodies }, days, labels] = await Promise.all([
    messagePage(svc, { where, orderBy: [{ recordedAt: 'asc' }, { id: 'asc' }], limit: input.limit }, input.include === 'body' ? { withContent: false } : null),
    retentionDaysOf(svc, input.accountId),
    threadLabels(svc, { accountId: input.accountId, boxes: input.scope, threadIds: [input.id] }),
  ]);
  const last = page[page.length - 1];
  return {
    ...presentThread(row, labels),
    messages: page.map((m) => ({ ...presentMessage(m, days), ...(bodies ? { body: bodies.get(m.id) ?? null } : {}) })),
    next_cursor: more && last ? encodeCursor(last.recordedAt, last.id) : null,
  };
}
