/**
 * Event payload fields as SQL reads them, by the rules of the upcaster (packages/schemas event-upcast.ts): stored
 * events keep the shape they were written in, so a reader in SQL derives today's field from older spellings here,
 * in one place.
 */
import { sql } from '@boxes/db';

/** The message an event is about: data.message_id (mail.received stored before API 1.3.0 has only message.id). */
export const EVENT_MESSAGE_ID = sql<string | null>`COALESCE(${sql.ref('data')}->>'message_id', ${sql.ref('data')}->'message'->>'id')`;
