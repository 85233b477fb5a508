/** Drafts: save, read, change, list, delete, and send through the rules of POST /messages/send. */
import { z } from 'zod';
import { createDraft, deleteDraft, getDraft, listDrafts, sendDraft, updateDraft } from '@boxes/core';
import {
  CreateDraftInput,
  DeleteDraftOutput,
  Draft,
  DraftIdInput,
  GetDraftInput,
  ListDraftsInput,
  ListDraftsOutput,
  Review,
  SendDraftOutput,
  UpdateDraftInput,
} from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

const SAVE_RULES =
  'A draft may be incomplete (no recipient, subject or body yet); what it has must be well formed: addresses (address or Name <address>), a subject without line breaks, base64 attachments, at most 50 recipients, a rendered size within the instance limit for a message (400 validation_error naming the field). from is a box of the account (default the primary one; 403 box_restricted_key for a box outside the key). in_reply_to is a message the key sees (404 otherwise). send_at is checked as on a send (in the future, at most 30 days ahead). The draft shows in the Drafts folder of its box for mail clients (IMAP), under a new UID after every change.';

export const draftsRouter = router({
  create: keyProcedure
    .meta({
      errors: ['box_restricted_key', 'not_found'],
      scope: 'send',
      openapi: {
        method: 'POST',
        path: '/drafts',
        tags: ['drafts'],
        summary: 'Save a draft',
        description: `Saves a message to send later with POST /drafts/{id}/send. Fields as on POST /messages/send: from, to, cc, bcc, subject, text, html, attachments (the same shape), send_at; in_reply_to makes it a reply to a message of the account (without to, it takes the reply's recipients and "Re:" subject; reply_all adds the original's To and Cc). ${SAVE_RULES}`,
      },
    })
    .input(CreateDraftInput)
    .output(Draft)
    .mutation(({ ctx, input }) => createDraft(ctx.svc, { account: ctx.account, boxScope: ctx.boxScope }, input)),
  list: keyProcedure
    .meta({
      errors: ['invalid_cursor', 'not_found'],
      scope: 'send',
      openapi: {
        method: 'GET',
        path: '/drafts',
        tags: ['drafts'],
        summary: 'List drafts',
        description:
          "The account's drafts, newest first (by creation), or one box's (box=<id or address>); include=body adds text and html. Paged: limit (default 50, at most 200) and next_cursor. A sent draft is no longer listed (its message names it as draft_id). A box-restricted key sees only the drafts of its boxes.",
      },
    })
    .input(ListDraftsInput)
    .output(ListDraftsOutput)
    .query(({ ctx, input }) => listDrafts(ctx.svc, { account: ctx.account, boxScope: ctx.boxScope }, input)),
  get: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'send',
      openapi: {
        method: 'GET',
        path: '/drafts/{id}',
        tags: ['drafts'],
        summary: 'Read a draft',
        description:
          'The draft with its text, html and attachments (their bytes with include=attachment_content), whether it is ready to send (a recipient and a body), and its UID in the Drafts folder. 404 once it was sent or deleted.',
      },
    })
    .input(GetDraftInput)
    .output(Draft)
    .query(({ ctx, input }) => getDraft(ctx.svc, { account: ctx.account, boxScope: ctx.boxScope }, input)),
  update: keyProcedure
    .meta({
      errors: ['box_restricted_key', 'conflict', 'not_found'],
      scope: 'send',
      openapi: {
        method: 'PUT',
        path: '/drafts/{id}',
        tags: ['drafts'],
        summary: 'Change a draft',
        description: `The fields given replace the draft's; fields left out keep their value; null clears one (to, cc, bcc, subject, text, html, attachments, in_reply_to, send_at). attachments replaces the whole list. Changes made at the same moment all apply, one after the other (409 conflict only if the draft keeps changing under a call). ${SAVE_RULES}`,
      },
    })
    .input(UpdateDraftInput)
    .output(Draft)
    .mutation(({ ctx, input }) => updateDraft(ctx.svc, { account: ctx.account, boxScope: ctx.boxScope }, input)),
  delete: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'send',
      openapi: {
        method: 'DELETE',
        path: '/drafts/{id}',
        tags: ['drafts'],
        summary: 'Delete a draft',
        description: 'The draft goes, and leaves the Drafts folder of mail clients. Nothing is sent.',
      },
    })
    .input(DraftIdInput)
    .output(DeleteDraftOutput)
    .mutation(({ ctx, input }) => deleteDraft(ctx.svc, { account: ctx.account, boxScope: ctx.boxScope }, input.id)),
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
        'not_found',
        'payment_required',
        'recipient_blocked',
      ],
      scope: 'send',
      reviewable: true,
      openapi: {
        method: 'POST',
        path: '/drafts/{id}/send',
        tags: ['drafts'],
        summary: 'Send a draft',
        description:
          "Sends the draft as POST /messages/send sends a message (a draft with in_reply_to as POST /messages/{id}/reply does, with the draft's recipients and subject when it has them): the same validation (a draft without recipients or body is refused with 400 validation_error), credit (402), suppression, allow and block lists, scopes and box restrictions, and the same answer, with draft_id. With send_at it becomes a scheduled send (cancel with POST /messages/{id}/cancel). The draft is then gone from GET /drafts and the message names it (draft_id). A draft is sent once: sending it again (or twice at the same moment) answers the same message with idempotent_replay: true. When owner review holds the send (the box's or the key's policy), the answer is 202 with the Review and the draft is gone: the review holds its content (GET /reviews/{id}).",
      },
    })
    .input(DraftIdInput)
    .output(z.union([SendDraftOutput, Review]))
    .mutation(async ({ ctx, input }) => {
      return sendDraft(ctx.svc, { account: ctx.account, key: ctx.key, boxScope: ctx.boxScope }, input.id);
    }),
});
