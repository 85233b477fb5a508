/**
 * Machine-readable reports that arrive at the mail exchanger: delivery status notifications (RFC 3464, and the
 * internationalized message/global-delivery-status of RFC 6533) and abuse feedback reports (ARF, RFC 5965).
 *
 * Works on the ParsedMail that parseMessage produces (mailparser 3.9.31 with default options). How mailparser
 * exposes the parts of a multipart/report:
 * - message/delivery-status without a Content-Disposition, or with "inline" (what Postfix, Exim and most MTAs
 *   send), is treated as a text part: its decoded text is appended to `mail.text` after the human-readable part,
 *   and it is NOT in `mail.attachments`. Only with Content-Disposition: attachment (or the parser option
 *   keepDeliveryStatus) is it an attachment. So both places are read here.
 * - message/global-delivery-status, message/feedback-report, text/rfc822-headers and message/global-headers are
 *   always attachments (content is a Buffer, already transfer-decoded).
 * - message/rfc822 is an attachment unless it carries Content-Disposition: inline (and a 7bit/8bit/binary
 *   encoding); then mailparser expands it in place and its headers (Message-ID among them) are not exposed.
 * - Parts of such an expanded message that are attachments get a dotted partId ("3.2"); direct children of the
 *   top-level multipart/report have "1", "2", "3". Only direct children are used, so an attachment inside the
 *   returned original cannot pass for a report part.
 *
 * Everything read is capped (64 KiB per part) and nothing here throws: a malformed report gives null, or a
 * partial result when some recipient blocks are intact. Note that reports are unauthenticated mail like any
 * other: anyone can send one.
 */
import type { Attachment, ParsedMail } from 'mailparser';
import addressparser from 'nodemailer/lib/addressparser';

export interface DeliveryStatusRecipient {
  /** Final-Recipient (or Original-Recipient) address, lower-cased, address type ("rfc822;") stripped. */
  address: string;
  /** Action: failed | delayed | delivered | relayed | expanded */
  action: string;
  /** Status, e.g. "5.1.1" */
  status: string | null;
  /** Diagnostic-Code text without its type ("smtp;"), or null */
  diagnostic: string | null;
  /** true when action is failed and status class is 5 (a hard bounce) */
  permanent: boolean;
}

export interface DeliveryStatusReport {
  kind: 'dsn';
  /** Reporting MTA (Reporting-MTA field, without the "dns;" type), or null. */
  reportingMta: string | null;
  /**
   * Message-ID (with angle brackets) of the original message, from the returned message/rfc822 (message/global)
   * or text/rfc822-headers (message/global-headers) part; null if absent. Original-Envelope-Id is not a
   * message id and is ignored.
   */
  originalMessageId: string | null;
  recipients: DeliveryStatusRecipient[];
}

export interface FeedbackReport {
  kind: 'arf';
  /** Feedback-Type, lower-cased, e.g. abuse */
  feedbackType: string;
  userAgent: string | null;
  /** Original-Rcpt-To addresses, lower-cased (may be empty) */
  originalRcptTo: string[];
  /** Original-Mail-From address, lower-cased; null if absent or the null sender <> */
  originalMailFrom: string | null;
  /** from the attached original message/rfc822 or text/rfc822-headers part */
  originalMessageId: string | null;
  /** Recipients of the original message (its To/Cc headers), lower-cased; used when Original-Rcpt-To is absent. */
  originalRecipients: string[];
}

export type MailReport = DeliveryStatusReport | FeedbackReport;

/** Bytes read from any one report part. */
const PART_LIMIT = 64 * 1024;
/** Characters of mail.text searched for an inline delivery-status part (human-readable part + report). */
const TEXT_LIMIT = 2 * PART_LIMIT;
const MAX_RECIPIENTS = 1000;
const MAX_DIAGNOSTIC = 2000;
const MAX_SHORT = 255;

const ACTIONS = new Set(['failed', 'delayed', 'delivered', 'relayed', 'expanded']);
const DSN_PARTS = new Set(['message/delivery-status', 'message/global-delivery-status']);
const ORIGINAL_PARTS = ['message/rfc822', 'message/global', 'text/rfc822-headers', 'message/global-headers'];

/** Fields of one block, by lower-cased name, values unfolded, in order of appearance. */
type Fields = Map<string, string[]>;

const FIELD_LINE = /^([!-9;-~]+)[ \t]*:[ \t]*(.*)$/;
const BLANK_LINE = /^[ \t]*$/;

/**
 * Splits header-style text into blocks of fields separated by blank lines; folded lines are unfolded.
 * A line that is neither a field, a continuation nor blank is either skipped ('skip': a report part, where such
 * a line is noise) or ends the current run of blocks ('split': mail.text, where the report is surrounded by
 * prose and other parts). Returns the runs, each a list of non-empty blocks.
 */
function fieldRuns(text: string, onOther: 'skip' | 'split'): Fields[][] {
  const runs: Fields[][] = [];
  let run: Fields[] = [];
  let block: Fields = new Map();
  let pending: { name: string; parts: string[] } | null = null;

  const flushField = (): void => {
    if (!pending) return;
    const value = pending.parts.join(' ').trim();
    const list = block.get(pending.name);
    if (list) list.push(value);
    else block.set(pending.name, [value]);
    pending = null;
  };
  const closeBlock = (): void => {
    flushField();
    if (block.size) run.push(block);
    block = new Map();
  };
  const closeRun = (): void => {
    closeBlock();
    if (run.length) runs.push(run);
    run = [];
  };

  for (const line of text.split(/\r\n|\r|\n/)) {
    if (BLANK_LINE.test(line)) {
      closeBlock();
    } else if ((line[0] === ' ' || line[0] === '\t') && pending) {
      pending.parts.push(line.trim());
    } else {
      const m = FIELD_LINE.exec(line);
      if (m) {
        flushField();
        pending = { name: m[1]!.toLowerCase(), parts: [m[2]!] };
      } else if (onOther === 'split') {
        closeRun();
      } else {
        flushField();
      }
    }
  }
  closeRun();
  return runs;
}

const first = (f: Fields, name: string): string | null => f.get(name)?.[0] ?? null;

const squash = (s: string, max: number): string => s.replace(/\s+/g, ' ').trim().slice(0, max);

/** "dns; mx.example.net" -> { type: 'dns', value: 'mx.example.net' }; no type -> type null. */
function typed(v: string): { type: string | null; value: string } {
  const m = /^([A-Za-z0-9][A-Za-z0-9.+-]*)[ \t]*;[ \t]*([\s\S]*)$/.exec(v);
  return m ? { type: m[1]!.toLowerCase(), value: m[2]!.trim() } : { type: null, value: v.trim() };
}

/** RFC 6533 utf-8 address type: non-ASCII as \x{HHHH}. */
function decodeEmbeddedUnicode(s: string): string {
  return s.replace(/\\x\{([0-9A-Fa-f]{1,6})\}/g, (all, hex: string) => {
    const cp = parseInt(hex, 16);
    return cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff) ? String.fromCodePoint(cp) : all;
  });
}

/** A single address out of a Final-Recipient / Original-Recipient style value ("rfc822; <User@Example.net>"). */
function typedAddress(v: string): string | null {
  const { type, value } = typed(v);
  const bracketed = /<([^<>]*)>/.exec(value);
  let addr = (bracketed ? bracketed[1]! : value.split(/[\s(]/)[0]!).trim();
  if (type === 'utf-8') addr = decodeEmbeddedUnicode(addr);
  return cleanAddress(addr);
}

function cleanAddress(addr: string): string | null {
  const a = addr.trim().toLowerCase();
  // eslint-disable-next-line no-control-regex
  return a && a.length <= 320 && !/[\s<>\x00-\x1f\x7f]/.test(a) ? a : null;
}

/** Addresses out of an address-list header value (To, Cc, Original-Rcpt-To), lower-cased. */
function listAddresses(v: string): string[] {
  return addressparser(v, { flatten: true })
    .map((a) => cleanAddress(a.address ?? ''))
    .filter((a): a is string => !!a && a.includes('@'));
}

const unique = (xs: string[]): string[] => [...new Set(xs)];

function messageIdOf(v: string | null): string | null {
  if (!v) return null;
  const m = /<[^<>\s]{1,900}>/.exec(v);
  if (m) return m[0];
  const bare = v.trim();
  return /^[^\s<>]{1,900}@[^\s<>]+$/.test(bare) ? `<${bare}>` : null;
}

function partText(a: Attachment): string {
  return Buffer.isBuffer(a.content) ? a.content.subarray(0, PART_LIMIT).toString('utf8') : '';
}

/** Attachments that are direct children of the top-level multipart (partId "2", not "3.2"). */
function topLevelParts(mail: ParsedMail): Attachment[] {
  const list = Array.isArray(mail.attachments) ? mail.attachments : [];
  return list.filter((a) => typeof a.partId !== 'string' || !a.partId.includes('.'));
}

const typeOf = (a: Attachment): string => (typeof a.contentType === 'string' ? a.contentType.toLowerCase().trim() : '');

/** Header fields of the returned original (message/rfc822 or text/rfc822-headers style part), or null. */
function originalHeaders(parts: Attachment[]): Fields | null {
  for (const t of ORIGINAL_PARTS) {
    const part = parts.find((a) => typeOf(a) === t);
    if (!part) continue;
    const text = partText(part).replace(/^(?:[ \t]*\r?\n)+/, '');
    const end = /\r?\n[ \t]*\r?\n/.exec(text);
    const head = end ? text.slice(0, end.index) : text;
    return fieldRuns(head, 'skip')[0]?.[0] ?? null;
  }
  return null;
}

function dsnFromRun(run: Fields[]): { reportingMta: string | null; recipients: DeliveryStatusRecipient[] } {
  let reportingMta: string | null = null;
  const recipients: DeliveryStatusRecipient[] = [];
  let seenRecipient = false;
  for (const block of run) {
    const final = first(block, 'final-recipient');
    const original = first(block, 'original-recipient');
    if (final === null && original === null) {
      // Per-message fields come first; a non-recipient block after the recipients is something else (in
      // mail.text: the From/Subject lines mailparser prints for an expanded original message, then its body).
      if (seenRecipient) break;
      const mta = first(block, 'reporting-mta');
      if (reportingMta === null && mta) reportingMta = squash(typed(mta).value, MAX_SHORT) || null;
      continue;
    }
    seenRecipient = true;
    if (recipients.length >= MAX_RECIPIENTS) break;
    const address = (final !== null ? typedAddress(final) : null) ?? (original !== null ? typedAddress(original) : null);
    const action = /^\s*([A-Za-z]+)/.exec(first(block, 'action') ?? '')?.[1]?.toLowerCase();
    if (!address || !action || !ACTIONS.has(action)) continue;
    const st = /^\s*([245])\.(\d{1,3})\.(\d{1,3})(?!\d)/.exec(first(block, 'status') ?? '');
    const status = st ? `${st[1]}.${st[2]}.${st[3]}` : null;
    const diag = first(block, 'diagnostic-code');
    const diagnostic = diag === null ? null : squash(typed(diag).value, MAX_DIAGNOSTIC) || null;
    recipients.push({ address, action, status, diagnostic, permanent: action === 'failed' && status?.[0] === '5' });
  }
  return { reportingMta, recipients };
}

function parseDsn(mail: ParsedMail, parts: Attachment[]): DeliveryStatusReport | null {
  const part = parts.find((a) => DSN_PARTS.has(typeOf(a)));
  // An attached delivery-status part is the report itself; otherwise mailparser put it into mail.text, between
  // the human-readable part and any expanded original: take the first run of field blocks there that names a
  // recipient.
  const runs = part ? fieldRuns(partText(part), 'skip') : typeof mail.text === 'string' ? fieldRuns(mail.text.slice(0, TEXT_LIMIT), 'split') : [];
  for (const run of runs) {
    const { reportingMta, recipients } = dsnFromRun(run);
    if (!recipients.length) continue;
    const original = originalHeaders(parts);
    return { kind: 'dsn', reportingMta, originalMessageId: original ? messageIdOf(first(original, 'message-id')) : null, recipients };
  }
  return null;
}

function parseArf(parts: Attachment[]): FeedbackReport | null {
  const part = parts.find((a) => typeOf(a) === 'message/feedback-report');
  if (!part) return null;
  const fields: Fields = new Map();
  for (const block of fieldRuns(partText(part), 'skip').flat()) {
    for (const [k, v] of block) fields.set(k, [...(fields.get(k) ?? []), ...v]);
  }
  const feedbackType = /^\s*([A-Za-z0-9][A-Za-z0-9_.-]*)/.exec(first(fields, 'feedback-type') ?? '')?.[1]?.toLowerCase();
  if (!feedbackType) return null;
  const ua = first(fields, 'user-agent');
  const mailFrom = first(fields, 'original-mail-from');
  const original = originalHeaders(parts);
  return {
    kind: 'arf',
    feedbackType,
    userAgent: ua === null ? null : squash(ua, MAX_SHORT) || null,
    originalRcptTo: unique((fields.get('original-rcpt-to') ?? []).flatMap(listAddresses)).slice(0, MAX_RECIPIENTS),
    originalMailFrom: mailFrom === null ? null : (listAddresses(mailFrom)[0] ?? null),
    originalMessageId: original ? messageIdOf(first(original, 'message-id')) : null,
    originalRecipients: original ? unique([...(original.get('to') ?? []), ...(original.get('cc') ?? [])].flatMap(listAddresses)).slice(0, MAX_RECIPIENTS) : [],
  };
}

/** The top-level Content-Type of the parsed message: value and lower-cased report-type parameter. */
function topContentType(mail: ParsedMail): { value: string; reportType: string } | null {
  const ct: unknown = mail.headers instanceof Map ? mail.headers.get('content-type') : undefined;
  if (!ct || typeof ct !== 'object' || !('value' in ct) || typeof ct.value !== 'string') return null;
  const params = 'params' in ct && ct.params && typeof ct.params === 'object' ? (ct.params as Record<string, unknown>) : {};
  const reportType = typeof params['report-type'] === 'string' ? params['report-type'] : '';
  return { value: ct.value.toLowerCase().trim(), reportType: reportType.toLowerCase().trim() };
}

/**
 * A delivery status notification (RFC 3464 / RFC 6533) or feedback report (RFC 5965) carried by this message
 * (top-level multipart/report), or null for any other message and for reports too malformed to use.
 * Never throws.
 */
export function parseReport(mail: ParsedMail): DeliveryStatusReport | FeedbackReport | null {
  try {
    const ct = topContentType(mail);
    if (!ct || ct.value !== 'multipart/report') return null;
    const parts = topLevelParts(mail);
    switch (ct.reportType) {
      case 'delivery-status':
      case 'global-delivery-status':
        return parseDsn(mail, parts);
      case 'feedback-report':
        return parseArf(parts);
      case '':
        // report-type is required, but be lenient when the report part itself says what it is
        if (parts.some((a) => typeOf(a) === 'message/feedback-report')) return parseArf(parts);
        if (parts.some((a) => DSN_PARTS.has(typeOf(a)))) return parseDsn(mail, parts);
        return null;
      default:
        return null; // disposition-notification (MDN), tlsrpt, ...
    }
  } catch {
    return null;
  }
}
