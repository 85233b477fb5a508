/**
 * Guardrails: pausing an account or a box, send caps per box and per API key, and their current use.
 */
import { z } from 'zod';
import { Timestamp } from './common';

const cap = (description: string, example: number) =>
  z
    .number()
    .int()
    .min(1)
    .max(10_000_000)
    .nullable()
    .optional()
    .meta({ description: `${description}; null or absent: no cap`, example });

export const SendCapsInput = z
  .strictObject({
    per_minute: cap('Messages accepted per minute (UTC clock minutes)', 10),
    per_hour: cap('Messages accepted per hour (UTC clock hours)', 200),
    per_day: cap('Messages accepted per UTC day', 1000),
    new_recipients_per_day: cap(
      'Distinct new recipients per UTC day: addresses the box never wrote to nor heard from (one counted that day does not count again)',
      100,
    ),
  })
  .meta({ description: 'Send caps: each a number of messages (or distinct new recipients) per window' });

export const CAP_NAMES = ['per_minute', 'per_hour', 'per_day', 'new_recipients_per_day'] as const;
export type CapName = (typeof CAP_NAMES)[number];

export const SendCaps = z
  .object({
    per_minute: z.number().int().nullable(),
    per_hour: z.number().int().nullable(),
    per_day: z.number().int().nullable(),
    new_recipients_per_day: z.number().int().nullable(),
  })
  .meta({ id: 'SendCaps', description: 'Send caps; null: no cap' });

export const CapUse = z.object({
  cap: z.enum(CAP_NAMES).meta({ description: 'Which cap', example: 'per_hour' }),
  limit: z.number().int().meta({ description: 'The cap', example: 200 }),
  used: z.number().int().meta({ description: 'Messages (or distinct new recipients) counted in the current window', example: 12 }),
  remaining: z.number().int().meta({ description: 'What is left in the current window', example: 188 }),
  window_seconds: z.number().int().meta({ description: 'Length of the window', example: 3600 }),
  resets_at: Timestamp.meta({ description: 'When the current window ends' }),
});

export const CapsOutput = z
  .object({
    box_id: z.string().nullable().meta({ description: 'The box (box caps), or null', example: 'box_0a1b2c3d4e5f6g7h8j9k' }),
    key_id: z.string().nullable().meta({ description: 'The API key (key caps), or null', example: null }),
    caps: SendCaps,
    usage: z.array(CapUse).meta({ description: 'Each cap that is set, with its use in the current window' }),
  })
  .meta({ id: 'Caps' });

export const BoxCapsInput = z.strictObject({ id: z.string().max(40).meta({ example: 'box_0a1b2c3d4e5f6g7h8j9k' }) });
export const SetBoxCapsInput = z.strictObject({
  id: z.string().max(40).meta({ example: 'box_0a1b2c3d4e5f6g7h8j9k' }),
  caps: SendCapsInput.meta({ description: 'The new caps (replace the old ones; a cap left out is removed)' }),
});
export const KeyCapsInput = z.strictObject({ id: z.string().max(40).meta({ example: 'key_0a1b2c3d4e5f6g7h8j9k' }) });

export const PauseState = z
  .object({
    paused: z.boolean(),
    paused_at: Timestamp.nullable(),
    paused_by: z.enum(['owner', 'key']).nullable().meta({ description: 'owner: on the owner pages (only the owner resumes); key: an admin API key' }),
    paused_by_key_id: z.string().nullable().meta({ description: 'The admin key that paused it (paused_by key)' }),
  })
  .meta({ id: 'PauseState' });

export const BoxPauseState = PauseState.extend({
  box_id: z.string().meta({ example: 'box_0a1b2c3d4e5f6g7h8j9k' }),
  address: z.string().meta({ example: 'billing@brave-otter.boxes.localhost' }),
});

export const PauseOverview = z.object({
  account: PauseState,
  boxes: z.array(BoxPauseState).meta({ description: 'Every box the key may see, with its own pause' }),
});

export const BoxPauseInput = z.strictObject({ id: z.string().max(40).meta({ example: 'box_0a1b2c3d4e5f6g7h8j9k' }) });
