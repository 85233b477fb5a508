/** The sealed (AES-256-GCM) body of a stored message: text, html, headers and attachments with content. */
import { open, seal } from '../shared/crypto';

export interface StoredAttachment {
  filename: string | null;
  content_type: string;
  content_id: string | null;
  content_b64: string;
}

export interface StoredBody {
  text: string | null;
  html: string | null;
  headers: Record<string, string>;
  attachments: StoredAttachment[];
  /** Sent messages only: what composing needs besides the message columns. */
  from_name?: string | null;
  reply_to?: string[];
  to_display?: string[];
  cc_display?: string[];
  date?: string;
  in_reply_to?: string | null;
}

/** The text a body is sealed as (sealBody), for sealing several copies of one body. */
export const bodyText = (body: StoredBody): string => JSON.stringify(body);
export const sealBody = (key: Buffer, body: StoredBody): string => seal(key, bodyText(body));
export const openBody = (key: Buffer, sealed: string): StoredBody => JSON.parse(open(key, sealed).toString('utf8')) as StoredBody;
