/**
 * Labels: the IMAP flags and keywords of a message (message_flags), as the API shows and changes them. One
 * store, two faces: a label set over the API is a keyword a mail client sees in FETCH FLAGS, and a keyword a
 * client STOREs is a label here.
 *
 * System labels map to IMAP flags:
 *   unread    the message lacks \Seen (adding read sets \Seen, adding unread clears it; removing does the opposite)
 *   flagged   \Flagged
 *   answered  \Answered
 *   draft     \Draft
 *   spam      the $Junk keyword (a per-message mark every client can see, not a move to the Junk folder, which is
 *             per box and per client; adding spam also drops $NotJunk)
 *   sent      the message was sent from this account (read-only)
 * Any other label is a keyword: what an IMAP keyword atom allows (printable ASCII without spaces, ( ) { % * " \ ]),
 * not starting with \, at most MAX_LABEL_LENGTH characters, compared case-insensitively (the first spelling is
 * kept). Keywords spelled like a system label (or $Junk, shown as spam) are not shown as labels of their own.
 *
 * Every change moves the modseq of each folder holding the message (CONDSTORE clients see it, open IMAP
 * sessions notice on their next look) and appends message.labels_changed, whose notification wakes idling
 * sessions at once.
 */
import { exec, k, rows, sql, tbl, type DbClient, type RawBuilder } from '@boxes/db';
import type { BoxScope } from '../boxes/boxes';
import { appendEvents } from '../events/append';
import type { Services } from '../shared/context';
import { AppError, notFound } from '../shared/errors';

/** The IMAP flag bits of message_flags.flags. */
const SEEN = 1;
const ANSWERED = 2;
const FLAGGED = 4;
const DRAFT = 8;

export const MAX_LABEL_LENGTH = 100;
/** Custom labels (keywords) one message may carry when they are set over the API. */
export const MAX_LABELS_PER_MESSAGE = 64;
/** An IMAP keyword atom (RFC 3501 flag-keyword): printable ASCII without atom-specials, not a \system flag. */
export const LABEL_PATTERN = /^[!#$&'+,\-./0-9:;<=>?@A-Z[^_`a-z|}~]{1,100}$/;

/** The system labels: shown on messages (read is only the absence of unread) and accepted in add, remove and filters. */
export const SYSTEM_LABELS = ['unread', 'read', 'flagged', 'answered', 'draft', 'spam', 'sent'] as const;
export type SystemLabel = (typeof SYSTEM_LABELS)[number];
const SYSTEM = new Set<string>(SYSTEM_LABELS);
const JUNK = '$junk';
const NOT_JUNK = '$NotJunk';
const BIT_OF: Partial<Record<SystemLabel, number>> = { flagged: FLAGGED, answered: ANSWERED, draft: DRAFT };

/** A label as given: a system label (lower-cased) or a custom one (as spelled), or a 400 invalid_label. */
export function parseLabel(raw: string, field: string): { system: SystemLabel } | { keyword: string } {
  const lower = raw.toLowerCase();
  if (SYSTEM.has(lower)) return { system: lower as SystemLabel };
  if (raw.length > MAX_LABEL_LENGTH || !LABEL_PATTERN.test(raw)) {
    throw new AppError(
      'invalid_label',
      `${field}: "${raw.slice(0, 40)}" is not a label: use 1 to ${MAX_LABEL_LENGTH} printable ASCII characters without spaces or ( ) { % * " \\ ], not starting with \\`,
      { field, label: raw.slice(0, MAX_LABEL_LENGTH + 1) },
    );
  }
  if (lower === JUNK) throw new AppError('invalid_label', `${field}: ${raw} is the spam label: use spam`, { field, label: raw });
  return { keyword: raw };
}

/** The labels of a message from its flags, keywords and direction, in a stable order: system labels, then keywords. */
export function labelsOf(flags: number, keywords: readonly string[], direction: string): string[] {
  const out: string[] = [];
  if (!(flags & SEEN)) out.push('unread');
  if (flags & FLAGGED) out.push('flagged');
  if (flags & ANSWERED) out.push('answered');
  if (flags & DRAFT) out.push('draft');
  if (keywords.some((k) => k.toLowerCase() === JUNK)) out.push('spam');
  if (direction === 'sent') out.push('sent');
  const seen = new Set<string>();
  for (const k of keywords) {
    const lower = k.toLowerCase();
    if (lower === JUNK || SYSTEM.has(lower) || seen.has(lower)) continue;
    seen.add(lower);
    out.push(k);
  }
  return out;
}

/** The flags of a message (messages under alias m) with no message_flags row: what you sent you have read. */
export const defaultFlags = (m = 'm'): RawBuilder<number> => sql<number>`CASE WHEN ${tbl('messages', m).direction} = 'sent' THEN 1 ELSE 0 END`;

/** A message's flags (messages under alias m, message_flags LEFT JOINed under f), its row's or the default. */
const flagsOf = (m = 'm', f = 'f'): RawBuilder<number> => sql<number>`COALESCE(${tbl('message_flags', f).flags}, ${defaultFlags(m)})`;

/**
 * The typed SQL condition "the message carries this label", over a messages alias and a LEFT JOINed
 * message_flags alias. Throws invalid_label for a malformed label.
 */
export function labelWhere(label: string, m = 'm', f = 'f', field = 'label'): RawBuilder<boolean> {
  const parsed = parseLabel(label, field);
  const ff = tbl('message_flags', f);
  const flags = flagsOf(m, f);
  const hasKeyword = (k: string) => sql<boolean>`EXISTS (SELECT 1 FROM unnest(${ff.keywords}) AS k(v) WHERE lower(k.v) = ${k.toLowerCase()})`;
  if ('keyword' in parsed) return hasKeyword(parsed.keyword);
  switch (parsed.system) {
    case 'unread':
      return sql<boolean>`(${flags} & ${SEEN}) = 0`;
    case 'read':
      return sql<boolean>`(${flags} & ${SEEN}) <> 0`;
    case 'spam':
      return hasKeyword(JUNK);
    case 'sent':
      return sql<boolean>`${tbl('messages', m).direction} = 'sent'`;
    default:
      return sql<boolean>`(${flags} & ${BIT_OF[parsed.system]!}) <> 0`;
  }
}

/** `= ANY(values)` for one parameter holding any number of values. */
const anyText = (values: readonly string[]) => sql<string>`ANY(${values}::text[])`;

/** What a change does to flags and keywords. */
interface LabelPlan {
  set: number;
  clear: number;
  addKeywords: string[];
  removeKeywords: string[];
}

function planLabels(add: readonly string[], remove: readonly string[]): LabelPlan {
  const plan: LabelPlan = { set: 0, clear: 0, addKeywords: [], removeKeywords: [] };
  const parse = (list: readonly string[], field: 'add' | 'remove') =>
    list.map((raw, i) => {
      const p = parseLabel(raw, `${field}.${i}`);
      if ('system' in p && p.system === 'sent') {
        throw new AppError('label_read_only', `${field}.${i}: sent says the message was sent from this account; it cannot be added or removed`, {
          field: `${field}.${i}`,
          label: raw,
        });
      }
      return p;
    });
  const apply = (p: ReturnType<typeof parseLabel>, on: boolean) => {
    if ('keyword' in p) (on ? plan.addKeywords : plan.removeKeywords).push(p.keyword);
    else if (p.system === 'spam') {
      (on ? plan.addKeywords : plan.removeKeywords).push('$Junk');
      if (on) plan.removeKeywords.push(NOT_JUNK);
    } else if (p.system === 'unread' || p.system === 'read') {
      // unread is the absence of \Seen: adding unread (or removing read) clears it.
      if ((p.system === 'read') === on) plan.set |= SEEN;
      else plan.clear |= SEEN;
    } else if (on) plan.set |= BIT_OF[p.system]!;
    else plan.clear |= BIT_OF[p.system]!;
  };
  for (const p of parse(add, 'add')) apply(p, true);
  for (const p of parse(remove, 'remove')) apply(p, false);
  const added = new Set(plan.addKeywords.map((k) => k.toLowerCase()));
  const both = plan.removeKeywords.find((k) => added.has(k.toLowerCase()) && k !== NOT_JUNK);
  if (plan.set & plan.clear || both) {
    throw new AppError('label_conflict', 'The same label (or read and unread) is both added and removed', { field: 'add' });
  }
  return plan;
}

function applyPlan(plan: LabelPlan, flags: number, keywords: readonly string[]): { flags: number; keywords: string[] } {
  const drop = new Set(plan.removeKeywords.map((k) => k.toLowerCase()));
  const out = keywords.filter((k) => !drop.has(k.toLowerCase()));
  const have = new Set(out.map((k) => k.toLowerCase()));
  for (const k of plan.addKeywords) {
    if (have.has(k.toLowerCase())) continue;
    have.add(k.toLowerCase());
    out.push(k);
  }
  return { flags: (flags | plan.set) & ~plan.clear, keywords: out };
}

/** What a label change did to one message. */
export interface LabelDiff {
  added: string[];
  removed: string[];
  labels: string[];
}

export function diffLabels(before: readonly string[], after: readonly string[]): LabelDiff {
  const b = new Set(before.map((l) => l.toLowerCase()));
  const a = new Set(after.map((l) => l.toLowerCase()));
  return { added: after.filter((l) => !b.has(l.toLowerCase())), removed: before.filter((l) => !a.has(l.toLowerCase())), labels: [...after] };
}

/** Who changed labels, for message.labels_changed. */
export type LabelActor = { via: 'api'; keyId: string } | { via: 'imap'; appPasswordId: string };

export interface LabelChange extends LabelDiff {
  messageId: string;
  threadId: string;
  boxId: string | null;
}

/**
 * Appends message.labels_changed for each change, chained onto the account's head in the caller's transaction
 * (appendEvents: one statement that also notifies; IMAP sessions and push workers wake at commit).
 */
export async function appendLabelEvents(tx: DbClient, accountId: string, changes: LabelChange[], actor: LabelActor): Promise<void> {
  await appendEvents(
    tx,
    accountId,
    changes.map((c) => ({
      type: 'message.labels_changed',
      boxId: c.boxId,
      data: {
        message_id: c.messageId,
        thread_id: c.threadId,
        box_id: c.boxId,
        added: c.added,
        removed: c.removed,
        labels: c.labels,
        via: actor.via,
        by_key_id: actor.via === 'api' ? actor.keyId : null,
        app_password_id: actor.via === 'imap' ? actor.appPasswordId : null,
      },
    })),
  );
}

interface FlagRow {
  message_id: string;
  flags: number;
  keywords: string[] | null;
  direction: string;
  box_id: string | null;
  thread_id: string;
}

/** A deadlock with a concurrent IMAP STORE on the same messages (they lock in another order): tried again. */
async function retryDeadlock<T>(fn: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      const text = String((err as { message?: unknown }).message ?? '');
      if (attempt >= 3 || !/40P01|deadlock detected/.test(text)) throw err;
    }
  }
}

/**
 * Adds and removes labels on messages of the account: one message (POST /messages/{id}/labels) or every visible
 * message of a thread (POST /threads/{id}/labels). A box-restricted key reaches only its boxes' messages (others
 * are not found). Returns each message's labels after the change.
 */
export async function changeLabels(
  svc: Pick<Services, 'db'>,
  input: {
    accountId: string;
    scope: BoxScope;
    target: { messageId: string } | { threadId: string };
    add: readonly string[];
    remove: readonly string[];
    actor: LabelActor;
  },
): Promise<{ messages: { id: string; labels: string[]; added: string[]; removed: string[] }[] }> {
  const plan = planLabels(input.add, input.remove);
  const { scope, target } = input;
  const inAccount = k.selectFrom('messages as m').select('m.id').where('m.account_id', '=', input.accountId);
  const which = 'messageId' in target ? inAccount.where('m.id', '=', target.messageId) : inAccount.where('m.thread_id', '=', target.threadId);
  const found = scope ? which.where('m.box_id', '=', anyText(scope)) : which;
  return retryDeadlock(() =>
    svc.db.$transaction(
      async (tx) => {
        const ids = await rows(tx, found);
        if (!ids.length) {
          throw 'messageId' in input.target ? notFound('message', input.target.messageId) : notFound('thread', input.target.threadId);
        }
        const messageIds = ids.map((r) => r.id);
        // A message no client has touched has no row yet: it gets the flags it shows (sent mail is \Seen).
        await exec(
          tx,
          k
            .insertInto('message_flags')
            .columns(['message_id', 'account_id', 'flags', 'keywords', 'updated_at'])
            .expression(
              k
                .selectFrom('messages as m')
                .select(['m.id', 'm.account_id', defaultFlags('m').as('flags'), sql`'{}'`.as('keywords'), sql`now()`.as('updated_at')])
                .where('m.id', '=', anyText(messageIds)),
            )
            .onConflict((oc) => oc.column('message_id').doNothing()),
        );
        const locked: FlagRow[] = await rows(
          tx,
          k
            .selectFrom('message_flags as f')
            .innerJoin('messages as m', 'm.id', 'f.message_id')
            .select(['f.message_id', 'f.flags', 'f.keywords', 'm.direction', 'm.box_id', 'm.thread_id'])
            .where('f.message_id', '=', anyText(messageIds))
            .orderBy('m.recorded_at')
            .orderBy('m.id')
            .forUpdate('f'),
        );
        const out: { id: string; labels: string[]; added: string[]; removed: string[] }[] = [];
        const changes: (LabelChange & { flags: number; keywords: string[] })[] = [];
        for (const r of locked) {
          const before = labelsOf(r.flags, r.keywords ?? [], r.direction);
          const next = applyPlan(plan, r.flags, r.keywords ?? []);
          const custom = next.keywords.filter((k) => !SYSTEM.has(k.toLowerCase()) && k.toLowerCase() !== JUNK).length;
          if (plan.addKeywords.length && custom > MAX_LABELS_PER_MESSAGE) {
            throw new AppError(
              'too_many_labels',
              `A message carries at most ${MAX_LABELS_PER_MESSAGE} labels of its own; ${r.message_id} would have ${custom}`,
              {
                message_id: r.message_id,
                limit: MAX_LABELS_PER_MESSAGE,
              },
            );
          }
          const after = labelsOf(next.flags, next.keywords, r.direction);
          const diff = diffLabels(before, after);
          out.push({ id: r.message_id, labels: after, added: diff.added, removed: diff.removed });
          const same = next.flags === r.flags && next.keywords.length === (r.keywords ?? []).length && next.keywords.every((k, i) => k === r.keywords?.[i]);
          if (!same) changes.push({ ...diff, messageId: r.message_id, threadId: r.thread_id, boxId: r.box_id, ...next });
        }
        if (!changes.length) return { messages: out };
        const payload = JSON.stringify(changes.map((c) => ({ message_id: c.messageId, flags: c.flags, keywords: c.keywords })));
        const [mf, mfs] = [tbl('message_flags', 'f'), tbl('message_flags')];
        await exec(
          tx,
          sql`
          UPDATE ${mf.$} SET ${mfs.flags} = x.flags, ${mfs.keywords} = x.keywords, ${mfs.updated_at} = now()
          FROM jsonb_to_recordset(${payload}::jsonb) AS x(message_id text, flags int, keywords text[])
          WHERE ${mf.message_id} = x.message_id`,
        );
        // Every folder holding a changed message takes the next modseq, and so do its entries (CONDSTORE).
        const changedIds = changes.map((c) => c.messageId);
        const [f, fs, e, es] = [tbl('mail_folders', 'f'), tbl('mail_folders'), tbl('mail_folder_entries', 'e'), tbl('mail_folder_entries')];
        await exec(
          tx,
          sql`
          WITH touched AS (
            UPDATE ${f.$} SET ${fs.highest_modseq} = ${f.highest_modseq} + 1
            WHERE ${f.id} IN (SELECT DISTINCT ${e.folder_id} FROM ${e.$} WHERE ${e.message_id} = ${anyText(changedIds)})
            RETURNING ${f.id}, ${f.highest_modseq}
          )
          UPDATE ${e.$} SET ${es.modseq} = t.highest_modseq FROM touched t
          WHERE ${e.folder_id} = t.id AND ${e.message_id} = ${anyText(changedIds)}`,
        );
        // Only changes a label shows are reported (a keyword hidden behind a system name changes none).
        await appendLabelEvents(
          tx,
          input.accountId,
          changes.filter((c) => c.added.length || c.removed.length),
          input.actor,
        );
        return { messages: out };
      },
      { maxWait: 10_000, timeout: 20_000 },
    ),
  );
}

/** The labels of messages (GET /messages, GET /threads/{id}), with their IMAP flag names. */
export async function messageLabels(
  svc: Pick<Services, 'db'>,
  messageIds: string[],
): Promise<Map<string, { flags: number; keywords: string[]; labels: string[] }>> {
  const out = new Map<string, { flags: number; keywords: string[]; labels: string[] }>();
  if (!messageIds.length) return out;
  const found = await rows(
    svc.db,
    k
      .selectFrom('messages as m')
      .leftJoin('message_flags as f', 'f.message_id', 'm.id')
      .select(['m.id', flagsOf('m', 'f').as('flags'), 'f.keywords', 'm.direction'])
      .where('m.id', '=', anyText(messageIds)),
  );
  for (const r of found) out.set(r.id, { flags: r.flags, keywords: r.keywords ?? [], labels: labelsOf(r.flags, r.keywords ?? [], r.direction) });
  return out;
}

/**
 * GET /labels: every system label (read aside) and every custom label in use, with the number of messages
 * carrying it among those the key sees (narrowed to one box with box).
 */
export async function listLabels(svc: Pick<Services, 'db'>, input: { accountId: string; scope: BoxScope; box?: string | undefined }) {
  let boxes = input.scope;
  if (input.box) {
    const b = await svc.db.box.findFirst({
      where: { accountId: input.accountId, OR: [{ id: input.box }, { address: input.box.toLowerCase() }] },
      select: { id: true },
    });
    if (!b || (boxes && !boxes.includes(b.id))) throw notFound('box', input.box);
    boxes = [b.id];
  }
  const [m, f] = [tbl('messages', 'm'), tbl('message_flags', 'f')];
  const inBoxes = boxes ? sql`AND ${m.box_id} = ${anyText(boxes)}` : sql``;
  const flags = flagsOf('m', 'f');
  const counted = await svc.db.box.findMany({
    where: { accountId: input.accountId, ...(boxes ? { id: { in: boxes } } : {}) },
    select: { id: true },
    orderBy: { createdAt: 'asc' },
  });
  const [counts] = await rows(
    svc.db,
    sql<{ unread: number; flagged: number; answered: number; draft: number; spam: number; sent: number }>`
    SELECT
      (count(*) FILTER (WHERE ${flags} & ${SEEN} = 0))::int AS unread,
      (count(*) FILTER (WHERE ${flags} & ${FLAGGED} <> 0))::int AS flagged,
      (count(*) FILTER (WHERE ${flags} & ${ANSWERED} <> 0))::int AS answered,
      (count(*) FILTER (WHERE ${flags} & ${DRAFT} <> 0))::int AS draft,
      (count(*) FILTER (WHERE EXISTS (SELECT 1 FROM unnest(${f.keywords}) AS k(v) WHERE lower(k.v) = ${JUNK})))::int AS spam,
      (count(*) FILTER (WHERE ${m.direction} = 'sent'))::int AS sent
    FROM ${m.$} LEFT JOIN ${f.$} ON ${f.message_id} = ${m.id}
    WHERE ${m.account_id} = ${input.accountId} ${inBoxes}`,
  );
  const custom = await rows(
    svc.db,
    sql<{ name: string; messages: number }>`
    SELECT min(k.v) AS name, count(DISTINCT ${m.id})::int AS messages
    FROM ${m.$} JOIN ${f.$} ON ${f.message_id} = ${m.id}, unnest(${f.keywords}) AS k(v)
    WHERE ${m.account_id} = ${input.accountId} ${inBoxes}
      AND lower(k.v) <> ${JUNK} AND lower(k.v) <> ALL(${[...SYSTEM]}::text[])
    GROUP BY lower(k.v) ORDER BY count(DISTINCT ${m.id}) DESC, lower(k.v)`,
  );
  const system = (['unread', 'flagged', 'answered', 'draft', 'spam', 'sent'] as const).map((name) => ({
    name,
    kind: 'system' as const,
    messages: counts?.[name] ?? 0,
  }));
  return { box_ids: counted.map((b) => b.id), labels: [...system, ...custom.map((c) => ({ name: c.name, kind: 'custom' as const, messages: c.messages }))] };
}

/**
 * The labels of threads (GET /threads, GET /threads/{id}): those of their messages the caller sees, together;
 * unread when any of them is unread.
 */
export async function threadLabels(
  svc: Pick<Services, 'db'>,
  input: { accountId: string; boxes: string[] | null; threadIds: string[] },
): Promise<Map<string, string[]>> {
  const out = new Map<string, string[]>();
  if (!input.threadIds.length) return out;
  const [m, f] = [tbl('messages', 'm'), tbl('message_flags', 'f')];
  const flags = flagsOf('m', 'f');
  const found = await rows(
    svc.db,
    sql<{ thread_id: string; seen: boolean; bits: number; sent: boolean; keywords: string[] | null }>`
    SELECT ${m.thread_id}, bool_and(${flags} & ${SEEN} <> 0) AS seen, bit_or(${flags})::int AS bits, bool_or(${m.direction} = 'sent') AS sent,
      array_remove(array_agg(DISTINCT k.v), NULL) AS keywords
    FROM ${m.$} LEFT JOIN ${f.$} ON ${f.message_id} = ${m.id} LEFT JOIN LATERAL unnest(${f.keywords}) AS k(v) ON true
    WHERE ${m.account_id} = ${input.accountId} AND ${m.thread_id} = ${anyText(input.threadIds)}
      ${input.boxes ? sql`AND ${m.box_id} = ${anyText(input.boxes)}` : sql``}
    GROUP BY ${m.thread_id}`,
  );
  for (const r of found) {
    const bits = (r.bits & ~SEEN) | (r.seen ? SEEN : 0);
    out.set(r.thread_id, labelsOf(bits, r.keywords ?? [], r.sent ? 'sent' : 'received'));
  }
  return out;
}
