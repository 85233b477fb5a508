/** App-passwords: mail-client credentials for IMAP and SMTP submission (never the HTTP API). */
import { z } from 'zod';
import { Timestamp } from './common';

export const CreateAppPasswordInput = z
  .strictObject({
    label: z.string().trim().min(1).max(100).meta({ description: 'Which device or client the password is for', example: 'Thunderbird on the office laptop' }),
    box: z.string().trim().min(1).max(320).optional().meta({
      description:
        "Limit the password to this box (its address, local part or id): it then logs in only with that address and sees and sends only that box's mail. Without it the password serves every box of the account.",
      example: 'billing@brave-otter.boxes.localhost',
    }),
  })
  .meta({ id: 'CreateAppPassword' });

export const AppPasswordOutput = z
  .object({
    id: z.string().meta({ example: 'apw_0a1b2c3d4e5f6g7h8j9k' }),
    label: z.string().meta({ example: 'Thunderbird on the office laptop' }),
    box_id: z.string().nullable().meta({ description: 'The box it is limited to; null: every box of the account' }),
    box: z
      .string()
      .nullable()
      .meta({ description: 'Address of box_id (null when unrestricted, or when that box was deleted: the password then no longer works)' }),
    created_at: Timestamp,
    last_used_at: Timestamp.nullable().meta({ description: 'Last successful login, to the minute' }),
  })
  .meta({ id: 'AppPassword' });

export const MailServerSettings = z
  .object({
    host: z.string().meta({
      description: 'The host to connect to: MAIL_HOST, or on a local instance (a *.localhost MAIL_HOST) the address the server listens on',
      example: 'mail.example.com',
    }),
    port: z.number().int().meta({ example: 993 }),
    security: z.literal('ssl/tls').meta({ description: 'Implicit TLS from the first byte (not STARTTLS)' }),
  })
  .meta({ id: 'MailServerSettings' });

export const CreatedAppPasswordOutput = AppPasswordOutput.extend({
  password: z
    .string()
    .meta({ description: 'The app-password: four groups of four base32 characters. Shown once; it cannot be recovered.', example: 'K7QF-M2XA-PL4D-WRTZ' }),
  usernames: z.array(z.string()).meta({
    description:
      "Usernames it logs in with. The owner's email sees every box (INBOX, Sent, ... of the primary box and Boxes/<local part>/... for the others); a box address sees that box's folders only. A limited password logs in only with its box's address.",
    example: ['owner@example.com', 'agent@brave-otter.boxes.localhost'],
  }),
  imap: MailServerSettings,
  smtp: MailServerSettings,
});

export const AppPasswordListOutput = z.object({ app_passwords: z.array(AppPasswordOutput) });
export const AppPasswordIdInput = z.strictObject({ id: z.string().max(40).meta({ example: 'apw_0a1b2c3d4e5f6g7h8j9k' }) });
export const RevokedAppPasswordOutput = z.object({
  id: z.string(),
  revoked: z.literal(true),
  revoked_at: Timestamp.meta({ description: 'New logins fail from now on, and open IMAP sessions are closed' }),
});

export const MailCertificateOutput = z
  .object({
    self_signed: z.boolean().meta({
      description: 'true: made by this instance (no SMTP_TLS_CERT_FILE); a mail client must be told to trust it, by this certificate or its fingerprint',
    }),
    sha256_fingerprint: z
      .string()
      .meta({ description: 'SHA-256 of the certificate (DER), as `openssl x509 -fingerprint -sha256` prints it', example: '3A:1F:...:9C' }),
    certificate_pem: z.string().meta({ description: "The certificate (PEM): mbsync's CertificateFile, or a trust anchor for any TLS client" }),
    names: z
      .array(z.string())
      .meta({ description: 'The host names and addresses it is valid for', example: ['mail.boxes.localhost', 'localhost', '127.0.0.1'] }),
    not_after: Timestamp,
  })
  .meta({ id: 'MailCertificate' });
