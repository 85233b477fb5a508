/** What mail clients need to trust the IMAP and submission servers: their certificate and its fingerprint. */
import { z } from 'zod';
import { AppError, mailCertificate } from '@boxes/core';
import { MailCertificateOutput } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

export const mailClientsRouter = router({
  certificate: keyProcedure
    .meta({
      errors: ['not_found'],
      openapi: {
        method: 'GET',
        path: '/mail-clients/certificate',
        tags: ['app-passwords'],
        summary: 'The certificate of the mail servers',
        description:
          'Any valid key. The TLS certificate IMAP, SMTP submission and the MX present, with its SHA-256 fingerprint, to pin in a mail client. A self-signed one (no SMTP_TLS_CERT_FILE) is made once and kept, so a client that pinned it keeps connecting across restarts.',
      },
    })
    .input(z.void())
    .output(MailCertificateOutput)
    .query(async ({ ctx }) => {
      const tls = await mailCertificate(ctx.svc);
      if (!tls)
        throw new AppError(
          'not_found',
          'No mail server has started on this instance yet, so it keeps no certificate: start the mail apps (boxes start mx, or pnpm start)',
        );
      return {
        self_signed: tls.selfSigned,
        sha256_fingerprint: tls.sha256,
        certificate_pem: tls.cert,
        names: tls.names,
        not_after: tls.notAfter.toISOString(),
      };
    }),
});
