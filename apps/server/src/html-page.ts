/**
 * The answer of a page people open from an emailed link (owner pages, forward confirmations): HTML that is never
 * cached, framed, or allowed to load anything but its own inline style, and whose forms post only here.
 */
export function htmlResponse(html: string, status: number): Response {
  return new Response(html, {
    status,
    headers: {
      'content-type': 'text/html; charset=utf-8',
      'cache-control': 'no-store',
      'x-frame-options': 'DENY',
      'referrer-policy': 'no-referrer',
      'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
    },
  });
}
