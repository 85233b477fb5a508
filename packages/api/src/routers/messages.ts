/** Mail: send, list, read, delete. */
import { cancelScheduled, deleteMessage, getMessage, listMessages, messageFlags, replyToMessage, searchMessages, sendMessage } from '@boxes/core';
import {
  CancelMessageInput,
  CancelMessageOutput,
  DeleteMessageInput,
  DeleteMessageOutput,
  ListMessagesInput,
  ListMessagesOutput,
  MessageIdInput,
  MessageWithBody,
  MessageReplyInput,
  SearchMessagesInput,
  SearchMessagesOutput,
  SendInput,
  SendOutput,
} from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';
import { bundleStep, keyChecks, withEvidence } from '../evidence';

export const messagesRouter = router({
  send: keyProcedure
    .meta({
      errors: ['box_restricted_key', 'domain_not_verified', 'from_domain_mismatch', 'idempotency_key_reused', 'payment_required', 'recipient_blocked'],
      scope: 'send',
      openapi: {
        method: 'POST',
        path: '/messages/send',
        tags: ['messages'],
        summary: 'Send a message',
        description:
          'Returns once the message is durably queued; delivery runs in the background (events mail.delivered, mail.bounced, mail.failed). One message is reserved per recipient (free allowance first) and charged when delivered. 402 with top-up guidance when credit is short; nothing is sent then.',
      },
    })
    .input(SendInput)
    .output(SendOutput)
    .mutation(async ({ ctx, input }) => {
      // The checks are collected only for an enrolled account: the send path stays as lean as before otherwise.
      const checks = ctx.account.evidenceEnrolledAt ? keyChecks(ctx, 'send') : undefined;
      const out = await sendMessage(ctx.svc, { account: ctx.account, key: ctx.key, boxScope: ctx.boxScope, ...(checks ? { checks } : {}) }, input);
      return checks
        ? withEvidence(ctx, out, { capability: 'messages.send', checks, idempotencyKey: input.idempotency_key, next: bundleStep(ctx.svc, out.message_id) })
        : out;
    }),
  reply: keyProcedure
    .meta({
      errors: [
        'box_restricted_key',
        'domain_not_verified',
        'from_domain_mismatch',
        'idempotency_key_reused',
        'not_found',
        'payment_required',
        'recipient_blocked',
      ],
      scope: 'send',
      openapi: {
        method: 'POST',
        path: '/messages/{id}/reply',
        tags: ['messages'],
        summary: 'Reply to a message',
        description:
          "Sends a reply with the rules, billing and answer of POST /messages/send. To: the Reply-To of the original, else its From (a sent original: its To); reply_all adds its To and Cc as Cc, without the sending box. Subject: \"Re: \" once (an existing Re:, RE:, Aw:, Sv: is kept). In-Reply-To: the original's Message-ID; References: its References plus its Message-ID (the first and the newest 19 when longer). From: the box that received the original. context: the original's unless given. The reply joins the original's thread (thread_id). A box-restricted key replies only to messages of its boxes.",
      },
    })
    .input(MessageReplyInput)
    .output(SendOutput)
    .mutation(async ({ ctx, input }) => {
      const checks = ctx.account.evidenceEnrolledAt ? keyChecks(ctx, 'send') : undefined;
      const out = await replyToMessage(ctx.svc, { account: ctx.account, key: ctx.key, boxScope: ctx.boxScope, ...(checks ? { checks } : {}) }, input);
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
      errors: ['invalid_cursor', 'not_found'],
      scope: 'receive',
      openapi: {
        method: 'GET',
        path: '/messages',
        tags: ['messages'],
        summary: 'List messages',
        description: 'Newest first. include=body adds bodies. A box-restricted key sees only its boxes. flags are those mail clients set over IMAP.',
      },
    })
    .input(ListMessagesInput)
    .output(ListMessagesOutput)
    .query(async ({ ctx, input }) => {
      const page = await listMessages(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, ...input });
      const flags = await messageFlags(
        ctx.svc,
        page.messages.map((m) => m.id),
      );
      return { ...page, messages: page.messages.map((m) => ({ ...m, flags: flags.get(m.id) ?? [] })) };
    }),
  search: keyProcedure
    .meta({
      errors: ['invalid_cursor', 'not_found'],
      scope: 'receive',
      openapi: {
        method: 'GET',
        path: '/messages/search',
        tags: ['messages'],
        summary: 'Search messages',
        description:
          'Full-text search over subject, addresses, body text and attachment text, best match first (ts_rank_cd: the subject counts most, then addresses, body, attachments). q is web search syntax: words are all required, "quoted words" follow each other, or between words means either, -word excludes; english word endings do not matter. Filters: box, direction, after/before (recorded_at), thread, label (an IMAP keyword, case-insensitive, or unread, read, flagged, answered, draft). 20 results a page (limit up to 100), next_cursor for the next. highlights mark matching words with <mark> and </mark>. A box-restricted key sees only its boxes. Privacy: bodies are encrypted at rest, the search index is not: it keeps, per message, the normalised words (stems) with their positions, never the text, so whoever reads the database learns which words a message contains. A message leaves the index when its body is reclaimed (DELETE /messages/{id}, the retention window); PUT /account/search-indexing turns the index off for the account and drops it. Messages stored before search existed are indexed by the worker shortly after an upgrade.',
      },
    })
    .input(SearchMessagesInput)
    .output(SearchMessagesOutput)
    .query(({ ctx, input }) => searchMessages(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, ...input })),
  get: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'receive',
      openapi: {
        method: 'GET',
        path: '/messages/{id}',
        tags: ['messages'],
        summary: 'Read a message',
        description: 'The full decrypted body, headers and attachments, and for sent messages each delivery.',
      },
    })
    .input(MessageIdInput)
    .output(MessageWithBody)
    .query(async ({ ctx, input }) => {
      const m = await getMessage(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, id: input.id });
      const flags = await messageFlags(ctx.svc, [m.id]);
      return { ...m, flags: flags.get(m.id) ?? [] };
    }),
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
