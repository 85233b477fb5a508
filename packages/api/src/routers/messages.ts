/** Mail: send, list, read, delete. */
import {
  cancelScheduled,
  changeLabels,
  deleteMessage,
  flagNames,
  getAttachment,
  getAttachmentText,
  getMessage,
  heldForReview,
  listMessages,
  messageLabels,
  replyToMessage,
  searchMessages,
  sendMessage,
  type Services,
} from '@boxes/core';
import {
  AttachmentIdInput,
  AttachmentOutput,
  AttachmentTextOutput,
  GetMessageInput,
  CancelMessageInput,
  CancelMessageOutput,
  DeleteMessageInput,
  DeleteMessageOutput,
  ListMessagesInput,
  LABEL_RULES,
  ListMessagesOutput,
  MessageLabelsInput,
  MessageLabelsOutput,
  MessageWithBody,
  MessageReplyInput,
  SearchMessagesInput,
  SearchMessagesOutput,
  SendInput,
  SendOrReviewOutput,
} from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';
import { bundleStep, keyChecks, withEvidence } from '../evidence';

/** The IMAP flag names (\\Deleted aside) and the labels of a message. */
function flagsAndLabels(l: { flags: number; keywords: string[]; labels: string[] } | undefined): { flags: string[]; labels: string[] } {
  return l ? { flags: flagNames(l.flags, false, l.keywords), labels: l.labels } : { flags: [], labels: [] };
}

/** Messages as answered: each with its IMAP flag names and labels, read for all of them in one query. */
export async function withLabels<M extends { id: string }>(svc: Services, messages: M[]): Promise<(M & { flags: string[]; labels: string[] })[]> {
  const labels = await messageLabels(
    svc,
    messages.map((m) => m.id),
  );
  return messages.map((m) => ({ ...m, ...flagsAndLabels(labels.get(m.id)) }));
}

export const messagesRouter = router({
  send: keyProcedure
    .meta({
      errors: [
        'account_paused',
        'box_paused',
        'box_restricted_key',
        'cap_exceeded',
        'domain_not_verified',
        'from_domain_mismatch',
        'idempotency_key_reused',
        'payment_required',
        'recipient_blocked',
      ],
      scope: 'send',
      reviewable: true,
      openapi: {
        method: 'POST',
        path: '/messages/send',
        tags: ['messages'],
        summary: 'Send a message',
        description:
          'Returns once the message is durably queued; delivery runs in the background (events mail.delivered, mail.bounced, mail.failed). One message is reserved per recipient (free allowance first) and charged when delivered. 402 with top-up guidance when credit is short; nothing is sent then. When the owner review policy of the box or the key holds the send (new_recipients, all), the answer is 202 with a Review instead: nothing is sent or charged until the owner approves it on the page they were emailed (GET /reviews/{id} follows it; events review.approved, review.denied, review.expired).',
      },
    })
    .input(SendInput)
    .output(SendOrReviewOutput)
    .mutation(async ({ ctx, input }) => {
      // The checks are collected only for an enrolled account: the send path stays as lean as before otherwise.
      const checks = ctx.account.evidenceEnrolledAt ? keyChecks(ctx, 'send') : undefined;
      const out = await sendMessage(ctx.svc, { account: ctx.account, key: ctx.key, boxScope: ctx.boxScope, ...(checks ? { checks } : {}) }, input);
      if (heldForReview(out)) return out;
      return checks
        ? withEvidence(ctx, out, { capability: 'messages.send', checks, idempotencyKey: input.idempotency_key, next: bundleStep(ctx.svc, out.message_id) })
        : out;
    }),
  reply: keyProcedure
    .meta({
      errors: [
        'account_paused',
        'box_paused',
        'box_restricted_key',
        'cap_exceeded',
        'domain_not_verified',
        'from_domain_mismatch',
        'idempotency_key_reused',
        'not_found',
        'payment_required',
        'recipient_blocked',
      ],
      scope: 'send',
      reviewable: true,
      openapi: {
        method: 'POST',
        path: '/messages/{id}/reply',
        tags: ['messages'],
        summary: 'Reply to a message',
        description:
          "Sends a reply with the rules, billing and answer of POST /messages/send. To: the Reply-To of the original, else its From (a sent original: its To); reply_all adds its To and Cc as Cc, without the sending box. Subject: \"Re: \" once (an existing Re:, RE:, Aw:, Sv: is kept). In-Reply-To: the original's Message-ID; References: its References plus its Message-ID (the first and the newest 19 when longer). From: the box that received the original. context: the original's unless given. The reply joins the original's thread (thread_id). A box-restricted key replies only to messages of its boxes. Owner review applies as to POST /messages/send (202 with a Review when held); under new_recipients a reply to the sender of a received message is not held.",
      },
    })
    .input(MessageReplyInput)
    .output(SendOrReviewOutput)
    .mutation(async ({ ctx, input }) => {
      const checks = ctx.account.evidenceEnrolledAt ? keyChecks(ctx, 'send') : undefined;
      const out = await replyToMessage(ctx.svc, { account: ctx.account, key: ctx.key, boxScope: ctx.boxScope, ...(checks ? { checks } : {}) }, input);
      if (heldForReview(out)) return out;
      return checks
        ? withEvidence(ctx, out, { capability: 'messages.reply', checks, idempotencyKey: input.idempotency_key, next: bundleStep(ctx.svc, out.message_id) })
        : out;
    }),
  cancel: keyProcedure
    .meta({
      errors: ['conflict', 'not_found'],
      scope: 'send',
      openapi: {
        method: 'POST',
        path: '/messages/{id}/cancel',
        tags: ['messages'],
        summary: 'Cancel a scheduled send',
        description:
          'A message sent with send_at that has not gone yet: nothing is sent, the credit reserved for it is released, and mail.cancelled is recorded. 409 conflict once it has gone (or for a message that was not scheduled). A box-restricted key cancels only messages of its boxes.',
      },
    })
    .input(CancelMessageInput)
    .output(CancelMessageOutput)
    .mutation(({ ctx, input }) => cancelScheduled(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, id: input.id, actorKeyId: ctx.key.id })),
  list: keyProcedure
    .meta({
      errors: ['invalid_cursor', 'invalid_label', 'not_found'],
      scope: 'receive',
      openapi: {
        method: 'GET',
        path: '/messages',
        tags: ['messages'],
        summary: 'List messages',
        description:
          'Newest first. include=body adds bodies (attachments listed without their bytes); include=attachment_content adds bodies with the bytes. label=<label> keeps the messages carrying it (unread for the unread ones). A box-restricted key sees only its boxes. flags are the IMAP flags and keywords mail clients see; labels are the same, named for triage (POST /messages/{id}/labels).',
      },
    })
    .input(ListMessagesInput)
    .output(ListMessagesOutput)
    .query(async ({ ctx, input }) => {
      const page = await listMessages(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, ...input });
      return { ...page, messages: await withLabels(ctx.svc, page.messages) };
    }),
  search: keyProcedure
    .meta({
      errors: ['invalid_cursor', 'invalid_label', 'not_found'],
      scope: 'receive',
      openapi: {
        method: 'GET',
        path: '/messages/search',
        tags: ['messages'],
        summary: 'Search messages',
        description:
          'Full-text search over subject, addresses, body text and attachment text, best match first (ts_rank_cd: the subject counts most, then addresses, body, attachments). q is web search syntax: words are all required, "quoted words" follow each other, or between words means either, -word excludes; english word endings do not matter. Filters: box, direction, after/before (recorded_at), thread, label (as GET /messages: an IMAP keyword, case-insensitive, or a system label: unread, read, flagged, answered, draft, spam, sent; 400 invalid_label for a malformed one). 20 results a page (limit up to 100), next_cursor for the next. highlights mark matching words with <mark> and </mark>. A box-restricted key sees only its boxes. Privacy: bodies are encrypted at rest, the search index is not: it keeps, per message, the normalised words (stems) with their positions, never the text, so whoever reads the database learns which words a message contains. A message leaves the index when its body is reclaimed (DELETE /messages/{id}, the retention window); PUT /account/search-indexing turns the index off for the account and drops it. Messages stored before search existed are indexed by the worker shortly after an upgrade.',
      },
    })
    .input(SearchMessagesInput)
    .output(SearchMessagesOutput)
    .query(async ({ ctx, input }) => {
      const found = await searchMessages(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, ...input });
      const messages = await withLabels(
        ctx.svc,
        found.results.map((r) => r.message),
      );
      return { ...found, results: found.results.map((r, i) => ({ ...r, message: messages[i]! })) };
    }),
  get: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'receive',
      openapi: {
        method: 'GET',
        path: '/messages/{id}',
        tags: ['messages'],
        summary: 'Read a message',
        description:
          'The full decrypted body, headers and attachments, and for sent messages each delivery. Attachments are listed with their id, type, size, SHA-256 and text status; their bytes only with include=attachment_content (else GET /messages/{id}/attachments/{attachment_id}/content).',
      },
    })
    .input(GetMessageInput)
    .output(MessageWithBody)
    .query(async ({ ctx, input }) => {
      const m = await getMessage(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, id: input.id, include: input.include });
      const [labelled] = await withLabels(ctx.svc, [m]);
      return labelled!;
    }),
  labels: keyProcedure
    .meta({
      errors: ['invalid_label', 'label_conflict', 'label_read_only', 'not_found', 'too_many_labels'],
      scope: 'receive',
      openapi: {
        method: 'POST',
        path: '/messages/{id}/labels',
        tags: ['messages'],
        summary: 'Add or remove labels on a message',
        description: `Triage: add and remove labels in one call ({"add": ["flagged", "invoices"], "remove": ["unread"]}); labels already there (or already absent) are left as they are. ${LABEL_RULES} A change shows in mail clients at once (IMAP FETCH FLAGS, with a new MODSEQ for CONDSTORE clients) and appends message.labels_changed. A box-restricted key labels only messages of its boxes.`,
      },
    })
    .input(MessageLabelsInput)
    .output(MessageLabelsOutput)
    .mutation(async ({ ctx, input }) => {
      const r = await changeLabels(ctx.svc, {
        accountId: ctx.account.id,
        scope: ctx.boxScope,
        target: { messageId: input.id },
        add: input.add ?? [],
        remove: input.remove ?? [],
        actor: { via: 'api', keyId: ctx.key.id },
      });
      const m = r.messages[0]!;
      return { id: m.id, labels: m.labels, added: m.added, removed: m.removed };
    }),
  attachment: keyProcedure
    .meta({
      errors: ['body_reclaimed', 'not_found'],
      scope: 'receive',
      openapi: {
        method: 'GET',
        path: '/messages/{id}/attachments/{attachment_id}',
        tags: ['messages'],
        summary: 'Get an attachment',
        description:
          'What the attachment is (type, size, SHA-256, text status) and where to download it: content_url with your API key, or download_url, signed and valid 10 minutes, with no key. The content route answers the bytes with the stored content type, Content-Disposition: attachment, X-Content-Type-Options: nosniff and a sandboxing Content-Security-Policy. 410 body_reclaimed once the body was reclaimed. A box-restricted key sees only its boxes.',
      },
    })
    .input(AttachmentIdInput)
    .output(AttachmentOutput)
    .query(({ ctx, input }) =>
      getAttachment(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, messageId: input.id, attachmentId: input.attachment_id }),
    ),
  attachmentText: keyProcedure
    .meta({
      errors: ['body_reclaimed', 'not_found'],
      scope: 'receive',
      openapi: {
        method: 'GET',
        path: '/messages/{id}/attachments/{attachment_id}/text',
        tags: ['messages'],
        summary: "Read an attachment's text",
        description:
          'The plain text the worker extracted (PDF, DOCX, XLSX, CSV, HTML, plain text; the type read from the bytes, not the name). text_status pending until the worker is done (event attachment.text_ready), then ready with the text, or too_large, unsupported or failed with the reason. Limits: 10 MiB input, 64 MiB unzipped, the first 500 PDF pages, 1,000,000 characters of text, 30 seconds.',
      },
    })
    .input(AttachmentIdInput)
    .output(AttachmentTextOutput)
    .query(({ ctx, input }) =>
      getAttachmentText(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, messageId: input.id, attachmentId: input.attachment_id }),
    ),
  delete: keyProcedure
    .meta({
      errors: ['conflict', 'not_found'],
      scope: 'receive',
      openapi: {
        method: 'DELETE',
        path: '/messages/{id}',
        tags: ['messages'],
        summary: 'Reclaim a message body',
        description:
          'Removes the body and raw message. With purge (query ?purge=true or JSON body {"purge": true}) also subject, from, to and cc. A message.deleted event records it.',
      },
    })
    .input(DeleteMessageInput)
    .output(DeleteMessageOutput)
    .mutation(async ({ ctx, input }) => {
      const out = await deleteMessage(ctx.svc, {
        accountId: ctx.account.id,
        scope: ctx.boxScope,
        id: input.id,
        purge: input.purge === true,
        actorKeyId: ctx.key.id,
      });
      const checks = keyChecks(ctx, 'receive');
      if (ctx.boxScope) checks.push({ check: 'box_restriction', result: 'passed', detail: "the message is in one of the key's boxes" });
      checks.push({ check: 'ownership', result: 'passed', detail: 'the message belongs to this account' });
      return withEvidence(ctx, out, { capability: 'messages.delete', checks, next: bundleStep(ctx.svc, out.id) });
    }),
});
