/** Custom header rules of POST /messages/send. */
import { MAX_HEADERS } from '@boxes/schemas';
import { invalidField } from '../shared/errors';

/** Headers Boxes sets itself, or that would break the MIME structure. */
export const RESERVED_HEADERS = [
  'message-id',
  'date',
  'from',
  'to',
  'cc',
  'bcc',
  'sender',
  'subject',
  'return-path',
  'dkim-signature',
  'x-boxes-configuration-set',
  'reply-to',
  'mime-version',
  'content-type',
  'content-transfer-encoding',
] as const;
export const RESERVED_PREFIX = 'x-boxes-agentic';

const FIELD_NAME = /^[!-9;-~]+$/; // printable ASCII except colon (RFC 5322 2.2)

export function validateHeaders(headers: Record<string, string> | undefined): Record<string, string> {
  const entries = Object.entries(headers ?? {});
  const bad = invalidField;
  if (entries.length > MAX_HEADERS) throw bad('headers', `at most ${MAX_HEADERS} custom headers (got ${entries.length})`);
  const seen = new Set<string>();
  for (const [name, value] of entries) {
    const lower = name.toLowerCase();
    if (!FIELD_NAME.test(name)) throw bad(`headers.${name}`, 'a header name is printable ASCII without spaces or colons');
    if ((RESERVED_HEADERS as readonly string[]).includes(lower) || lower.startsWith(RESERVED_PREFIX)) {
      throw bad(`headers.${name}`, `${name} is reserved${lower === 'reply-to' ? ' (use the reply_to field)' : ''}`);
    }
    if (/[\r\n\0]/.test(value)) throw bad(`headers.${name}`, 'header values must not contain line breaks');
    if (seen.has(lower)) throw bad(`headers.${name}`, 'the same header is given twice');
    seen.add(lower);
  }
  return Object.fromEntries(entries);
}
