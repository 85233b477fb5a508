import { z } from 'zod';
import { FEATURE_REQUEST_STATUSES, SUPPORT_QUESTION_STATUSES } from './statuses';
import { Timestamp } from './common';
import { text } from './strings';

export const McpStatusOutput = z.object({
  enabled: z.boolean(),
  enrolled_at: Timestamp.meta({ description: 'When MCP access began (kept when disabled)' }),
  disabled_at: Timestamp.nullable().meta({ description: 'Set while MCP is disabled' }),
});

// An object with any members (free-form), not a record: the REST layer needs an object schema.
export const McpFeedbackInput = z
  .object({})
  .catchall(z.unknown())
  .meta({ description: 'Free-form notes about the MCP endpoint (any JSON object)', example: { notes: 'tool descriptions are clear', client: 'my-agent/1.0' } });
export const McpFeedbackOutput = z.object({ receipt_id: z.string(), received_at: Timestamp });

export const AskQuestionInput = z.strictObject({
  subject: z.string().trim().min(1).max(200).meta({ example: 'Bounces from example.org' }),
  body: text(z.string().trim().min(1).max(20_000)).meta({ example: 'Every message to example.org bounces with 5.7.1. What should I check?' }),
  context: z
    .record(z.string().max(256), z.unknown())
    .optional()
    .meta({ description: 'Anything that helps: ids, error bodies', example: { message_id: 'msg_0a1b2c3d4e5f6g7h8j9k' } }),
});

const ThreadMessage = z.object({ id: z.string(), author: z.enum(['agent', 'operator']), body: z.string(), created_at: Timestamp });

const QuestionBase = z.object({
  id: z.string().meta({ example: 'sq_0a1b2c3d4e5f6g7h8j9k' }),
  subject: z.string(),
  body: z.string().meta({ description: 'The initial question' }),
  context: z.record(z.string(), z.unknown()).nullable(),
  status: z.enum(SUPPORT_QUESTION_STATUSES).meta({ description: 'open: waiting for an operator; answered: an operator replied last' }),
  created_at: Timestamp,
  updated_at: Timestamp,
});
export const QuestionOutput = QuestionBase.extend({ messages: z.array(ThreadMessage).meta({ description: 'The thread, oldest first' }) }).meta({
  id: 'SupportQuestion',
});
export const QuestionListOutput = z.object({ questions: z.array(QuestionBase.extend({ replies: z.number().int() })) });
export const QuestionIdInput = z.strictObject({ id: z.string().max(40) });
export const ReplyInput = z.strictObject({ id: z.string().max(40), body: text(z.string().trim().min(1).max(20_000)) });

export const FeatureRequestInput = z.strictObject({
  title: z.string().trim().min(5, 'title must be at least 5 characters').max(200).meta({ example: 'Scheduled sends' }),
  description: text(z.string().trim().min(20, 'description must be at least 20 characters').max(10_000)).meta({
    example: 'Let me give send_at so a message goes out later.',
  }),
});
export const FeatureRequestOutput = z
  .object({
    id: z.string().meta({ example: 'fr_0a1b2c3d4e5f6g7h8j9k' }),
    title: z.string(),
    description: z.string(),
    status: z.enum(FEATURE_REQUEST_STATUSES),
    votes: z.number().int(),
    voted: z.boolean().meta({ description: 'Whether your account has upvoted it' }),
    mine: z.boolean().meta({ description: 'Whether your account asked for it' }),
    created_at: Timestamp,
    shipped_at: Timestamp.nullable(),
  })
  .meta({ id: 'FeatureRequest' });
export const FeatureListOutput = z.object({ feature_requests: z.array(FeatureRequestOutput) });
export const FeatureIdInput = z.strictObject({ id: z.string().max(40) });
