import { z } from 'zod';
import { Scope, Timestamp } from './common';
import { Evidence } from './audit';
import { SendCaps, SendCapsInput } from './guard';
import { ReviewPolicyEnum } from './reviews';

export const CreateKeyInput = z
  .strictObject({
    label: z.string().trim().min(1).max(100).meta({ description: 'What the key is for', example: 'invoice-bot' }),
    scopes: z
      .array(Scope)
      .min(1, 'give at least one scope')
      .refine((s) => new Set(s).size === s.length, 'scopes must not repeat')
      .meta({ description: 'Subset of send, receive, admin', example: ['send', 'receive'] }),
    allowed_boxes: z
      .array(z.string().max(254))
      .min(1)
      .max(100)
      .optional()
      .meta({ description: 'Restrict the key to these box addresses (or local parts)', example: ['billing@brave-otter.boxes.localhost'] }),
    allowed_box_ids: z
      .array(z.string().max(40))
      .min(1)
      .max(100)
      .optional()
      .meta({ description: 'Restrict the key to these box ids', example: ['box_0a1b2c3d4e5f6g7h8j9k'] }),
    expires_at: Timestamp.optional().meta({
      description: 'When the key stops working (ISO 8601 with a zone, in the future); absent: never. A key that expires cannot mint one that expires later.',
      example: '2026-12-31T00:00:00Z',
    }),
    caps: SendCapsInput.optional().meta({ description: "Send caps of the key, beside its boxes' own" }),
    review: ReviewPolicyEnum.optional().meta({
      description: "Owner review of this key's sends (default none); the stricter of the key's and the box's applies",
    }),
  })
  .refine((v) => !(v.allowed_boxes && v.allowed_box_ids), {
    message: 'give allowed_boxes or allowed_box_ids, not both',
    path: ['allowed_box_ids'],
  });

export const KeyOutput = z
  .object({
    id: z.string().meta({ example: 'key_0a1b2c3d4e5f6g7h8j9k' }),
    prefix: z.string().meta({ description: 'First characters of the key, to recognise it', example: 'bxs_live_Ab3d' }),
    label: z.string(),
    scopes: z.array(Scope),
    allowed_box_ids: z.array(z.string()).nullable().meta({ description: 'null: every box of the account' }),
    allowed_boxes: z.array(z.string()).nullable().meta({ description: 'Addresses of allowed_box_ids; null: every box' }),
    is_owner: z.boolean().meta({ description: 'The original owner key, which cannot be revoked' }),
    review: ReviewPolicyEnum,
    created_at: Timestamp,
    last_used_at: Timestamp.nullable(),
    expires_at: Timestamp.nullable().meta({ description: 'When the key stops working; null: never' }),
    caps: SendCaps.nullable().meta({ description: 'Send caps of the key; null: none' }),
  })
  .meta({ id: 'ApiKey' });

export const CreatedKeyOutput = KeyOutput.extend({
  api_key: z.string().meta({ description: 'The raw key. Shown once; it cannot be recovered.', example: 'bxs_live_...' }),
  evidence: Evidence.optional(),
});

export const KeyListOutput = z.object({ keys: z.array(KeyOutput) });
export const KeyIdInput = z.strictObject({ id: z.string().max(40).meta({ example: 'key_0a1b2c3d4e5f6g7h8j9k' }) });
export const RevokedKeyOutput = z.object({ id: z.string(), revoked: z.literal(true), revoked_at: Timestamp, evidence: Evidence.optional() });
