/** Auto-forwarding: /boxes/{id}/forwards. */
import { z } from 'zod';
import { FORWARD_STATUSES } from './statuses';
import { Timestamp } from './common';

export const ForwardOutput = z
  .object({
    id: z.string().meta({ description: 'The forward id', example: 'fwd_0a1b2c3d4e5f6g7h8j9k' }),
    box_id: z.string().meta({ description: 'The box whose mail is forwarded', example: 'box_0a1b2c3d4e5f6g7h8j9k' }),
    box: z.string().optional().meta({ description: 'The box address', example: 'support@brave-otter.boxes.localhost' }),
    to: z.string().meta({ description: "The person's address copies go to", example: 'owner@example.com' }),
    match: z
      .object({
        from_contains: z
          .string()
          .nullable()
          .meta({ description: 'Only mail whose sender address contains this (case-insensitive); null: any', example: '@customer.example' }),
        subject_contains: z
          .string()
          .nullable()
          .meta({ description: 'Only mail whose subject contains this (case-insensitive); null: any', example: 'invoice' }),
      })
      .meta({ description: 'Which mail is forwarded: both conditions must hold; nulls match everything' }),
    status: z.enum(FORWARD_STATUSES).meta({
      description: 'pending_confirmation until the target confirms by the mailed link; active: forwarding; stopped: for good (see stop_reason)',
      example: 'active',
    }),
    stop_reason: z.string().nullable().meta({ description: 'bounced (a copy bounced) or declined (the target declined)', example: 'bounced' }),
    confirmation_expires_at: Timestamp.nullable().meta({
      description: 'Until when the confirmation link works (pending only)',
      example: '2026-11-30T10:00:00.000Z',
    }),
    confirmed_at: Timestamp.nullable().meta({ description: 'When the target confirmed', example: '2026-11-23T10:05:00.000Z' }),
    stopped_at: Timestamp.nullable().meta({ description: 'When it stopped', example: '2026-11-24T08:00:00.000Z' }),
    created_at: Timestamp,
  })
  .meta({ id: 'Forward' });

export const CreateForwardInput = z.strictObject({
  id: z.string().max(40).meta({ description: 'The box id', example: 'box_0a1b2c3d4e5f6g7h8j9k' }),
  to: z
    .string()
    .min(3)
    .max(320)
    .meta({ description: "The person's address; it gets a confirmation link and nothing is forwarded until it is used", example: 'owner@example.com' }),
  from_contains: z
    .string()
    .max(254)
    .nullable()
    .optional()
    .meta({ description: 'Forward only mail whose sender address contains this (case-insensitive)', example: '@customer.example' }),
  subject_contains: z
    .string()
    .max(998)
    .nullable()
    .optional()
    .meta({ description: 'Forward only mail whose subject contains this (case-insensitive)', example: 'invoice' }),
});

export const ForwardListInput = z.strictObject({ id: z.string().max(40).meta({ description: 'The box id', example: 'box_0a1b2c3d4e5f6g7h8j9k' }) });
export const ForwardListOutput = z.object({ forwards: z.array(ForwardOutput).meta({ description: "The box's forwards, oldest first" }) });

export const ForwardIdInput = z.strictObject({
  id: z.string().max(40).meta({ description: 'The box id', example: 'box_0a1b2c3d4e5f6g7h8j9k' }),
  forward_id: z.string().max(40).meta({ description: 'The forward id', example: 'fwd_0a1b2c3d4e5f6g7h8j9k' }),
});
export const ForwardDeleted = z.object({
  deleted: z.literal(true).meta({ description: 'Removed: nothing more is forwarded by it', example: true }),
  id: z.string().meta({ description: 'The forward that was removed', example: 'fwd_0a1b2c3d4e5f6g7h8j9k' }),
});
