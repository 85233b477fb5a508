/**
 * The INSERTs of the ledger-grade tables (messages, deliveries, ledger entries), written once for every path
 * (sends, inbound, bulk, delivery outcomes) and typed from the schema: a row is the table's Insertable type from
 * the generated Kysely types (packages/db sql.ts), its columns are a list tsc checks against the table, and the
 * rows reach PostgreSQL as one JSON recordset read with the table's own row type (jsonb_populate_recordset), so
 * no column type is written by hand. A renamed or retyped column is a compile error here.
 *
 * Sealed bodies and raw bytes travel beside the JSON as text arrays (bytes as base64): the JSON stays small and
 * the database decodes them into their columns.
 */
import { compile, sql, tbl, type Column, type DB, type Insertable, type RawBuilder, type Table } from '@boxes/db';
import type { DeliveryStatus, MessageStatus } from '@boxes/schemas';
import type { AttachmentMeta } from '../messages/attachments';

/** A list of a table's columns, checked by tsc. */
export const columns =
  <T extends Table>() =>
  <const C extends readonly Column<T>[]>(...c: C) =>
    c;

/** JSON for a recordset: bigint as its digits (PostgreSQL reads them into BIGINT columns exactly). */
export const recordsetJson = (rows: unknown[]): string => JSON.stringify(rows, (_, v) => (typeof v === 'bigint' ? v.toString() : v));

const fixedTexts = new Map<string, RawBuilder<unknown>>();

/**
 * A fragment without parameters (a column list, a CTE's fixed head) as its compiled text, made once under key:
 * the writer's statement is built on every flush, and compiling the same references again each time was the
 * larger part of building it.
 */
export function fixed(key: string, make: () => RawBuilder<unknown>): RawBuilder<unknown> {
  let f = fixedTexts.get(key);
  if (!f) {
    const c = compile(make());
    if (c.parameters.length) throw new Error(`fixed(${key}): a fragment with parameters`);
    f = sql.raw(c.sql);
    fixedTexts.set(key, f);
  }
  return f;
}

/** message_search.tsv: a tsvector, which the schema declares Unsupported, so the generated types leave it out. */
const TSV = sql.ref('tsv');

/** The columns of each table the writer sets from its rows (the rest take their defaults, or now() below). */
const MESSAGE_COLUMNS = columns<'messages'>()(
  'id',
  'account_id',
  'box_id',
  'direction',
  'status',
  'rfc_message_id',
  'provider_message_id',
  'in_reply_to',
  'references',
  'from_address',
  'to_addresses',
  'cc_addresses',
  'bcc_addresses',
  'subject',
  'size_bytes',
  'context',
  'idempotency_key',
  'request_hash',
  'response',
  'thread_id',
  'send_at',
  'authentication',
  'spam',
  'draft_id',
);
const DELIVERY_COLUMNS = columns<'deliveries'>()(
  'id',
  'message_id',
  'account_id',
  'recipient',
  'status',
  'route',
  'held_micros',
  'used_free',
  'attachment_micros',
  'surcharge_micros',
);
const LEDGER_COLUMNS = columns<'ledger_entries'>()(
  'id',
  'account_id',
  'type',
  'amount_micros',
  'free_messages',
  'balance_after',
  'message_id',
  'delivery_id',
  'payment_id',
  'quantity',
  'description',
);

type Row<T extends Table, C extends readonly Column<T>[]> = Pick<Insertable<DB[T]>, C[number] & keyof Insertable<DB[T]>>;

/** A message row: its columns as the table has them, its status from the vocabulary, bodies beside. */
export type MessageRow = Omit<Row<'messages', typeof MESSAGE_COLUMNS>, 'status' | 'direction' | 'provider_message_id'> & {
  direction: 'sent' | 'received';
  status: MessageStatus;
  /** ISO 8601 or a Date; now() when absent. */
  recorded_at?: Insertable<DB['messages']>['recorded_at'];
  /** The sealed body (sealBody). */
  body_enc: string | null;
  /** The sealed raw message (sealBytes): received mail, and sent mail once signed. */
  raw_enc?: Uint8Array | null;
  /** Its attachments as they are in the body, in order: the writer names each in message_attachments. */
  attachments?: readonly AttachmentMeta[];
  /** The body text its search vector is made of (search/vector.ts searchBodyText); never stored. */
  search_text?: string | null;
};

/** A delivery row: one recipient of a sent message, with what its send holds. */
export type DeliveryRow = Omit<Row<'deliveries', typeof DELIVERY_COLUMNS>, 'status'> & { status: DeliveryStatus };

/** A ledger entry (the writer's quiet path; keyed postings go through postEntries). */
export type LedgerRow = Row<'ledger_entries', typeof LEDGER_COLUMNS>;

const list = (cols: readonly string[], alias?: string) =>
  fixed(`list:${alias ?? ''}:${cols.join(',')}`, () => sql.join(cols.map((c) => sql.ref(alias ? `${alias}.${c}` : c))));

const base64 = (b: Uint8Array | null | undefined) => (b ? Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('base64') : null);

/**
 * The CTEs that write messages, for the writer's statement: `r` (the rows, read once), `msg` (INSERT INTO messages)
 * and, for rows with a search_text, `fts`: their search vector (message_search, boxes_search_vector) when the
 * account keeps a search index. The body text is a parameter of the statement, never stored.
 */
export function messagesCtes(rows: MessageRow[]): RawBuilder<unknown> {
  const meta = rows.map(({ body_enc: _b, raw_enc: _r, attachments: _a, search_text: _s, ...m }) => ({ ...m, provider_message_id: m.id }));
  const bodies = rows.map((m) => m.body_enc);
  const raws = rows.map((m) => base64(m.raw_enc));
  const texts = rows.map((m) => m.search_text ?? null);
  const [fts, acc] = [tbl('message_search'), tbl('accounts', 'a')];
  const indexed = texts.some((t) => t !== null)
    ? sql`, fts AS (
      INSERT INTO ${fts.$} (${sql.join([fts.message_id, fts.account_id, fts.box_id, fts.direction, fts.recorded_at, fts.thread_id, TSV])})
      SELECT r.id, r.account_id, r.box_id, r.direction, r.recorded_at, r.thread_id,
        boxes_search_vector(r.subject, array_to_string(array_prepend(r.from_address, r.to_addresses || r.cc_addresses || r.bcc_addresses), ' '), r.search_text, NULL)
      FROM r WHERE r.search_text IS NOT NULL AND EXISTS (SELECT 1 FROM ${acc.$} WHERE ${acc.id} = r.account_id AND ${acc.search_indexing})
    )`
    : sql``;
  return sql`r AS MATERIALIZED (
      SELECT ${list(MESSAGE_COLUMNS, 'm')}, COALESCE(m.recorded_at, now()) AS recorded_at, b.sealed_body, decode(b.raw_b64, 'base64') AS raw, b.search_text
      FROM jsonb_populate_recordset(NULL::${sql.table('messages')}, ${recordsetJson(meta)}::jsonb) WITH ORDINALITY AS m
      JOIN unnest(${bodies}::text[], ${raws}::text[], ${texts}::text[]) WITH ORDINALITY AS b(sealed_body, raw_b64, search_text, i) ON b.i = m.ordinality
    ), msg AS (
      INSERT INTO ${sql.table('messages')} (${list(MESSAGE_COLUMNS)}, ${sql.ref('recorded_at')}, ${sql.ref('body_enc')}, ${sql.ref('raw_enc')})
      SELECT ${list(MESSAGE_COLUMNS, 'r')}, r.recorded_at, r.sealed_body, r.raw FROM r
    )${indexed}`;
}

/**
 * INSERT INTO a table of many rows in one parameter: the rows as one JSON recordset read with the table's own row
 * type, into the columns listed (tsc checks them against the table; the others take their defaults), plus
 * columns set to an SQL expression (now()). For any number of rows: a VALUES list would need a parameter per value.
 */
export function recordsetInsert<T extends Table>(
  table: T,
  cols: readonly Column<T>[],
  rows: readonly Partial<Insertable<DB[T]>>[],
  set: Partial<Record<Column<T>, RawBuilder<unknown>>> = {},
): RawBuilder<unknown> {
  const extra = Object.entries(set) as [string, RawBuilder<unknown>][];
  const target = sql.join([list(cols), ...extra.map(([c]) => sql.ref(c))]);
  const values = sql.join([list(cols, 'r'), ...extra.map(([, v]) => v)]);
  return sql`INSERT INTO ${sql.table(table)} (${target})
      SELECT ${values} FROM jsonb_populate_recordset(NULL::${sql.table(table)}, ${recordsetJson([...rows])}::jsonb) AS r`;
}

const ATTACHMENT_COLUMNS = columns<'message_attachments'>()(
  'id',
  'message_id',
  'account_id',
  'idx',
  'filename',
  'content_type',
  'content_id',
  'size_bytes',
  'sha256',
);

/** INSERT INTO message_attachments of new messages' rows (attachmentRows), for a CTE of the writer's statement. */
export function attachmentsInsert(rows: Insertable<DB['message_attachments']>[]): RawBuilder<unknown> {
  return recordsetInsert('message_attachments', ATTACHMENT_COLUMNS, rows);
}

/** INSERT INTO deliveries of the rows, for a CTE of the writer's statement. */
export function deliveriesInsert(rows: DeliveryRow[]): RawBuilder<unknown> {
  return recordsetInsert('deliveries', DELIVERY_COLUMNS, rows, { created_at: sql`now()`, updated_at: sql`now()` });
}

/** INSERT INTO ledger_entries of the rows, for a CTE of the writer's statement. */
export function ledgerInsert(rows: LedgerRow[]): RawBuilder<unknown> {
  return recordsetInsert('ledger_entries', LEDGER_COLUMNS, rows, { created_at: sql`now()` });
}
