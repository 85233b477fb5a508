/**
 * The per-key rate limit as HTTP response fields (draft-ietf-httpapi-ratelimit-headers-11, structured fields):
 *   RateLimit-Policy: "default";q=<limit>;w=<window seconds>
 *   RateLimit: "default";r=<remaining>;t=<seconds until the window ends>
 * and Retry-After (the same seconds) on a refused call. Every face copies ctx.responseHeaders onto its response.
 */
import type { RateWindow } from '@boxes/core';

export const RATE_LIMIT_POLICY = 'default';

export function rateLimitFields(w: RateWindow): Record<string, string> {
  return {
    'ratelimit-policy': `"${RATE_LIMIT_POLICY}";q=${w.limit};w=${w.windowSeconds}`,
    ratelimit: `"${RATE_LIMIT_POLICY}";r=${w.remaining};t=${w.resetSeconds}`,
    ...(w.limited ? { 'retry-after': String(w.resetSeconds) } : {}),
  };
}

/**
 * Sets the fields on a response's header bag. Calls of one tRPC batch share a bag and run concurrently: the
 * fields of the most used-up window stay (the one with the fewest requests left, and a refusal over none).
 */
export function setRateLimitFields(headers: Headers, w: RateWindow): void {
  const current = /;r=(\d+)/.exec(headers.get('ratelimit') ?? '');
  if (current && Number(current[1]) < w.remaining) return;
  if (current && headers.has('retry-after') && !w.limited) return;
  for (const [name, value] of Object.entries(rateLimitFields(w))) headers.set(name, value);
}
