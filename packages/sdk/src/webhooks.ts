/**
 * Verifying a webhook delivery of Boxes: X-Boxes-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of
 * "<t>.<raw body>" keyed by the signing secret> (during a secret rotation, two v1 values). The body must be the
 * raw bytes received, before any JSON parsing.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { BoxesEvent } from './index';

export interface VerifyWebhookOptions {
  /** Oldest accepted t, in seconds before now (default 300; an older one is refused as a possible replay). */
  toleranceSeconds?: number;
  /** The current time in milliseconds (tests). */
  now?: number;
}

export class WebhookVerificationError extends Error {
  override name = 'WebhookVerificationError';
}

/**
 * Checks the signature header of a delivery against the signing secret (GET /account/webhook) and returns
 * the parsed event (a BoxesEvent: narrow on its type to read its data); throws WebhookVerificationError when the header is missing or malformed, too old, or no
 * v1 value matches.
 */
export function verifyWebhook<T = BoxesEvent>(
  rawBody: string | Uint8Array,
  signatureHeader: string | null | undefined,
  secret: string,
  opts: VerifyWebhookOptions = {},
): T {
  if (!signatureHeader) throw new WebhookVerificationError('missing X-Boxes-Signature header');
  const parts = signatureHeader.split(',').map((p) => p.trim().split('=') as [string, string?]);
  const t = parts.find(([k]) => k === 't')?.[1];
  const signatures = parts.filter(([k, v]) => k === 'v1' && v).map(([, v]) => v!);
  if (!t || !/^\d+$/.test(t) || !signatures.length) throw new WebhookVerificationError('malformed X-Boxes-Signature header (expected t=<unix>,v1=<hex>)');
  const age = Math.floor((opts.now ?? Date.now()) / 1000) - Number(t);
  if (age > (opts.toleranceSeconds ?? 300)) throw new WebhookVerificationError(`signature too old (${age} s)`);
  const body = typeof rawBody === 'string' ? Buffer.from(rawBody, 'utf8') : Buffer.from(rawBody);
  const expected = createHmac('sha256', secret).update(`${t}.`).update(body).digest();
  const ok = signatures.some((hex) => {
    const given = Buffer.from(hex, 'hex');
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
  if (!ok) throw new WebhookVerificationError('no signature matches the signing secret');
  return JSON.parse(body.toString('utf8')) as T;
}
