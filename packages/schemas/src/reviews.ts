/** Owner review of sends: the policy of a box or a key, and a send held for the owner's decision. */
import { z } from 'zod';
import { Timestamp } from './common';
import { REVIEW_POLICIES, REVIEW_REASONS, REVIEW_STATUSES } from './statuses';

export const ReviewPolicyEnum = z.enum(REVIEW_POLICIES).meta({
  description:
    "Which sends wait for the owner's approval: none (default: every send goes at once), new_recipients (a send naming any address in to, cc or bcc that the sending box never wrote to nor heard from), all (every send). The stricter of the box's and the key's policy applies.",
  example: 'new_recipients',
});

export const ReviewStatusEnum = z.enum(REVIEW_STATUSES).meta({
  description:
    'pending: waiting for the owner; approved: the owner approved and the message was sent (message_id); denied: the owner denied, nothing was sent or charged; expired: nobody decided in time, nothing was sent; withdrawn: the agent withdrew it, nothing was sent',
  example: 'pending',
});

export const Review = z
  .object({
    id: z.string().meta({ description: 'The review (GET /reviews/{id})', example: 'rev_0a1b2c3d4e5f6g7h8j9k' }),
    status: ReviewStatusEnum,
    reason: z.enum(REVIEW_REASONS).meta({ description: 'The policy that held the send', example: 'new_recipients' }),
    new_recipients: z
      .array(z.string())
      .meta({ description: 'Recipients the box never wrote to nor heard from (empty when every recipient is known)', example: ['someone@example.com'] }),
    box_id: z.string().meta({ description: 'The sending box', example: 'box_0a1b2c3d4e5f6g7h8j9k' }),
    from: z.string().meta({ description: 'The sending address', example: 'agent@brave-otter.boxes.localhost' }),
    to: z.array(z.string()).meta({ example: ['someone@example.com'] }),
    cc: z.array(z.string()),
    bcc: z.array(z.string()),
    subject: z.string().nullable(),
    send_at: Timestamp.nullable().meta({ description: 'A scheduled send: when it goes once approved (at once if that time has passed by then)' }),
    created_at: Timestamp,
    expires_at: Timestamp.meta({ description: 'Nothing is sent unless the owner approves before this (REVIEW_TTL_HOURS after the send, 72 h by default)' }),
    decided_at: Timestamp.nullable().meta({ description: 'When it left pending' }),
    message_id: z.string().nullable().meta({ description: 'Approved: the message that was sent (GET /messages/{id})', example: 'msg_0a1b2c3d4e5f6g7h8j9k' }),
    last_error: z.object({ code: z.string(), message: z.string() }).nullable().meta({
      description:
        'Set when the owner approved but the send was refused then (payment_required when the credit was short, domain_not_verified, recipient_blocked): nothing was sent and the review stays pending until it expires, so the owner can approve again once it is fixed',
    }),
    idempotent_replay: z.boolean().optional().meta({ description: 'true when a send with the same idempotency_key was already held: this is that review' }),
  })
  .meta({ id: 'Review', description: "A send held for the owner's review: nothing is sent (or charged) unless the owner approves it" });

export const ReviewIdInput = z.strictObject({ id: z.string().max(40).meta({ example: 'rev_0a1b2c3d4e5f6g7h8j9k' }) });

export const ListReviewsInput = z.strictObject({
  status: ReviewStatusEnum.optional().meta({ description: 'Only reviews in this status (default: all)' }),
  limit: z.coerce.number<number>().int().min(1).max(100).default(50).meta({ description: 'At most this many, newest first (default 50, at most 100)' }),
});

export const ReviewListOutput = z.object({ reviews: z.array(Review) });
