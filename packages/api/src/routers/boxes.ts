/** Boxes: create (admin), list (any key; box-restricted keys see their boxes), delete and signature (admin). */
import { z } from 'zod';
import { capsInput, createBox, deleteBox, listBoxes, presentBox, setBoxReview, setSignature } from '@boxes/core';
import { BoxIdInput, BoxListOutput, BoxOutput, CreateBoxInput, Deleted, SignatureInput, UpdateBoxInput } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

export const boxesRouter = router({
  create: keyProcedure
    .meta({
      errors: ['box_exists'],
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'POST',
        path: '/boxes',
        tags: ['boxes'],
        summary: 'Create a box',
        description:
          "address is a local part (RFC 5322 dot-atom, at most 64 characters, stored lower-case) on the account domain. Boxes are free and unlimited. caps (optional) sets its send caps (PUT /boxes/{id}/caps changes them). review sets the owner review of the box's sends (none, new_recipients or all; default none): see GET /reviews.",
      },
    })
    .input(CreateBoxInput)
    .output(BoxOutput)
    .mutation(async ({ ctx, input }) =>
      presentBox(
        await createBox({
          db: ctx.svc.db,
          accountId: ctx.account.id,
          address: input.address,
          sendCaps: capsInput(input.caps),
          ...(input.review ? { review: input.review } : {}),
        }),
      ),
    ),
  update: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'admin',
      openapi: {
        method: 'PATCH',
        path: '/boxes/{id}',
        tags: ['boxes'],
        summary: "Set a box's owner review policy",
        description:
          "review: none (sends go at once), new_recipients (a send naming any address the box never wrote to nor heard from waits for the owner's approval) or all (every send waits). The stricter of the box's and the sending key's policy applies. A change appends box.review_updated; making it less strict also emails the owner.",
      },
    })
    .input(UpdateBoxInput)
    .output(BoxOutput)
    .mutation(async ({ ctx, input }) =>
      presentBox(
        await setBoxReview({ db: ctx.svc.db, accountId: ctx.account.id, scope: ctx.boxScope, boxId: input.id, review: input.review, keyId: ctx.key.id }),
      ),
    ),
  list: keyProcedure
    .meta({ openapi: { method: 'GET', path: '/boxes', tags: ['boxes'], summary: 'List boxes', description: 'A box-restricted key sees only its boxes.' } })
    .input(z.void())
    .output(BoxListOutput)
    .query(async ({ ctx }) => ({
      boxes: (await listBoxes({ db: ctx.svc.db, accountId: ctx.account.id, scope: ctx.boxScope })).map(presentBox),
    })),
  delete: keyProcedure
    .meta({
      errors: ['not_found', 'primary_box'],
      scope: 'admin',
      openapi: {
        method: 'DELETE',
        path: '/boxes/{id}',
        tags: ['boxes'],
        summary: 'Delete a box',
        description: 'The primary box cannot be deleted (409 primary_box).',
      },
    })
    .input(BoxIdInput)
    .output(Deleted)
    .mutation(({ ctx, input }) => deleteBox({ db: ctx.svc.db, accountId: ctx.account.id, scope: ctx.boxScope, boxId: input.id })),
  setSignature: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'admin',
      openapi: {
        method: 'PUT',
        path: '/boxes/{id}/signature',
        tags: ['boxes'],
        summary: "Set a box's signature",
        description: 'Plain text (at most 4000 characters) appended to every message sent from the box; null removes it.',
      },
    })
    .input(SignatureInput)
    .output(BoxOutput)
    .mutation(async ({ ctx, input }) =>
      presentBox(await setSignature({ db: ctx.svc.db, accountId: ctx.account.id, scope: ctx.boxScope, boxId: input.id, signature: input.signature })),
    ),
});
