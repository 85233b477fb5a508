/**
 * The confirmation page of an auto-forward (/forwards/confirm/<token>), linked from the mail its target gets.
 * GET only shows what would be forwarded where (mail scanners that prefetch links change nothing); the
 * Confirm and Decline buttons POST. No key: the token is the credential. Plain HTML, no scripts.
 */
import type { Hono } from 'hono';
import { answerForwardConfirmation, AppError, escapeHtml, peekForwardConfirmation, type Services } from '@boxes/core';
import type { Logger } from './logger';
import { htmlResponse } from './html-page';

const esc = escapeHtml;

function page(title: string, body: string, status = 200): Response {
  const html = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(title)} · Boxes</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:2rem auto;padding:0 1rem;color:#111}h1{font-size:1.5rem}
button{font:inherit;padding:.6rem 1.2rem;margin:.5rem .5rem .5rem 0;border-radius:.3rem;border:1px solid #333;cursor:pointer}
button.primary{background:#0a5;color:#fff;border-color:#0a5}.note{background:#f4f4f4;padding:.75rem;border-radius:.3rem}</style></head>
<body><main><h1>${esc(title)}</h1>
${body}
</main></body></html>`;
  return htmlResponse(html, status);
}

function what(f: { box?: string | undefined; to: string; match: { from_contains: string | null; subject_contains: string | null } }): string {
  const only = [
    f.match.from_contains ? `from senders containing “${f.match.from_contains}”` : '',
    f.match.subject_contains ? `with subjects containing “${f.match.subject_contains}”` : '',
  ]
    .filter(Boolean)
    .join(' and ');
  return `copies of mail received by <strong>${esc(f.box)}</strong>${only ? ` (only mail ${esc(only)})` : ''} to <strong>${esc(f.to)}</strong>`;
}

export function mountForwardConfirmation(app: Hono, svc: Services, log: Logger): void {
  const failure = (err: unknown) => {
    if (err instanceof AppError) return page(err.code === 'link_expired' ? 'Link expired' : 'Link not valid', `<p>${esc(err.message)}.</p>`, err.status);
    log.error({ err }, 'forward confirmation failed');
    return page('Something went wrong', '<p>Try again in a minute.</p>', 500);
  };

  app.get('/forwards/confirm/:token', async (c) => {
    try {
      const f = await peekForwardConfirmation(svc, c.req.param('token'));
      if (f.status !== 'pending_confirmation') {
        return page('Already answered', `<p>This forward is ${esc(f.status === 'active' ? 'confirmed' : 'stopped')}: ${what(f)}.</p>`);
      }
      return page(
        'Forward mail to you?',
        `<p>An agent on Boxes asks to forward ${what(f)}.</p>
<p class="note">Nothing is forwarded unless you confirm. Each copy is a new message from that address with the original attached.</p>
<form method="post"><input type="hidden" name="answer" value="confirm"><button class="primary" type="submit">Confirm</button></form>
<form method="post"><input type="hidden" name="answer" value="decline"><button type="submit">Decline</button></form>`,
      );
    } catch (err) {
      return failure(err);
    }
  });

  app.post('/forwards/confirm/:token', async (c) => {
    // Only our own form answers (a page elsewhere must not confirm for the visitor).
    const origin = c.req.header('origin');
    if (
      c.req.header('sec-fetch-site') === 'cross-site' ||
      (origin && origin !== 'null' && origin !== new URL(svc.config.siteUrl).origin && origin !== new URL(c.req.url).origin)
    ) {
      return page('Link not valid', '<p>Open the link from your email directly.</p>', 403);
    }
    try {
      const form = await c.req.parseBody().catch(() => ({}) as Record<string, unknown>);
      const answer = form.answer === 'decline' ? 'decline' : 'confirm';
      const f = await answerForwardConfirmation(svc, c.req.param('token'), answer);
      if (f.status === 'active') return page('Forwarding confirmed', `<p>From now on, ${what(f)}.</p>`);
      return page('Declined', `<p>Nothing will be forwarded: ${what(f)} was declined.</p>`);
    } catch (err) {
      return failure(err);
    }
  });
}
