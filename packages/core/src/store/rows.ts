/**
 * The INSERTs of messages and deliveries, written once for every path (sends, inbound, bulk). Rows travel as one
 * JSON recordset; sealed bodies and raw bytes travel beside it as text arrays (bytes as base64), so the JSON stays
 * small and the database decodes them into their columns.
 */
import { Prisma } from '@boxes/db';
import type { DeliveryStatus, MessageStatus } from '@boxes/schemas';

/** A message row. Columns left out are null (recorded_at: now()). */
export interface MessageRow {
  id: string;
  account_id: string;
  box_id: string | null;
  direction: 'sent' | 'received';
  status: MessageStatus;
  rfc_message_id: string;
  in_reply_to: string | null;
  refs: string[];
  from_address: string | null;
  to_addresses: string[];
  cc_addresses: string[];
  bcc_addresses: string[];
  subject: string | null;
  size_bytes: number;
  thread_id: string;
  context?: unknown;
  idempotency_key?: string | null;
  request_hash?: string | null;
  response?: unknown;
  /** ISO 8601; now() when absent. */
  recorded_at?: string | null;
  send_at?: string | null;
  authentication?: unknown;
  spam?: unknown;
  /** The sealed body (sealBody). */
  body_enc: string | null;
  /** The sealed raw message (sealBytes), received mail and sent mail once signed. */
  raw_enc?: Uint8Array | null;
}

/** A delivery row: one recipient of a sent message, with what its send holds. */
export interface DeliveryRow {
  id: string;
  message_id: string;
  account_id: string;
  recipient: string;
  status: DeliveryStatus;
  route: string;
  held_micros: number | string;
  used_free: boolean;
  attachment_micros: number | string;
  surcharge_micros: number | string;
}

const base64 = (b: Uint8Array | null | undefined) => (b ? Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('base64') : null);

/** INSERT INTO messages of the rows, for a CTE of the writer's statement. */
export function messagesInsert(rows: MessageRow[]): Prisma.Sql {
  const meta = rows.map(({ body_enc: _b, raw_enc: _r, ...m }, n) => ({ ...m, i: n + 1, context: m.context ?? null, response: m.response ?? null }));
  const bodies = rows.map((m) => m.body_enc);
  const raws = rows.map((m) => base64(m.raw_enc));
  return Prisma.sql`
      INSERT INTO messages (id, account_id, box_id, direction, status, rfc_message_id, provider_message_id, in_reply_to, "references",
        from_address, to_addresses, cc_addresses, bcc_addresses, subject, size_bytes, body_enc, raw_enc, context, idempotency_key, request_hash,
        response, recorded_at, thread_id, send_at, authentication, spam)
      SELECT m.id, m.account_id, m.box_id, m.direction, m.status, m.rfc_message_id, m.id, m.in_reply_to, m.refs,
        m.from_address, m.to_addresses, m.cc_addresses, m.bcc_addresses, m.subject, m.size_bytes, b.body_enc, decode(b.raw_b64, 'base64'), m.context,
        m.idempotency_key, m.request_hash, m.response, COALESCE(m.recorded_at, now()), m.thread_id, m.send_at, m.authentication, m.spam
      FROM jsonb_to_recordset(${JSON.stringify(meta)}::jsonb) AS m(i int, id text, account_id text, box_id text, direction text, status text,
        rfc_message_id text, in_reply_to text, refs text[], from_address text, to_addresses text[], cc_addresses text[], bcc_addresses text[],
        subject text, size_bytes int, context jsonb, idempotency_key text, request_hash text, response jsonb, recorded_at timestamptz,
        thread_id text, send_at timestamptz, authentication jsonb, spam jsonb)
      JOIN unnest(${bodies}::text[], ${raws}::text[]) WITH ORDINALITY AS b(body_enc, raw_b64, i) ON b.i = m.i`;
}

/** INSERT INTO deliveries of the rows, for a CTE of the writer's statement. */
export function deliveriesInsert(rows: DeliveryRow[]): Prisma.Sql {
  return Prisma.sql`
      INSERT INTO deliveries (id, message_id, account_id, recipient, status, route, held_micros, used_free, attachment_micros, surcharge_micros, created_at, updated_at)
      SELECT d.id, d.message_id, d.account_id, d.recipient, d.status, d.route, d.held_micros, d.used_free, d.attachment_micros, d.surcharge_micros, now(), now()
      FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb)
        AS d(id text, message_id text, account_id text, recipient text, status text, route text, held_micros bigint, used_free boolean,
          attachment_micros bigint, surcharge_micros bigint)`;
}
