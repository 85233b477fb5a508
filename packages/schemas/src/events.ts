import { z } from 'zod';
import { Timestamp } from './common';

export const EventOutput = z
  .object({
    id: z.string().meta({ example: 'evt_0a1b2c3d4e5f6g7h8j9k' }),
    seq: z.number().int().meta({ description: 'Position in the account stream, from 1, without gaps', example: 7 }),
    type: z.string().meta({ example: 'box.created' }),
    account_id: z.string(),
    created_at: Timestamp,
    data: z.unknown().meta({ description: 'Event payload; its shape depends on type' }),
    _chain: z
      .object({
        prev_hash: z.string().meta({ description: 'hash of the previous event (64 zeros before the first)' }),
        hash: z.string().meta({ description: 'hex SHA-256 of prev_hash + "\\n" + RFC 8785 JSON of the event without _chain' }),
      })
      .meta({ description: 'Tamper evidence: see README "Verifying the event log"' }),
  })
  .meta({ id: 'Event' });

export const ListEventsInput = z.strictObject({
  since: z.string().max(20).optional().meta({ description: 'Cursor: next_cursor of the previous page; omit to start from the first event', example: '42' }),
  type: z
    .string()
    .max(500)
    .optional()
    .meta({ description: 'Only these types (comma-separated)', example: 'mail.received,box.created' }),
  limit: z.coerce.number().int().min(1).max(500).default(100).meta({ description: 'Page size (default 100, at most 500)', example: 100 }),
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
