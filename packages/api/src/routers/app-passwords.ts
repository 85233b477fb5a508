/** App-passwords for mail clients: mint, list, revoke (admin scope, unrestricted key). */
import { z } from 'zod';
import { createAppPassword, listAppPasswords, revokeAppPassword } from '@boxes/core';
import { AppPasswordIdInput, AppPasswordListOutput, CreateAppPasswordInput, CreatedAppPasswordOutput, RevokedAppPasswordOutput } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

export const appPasswordsRouter = router({
  create: keyProcedure
    .meta({
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'POST',
        path: '/account/app-passwords',
        tags: ['app-passwords'],
        summary: 'Create an app-password for a mail client',
        description:
          'A password for IMAP (implicit TLS, 993 in production) and SMTP submission (implicit TLS, 465), never for this API. The value (four groups of four base32 characters) is returned only here and stored as an scrypt hash. box limits it to one box. Appends account.app_password.created.',
      },
    })
    .input(CreateAppPasswordInput)
    .output(CreatedAppPasswordOutput)
    .mutation(async ({ ctx, input }) => {
      const { view, password, usernames } = await createAppPassword({
        db: ctx.svc.db,
        secretKey: ctx.svc.secretKey,
        accountId: ctx.account.id,
        label: input.label,
        box: input.box,
        actorKeyId: ctx.key.id,
      });
      const mc = ctx.svc.config.mailClients;
      return {
        ...view,
        password,
        usernames,
        imap: { host: mc.imapPublicHost, port: mc.imapPort, security: 'ssl/tls' as const },
        smtp: { host: mc.submissionPublicHost, port: mc.submissionPort, security: 'ssl/tls' as const },
      };
    }),
  list: keyProcedure
    .meta({
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'GET',
        path: '/account/app-passwords',
        tags: ['app-passwords'],
        summary: 'List app-passwords',
        description: 'Active app-passwords; never their values.',
      },
    })
    .input(z.void())
    .output(AppPasswordListOutput)
    .query(async ({ ctx }) => ({ app_passwords: await listAppPasswords({ db: ctx.svc.db, accountId: ctx.account.id }) })),
  revoke: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'DELETE',
        path: '/account/app-passwords/{id}',
        tags: ['app-passwords'],
        summary: 'Revoke an app-password',
        description:
          'New logins with it fail at once and open IMAP sessions that used it are closed (on every instance). Appends account.app_password.revoked.',
      },
    })
    .input(AppPasswordIdInput)
    .output(RevokedAppPasswordOutput)
    .mutation(({ ctx, input }) => revokeAppPassword({ db: ctx.svc.db, accountId: ctx.account.id, id: input.id, actorKeyId: ctx.key.id })),
});
