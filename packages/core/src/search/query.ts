/**
 * GET /messages/search: ranked full-text search over the account's search index (search/vector.ts).
 *
 * The query is PostgreSQL's web search syntax (websearch_to_tsquery, english stems): words are all required,
 * "quoted words" must follow each other, `or` between words means either, a leading `-` excludes a word.
 * Results are ranked by ts_rank_cd (cover density, with the weights of the vector: subject, then addresses,
 * body, attachments), ties by message id, and paged by an opaque cursor (rank and id of the last result).
 * Highlights are made for the page only, by ts_headline over the decrypted subject and body text passed as
 * parameters: the text is never stored for search.
 */
import { rows as run, sql, tbl, type RawBuilder } from '@boxes/db';
import { SEARCH_MARK_START, SEARCH_MARK_STOP } from '@boxes/schemas';
import type { BoxScope } from '../boxes/boxes';
import { labelWhere } from '../messages/labels';
import { openBody } from '../messages/body';
import { parseTime, presentMessage, retentionDaysOf, WITHOUT_RAW } from '../messages/read';
import type { Services } from '../shared/context';
import { AppError, notFound } from '../shared/errors';
import { SEARCH_CONFIG, searchBodyText } from './vector';

/** The most of a body ts_headline reads for a snippet (a match further in gets a snippet without a marker). */
const HEADLINE_CHARS = 50_000;

const headlineOptions = (more: string) => `StartSel="${SEARCH_MARK_START}", StopSel="${SEARCH_MARK_STOP}", ${more}`;
const SUBJECT_HEADLINE = headlineOptions('HighlightAll=true');
const BODY_HEADLINE = headlineOptions('MaxWords=30, MinWords=12, MaxFragments=2, FragmentDelimiter=" … "');

export interface SearchInput {
  accountId: string;
  scope: BoxScope;
  q: string;
  box?: string | undefined;
  direction?: 'sent' | 'received' | undefined;
  after?: string | undefined;
  before?: string | undefined;
  thread?: string | undefined;
  label?: string | undefined;
  limit: number;
  cursor?: string | undefined;
}

const encodeCursor = (rank: string, id: string) => Buffer.from(JSON.stringify([rank, id])).toString('base64url');

function decodeCursor(cursor: string): { rank: string; id: string } {
  try {
    const [rank, id] = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as [unknown, unknown];
    if (typeof rank !== 'string' || !/^-?\d+(\.\d+)?(e[-+]?\d+)?$/i.test(rank) || typeof id !== 'string' || id.length > 40) throw new Error('bad');
    return { rank, id };
  } catch {
    throw new AppError('invalid_cursor', 'cursor must be a next_cursor returned by GET /messages/search', { field: 'cursor' });
  }
}

/**
 * The filters of a search as SQL conditions on message_search s, which carries the message columns they need
 * (box-restricted keys: only their boxes); the cursor as a condition on the ranked rows r.
 */
async function filtersOf(
  svc: Services,
  input: SearchInput,
): Promise<{ where: RawBuilder<unknown>[]; join: RawBuilder<unknown>; after: RawBuilder<unknown> | null }> {
  const where: RawBuilder<unknown>[] = [];
  const [s, f] = [tbl('message_search', 's'), tbl('message_flags', 'f')];
  if (input.box) {
    const b = await svc.db.box.findFirst({
      where: { accountId: input.accountId, OR: [{ id: input.box }, { address: input.box.toLowerCase() }] },
      select: { id: true },
    });
    if (!b || (input.scope && !input.scope.includes(b.id))) throw notFound('box', input.box);
    where.push(sql`${s.box_id} = ${b.id}`);
  } else if (input.scope) {
    where.push(sql`${s.box_id} = ANY(${input.scope}::text[])`);
  }
  if (input.direction) where.push(sql`${s.direction} = ${input.direction}`);
  const after = parseTime(input.after, 'after');
  const before = parseTime(input.before, 'before');
  if (after) where.push(sql`${s.recorded_at} >= ${after}`);
  if (before) where.push(sql`${s.recorded_at} < ${before}`);
  if (input.thread) where.push(sql`${s.thread_id} = ${input.thread}`);
  // Labels as GET /messages reads them (messages/labels.ts): flag bits and keywords of message_flags, LEFT JOINed
  // to the search rows. labelWhere reads the message's direction from its messages alias; message_search carries
  // the same column, so the condition reads it from s without touching messages (a common word matches thousands).
  const join = input.label ? sql`LEFT JOIN ${f.$} ON ${f.message_id} = ${s.message_id}` : sql``;
  if (input.label) where.push(labelWhere(input.label, 's', 'f'));
  const c = input.cursor ? decodeCursor(input.cursor) : null;
  return { where, join, after: c ? sql`(r.rank, r.message_id) < (${c.rank}::real, ${c.id})` : null };
}

export async function searchMessages(svc: Services, input: SearchInput) {
  const { where, join, after } = await filtersOf(svc, input);
  const conditions = where.length ? sql`AND ${sql.join(where, sql` AND `)}` : sql``;
  const s = tbl('message_search', 's');
  // message_search alone until the page is known; OFFSET 0 keeps the ranked rows (id, rank) apart, so the sort
  // does not carry the vectors. The page's messages are read afterwards, by id.
  // s.tsv: a tsvector, which the generated types leave out (the schema declares it Unsupported).
  const hits = await run(
    svc.db,
    sql<{ id: string; rank: string; rank_value: number }>`
    WITH q AS (SELECT websearch_to_tsquery(${SEARCH_CONFIG}::regconfig, ${input.q}) AS q)
    SELECT r.message_id AS id, r.rank::text AS rank, r.rank::float8 AS rank_value
    FROM (
      SELECT ${s.message_id}, ts_rank_cd(s.tsv, q.q) AS rank
      FROM ${s.$} ${join} CROSS JOIN q
      WHERE ${s.account_id} = ${input.accountId} AND s.tsv @@ q.q ${conditions}
      OFFSET 0
    ) r
    ${after ? sql`WHERE ${after}` : sql``}
    ORDER BY r.rank DESC, r.message_id DESC
    LIMIT ${input.limit + 1}`,
  );
  const page = hits.slice(0, input.limit);
  if (!page.length) return { results: [], next_cursor: null };
  const ids = page.map((h) => h.id);
  const [rows, days] = await Promise.all([svc.db.message.findMany({ where: { id: { in: ids } }, omit: WITHOUT_RAW }), retentionDaysOf(svc, input.accountId)]);
  const byId = new Map(rows.map((m) => [m.id, m]));
  const messages = page.flatMap((h) => {
    const m = byId.get(h.id);
    return m ? [{ m, rank: h.rank_value }] : [];
  });
  // Highlights for this page only, from the decrypted bodies (the index keeps no text).
  const subjects = messages.map(({ m }) => m.subject ?? '');
  const bodies = messages.map(({ m }) => (m.bodyEnc ? searchBodyText(openBody(svc.secretKey, m.bodyEnc)).slice(0, HEADLINE_CHARS) : null));
  const headlines = await run(
    svc.db,
    sql<{ subject: string; body: string | null }>`
    SELECT ts_headline(${SEARCH_CONFIG}::regconfig, x.subject, q.q, ${SUBJECT_HEADLINE}) AS subject,
      CASE WHEN x.body IS NULL THEN NULL ELSE ts_headline(${SEARCH_CONFIG}::regconfig, x.body, q.q, ${BODY_HEADLINE}) END AS body
    FROM unnest(${subjects}::text[], ${bodies}::text[]) WITH ORDINALITY AS x(subject, body, i),
      websearch_to_tsquery(${SEARCH_CONFIG}::regconfig, ${input.q}) AS q(q)
    ORDER BY x.i`,
  );
  const last = page[page.length - 1]!;
  return {
    results: messages.map(({ m, rank }, i) => ({
      message: presentMessage(m, days),
      rank,
      highlights: { subject: m.subject === null ? null : (headlines[i]?.subject ?? null), body: headlines[i]?.body ?? null },
    })),
    next_cursor: hits.length > input.limit ? encodeCursor(last.rank, last.id) : null,
  };
}

/**
 * IMAP SEARCH TEXT/BODY: of these messages, the ones whose vector has every word of value (parsed and stemmed as
 * the index parses text) as the start of one of its words ("invoi" finds "invoice"), and the ones that have no
 * vector (not indexed: they must be read). null when value has no word the index can look for (punctuation,
 * stop words only): then every message is read.
 */
export async function searchCandidates(svc: Pick<Services, 'db'>, messageIds: string[], value: string): Promise<Set<string> | null> {
  if (!messageIds.length) return null;
  const [words] = await run(svc.db, sql<{ lexemes: string[] }>`SELECT tsvector_to_array(to_tsvector(${SEARCH_CONFIG}::regconfig, ${value})) AS lexemes`);
  if (!words?.lexemes.length) return null;
  // Each lexeme quoted as tsquery input wants it (a quote doubled, a backslash escaped), as a prefix.
  const query = words.lexemes.map((l) => `'${l.replace(/\\/g, '\\\\').replace(/'/g, "''")}':*`).join(' & ');
  const s = tbl('message_search', 's');
  const rows = await run(
    svc.db,
    sql<{ id: string }>`
    SELECT m.id FROM unnest(${messageIds}::text[]) AS m(id)
    LEFT JOIN ${s.$} ON ${s.message_id} = m.id
    WHERE ${s.message_id} IS NULL OR s.tsv @@ ${query}::tsquery`,
  );
  return new Set(rows.map((r) => r.id));
}
