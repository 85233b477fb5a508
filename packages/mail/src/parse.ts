/** Parsing incoming RFC 5322 messages with mailparser into the shape Boxes stores. */
import { simpleParser, type AddressObject, type ParsedMail } from 'mailparser';

export interface ParsedAttachment {
  filename: string | null;
  contentType: string;
  size: number;
  contentId: string | null;
  content: Buffer;
}

export interface ParsedMessage {
  messageId: string | null;
  inReplyTo: string | null;
  references: string[];
  from: string | null;
  to: string[];
  cc: string[];
  replyTo: string[];
  subject: string | null;
  date: string | null;
  text: string | null;
  html: string | null;
  headers: Record<string, string>;
  attachments: ParsedAttachment[];
  /** The mailparser result, for report parsing (DSN, ARF). */
  mail: ParsedMail;
}

function addresses(v: AddressObject | AddressObject[] | undefined): string[] {
  const list = Array.isArray(v) ? v : v ? [v] : [];
  return list.flatMap((a) =>
    a.value
      .flatMap((e) => (e.group ? e.group : [e]))
      .map((e) => e.address?.toLowerCase())
      .filter((x): x is string => !!x),
  );
}

const idList = (v: string | string[] | undefined): string[] => (Array.isArray(v) ? v : v ? v.split(/\s+/) : []).map((s) => s.trim()).filter(Boolean);

export async function parseMessage(raw: Buffer): Promise<ParsedMessage> {
  // keepDeliveryStatus: DSN status parts stay attachments (reports.ts reads them there) instead of joining the text.
  const mail = await simpleParser(raw, { skipImageLinks: true, skipTextLinks: true, maxHtmlLengthToParse: 2_000_000, keepDeliveryStatus: true });
  // A Map, not a plain object: a header named constructor or toString would find Object's member and be joined
  // to it, and one named __proto__ would be lost.
  const headers = new Map<string, string>();
  for (const line of mail.headerLines) {
    const value = line.line
      .slice(line.line.indexOf(':') + 1)
      .replace(/\r?\n[ \t]+/g, ' ')
      .trim();
    const before = headers.get(line.key);
    headers.set(line.key, before ? `${before}, ${value}` : value);
  }
  return {
    messageId: mail.messageId ?? null,
    inReplyTo: idList(mail.inReplyTo)[0] ?? null,
    references: idList(mail.references),
    from: addresses(mail.from)[0] ?? null,
    to: addresses(mail.to),
    cc: addresses(mail.cc),
    replyTo: addresses(mail.replyTo),
    subject: mail.subject ?? null,
    date: mail.date ? mail.date.toISOString() : null,
    text: mail.text ?? null,
    html: typeof mail.html === 'string' ? mail.html : null,
    headers: Object.fromEntries(headers),
    attachments: mail.attachments.map((a) => ({
      filename: a.filename ?? null,
      contentType: a.contentType,
      size: a.size,
      contentId: a.contentId ?? a.cid ?? null,
      content: a.content,
    })),
    mail,
  };
}
