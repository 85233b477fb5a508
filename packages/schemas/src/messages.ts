import { z } from 'zod';
import { Timestamp } from './common';
import { Evidence } from './audit';
import { text } from './strings';
import { Authentication, SpamVerdict } from './trust';
import { Review } from './reviews';

export const ThreadId = z.string().max(40).meta({
  description:
    'The conversation this message belongs to (GET /threads/{id}): a reply joins the thread of the message it answers (In-Reply-To, then References); any other message starts a thread',
  example: 'thr_0a1b2c3d4e5f6g7h8j9k',
});

/** The rule of label names, shown where labels are taken. */
export const LABEL_RULES =
  'Labels are the IMAP flags and keywords mail clients see. System labels: unread (the message lacks \\Seen; add read or remove unread to mark it read), flagged (\\Flagged), answered (\\Answered), draft (\\Draft), spam (the $Junk keyword; adding it drops $NotJunk; the Junk folder is left to mail clients), sent (sent from this account; read-only). Any other label is an IMAP keyword: 1 to 100 printable ASCII characters without spaces or ( ) { % * " \\ ], not starting with \\, compared case-insensitively (the first spelling is kept); a message has at most 64 of them. A malformed label is 400 invalid_label; adding or removing sent is 400 label_read_only; the same label added and removed is 400 label_conflict.';

export const LabelFilter = z.string().max(200).optional().meta({
  description: 'Only messages carrying this label (a system label such as unread, flagged, spam, sent, read, or your own, case-insensitive)',
  example: 'unread',
});

const AddressList = z.union([z.string().min(3).max(320), z.array(z.string().min(3).max(320)).max(50)]);
/** Recipients: a message goes to someone, so a list has at least one. */
const Recipients = z.union([z.string().min(3).max(320), z.array(z.string().min(3).max(320)).min(1, 'give at least one recipient').max(50)]);

/**
 * A message has a body: text, html or at least one attachment (JSON Schema anyOf on the object; the server
 * refuses one without any with 400 validation_error on text).
 */
export const MESSAGE_BODY_RULE = {
  anyOf: [{ required: ['text'] }, { required: ['html'] }, { required: ['attachments'], properties: { attachments: { minItems: 1 } } }],
};

export const MAX_CONTEXT_BYTES = 16 * 1024;
export const MAX_HEADERS = 15;
export const MAX_REPLY_TO = 5;
export const MAX_RECIPIENTS = 50;
/** An attachment's base64 text can be no longer than the largest request body (30 MiB). */
export const MAX_ATTACHMENT_B64 = 30 * 1024 * 1024;

export const SendAt = Timestamp.optional().meta({
  description:
    'Schedule the send: an ISO 8601 time with a zone (Z or +hh:mm), in the future, at most 30 days ahead. The message is stored and its credit reserved now (status scheduled, event mail.scheduled); it goes at that time, once, and can be cancelled until then with POST /messages/{id}/cancel',
  example: '2026-11-24T09:00:00Z',
});

export const SendAttachment = z.strictObject({
  filename: z.string().min(1).max(255).meta({ example: 'invoice.pdf' }),
  content_b64: text(
    z
      .string()
      .max(MAX_ATTACHMENT_B64)
      .regex(/^[A-Za-z0-9+/\r\n]*={0,2}$/, 'must be base64'),
  ).meta({ description: 'The content, base64-encoded', example: 'JVBERi0xLjQK' }),
  content_type: z
    .string()
    .min(3)
    .max(255)
    .regex(/^[\w.+-]+\/[\w.+-]+$/, 'must be a MIME type such as application/pdf')
    .meta({ example: 'application/pdf' }),
  content_id: z
    .string()
    .max(255)
    .regex(/^[^<>\s]+$/, 'must not contain spaces or angle brackets')
    .optional()
    .meta({ description: 'Makes the attachment inline: reference it in html as cid:<content_id>', example: 'logo' }),
});

export const SendInput = z
  .strictObject({
    to: Recipients.meta({ description: 'One address or a list of at least one (Name <address> accepted)', example: 'someone@example.com' }),
    cc: AddressList.optional(),
    bcc: AddressList.optional().meta({ description: 'Delivered but not shown in the headers; kept on the sent record' }),
    from: z.string().max(320).optional().meta({
      description: 'A box of your account (default: the primary address agent@<domain>); Name <address> accepted',
      example: 'Billing <billing@brave-otter.boxes.localhost>',
    }),
    subject: z.string().max(998).default('').meta({ example: 'Your invoice' }),
    text: text(z.string().max(5_000_000)).optional().meta({ description: 'Plain-text body', example: 'Hello!' }),
    html: text(z.string().max(5_000_000)).optional().meta({ description: 'HTML body', example: '<p>Hello!</p>' }),
    reply_to: z
      .union([z.string().min(3).max(320), z.array(z.string().min(3).max(320)).max(MAX_REPLY_TO, `at most ${MAX_REPLY_TO} reply_to addresses`)])
      .optional()
      .meta({ description: `Reply-To addresses (at most ${MAX_REPLY_TO})` }),
    headers: z
      .record(z.string().min(1).max(100), z.string().max(2000))
      .optional()
      .meta({ description: `Custom headers (at most ${MAX_HEADERS}); no line breaks; reserved names are rejected`, example: { 'X-Campaign': 'november' } }),
    attachments: z.array(SendAttachment).max(20).optional(),
    idempotency_key: z.string().min(1).max(255).optional().meta({
      description: 'Repeat a send safely: the same key with the same message replays the first response; with a different message it is rejected (409)',
      example: 'invoice-2026-11-0042',
    }),
    context: z
      .record(z.string().max(256), z.unknown())
      .optional()
      .meta({ description: 'Your own JSON object (at most 16 KB), returned on replies to this message', example: { ticket: 4211 } }),
    send_at: SendAt,
  })
  .meta({ id: 'SendMessage', ...MESSAGE_BODY_RULE });

export const SendOutput = z.object({
  message_id: z.string().meta({ example: 'msg_0a1b2c3d4e5f6g7h8j9k' }),
  rfc_message_id: z.string().meta({ description: 'The Message-ID header', example: '<msg_0a1b2c3d4e5f6g7h8j9k@brave-otter.boxes.localhost>' }),
  thread_id: ThreadId,
  status: z.enum(['queued', 'scheduled', 'suppressed']).meta({
    description:
      'queued: durably queued for delivery; scheduled: waits for send_at (cancel with POST /messages/{id}/cancel); suppressed: every recipient is on the suppression list, nothing is sent',
  }),
  send_at: Timestamp.optional().meta({ description: 'A scheduled send: when it goes' }),
  from: z.string(),
  recipients: z.array(z.string()).meta({ description: 'Addresses queued for delivery, each once' }),
  suppressed: z.array(z.string()).meta({ description: 'Recipients on your suppression list: not attempted, not charged' }),
  billing: z
    .object({
      messages: z.number().int().meta({ description: 'Messages reserved: one per recipient' }),
      free_messages_used: z.number().int(),
      paid_messages: z.number().int(),
      price_per_message_usd: z.string().meta({ example: '0.0016' }),
      reserved_usd: z.string().meta({ description: 'Held now; charged per recipient when delivered, released if it bounces or fails', example: '0.0032' }),
      free_messages_left: z.number().int(),
      credit_balance_cents: z.number().int(),
    })
    .meta({ description: 'What this send costs' }),
  warning: z
    .object({ code: z.string(), message: z.string() })
    .optional()
    .meta({ description: 'Present when many single sends to different recipients were made in a short time: use bulk send instead' }),
  idempotent_replay: z.boolean().optional().meta({ description: 'true when this is the stored response of an earlier send with the same idempotency_key' }),
  evidence: Evidence.optional(),
});

/** What a send answers: the queued message (200), or the review it waits in (202) when owner review holds it. */
export const SendOrReviewOutput = z.union([SendOutput, Review]);

export const MessageSummary = z
  .object({
    id: z.string(),
    direction: z.enum(['sent', 'received']),
    status: z
      .string()
      .meta({ description: 'sent: scheduled, cancelled, queued, delivered, partially_delivered, failed, bounced, suppressed; received: received' }),
    send_at: Timestamp.nullable().meta({ description: 'A scheduled send: when it goes (or went); null otherwise' }),
    draft_id: z.string().nullable().meta({ description: 'The draft it was sent from (POST /drafts/{id}/send); null otherwise' }),
    box_id: z.string().nullable(),
    from: z.string().nullable(),
    to: z.array(z.string()),
    cc: z.array(z.string()),
    bcc: z.array(z.string()).meta({ description: 'Kept on sent records only' }),
    subject: z.string().nullable(),
    size_bytes: z.number().int(),
    rfc_message_id: z.string(),
    provider_message_id: z.string(),
    in_reply_to: z.string().nullable(),
    thread_id: ThreadId,
    context: z.record(z.string(), z.unknown()).nullable(),
    recorded_at: Timestamp,
    body_state: z.enum(['available', 'reclaimed']),
    body_reclaimed_at_utc: Timestamp.nullable().meta({
      description: 'When the body was reclaimed (DELETE /messages/{id}, or the audit retention window); null while available',
    }),
    body_reclaim_due_at_utc: Timestamp.nullable().meta({
      description:
        'While the body is available: when the audit retention window (usermetadata.audit_retention_days, default 14 days after recorded_at) reclaims it',
    }),
    purged: z.boolean(),
    flags: z.array(z.string()).meta({
      description:
        'Flags mail clients set over IMAP: \\Seen, \\Answered, \\Flagged, \\Draft and keywords such as $Forwarded (a sent message is \\Seen unless a client clears it). \\Deleted is kept per IMAP folder and not shown here.',
      example: ['\\Seen', '\\Flagged'],
    }),
    labels: z.array(z.string()).meta({
      description:
        'Its labels (POST /messages/{id}/labels): system labels (unread, flagged, answered, draft, spam, sent) then its own labels, which mail clients see as IMAP keywords',
      example: ['unread', 'flagged', 'invoices'],
    }),
    authentication: Authentication.nullable(),
    spam: SpamVerdict.nullable(),
  })
  .meta({ id: 'MessageSummary' });

/** Where the extraction of an attachment's text stands (the worker extracts it; event attachment.text_ready at the end). */
export const ATTACHMENT_TEXT_STATUSES = ['pending', 'ready', 'too_large', 'unsupported', 'failed'] as const;
export const AttachmentTextStatus = z.enum(ATTACHMENT_TEXT_STATUSES).meta({
  description:
    'pending: the worker has not read it yet; ready: its text is at GET /messages/{id}/attachments/{attachment_id}/text; too_large: over the extraction limits (10 MiB input, 64 MiB unzipped for DOCX/XLSX); unsupported: a type without text (read from the bytes, not the name: PDF, DOCX, XLSX, CSV, HTML and plain text are read); failed: unreadable (corrupt, or over the time or memory limit). attachment.text_ready is recorded when it leaves pending.',
  example: 'ready',
});
export type AttachmentTextStatus = z.infer<typeof AttachmentTextStatus>;

export const AttachmentInfo = z
  .object({
    id: z.string().meta({ description: 'GET /messages/{id}/attachments/{attachment_id}', example: 'att_0a1b2c3d4e5f6g7h8j9k' }),
    filename: z.string().nullable().meta({ example: 'invoice.pdf' }),
    content_type: z.string().meta({ description: 'As declared by the sender', example: 'application/pdf' }),
    size_bytes: z.number().int(),
    sha256: z.string().meta({ description: 'SHA-256 (hex) of the bytes' }),
    content_id: z.string().nullable().meta({ description: 'Inline parts: the cid the html references' }),
    text_status: AttachmentTextStatus,
    text_bytes: z.number().int().nullable().meta({ description: 'UTF-8 size of the extracted text once text_status is ready; null otherwise' }),
    detected_type: z
      .string()
      .nullable()
      .meta({ description: 'The type read from the bytes (magic numbers) once extraction ran; null before', example: 'application/pdf' }),
  })
  .meta({ id: 'Attachment' });

export const MessageAttachment = AttachmentInfo.extend({
  content_b64: z.string().optional().meta({
    description:
      'The bytes, base64-encoded: only with include=attachment_content (GET /messages/{id} and GET /messages). Otherwise download them from GET /messages/{id}/attachments/{attachment_id}/content',
  }),
});

export const MessageBody = z.object({
  text: z.string().nullable(),
  extracted_text: z.string().nullable().meta({
    description: 'Received messages: the new text of a reply, without the quoted history and signature blocks; null for sent messages or without a text body',
    example: 'Yes, Thursday works.',
  }),
  html: z.string().nullable(),
  headers: z.record(z.string(), z.string()),
  attachments: z.array(MessageAttachment).meta({
    description: 'Each attachment with its id, type, size, SHA-256 and text status; the bytes only with include=attachment_content',
  }),
});

export const MessageWithBody = MessageSummary.extend({
  body: MessageBody.nullable().meta({ description: 'null once the body was reclaimed (DELETE /messages/{id})' }),
  deliveries: z
    .array(
      z.object({
        recipient: z.string(),
        status: z.string(),
        attempts: z.number().int(),
        last_error: z.string().nullable(),
        delivered_at: Timestamp.nullable(),
      }),
    )
    .meta({ description: 'Sent messages: one entry per recipient' }),
});

export const ListMessagesInput = z.strictObject({
  include: z.enum(['body', 'attachment_content']).optional().meta({
    description:
      "include=body adds each message body (attachments listed without their bytes); include=attachment_content adds bodies with each attachment's bytes (content_b64)",
  }),
  direction: z.enum(['sent', 'received']).optional(),
  box: z.string().max(320).optional().meta({ description: 'A box id or address' }),
  since: Timestamp.optional().meta({ description: 'Only messages recorded at or after this time' }),
  before: Timestamp.optional().meta({ description: 'Only messages recorded before this time' }),
  limit: z.coerce.number<number>().int().min(1).max(200).default(50).meta({ description: 'Page size (default 50, at most 200)' }),
  cursor: z.string().max(200).optional().meta({ description: 'next_cursor of the previous page' }),
  label: LabelFilter,
});

export const ListMessagesOutput = z.object({
  messages: z.array(MessageWithBody.extend({ body: MessageBody.nullable().optional() }).omit({ deliveries: true })),
  next_cursor: z.string().nullable().meta({ description: 'Pass as cursor for older messages; null at the end' }),
});

export const MessageIdInput = z.strictObject({ id: z.string().max(40) });
export const GetMessageInput = z.strictObject({
  id: z.string().max(40),
  include: z.enum(['attachment_content']).optional().meta({
    description: "include=attachment_content adds each attachment's bytes (content_b64) to the body; without it attachments are listed without their bytes",
  }),
});

export const AttachmentIdInput = z.strictObject({
  id: z.string().max(40).meta({ description: 'The message', example: 'msg_0a1b2c3d4e5f6g7h8j9k' }),
  attachment_id: z.string().max(40).meta({ example: 'att_0a1b2c3d4e5f6g7h8j9k' }),
});

export const AttachmentOutput = AttachmentInfo.extend({
  message_id: z.string(),
  content_url: z.string().meta({ description: 'GET it with your API key (Authorization: Bearer) for the bytes' }),
  download_url: z.string().meta({
    description:
      'The same content URL signed (HMAC with the instance secret, bound to the account, the message, the attachment and the expiry): no API key needed, valid 10 minutes. An expired one answers 410 link_expired, a changed one 403 invalid_signature',
  }),
  download_url_expires_at: Timestamp,
}).meta({ id: 'AttachmentWithUrl' });

export const AttachmentTextOutput = z
  .object({
    message_id: z.string(),
    attachment_id: z.string(),
    filename: z.string().nullable(),
    text_status: AttachmentTextStatus,
    detected_type: z.string().nullable(),
    text: z.string().nullable().meta({ description: 'The extracted plain text once text_status is ready; null otherwise' }),
    text_bytes: z.number().int().nullable(),
    truncated: z.boolean().meta({ description: 'true when the text stopped at a limit (1,000,000 characters, or the first 500 PDF pages)' }),
    error: z.string().nullable().meta({ description: 'Why it is failed, too_large or unsupported' }),
  })
  .meta({ id: 'AttachmentText' });

const LabelList = z
  .array(z.string().max(200))
  .max(20)
  .optional()
  .meta({ description: 'At most 20 labels', example: ['flagged', 'invoices'] });

export const MessageLabelsInput = z.strictObject({
  id: z.string().max(40),
  add: LabelList.meta({ description: 'Labels to add (at most 20): system labels or your own', example: ['flagged', 'invoices'] }),
  remove: LabelList.meta({ description: 'Labels to remove (at most 20)', example: ['unread'] }),
});

export const MessageLabelsOutput = z.object({
  id: z.string().meta({ example: 'msg_0a1b2c3d4e5f6g7h8j9k' }),
  labels: z.array(z.string()).meta({ description: 'Its labels now', example: ['flagged', 'invoices'] }),
  added: z.array(z.string()).meta({ description: 'Labels it did not have before', example: ['flagged', 'invoices'] }),
  removed: z.array(z.string()).meta({ description: 'Labels it had and lost', example: ['unread'] }),
});

export const ListLabelsInput = z.strictObject({
  box: z.string().max(320).optional().meta({ description: 'A box id or address: count only its messages', example: 'agent@brave-otter.boxes.localhost' }),
});

export const ListLabelsOutput = z.object({
  box_ids: z.array(z.string()).meta({ description: 'The boxes whose messages were counted', example: ['box_0a1b2c3d4e5f6g7h8j9k'] }),
  labels: z
    .array(
      z.object({
        name: z.string().meta({ example: 'invoices' }),
        kind: z
          .enum(['system', 'custom'])
          .meta({ description: 'system: unread, flagged, answered, draft, spam, sent (always listed); custom: your own, in use' }),
        messages: z.number().int().meta({ description: 'Messages carrying it (among those the key sees)', example: 12 }),
      }),
    )
    .meta({ description: 'System labels first, then custom labels by use' }),
});
export const DeleteMessageInput = z.strictObject({
  id: z.string().max(40),
  purge: z.boolean().optional().meta({
    description:
      'true also removes subject, from, to and cc (id, provider message id, rfc_message_id, recorded_at and direction stay). Over REST, the query ?purge=true or the JSON body {"purge": true}.',
  }),
});
export const DeleteMessageOutput = z.object({
  id: z.string(),
  body_state: z.object({ reclaimed_at_utc: Timestamp }),
  purged: z.boolean(),
  evidence: Evidence.optional(),
});

export const SuppressionEntry = z.object({
  address: z.string(),
  reason: z.enum(['bounce', 'complaint']),
  detail: z.string().nullable(),
  message_id: z.string().nullable(),
  created_at: Timestamp,
});
export const SuppressionList = z.object({ suppressions: z.array(SuppressionEntry) });
export const SuppressionAddressInput = z.strictObject({ address: z.string().min(3).max(320) });
export const SuppressionStatus = z.object({
  address: z.string(),
  suppressed: z.boolean(),
  entry: SuppressionEntry.nullable(),
});
export const UnblockOutput = z.object({ address: z.string(), removed: z.boolean() });

export const ReputationOutput = z.object({
  window_days: z.number().int(),
  sent: z.number().int(),
  bounced: z.number().int(),
  complained: z.number().int(),
  bounce_rate: z.number(),
  complaint_rate: z.number(),
  bounce_rate_limit: z.number(),
  complaint_rate_limit: z.number(),
  state: z.enum(['ok', 'bounce_rate_high', 'complaint_rate_high', 'bounce_and_complaint_rate_high']),
});

export const MessageReplyInput = z
  .strictObject({
    id: z.string().max(40).meta({ description: 'The message to answer (received or sent)', example: 'msg_0a1b2c3d4e5f6g7h8j9k' }),
    reply_all: z
      .boolean()
      .optional()
      .meta({ description: 'Also to everyone in the original To and Cc (as Cc), except the sending box; default false', example: false }),
    quote: z
      .boolean()
      .optional()
      .meta({ description: 'Append the original text below yours, each line quoted with "> " (and as a blockquote in html); default false', example: true }),
    text: SendInput.shape.text,
    html: SendInput.shape.html,
    from: z
      .string()
      .max(320)
      .optional()
      .meta({ description: 'A box of your account (default: the box that received or sent the original)', example: 'agent@brave-otter.boxes.localhost' }),
    cc: SendInput.shape.cc.meta({ description: 'More Cc recipients, besides those reply_all adds' }),
    bcc: SendInput.shape.bcc,
    reply_to: SendInput.shape.reply_to,
    headers: z
      .record(z.string().min(1).max(100), z.string().max(2000))
      .optional()
      .meta({ description: `Custom headers (at most ${MAX_HEADERS - 2}); In-Reply-To and References are set by the reply`, example: { 'X-Ticket': '4211' } }),
    attachments: SendInput.shape.attachments,
    idempotency_key: SendInput.shape.idempotency_key,
    send_at: SendAt,
    context: z
      .record(z.string().max(256), z.unknown())
      .optional()
      .meta({
        description: 'Your own JSON object (at most 16 KB), returned on replies to this reply; default: the context of the original',
        example: { ticket: 4211 },
      }),
  })
  .meta({ id: 'ReplyMessage' });

export const CancelMessageInput = z.strictObject({
  id: z.string().max(40).meta({ description: 'A message sent with send_at', example: 'msg_0a1b2c3d4e5f6g7h8j9k' }),
});
export const CancelMessageOutput = z.object({
  id: z.string().meta({ example: 'msg_0a1b2c3d4e5f6g7h8j9k' }),
  status: z.literal('cancelled'),
  send_at: Timestamp.nullable().meta({ description: 'When it would have gone' }),
  released_messages: z.number().int().meta({ description: 'Recipients whose reserved credit was released', example: 1 }),
});

/** Highlight markers of GET /messages/search (ts_headline StartSel and StopSel). */
export const SEARCH_MARK_START = '<mark>';
export const SEARCH_MARK_STOP = '</mark>';

export const SearchMessagesInput = z.strictObject({
  q: z.string().trim().min(1).max(500).meta({
    description:
      'The query, in web search syntax (PostgreSQL websearch_to_tsquery, english stemming): words are all required (alice invoice); "quoted words" must follow each other; or between words means either (invoice or receipt); a leading - excludes a word (-draft). Case, punctuation and word endings (invoices, invoicing) do not matter.',
    example: 'invoice -draft "march 2026"',
  }),
  box: z.string().max(320).optional().meta({ description: 'A box id or address' }),
  direction: z.enum(['sent', 'received']).optional(),
  after: Timestamp.optional().meta({ description: 'Only messages recorded at or after this time' }),
  before: Timestamp.optional().meta({ description: 'Only messages recorded before this time' }),
  thread: z.string().max(40).optional().meta({ description: 'Only messages of this thread (thread_id)' }),
  label: z.string().min(1).max(200).optional().meta({
    description:
      'Only messages with this label: an IMAP keyword (case-insensitive, e.g. $Forwarded or project-x) or a system label: unread (no \\Seen), read, flagged, answered, draft',
    example: 'unread',
  }),
  limit: z.coerce.number<number>().int().min(1).max(100).default(20).meta({ description: 'Page size (default 20, at most 100)' }),
  cursor: z.string().max(300).optional().meta({ description: 'next_cursor of the previous page (same q and filters)' }),
});

export const SearchMessagesOutput = z.object({
  results: z.array(
    z.object({
      message: MessageSummary,
      rank: z.number().meta({ description: 'Relevance (ts_rank_cd: subject counts most, then addresses, body, attachments); higher first' }),
      highlights: z
        .object({
          subject: z.string().nullable(),
          body: z.string().nullable(),
        })
        .meta({
          description:
            'Snippets with the matching words between <mark> and </mark> (plain text, not HTML-escaped); body is null once the body was reclaimed, and carries no marker when only an attachment matched',
        }),
    }),
  ),
  next_cursor: z.string().nullable().meta({ description: 'Pass as cursor for the next page; null at the end' }),
});
