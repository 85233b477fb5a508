// Shared by the imap-*.test.ts files: mail into a box through the real MX, clients on the implicit-TLS IMAP
// port, and app-passwords.
import { ImapFlow } from 'imapflow';
import { rest, type TestAccount, type TestServer } from '@boxes/testing';
import { crlf, sendRaw } from './mail-receive-helpers';

export { execFileAsync, requireTool, waitFor } from './mail-receive-helpers';

export async function appPassword(
  t: TestServer,
  account: TestAccount,
  body: Record<string, unknown> = { label: 'imap test' },
): Promise<{ id: string; password: string }> {
  const r = await rest(t, 'POST', '/account/app-passwords', { key: account.apiKey, body });
  if (r.status !== 200) throw new Error(`app-password: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

/** A multipart message: a text part, an html part and an attachment. */
export function multipartMessage(opts: { from: string; to: string; subject: string; text: string; attachment?: string; messageId?: string }): string {
  const b = `b-${Math.random().toString(36).slice(2)}`;
  const alt = `a-${Math.random().toString(36).slice(2)}`;
  return crlf(
    [
      `From: Sender Person <${opts.from}>`,
      `To: ${opts.to}`,
      `Subject: ${opts.subject}`,
      `Date: ${new Date().toUTCString()}`,
      `Message-ID: ${opts.messageId ?? `<${Math.random().toString(36).slice(2)}@outside.test>`}`,
      'MIME-Version: 1.0',
      `Content-Type: multipart/mixed; boundary="${b}"`,
      '',
      'This is a multi-part message in MIME format.',
      `--${b}`,
      `Content-Type: multipart/alternative; boundary="${alt}"`,
      '',
      `--${alt}`,
      'Content-Type: text/plain; charset=utf-8',
      'Content-Transfer-Encoding: 7bit',
      '',
      opts.text,
      `--${alt}`,
      'Content-Type: text/html; charset=utf-8',
      '',
      `<p>${opts.text}</p>`,
      `--${alt}--`,
      `--${b}`,
      'Content-Type: text/plain; name="notes.txt"',
      'Content-Disposition: attachment; filename="notes.txt"',
      'Content-Transfer-Encoding: base64',
      '',
      Buffer.from(opts.attachment ?? 'attached notes').toString('base64'),
      `--${b}--`,
      '',
    ].join('\n'),
  );
}

/** Delivers raw bytes to addresses of this instance through its MX. */
export async function deliver(t: TestServer, to: string[], raw: string): Promise<void> {
  await sendRaw(t.smtpPort!, { from: 'sender@outside.test', to }, raw);
}

export function imapClient(t: TestServer, user: string, pass: string): ImapFlow {
  return new ImapFlow({
    host: '127.0.0.1',
    port: t.imapPort!,
    secure: true,
    tls: { rejectUnauthorized: false },
    auth: { user, pass },
    logger: false,
    disableAutoIdle: true,
  });
}

/** Connects, runs fn, logs out. */
export async function withImap<T>(t: TestServer, user: string, pass: string, fn: (c: ImapFlow) => Promise<T>): Promise<T> {
  const c = imapClient(t, user, pass);
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.logout().catch(() => undefined);
  }
}

/**
 * An mbsync (isync) configuration syncing every folder of an account over implicit TLS into a Maildir, trusting
 * only `certificate` (CertificateFile). With expunge, deletions flow both ways.
 */
export function mbsyncConfig(o: { port: number; user: string; password: string; certificate: string; maildir: string; expunge?: boolean }): string {
  return `IMAPAccount boxes
Host 127.0.0.1
Port ${o.port}
User ${o.user}
Pass ${o.password}
SSLType IMAPS
CertificateFile ${o.certificate}

IMAPStore remote
Account boxes

MaildirStore local
Path ${o.maildir}/
Inbox ${o.maildir}/INBOX
SubFolders Verbatim

Channel boxes
Far :remote:
Near :local:
Patterns *
Create Near
${o.expunge ? 'Expunge Both\n' : ''}SyncState *
`;
}
