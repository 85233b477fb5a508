import { z } from 'zod';
import { Timestamp } from './common';
import { text } from './strings';
import { SendCapsInput } from './guard';
import { ReviewPolicyEnum } from './reviews';

export const BoxOutput = z
  .object({
    id: z.string().meta({ description: 'The box', example: 'box_0a1b2c3d4e5f6g7h8j9k' }),
    address: z.string().meta({ description: 'The full address', example: 'billing@brave-otter.boxes.localhost' }),
    local_part: z.string().meta({ description: 'The part before @', example: 'billing' }),
    domain: z.string().meta({ description: 'The domain it is on', example: 'brave-otter.boxes.localhost' }),
    is_primary: z.boolean().meta({ description: 'agent@<domain>; cannot be deleted' }),
    signature: z.string().nullable().meta({ description: 'Appended to every message sent from the box' }),
    review: ReviewPolicyEnum,
    created_at: Timestamp,
  })
  .meta({ id: 'Box', description: 'An address of the account (a box)' });

export const CreateBoxInput = z.strictObject({
  address: z.string().min(1).max(254).meta({ description: 'The local part (billing), or a full address on your domain', example: 'billing' }),
  caps: SendCapsInput.optional().meta({ description: 'Send caps of the box (PUT /boxes/{id}/caps changes them)' }),
  review: ReviewPolicyEnum.optional().meta({ description: "Owner review of the box's sends (default none); needs the admin scope" }),
});

export const UpdateBoxInput = z.strictObject({
  id: z.string().max(40).meta({ example: 'box_0a1b2c3d4e5f6g7h8j9k' }),
  review: ReviewPolicyEnum,
});

export const BoxIdInput = z.strictObject({ id: z.string().max(40).meta({ example: 'box_0a1b2c3d4e5f6g7h8j9k' }) });
export const BoxListOutput = z.object({ boxes: z.array(BoxOutput) });
export const SignatureInput = z.strictObject({
  id: z.string().max(40),
  signature: text(z.string().max(4000))
    .nullable()
    .meta({ description: 'Plain text appended to every message sent from the box; null removes it', example: '-- \nBilling bot, Example Inc.' }),
});
