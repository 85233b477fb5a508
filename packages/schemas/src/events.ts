import { z } from 'zod';
import { Timestamp } from './common';
import { EVENT_CATALOGUE, EVENT_TYPES, eventDescription, type EventData, type EventType } from './event-catalogue';

export * from './event-catalogue';

const EventChain = z
  .object({
    prev_hash: z.string().meta({ description: 'hash of the previous event (64 zeros before the first)' }),
    hash: z.string().meta({ description: 'hex SHA-256 of prev_hash + "\\n" + RFC 8785 JSON of the event without _chain' }),
  })
  .meta({ id: 'EventChain', description: 'Tamper evidence: see the guide, /docs/guide/audit (Verifying the event log)' });

/** The name of an event type's schema in the OpenAPI document: mail.received -> MailReceivedEvent. */
export const eventSchemaName = (t: EventType): string =>
  `${t
    .split(/[._]/)
    .map((w) => w.charAt(0).toUpperCase() + w.slice(1))
    .join('')}Event`;

function eventVariant<T extends EventType>(t: T) {
  return z
    .object({
      id: z.string().meta({ example: 'evt_0a1b2c3d4e5f6g7h8j9k' }),
      seq: z.number().int().meta({ description: 'Position in the account stream, from 1, without gaps', example: 7 }),
      type: z.literal(t),
      account_id: z.string(),
      created_at: Timestamp,
      data: EVENT_CATALOGUE[t],
      _chain: EventChain,
    })
    .meta({ id: eventSchemaName(t), description: eventDescription(t) });
}

/** One event as the API, webhooks, MQTT and Server-Sent Events carry it. */
export type BoxesEvent = {
  [T in EventType]: {
    id: string;
    seq: number;
    type: T;
    account_id: string;
    created_at: string;
    data: EventData<T>;
    _chain: { prev_hash: string; hash: string };
  };
}[EventType];

/**
 * The event union, discriminated on type (OpenAPI: oneOf with a discriminator mapping). Typed as BoxesEvent so
 * that narrowing on type narrows data; at run time each payload keeps members it does not know (see o() in the
 * catalogue), so an event read back hashes as it was stored.
 */
export const EventOutput = z
  .discriminatedUnion('type', EVENT_TYPES.map((t) => eventVariant(t)) as unknown as [ReturnType<typeof eventVariant>, ...ReturnType<typeof eventVariant>[]])
  .meta({ id: 'Event', description: 'An event of the account stream; data depends on type (one schema per type)' }) as unknown as z.ZodType<BoxesEvent>;

export const ListEventsInput = z.strictObject({
  since: z.string().max(20).optional().meta({ description: 'Cursor: next_cursor of the previous page; omit to start from the first event', example: '42' }),
  type: z.string().max(500).optional().meta({ description: 'Only these types (comma-separated)', example: 'mail.received,box.created' }),
  limit: z.coerce.number<number>().int().min(1).max(500).default(100).meta({ description: 'Page size (default 100, at most 500)', example: 100 }),
});

export const ListEventsOutput = z.object({
  events: z.array(EventOutput),
  next_cursor: z.string().meta({ description: 'Pass as since to get the events after this page; poll with it when has_more is false', example: '142' }),
  has_more: z.boolean().meta({ description: 'true when more events are already waiting' }),
});

export const VerifyOutput = z.object({
  ok: z.boolean(),
  events_verified: z.number().int(),
  last_verified_seq: z.number().int().meta({ description: 'Last seq up to which the chain is intact (0 if none)' }),
  hash_at_seq: z.string().nullable().meta({ description: 'hash of the event at last_verified_seq' }),
  anomalies: z.array(
    z.object({
      at_seq: z.number().int(),
      kind: z.enum(['hash_mismatch', 'prev_hash_mismatch', 'seq_gap', 'head_mismatch']),
      message: z.string(),
      expected: z.string().optional(),
      found: z.string().optional(),
    }),
  ),
  reason: z.string().nullable().meta({ description: 'Why ok is false, or null' }),
  verified_at: Timestamp,
});
