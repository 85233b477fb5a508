/** Bulk send jobs: POST /messages/send/bulk, the job resource, its list and cancel. */
import { z } from 'zod';
import { BULK_STATUSES } from './statuses';
import { Timestamp } from './common';
import { MESSAGE_BODY_RULE, SendInput } from './messages';

export const MAX_BULK_MESSAGES = 5000;

/**
 * A message of a bulk job: the fields of a single send, without idempotency_key (the job has one) and without
 * send_at (a job runs batch by batch on its own schedule).
 */
export const BulkMessage = SendInput.omit({ idempotency_key: true, send_at: true }).meta({
  id: 'BulkMessage',
  ...MESSAGE_BODY_RULE,
  description: 'The fields of POST /messages/send, except idempotency_key (the job has its own) and send_at (the job sends batch by batch)',
});

export const BulkSendInput = z
  .strictObject({
    messages: z
      .array(BulkMessage)
      .min(1)
      .max(MAX_BULK_MESSAGES, `at most ${MAX_BULK_MESSAGES} messages a job`)
      .meta({
        description: `The messages, 1 to ${MAX_BULK_MESSAGES}. Every one is validated before anything is queued: one bad message rejects the job, naming its index and field (messages.<index>.<field>).`,
      }),
    batch_size: z.number().int().min(1).max(MAX_BULK_MESSAGES).default(1000).meta({
      description:
        'Messages per batch (default 1000, at most the instance setting BULK_MAX_BATCH_SIZE, default 1000: a larger one is refused with 400). Batches go out one after another with the cool-off between them.',
      example: 1000,
    }),
    from: z
      .string()
      .max(320)
      .optional()
      .meta({ description: 'Sender of every message that names no from (default: the primary address)', example: 'News <news@brave-otter.boxes.localhost>' }),
    cool_off_seconds: z.number().int().min(0).max(86_400).optional().meta({
      description:
        'Pause between the end of one batch and the start of the next (default 600, the instance setting BULK_COOL_OFF_SECONDS). Not below the instance floor BULK_MIN_COOL_OFF_SECONDS (default 600: 10 minutes between batches is the rule; an operator may loosen it): a lower value is refused with 400.',
      example: 600,
    }),
    max_bounce_rate: z.number().min(0).max(1).optional().meta({
      description: "Halt the job when its bounces pass this share of its attempted recipients (default and upper bound: the instance's, 0.02)",
      example: 0.02,
    }),
    max_complaint_rate: z.number().min(0).max(1).optional().meta({
      description: "Halt the job when its complaints pass this share of its attempted recipients (default and upper bound: the instance's, 0.005)",
      example: 0.005,
    }),
    idempotency_key: z.string().min(1).max(255).optional().meta({
      description:
        'Create the job at most once: the same key with the same request answers the existing job; with a different request 409 idempotency_key_reused',
      example: 'newsletter-2026-11',
    }),
  })
  .meta({ id: 'BulkSendRequest' });

const Counts = z
  .object({
    messages: z.number().int().meta({ description: 'Messages in the job', example: 5000 }),
    recipients: z.number().int().meta({ description: 'Distinct recipients of the messages whose batch started (suppressed ones included)', example: 5000 }),
    pending: z.number().int().meta({ description: 'Recipients of started batches not yet attempted', example: 0 }),
    delivered: z.number().int().meta({ example: 4990 }),
    deferred: z.number().int().meta({ description: 'The receiving MX answered 4xx: retried on the delivery schedule', example: 0 }),
    bounced: z.number().int().meta({ example: 10 }),
    failed: z.number().int().meta({ description: 'Retries exhausted, or never sent because the job was cancelled or halted mid-batch', example: 0 }),
    suppressed: z.number().int().meta({ description: 'Recipients on the suppression list when their batch started: not attempted, not charged', example: 0 }),
    complaints: z.number().int().meta({ description: "Recipients of the job's messages who complained (feedback reports)", example: 0 }),
  })
  .meta({ description: 'Outcomes per recipient so far' });

export const BulkBatch = z.object({
  index: z.number().int().meta({ description: 'Batch number, from 0', example: 0 }),
  messages: z.number().int().meta({ example: 1000 }),
  status: z
    .enum(['pending', 'sending', 'completed', 'stopped', 'skipped'])
    .meta({ description: 'stopped: the job was halted or cancelled while this batch was going out (part of it was sent); skipped: before it started' }),
  started_at: Timestamp.nullable(),
  completed_at: Timestamp.nullable(),
});

export const BulkJob = z
  .object({
    id: z.string().meta({ example: 'bulk_0a1b2c3d4e5f6g7h8j9k' }),
    status: z.enum(BULK_STATUSES).meta({
      description:
        'queued (no batch sent yet), sending (a batch is going out), cooling_off (waiting for next_batch_at), halted (the breaker or the credit stopped it: see halted), completed, cancelled',
    }),
    batch_size: z.number().int().meta({ example: 1000 }),
    cool_off_seconds: z.number().int().meta({ example: 600 }),
    max_bounce_rate: z.number().meta({ example: 0.02 }),
    max_complaint_rate: z.number().meta({ example: 0.005 }),
    batches_total: z.number().int().meta({ example: 5 }),
    batches_completed: z.number().int().meta({ example: 2 }),
    batches: z.array(BulkBatch),
    next_batch_at: Timestamp.nullable().meta({ description: 'When the next batch starts (cooling_off and queued); null otherwise' }),
    counts: Counts,
    bounce_rate: z.number().meta({ description: 'Bounced / attempted recipients of this job', example: 0.002 }),
    complaint_rate: z.number().meta({ description: 'Complaints / attempted recipients of this job', example: 0 }),
    halted: z
      .object({
        reason: z.enum(['bounce_rate', 'complaint_rate', 'insufficient_credit', 'batch_failed']),
        message: z.string(),
        at: Timestamp,
      })
      .catchall(z.unknown())
      .nullable()
      .meta({ description: 'Why the job halted (null unless halted)' }),
    box_ids: z.array(z.string()).meta({ description: 'The boxes the messages are sent from', example: ['box_0a1b2c3d4e5f6g7h8j9k'] }),
    idempotency_key: z.string().nullable(),
    created_at: Timestamp,
    finished_at: Timestamp.nullable().meta({ description: 'When the job completed, halted or was cancelled' }),
    idempotent_replay: z.boolean().optional().meta({ description: 'true when this answers a repeated request with the same idempotency_key' }),
  })
  .meta({ id: 'BulkJob' });

export const BulkJobIdInput = z.strictObject({ id: z.string().max(40).meta({ example: 'bulk_0a1b2c3d4e5f6g7h8j9k' }) });

export const ListBulkJobsInput = z.strictObject({
  status: z.enum(BULK_STATUSES).optional(),
  limit: z.coerce.number<number>().int().min(1).max(100).default(20).meta({ description: 'Page size (default 20, at most 100)' }),
  cursor: z.string().max(200).optional().meta({ description: 'next_cursor of the previous page' }),
});

export const ListBulkJobsOutput = z.object({
  jobs: z.array(BulkJob),
  next_cursor: z.string().nullable().meta({ description: 'Pass as cursor for older jobs; null at the end' }),
});
