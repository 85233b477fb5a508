import { z } from 'zod';
import { Timestamp } from './common';
import { LabelFilter, MessageBody, MessageSummary, ThreadId } from './messages';

export const ThreadSummary = z
  .object({
    id: ThreadId,
    subject: z.string().nullable().meta({ description: 'Subject of the first message of the thread', example: 'Invoice 42' }),
    message_count: z.number().int().meta({ description: 'Messages in the thread that this key may see', example: 4 }),
    received_count: z.number().int().meta({ description: 'Of those, received', example: 2 }),
    sent_count: z.number().int().meta({ description: 'Of those, sent (scheduled and cancelled sends included)', example: 2 }),
    participants: z.array(z.string()).meta({
      description: 'Every address in From, To or Cc of those messages, lower-cased, sorted (Bcc is never shown)',
      example: ['agent@brave-otter.boxes.localhost', 'someone@example.com'],
    }),
    box_ids: z.array(z.string()).meta({ description: 'The boxes the messages were sent from or received in', example: ['box_0a1b2c3d4e5f6g7h8j9k'] }),
    started_at: Timestamp.meta({ description: 'recorded_at of the first message' }),
    last_activity_at: Timestamp.meta({ description: 'recorded_at of the newest message' }),
    last_message_id: z.string().meta({ description: 'id of the newest message', example: 'msg_0a1b2c3d4e5f6g7h8j9k' }),
    labels: z.array(z.string()).meta({
      description: 'The labels of those messages together (unread when any of them is unread)',
      example: ['unread', 'sent', 'invoices'],
    }),
  })
  .meta({ id: 'ThreadSummary' });

export const ListThreadsInput = z.strictObject({
  box: z.string().max(320).optional().meta({
    description: 'A box id or address: only the messages of that box count (threads without any are left out)',
    example: 'agent@brave-otter.boxes.localhost',
  }),
  limit: z.coerce.number<number>().int().min(1).max(200).default(50).meta({ description: 'Page size (default 50, at most 200)', example: 50 }),
  cursor: z.string().max(200).optional().meta({ description: 'next_cursor of the previous page', example: 'WyIyMDI2LTExLTIzVDA5OjAwOjAwLjAwMFoiLCJ0aHJfMCJd' }),
  label: LabelFilter.meta({
    description: 'Only threads with at least one message (that the key sees) carrying this label; the counts stay those of all its messages',
    example: 'unread',
  }),
});

export const ListThreadsOutput = z.object({
  threads: z.array(ThreadSummary).meta({ description: 'Newest activity first' }),
  next_cursor: z.string().nullable().meta({ description: 'Pass as cursor for threads with older activity; null at the end', example: null }),
});

export const GetThreadInput = z.strictObject({
  id: ThreadId,
  include: z.enum(['body']).optional().meta({ description: 'include=body adds each message body', example: 'body' }),
  limit: z.coerce.number<number>().int().min(1).max(500).default(100).meta({ description: 'Messages per page (default 100, at most 500)', example: 100 }),
  cursor: z
    .string()
    .max(200)
    .optional()
    .meta({ description: 'next_cursor of the previous page (later messages)', example: 'WyIyMDI2LTExLTIzVDA5OjAwOjAwLjAwMFoiLCJtc2dfMCJd' }),
});

export const ThreadDetail = ThreadSummary.extend({
  messages: z.array(MessageSummary.extend({ body: MessageBody.nullable().optional() })).meta({ description: 'The messages of the thread, oldest first' }),
  next_cursor: z.string().nullable().meta({ description: 'Pass as cursor for the later messages of a long thread; null at the end', example: null }),
}).meta({ id: 'ThreadDetail' });

export const ThreadLabelsInput = z.strictObject({
  id: ThreadId,
  add: z
    .array(z.string().max(200))
    .max(20)
    .optional()
    .meta({ description: 'Labels to add to every message of the thread (at most 20)', example: ['invoices'] }),
  remove: z
    .array(z.string().max(200))
    .max(20)
    .optional()
    .meta({ description: 'Labels to remove from every message (at most 20)', example: ['unread'] }),
});

export const ThreadLabelsOutput = z.object({
  id: ThreadId,
  messages: z
    .array(
      z.object({
        id: z.string().meta({ example: 'msg_0a1b2c3d4e5f6g7h8j9k' }),
        labels: z.array(z.string()).meta({ description: 'Its labels now', example: ['invoices'] }),
        added: z.array(z.string()).meta({ description: 'Labels it gained', example: ['invoices'] }),
        removed: z.array(z.string()).meta({ description: 'Labels it lost', example: ['unread'] }),
      }),
    )
    .meta({ description: 'Every message of the thread the key sees, oldest first' }),
  changed: z.number().int().meta({ description: 'Messages whose labels changed', example: 2 }),
});
