/** Building outgoing MIME with nodemailer's MailComposer, and DKIM-signing it with nodemailer's signer. */
import MailComposer from 'nodemailer/lib/mail-composer';
import DKIM from 'nodemailer/lib/dkim';

export interface OutgoingAttachment {
  filename: string;
  content: Buffer;
  contentType: string;
  /** Makes the attachment inline (Content-ID), so HTML can reference it as cid:<contentId>. */
  contentId?: string | undefined;
}

export interface OutgoingMail {
  from: { name?: string | undefined; address: string };
  to: string[];
  cc: string[];
  replyTo: string[];
  subject: string;
  text?: string | undefined;
  html?: string | undefined;
  /** Custom headers, already validated (no reserved names, no line breaks). */
  headers: Record<string, string>;
  attachments: OutgoingAttachment[];
  /** Message-ID including angle brackets. */
  messageId: string;
  date: Date;
  inReplyTo?: string | undefined;
  references?: string[] | undefined;
}

/** The RFC 5322 message, without Bcc (bcc recipients only appear in the SMTP envelope). */
export async function composeMessage(m: OutgoingMail): Promise<Buffer> {
  const composer = new MailComposer({
    from: m.from.name ? { name: m.from.name, address: m.from.address } : m.from.address,
    to: m.to,
    cc: m.cc.length ? m.cc : undefined,
    replyTo: m.replyTo.length ? m.replyTo : undefined,
    subject: m.subject,
    text: m.text,
    html: m.html,
    headers: m.headers,
    messageId: m.messageId,
    date: m.date,
    inReplyTo: m.inReplyTo,
    references: m.references,
    attachments: m.attachments.map((a) => ({
      filename: a.filename,
      content: a.content,
      contentType: a.contentType,
      ...(a.contentId ? { cid: a.contentId, contentDisposition: 'inline' as const } : {}),
    })),
    // Content comes only from the request: never let a value be read as a file path or URL.
    disableFileAccess: true,
    disableUrlAccess: true,
  });
  return composer.compile().build();
}

export interface DkimKey {
  domainName: string;
  keySelector: string;
  /** PKCS#8 PEM. */
  privateKey: string;
}

export async function dkimSign(raw: Buffer, key: DkimKey): Promise<Buffer> {
  const signer = new DKIM({ domainName: key.domainName, keySelector: key.keySelector, privateKey: key.privateKey });
  const chunks: Buffer[] = [];
  for await (const chunk of signer.sign(raw)) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}
