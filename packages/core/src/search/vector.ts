/**
 * The search index of messages (table message_search): one tsvector per message, made by the SQL function
 * boxes_search_vector (migration 20261126163100_message_search) from the subject (weight A), the addresses
 * (B), the body text (C) and the attachments' text (D).
 *
 * Privacy: bodies are sealed at rest (AES-256-GCM), an index cannot be. Only the vector is kept, in a table of
 * its own: lexemes (english stems, stop words dropped), their positions and weights, never the text. Whoever
 * reads the database learns which words each message contains, how often, in which part (subject, addresses,
 * body, attachments) and at which positions, so the order of its words (not punctuation, casing, stop words or
 * word endings); enough to tell what a message is about, not to restore it as written. Positions are kept
 * because phrase queries ("quoted words") and ts_rank_cd need them. The vector goes with the body (DELETE
 * /messages/{id}, the retention window: dropSearchVectors), and an account can keep none at all
 * (accounts.search_indexing, PUT /account/search-indexing: off drops its vectors). Highlights are made at query
 * time from the decrypted bodies of one page of results (search/query.ts).
 *
 * Storage, measured by pnpm bench:search (messages of 20 to 200 words, one in ten with attachment text): about
 * 3.0 kB a message (the row with its lz4-compressed vector ~2.2 kB, the GIN index ~0.5 kB), beside ~1.6 kB for
 * its sealed body: the index is about twice the size of the bodies it covers.
 *
 * Every path that stores a message writes its vector in the statement that stores it (the text is passed as a
 * parameter, never stored): received mail (messages/receive.ts), sends (messages/send.ts), bulk batches
 * (bulk/run.ts). indexMessageText re-indexes one message (attachment text extracted later by a worker job);
 * backfillSearchIndex indexes messages stored before the index existed.
 */
import { exec, k, rows, sql, tbl, type DbClient } from '@boxes/db';
import { open } from '../shared/crypto';
import type { Services } from '../shared/context';
import { openBody, type StoredBody } from '../messages/body';

/** The text search configuration of the index and of every query (stems, stop words). */
export const SEARCH_CONFIG = 'english';

/** At most this much of a body (and of the attachments' text) is indexed; the SQL function cuts there too. */
export const MAX_INDEXED_CHARS = 100_000;

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: ' ' };

/** The words of an HTML body: scripts and styles dropped, tags turned into spaces, common entities decoded. */
export function htmlText(html: string): string {
  return html
    .replace(/<(script|style|head)\b[\s\S]*?<\/\1\s*>/gi, ' ')
    .replace(/<!--[\s\S]*?-->/g, ' ')
    .replace(/<[^>]*>/g, ' ')
    .replace(/&(#x[0-9a-f]+|#\d+|[a-z]+);/gi, (all, e: string) => {
      if (e[0] === '#') {
        const n = e[1] === 'x' || e[1] === 'X' ? Number.parseInt(e.slice(2), 16) : Number.parseInt(e.slice(1), 10);
        return n > 0 && n < 0x110000 ? String.fromCodePoint(n) : ' ';
      }
      return ENTITIES[e.toLowerCase()] ?? all;
    });
}

/** The body text a message is indexed (and highlighted) by: its text part, else the words of its html. */
export function searchBodyText(body: Pick<StoredBody, 'text' | 'html'>): string {
  const text = body.text?.trim() ? body.text : body.html ? htmlText(body.html) : '';
  return text.length > MAX_INDEXED_CHARS ? text.slice(0, MAX_INDEXED_CHARS) : text;
}

/** Attachment texts as one indexed string (cut at MAX_INDEXED_CHARS). */
export function attachmentText(texts: readonly string[] | undefined): string | null {
  if (!texts?.length) return null;
  const all = texts.join('\n');
  return all.length > MAX_INDEXED_CHARS ? all.slice(0, MAX_INDEXED_CHARS) : all;
}

export async function writeSearchVectors(db: DbClient, docs: { id: string; body: string; attachments: string | null }[]): Promise<number> {
  if (!docs.length) return 0;
  const [set, m, a] = [tbl('message_search'), tbl('messages', 'm'), tbl('accounts', 'a')];
  // set.tsv / EXCLUDED.tsv: a tsvector, which the generated types leave out (the schema declares it Unsupported).
  return exec(
    db,
    sql`
    INSERT INTO ${set.$} (${sql.join([set.message_id, set.account_id, set.box_id, set.direction, set.recorded_at, set.thread_id])}, tsv)
    SELECT ${sql.join([m.id, m.account_id, m.box_id, m.direction, m.recorded_at, m.thread_id])},
      boxes_search_vector(${m.subject}, array_to_string(array_prepend(${m.from_address}, ${m.to_addresses} || ${m.cc_addresses} || ${m.bcc_addresses}), ' '), t.body, t.att)
    FROM unnest(${docs.map((d) => d.id)}::text[], ${docs.map((d) => d.body)}::text[], ${docs.map((d) => d.attachments)}::text[]) AS t(id, body, att)
    JOIN ${m.$} ON ${m.id} = t.id
    WHERE ${m.body_enc} IS NOT NULL AND EXISTS (SELECT 1 FROM ${a.$} WHERE ${a.id} = ${m.account_id} AND ${a.search_indexing})
    FOR SHARE OF m
    ON CONFLICT (${set.message_id}) DO UPDATE SET tsv = EXCLUDED.tsv, ${set.account_id} = EXCLUDED.account_id, ${set.indexed_at} = now()`,
  );
}

/**
 * What the vectors of stored messages are made of, read and decrypted: the body text and the text of every
 * attachment whose extraction is ready (in body order). Messages whose body was reclaimed have none.
 */
export async function searchDocs(
  svc: Pick<Services, 'secretKey'>,
  db: DbClient,
  messages: readonly { id: string; bodyEnc: string | null }[],
): Promise<{ id: string; body: string; attachments: string | null }[]> {
  const live = messages.filter((m): m is { id: string; bodyEnc: string } => m.bodyEnc !== null);
  if (!live.length) return [];
  const texts = await rows(
    db,
    k
      .selectFrom('message_attachments')
      .select(['message_id', 'text_enc'])
      .where(
        'message_id',
        'in',
        live.map((m) => m.id),
      )
      .where('text_enc', 'is not', null)
      .orderBy('message_id')
      .orderBy('idx'),
  );
  const byMessage = new Map<string, string[]>();
  for (const t of texts) byMessage.set(t.message_id, [...(byMessage.get(t.message_id) ?? []), open(svc.secretKey, t.text_enc!).toString('utf8')]);
  return live.map((m) => ({ id: m.id, body: searchBodyText(openBody(svc.secretKey, m.bodyEnc)), attachments: attachmentText(byMessage.get(m.id)) }));
}

/**
 * (Re)indexes one stored message from its body and its attachments' extracted text (attachmentTexts, when given,
 * instead of those stored). False when it has no body or its account keeps no index.
 */
export async function indexMessageText(svc: Services, messageId: string, extra: { attachmentTexts?: readonly string[] } = {}): Promise<boolean> {
  const m = await svc.db.message.findUnique({ where: { id: messageId }, select: { id: true, bodyEnc: true } });
  if (!m?.bodyEnc) return false;
  const [doc] = await searchDocs(svc, svc.db, [m]);
  if (!doc) return false;
  if (extra.attachmentTexts) doc.attachments = attachmentText(extra.attachmentTexts);
  return (await writeSearchVectors(svc.db, [doc])) > 0;
}

/** Drops the vectors of messages whose body goes (DELETE /messages/{id}, the retention window). */
export async function dropSearchVectors(db: DbClient, messageIds: string[]): Promise<void> {
  if (messageIds.length) await exec(db, k.deleteFrom('message_search').where('message_id', 'in', messageIds));
}

/**
 * Indexes stored messages that have no vector (stored before search existed, or while indexing was off), newest
 * first, up to limit. Returns how many it indexed (0: none left).
 */
export async function backfillSearchIndex(svc: Services, limit = 500): Promise<number> {
  const [m, a, s] = [tbl('messages', 'm'), tbl('accounts', 'a'), tbl('message_search', 's')];
  const found = await rows(
    svc.db,
    sql<{ id: string; body_enc: string }>`
    SELECT ${m.id}, ${m.body_enc} FROM ${m.$} JOIN ${a.$} ON ${a.id} = ${m.account_id} AND ${a.search_indexing}
    WHERE ${m.body_enc} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM ${s.$} WHERE ${s.message_id} = ${m.id})
    ORDER BY ${m.recorded_at} DESC LIMIT ${limit}`,
  );
  await writeSearchVectors(
    svc.db,
    await searchDocs(
      svc,
      svc.db,
      found.map((r) => ({ id: r.id, bodyEnc: r.body_enc })),
    ),
  );
  return found.length;
}

/** Turns an account's search index on or off; off drops every vector it had (on: the backfill rebuilds them). */
export async function setSearchIndexing(svc: Services, accountId: string, enabled: boolean): Promise<{ search_indexing: boolean }> {
  await svc.db.$transaction(async (tx) => {
    await tx.account.update({ where: { id: accountId }, data: { searchIndexing: enabled } });
    if (!enabled) await exec(tx, k.deleteFrom('message_search').where('account_id', '=', accountId));
  });
  return { search_indexing: enabled };
}
