/**
 * extracted_text: the new text of a received reply, without the quoted history ("On ... wrote:", Outlook's
 * "From:/Sent:" block and "-----Original Message-----", "> " quotes) and signature blocks ("-- ", "Sent from
 * my iPhone"), so an agent reads only what is new. email-reply-parser (a maintained port of GitHub's
 * EmailReplyParser) does the work; it runs when a body is read, never on the inbound path.
 */
import EmailReplyParser from 'email-reply-parser';

const parser = new EmailReplyParser();

export function extractReplyText(text: string | null): string | null {
  if (text === null) return null;
  try {
    return parser.parseReply(text.replace(/\r\n/g, '\n')).trim();
  } catch {
    return text.trim();
  }
}
