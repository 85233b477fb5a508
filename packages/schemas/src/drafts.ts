/**
 * Drafts: messages being written, saved incomplete if need be, sent later with POST /drafts/{id}/send through
 * the same rules as POST /messages/send. Mail clients see them in each box's Drafts folder.
 */
import { z } from 'zod';
import { Timestamp } from './common';
import { SendAttachment, SendInput, SendOutput } from './messages';

/** Recipients of a draft: like a send's, but a draft may have none yet (an empty list is kept as none). */
const DraftAddresses = z.union([z.string().min(3).max(320), z.array(z.string().min(3).max(320)).max(50)]);

const fields = {
  from: z.string().max(320).meta({
    description: 'A box of your account (default: the primary address agent@<domain>); Name <address> accepted. The draft lives in that box',
    example: 'Billing <billing@brave-otter.boxes.localhost>',
  }),
  to: DraftAddresses.meta({
    description: 'One address or a list (Name <address> accepted); may be empty while the draft is being written',
    example: 'someone@example.com',
  }),
  cc: DraftAddresses,
  bcc: DraftAddresses.meta({ description: 'Delivered but not shown in the headers of the sent message' }),
  subject: z.string().max(998).meta({ description: 'No line breaks', example: 'Your invoice' }),
  text: SendInput.shape.text,
  html: SendInput.shape.html,
  attachments: z.array(SendAttachment).max(20).meta({ description: 'The same shape as a send: filename, content_b64, content_type, content_id' }),
  in_reply_to: z.string().max(40).meta({
    description:
      'A message of the account this draft answers: sent as POST /messages/{id}/reply sends (In-Reply-To, References, thread, the original context). Without to, the draft takes the reply recipients (Reply-To, else From) and a "Re:" subject when saved',
    example: 'msg_0a1b2c3d4e5f6g7h8j9k',
  }),
  send_at: Timestamp.meta({
    description:
      'Send it later: an ISO 8601 time with a zone, in the future, at most 30 days ahead. Sending the draft then makes a scheduled send (cancellable with POST /messages/{id}/cancel)',
    example: '2026-11-24T09:00:00Z',
  }),
};

export const CreateDraftInput = z
  .strictObject({
    from: fields.from.optional(),
    to: fields.to.optional(),
    cc: fields.cc.optional(),
    bcc: fields.bcc.optional(),
    subject: fields.subject.optional(),
    text: fields.text,
    html: fields.html,
    attachments: fields.attachments.optional(),
    in_reply_to: fields.in_reply_to.optional(),
    reply_all: z
      .boolean()
      .optional()
      .meta({ description: 'With in_reply_to and no to: also Cc everyone in the original To and Cc, as reply_all does; default false', example: false }),
    send_at: fields.send_at.optional(),
  })
  .meta({ id: 'CreateDraft' });

export const UpdateDraftInput = z
  .strictObject({
    id: z.string().max(40).meta({ example: 'drf_0a1b2c3d4e5f6g7h8j9k' }),
    from: fields.from.optional(),
    to: fields.to.nullable().optional(),
    cc: fields.cc.nullable().optional(),
    bcc: fields.bcc.nullable().optional(),
    subject: fields.subject.nullable().optional(),
    text: fields.text.unwrap().nullable().optional().meta({ description: 'Plain-text body; null removes it' }),
    html: fields.html.unwrap().nullable().optional().meta({ description: 'HTML body; null removes it' }),
    attachments: fields.attachments.nullable().optional().meta({ description: 'Replaces every attachment; [] or null removes them' }),
    in_reply_to: fields.in_reply_to.nullable().optional(),
    send_at: fields.send_at.nullable().optional(),
  })
  .meta({ id: 'UpdateDraft' });

export const DraftIdInput = z.strictObject({ id: z.string().max(40).meta({ example: 'drf_0a1b2c3d4e5f6g7h8j9k' }) });

export const GetDraftInput = z.strictObject({
  id: z.string().max(40).meta({ example: 'drf_0a1b2c3d4e5f6g7h8j9k' }),
  include: z.enum(['attachment_content']).optional().meta({ description: "include=attachment_content adds each attachment's bytes (content_b64)" }),
});

export const ListDraftsInput = z.strictObject({
  box: z.string().max(320).optional().meta({ description: 'A box id or address: only its drafts (default: every box the key sees)' }),
  include: z.enum(['body']).optional().meta({ description: 'include=body adds text and html (attachments are always listed without their bytes)' }),
  limit: z.coerce.number<number>().int().min(1).max(200).default(50).meta({ description: 'Page size (default 50, at most 200)' }),
  cursor: z.string().max(200).optional().meta({ description: 'next_cursor of the previous page' }),
});

export const DraftAttachment = z.object({
  filename: z.string().nullable().meta({ example: 'invoice.pdf' }),
  content_type: z.string().meta({ example: 'application/pdf' }),
  content_id: z.string().nullable().meta({ description: 'Inline parts: the cid the html references' }),
  size_bytes: z.number().int(),
  content_b64: z.string().optional().meta({ description: 'The bytes, base64 (GET /drafts/{id}?include=attachment_content only)' }),
});

export const Draft = z
  .object({
    id: z.string().meta({ example: 'drf_0a1b2c3d4e5f6g7h8j9k' }),
    box_id: z.string().meta({ example: 'box_0a1b2c3d4e5f6g7h8j9k' }),
    from: z.string().meta({ description: 'The sending box, with its display name when one was given', example: 'agent@brave-otter.boxes.localhost' }),
    to: z.array(z.string()),
    cc: z.array(z.string()),
    bcc: z.array(z.string()),
    subject: z.string().nullable(),
    text: z.string().nullable().optional().meta({ description: 'The plain-text body (absent from a list without include=body)' }),
    html: z.string().nullable().optional().meta({ description: 'The HTML body (absent from a list without include=body)' }),
    attachments: z.array(DraftAttachment),
    in_reply_to: z.string().nullable().meta({ description: 'The message it answers' }),
    send_at: Timestamp.nullable().meta({ description: 'When it goes once sent; null: at once' }),
    ready: z.boolean().meta({ description: 'Whether it has what a send needs (a recipient and a body); POST /drafts/{id}/send checks the rest' }),
    imap_uid: z.number().int().meta({ description: "Its UID in the box's Drafts folder (IMAP): a new one on every change" }),
    size_bytes: z.number().int().meta({ description: 'Octets of its RFC 5322 rendering (what mail clients download)' }),
    created_at: Timestamp,
    updated_at: Timestamp,
  })
  .meta({ id: 'Draft' });

export const ListDraftsOutput = z.object({
  drafts: z.array(Draft).meta({ description: 'Newest first (by creation)' }),
  next_cursor: z.string().nullable().meta({ description: 'Pass as cursor for older drafts; null at the end' }),
});

export const DeleteDraftOutput = z.object({ id: z.string(), deleted: z.literal(true) });

export const SendDraftOutput = SendOutput.extend({
  draft_id: z.string().meta({ description: 'The draft sent (gone from GET /drafts; the message names it as draft_id)', example: 'drf_0a1b2c3d4e5f6g7h8j9k' }),
});
