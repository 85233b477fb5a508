/**
 * A message submitted by a mail client, turned into the request POST /messages/send takes, so it goes through
 * the same core path (credit, suppression, header rules, signature, trailer, DKIM, events, the Sent copy).
 * To and Cc come from the headers and must be envelope recipients; envelope recipients the headers do not name
 * are the Bcc. The headers Boxes writes itself (Message-ID, Date, MIME structure) are taken from the message
 * as fields, client noise (User-Agent, X-Mailer, ...) is dropped, and every other header is passed on under the
 * same rules as the API's `headers`.
 */
import { parseMessage } from '@boxes/mail';
import { formatMailbox } from '@boxes/core';
import { PROTO_KEY, PROTO_KEY_REFUSED, SendInput } from '@boxes/schemas';
import type { AddressObject } from 'mailparser';
import type { z } from 'zod';

export class SubmissionRefused extends Error {
  constructor(
    readonly responseCode: number,
    message: string,
  ) {
    super(message);
  }
}

/** Headers that become fields of the send, or that Boxes writes itself. */
const CONSUMED = new Set([
  'message-id',
  'date',
  'from',
  'to',
  'cc',
  'bcc',
  'sender',
  'subject',
  'reply-to',
  'mime-version',
  'content-type',
  'content-transfer-encoding',
  'content-disposition',
  'content-id',
  'content-description',
  'return-path',
  'received',
  'dkim-signature',
]);

/** Headers mail clients add on their own that say nothing to the recipient. */
const NOISE =
  /^(user-agent|x-mailer|content-language|thread-index|thread-topic|x-mozilla-.*|x-ms-.*|x-microsoft-.*|autocrypt|openpgp|x-priority|importance|priority|x-mimeole|x-originating-ip|accept-language|x-account-key|x-identity-key|fcc|x-draft-info|x-uniform-type-identifier|x-universally-unique-identifier)$/i;

const MIME_TYPE = /^[\w.+-]+\/[\w.+-]+$/;

function mailboxes(v: AddressObject | AddressObject[] | undefined): { name: string | undefined; address: string }[] {
  const list = Array.isArray(v) ? v : v ? [v] : [];
  return list
    .flatMap((a) => a.value.flatMap((e) => (e.group ? e.group : [e])))
    .filter((e) => !!e.address)
    .map((e) => ({ name: e.name || undefined, address: e.address!.toLowerCase() }));
}

export interface Submission {
  input: z.infer<typeof SendInput>;
  /** The From header's address (lower case). */
  from: string;
}

export async function toSendInput(raw: Buffer, envelopeRecipients: string[]): Promise<Submission> {
  const parsed = await parseMessage(raw);
  const mail = parsed.mail;
  const from = mailboxes(mail.from);
  if (from.length !== 1) throw new SubmissionRefused(550, '5.6.0 The message needs exactly one From address, a box of yours');
  const to = mailboxes(mail.to);
  const cc = mailboxes(mail.cc);
  const rcpts = new Set(envelopeRecipients.map((r) => r.toLowerCase()));
  const named = [...to, ...cc];
  const outside = named.filter((m) => !rcpts.has(m.address));
  if (outside.length) {
    throw new SubmissionRefused(550, `5.5.4 To/Cc name addresses that are not envelope recipients (RCPT TO): ${outside.map((m) => m.address).join(', ')}`);
  }
  const namedSet = new Set(named.map((m) => m.address));
  const bcc = [...rcpts].filter((r) => !namedSet.has(r));
  if (!to.length) throw new SubmissionRefused(550, '5.6.0 The message needs at least one To recipient (Bcc-only messages are not supported)');

  // The first of each name, whatever its case, as written (a Map: a plain object would take a header named
  // toString or constructor for one already seen, and drop it).
  const headers = new Map<string, { name: string; value: string }>();
  for (const line of mail.headerLines) {
    const key = line.key.toLowerCase();
    if (CONSUMED.has(key) || NOISE.test(key) || key.startsWith('resent-')) continue;
    const name = line.line.slice(0, line.line.indexOf(':')).trim();
    const value = line.line
      .slice(line.line.indexOf(':') + 1)
      .replace(/\r?\n[ \t]+/g, ' ')
      .trim();
    if (!headers.has(key)) headers.set(key, { name, value });
  }
  if (headers.get(PROTO_KEY)?.name === PROTO_KEY)
    throw new SubmissionRefused(554, `5.6.0 The message cannot be sent: headers.${PROTO_KEY}: ${PROTO_KEY_REFUSED}`);

  const html = typeof mail.html === 'string' ? mail.html : undefined;
  const attachments = mail.attachments.map((a, i) => ({
    filename: (a.filename ?? '').slice(0, 255) || `attachment-${i + 1}`,
    content_b64: a.content.toString('base64'),
    content_type: MIME_TYPE.test(a.contentType) ? a.contentType : 'application/octet-stream',
    // Inline parts of an html body keep their Content-ID so cid: references resolve.
    ...(html !== undefined && a.cid && (a.related || a.contentDisposition === 'inline') ? { content_id: a.cid.replace(/[<>\s]/g, '') } : {}),
  }));

  const request = {
    from: formatMailbox(from[0]!),
    to: to.map(formatMailbox),
    ...(cc.length ? { cc: cc.map(formatMailbox) } : {}),
    ...(bcc.length ? { bcc } : {}),
    subject: mail.subject ?? '',
    ...(mail.text !== undefined ? { text: mail.text } : {}),
    ...(html !== undefined ? { html } : {}),
    ...(mailboxes(mail.replyTo).length ? { reply_to: mailboxes(mail.replyTo).map(formatMailbox) } : {}),
    ...(headers.size ? { headers: Object.fromEntries([...headers.values()].map((h) => [h.name, h.value])) } : {}),
    ...(attachments.length ? { attachments } : {}),
  };
  const checked = SendInput.safeParse(request);
  if (!checked.success) {
    const why = checked.error.issues.map((i) => `${i.path.join('.') || 'message'}: ${i.message}`).join('; ');
    throw new SubmissionRefused(554, `5.6.0 The message cannot be sent: ${why}`);
  }
  return { input: checked.data, from: from[0]!.address };
}
