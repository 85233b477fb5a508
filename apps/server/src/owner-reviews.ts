/**
 * The owner page of a send held for review (/owner/reviews/<id>), reached from the emailed single-use link:
 * the message as it will go (from, to, cc, bcc, subject, the text, the html shown as its source text, never
 * rendered, attachment names and sizes) and Approve / Deny as a plain form with the session's form token.
 * Approving sends it through the send path (packages/core/src/reviews); a refusal then (credit short) is shown
 * and the review stays pending.
 */
import { AppError, approveReview, denyReview, heldForReview, ownerReview, sendMessage, type OwnerSessionInfo, type Services } from '@boxes/core';

/** What owner.ts lends this page: its layout, escaping and the route helper for one decided item. */
export interface OwnerPageKit {
  svc: Services;
  page: (title: string, body: string, status?: number, notice?: string) => Response;
  banner: (kind: 'ok' | 'error' | 'note', text: string) => string;
  esc: (value: unknown) => string;
  itemRoutes: (
    path: string,
    title: string,
    notFound: string,
    render: (s: OwnerSessionInfo, id: string, notice?: string, status?: number) => Promise<Response>,
    decide: (s: OwnerSessionInfo, id: string, form: Record<string, unknown>) => Promise<Response>,
  ) => void;
}

const STATUS_TEXT: Record<string, string> = {
  pending: 'Waiting for your decision',
  approved: 'Approved: sent',
  denied: 'Denied: not sent',
  expired: 'Expired: not sent',
  withdrawn: 'Withdrawn by the agent: not sent',
};

const when = (d: Date) => `${d.toISOString().replace('T', ' ').slice(0, 16)} UTC`;

const sizeOf = (b64: string) => {
  const n = Buffer.byteLength(b64, 'base64');
  return n < 1024 ? `${n} bytes` : n < 1024 * 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / 1024 / 1024).toFixed(1)} MiB`;
};

export function mountOwnerReviewPages(kit: OwnerPageKit): void {
  const { svc, page, banner, esc } = kit;
  const list = (values: readonly string[] | string | undefined) => (values === undefined ? [] : Array.isArray(values) ? values : [values]);

  const reviewPage = async (s: OwnerSessionInfo, id: string, notice = '', status = 200) => {
    const { review: r, request: q, account } = await ownerReview(svc, s.email, id);
    const fresh = new Set(r.newRecipients);
    const addresses = (label: string, values: string[]) =>
      values.length ? `<dt>${label}</dt><dd>${values.map((a) => `${esc(a)}${fresh.has(a) ? ' <strong>(new)</strong>' : ''}`).join(', ')}</dd>` : '';
    const attachments = (q.attachments ?? []).map(
      (a) => `<li>${esc(a.filename ?? '(no name)')} <small>${esc(a.content_type)}, ${esc(sizeOf(a.content_b64))}</small></li>`,
    );
    const why =
      r.reason === 'all'
        ? 'Every message from this box (or this API key) waits for your approval.'
        : 'It is addressed to someone this box has never written to nor heard from (marked new).';
    const details = `<p>${esc(why)}</p>
<dl>
<dt>Account</dt><dd>${esc(account.primaryAddress)}</dd>
<dt>From</dt><dd id="from">${esc(r.fromAddress)}</dd>
${addresses('To', r.toAddresses)}${addresses('Cc', r.ccAddresses)}${addresses('Bcc', r.bccAddresses)}
${list(q.reply_to).length ? `<dt>Reply-To</dt><dd>${esc(list(q.reply_to).join(', '))}</dd>` : ''}
<dt>Subject</dt><dd id="subject">${esc(r.subject ?? '(none)')}</dd>
${r.sendAt ? `<dt>Scheduled</dt><dd>${esc(when(r.sendAt))} (at once if approved later)</dd>` : ''}
<dt>Status</dt><dd id="status">${esc(STATUS_TEXT[r.status] ?? r.status)}</dd>
<dt>Expires</dt><dd>${esc(when(r.expiresAt))}</dd>
${r.messageId ? `<dt>Message</dt><dd><code>${esc(r.messageId)}</code></dd>` : ''}
</dl>
${q.text !== undefined ? `<h2>Text</h2><pre id="text" style="white-space:pre-wrap;background:#f4f4f4;padding:.75rem">${esc(q.text)}</pre>` : ''}
${q.html !== undefined ? `<h2>HTML</h2><p><small>Shown as its source, not rendered: nothing in it runs or loads here.</small></p><pre id="html" style="white-space:pre-wrap;background:#f4f4f4;padding:.75rem">${esc(q.html)}</pre>` : ''}
${attachments.length ? `<h2>Attachments</h2><ul id="attachments">${attachments.join('')}</ul>` : ''}
<p><small>The box's signature and the service's trailer (unless turned off) are added when it is sent, as for every message.</small></p>
${r.lastError && r.status === 'pending' ? `<p class="error" role="alert">Your last approval could not send it: ${esc((r.lastError as { message?: string }).message ?? '')}</p>` : ''}`;
    const actions =
      r.status === 'pending'
        ? `<form method="post"><input type="hidden" name="form_token" value="${esc(s.formToken)}">
<button class="primary" type="submit" name="action" value="approve">Approve and send</button>
<button class="danger" type="submit" name="action" value="deny">Deny</button></form>`
        : '';
    return page(
      r.status === 'pending' ? 'Send this message?' : 'Message for review',
      `${details}${actions}<p><small>Signed in as ${esc(s.email)}.</small> <a href="/owner">Owner home</a></p>`,
      status,
      notice,
    );
  };

  kit.itemRoutes('/owner/reviews/:id', 'Message for review', 'No such message to review for you.', reviewPage, async (s, id, form) => {
    if (form.action === 'deny') {
      await denyReview(svc, s.email, id);
      return reviewPage(s, id, banner('note', 'You denied this message. Nothing was sent or charged.'));
    }
    // Exactly as the agent wrote it, through the send path: credit is checked and reserved now.
    let r: Awaited<ReturnType<typeof approveReview>>;
    try {
      r = await approveReview(svc, s.email, id, async (account, input) => {
        const out = await sendMessage(svc, { account, boxScope: null, bypassReview: 'approved' }, input);
        if (heldForReview(out)) throw new Error('an approved send was held again');
        return out;
      });
    } catch (err) {
      if (err instanceof AppError && err.code === 'payment_required') {
        return reviewPage(
          s,
          id,
          banner('error', "Not sent: the account's credit is too low for this message. It keeps waiting until it expires: add credit, then approve again."),
          402,
        );
      }
      throw err;
    }
    return reviewPage(s, id, banner('ok', `Approved. The message was sent (${r.messageId}).`));
  });
}
