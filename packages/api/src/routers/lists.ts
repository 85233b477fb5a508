/**
 * Allow and block lists (per account or per box, for receiving, sending or both) and each box's receiving
 * policy (allow-list mode, verified senders only, what spam does). Reading needs any key; changes need admin,
 * and an account-wide entry a key not restricted to boxes.
 */
import { addEntry, getBoxPolicy, listEntries, removeEntry, setBoxPolicy } from '@boxes/core';
import {
  AddListEntryInput,
  AddListEntryOutput,
  BoxIdInput,
  BoxPolicy,
  Deleted,
  ListEntriesInput,
  ListEntriesOutput,
  ListEntryIdInput,
  SetBoxPolicyInput,
} from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

const LISTS_DOC =
  'An entry is an address or a domain (covering its subdomains), on the allow or the block list, for receive, send or both, for one box or the whole account. ' +
  'Receiving: a sender blocked by envelope (MAIL FROM) is refused at RCPT with 550, by From header after DATA with 550; refused mail is counted on the box (refused_count) and never stored or charged. ' +
  'Sending: POST /messages/send to a blocked recipient is refused with 403 recipient_blocked. An allow entry naming the exact address beats a block of its domain.';

export const listsRouter = router({
  list: keyProcedure
    .meta({
      errors: ['not_found'],
      openapi: {
        method: 'GET',
        path: '/lists',
        tags: ['lists'],
        summary: 'List allow and block entries',
        description: `${LISTS_DOC} A box-restricted key sees the account's entries and those of its boxes.`,
      },
    })
    .input(ListEntriesInput)
    .output(ListEntriesOutput)
    .query(({ ctx, input }) =>
      listEntries({ db: ctx.svc.db, accountId: ctx.account.id, scope: ctx.boxScope, box: input.box, list: input.list, direction: input.direction }),
    ),
  add: keyProcedure
    .meta({
      errors: ['box_restricted_key', 'conflict', 'not_found'],
      scope: 'admin',
      openapi: {
        method: 'POST',
        path: '/lists',
        tags: ['lists'],
        summary: 'Add an allow or block entry',
        description: `${LISTS_DOC} Adding the same entry again returns it with created false.`,
      },
    })
    .input(AddListEntryInput)
    .output(AddListEntryOutput)
    .mutation(({ ctx, input }) =>
      addEntry({
        db: ctx.svc.db,
        accountId: ctx.account.id,
        scope: ctx.boxScope,
        list: input.list,
        direction: input.direction,
        value: input.value,
        box: input.box,
        note: input.note,
      }),
    ),
  remove: keyProcedure
    .meta({ errors: ['not_found'], scope: 'admin', openapi: { method: 'DELETE', path: '/lists/{id}', tags: ['lists'], summary: 'Remove an entry' } })
    .input(ListEntryIdInput)
    .output(Deleted)
    .mutation(({ ctx, input }) => removeEntry({ db: ctx.svc.db, accountId: ctx.account.id, scope: ctx.boxScope, id: input.id })),
  getPolicy: keyProcedure
    .meta({
      errors: ['not_found'],
      openapi: {
        method: 'GET',
        path: '/boxes/{id}/policy',
        tags: ['lists'],
        summary: "A box's receiving policy",
        description: 'receive_mode (open or allow_list), require_verified_sender, spam_action (label or refuse), and how many messages were refused.',
      },
    })
    .input(BoxIdInput)
    .output(BoxPolicy)
    .query(({ ctx, input }) => getBoxPolicy({ db: ctx.svc.db, accountId: ctx.account.id, scope: ctx.boxScope, boxId: input.id })),
  setPolicy: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'admin',
      openapi: {
        method: 'PUT',
        path: '/boxes/{id}/policy',
        tags: ['lists'],
        summary: "Set a box's receiving policy",
        description:
          'allow_list: only senders whose From header an allow entry (of the box or the account, direction receive or both) matches are accepted; with require_verified_sender also only when DMARC passes. spam_action refuse: an rspamd spam verdict is refused with 550 (needs RSPAMD_URL). Fields left out keep their value.',
      },
    })
    .input(SetBoxPolicyInput)
    .output(BoxPolicy)
    .mutation(({ ctx, input }) =>
      setBoxPolicy({
        db: ctx.svc.db,
        accountId: ctx.account.id,
        scope: ctx.boxScope,
        boxId: input.id,
        receiveMode: input.receive_mode,
        requireVerifiedSender: input.require_verified_sender,
        spamAction: input.spam_action,
      }),
    ),
});
