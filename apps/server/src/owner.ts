/**
 * The owner's pages: plain HTML forms, no scripts. A human owner arrives through a single-use link emailed to
 * them (/owner/l/<token>), presses Continue, and gets a one-hour session cookie for their email. From there:
 * approve or deny a payment (/owner/payments/<id>), and save a card with a mandate for automatic top-ups
 * (/owner/card). /pay/<id> is the public status page of a payment (JSON for clients that ask for it), and
 * with the payment's client_secret it is the card-form path.
 */
import type { Context, Hono } from 'hono';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import {
  AppError,
  consumeOwnerLink,
  createOwnerLink,
  decideCloseRequest,
  decidePayment,
  endOwnerSession,
  MANDATE_TIERS,
  maskEmail,
  ownerCloseRequest,
  escapeHtml,
  ownerPayment,
  ownerPayments,
  ownerSession,
  paymentView,
  payerOf,
  payWithClientSecret,
  peekOwnerLink,
  queueNotice,
  refreshPayment,
  removeCard,
  saveCard,
  setAccountPause,
  setBoxPause,
  setMandate,
  usd,
  walletOf,
  type OwnerSessionInfo,
  type Services,
} from '@boxes/core';
import type { Payment } from '@boxes/db';
import type { Logger } from './logger';
import { htmlResponse } from './html-page';
import { mountOwnerReviewPages } from './owner-reviews';

const COOKIE = 'boxes_owner';

const esc = escapeHtml;

function page(title: string, body: string, status = 200, notice = ''): Response {
  const html = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(title)} · Boxes</title>
<style>
body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:2rem auto;padding:0 1rem;color:#111}
h1{font-size:1.5rem}dl{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1rem}dt{font-weight:600}
label{display:block;margin:.5rem 0 .2rem}input,select{font:inherit;padding:.4rem;width:100%;max-width:20rem;box-sizing:border-box}
button{font:inherit;padding:.6rem 1.2rem;margin:.5rem .5rem .5rem 0;border-radius:.3rem;border:1px solid #333;cursor:pointer}
button.primary{background:#0a5;color:#fff;border-color:#0a5}button.danger{background:#fff;color:#a00;border-color:#a00}
.note{background:#f4f4f4;padding:.75rem;border-radius:.3rem}.error{background:#fee;border:1px solid #c00;padding:.75rem;border-radius:.3rem}
.ok{background:#efe;border:1px solid #0a5;padding:.75rem;border-radius:.3rem}small{color:#555}
</style></head>
<body><main>
<h1>${esc(title)}</h1>
${notice}
${body}
</main>
<footer><small>Boxes owner pages. Payments here go through the ${esc('configured payment provider')}; the built-in local provider simulates the card network, and no real money moves.</small></footer>
</body></html>`;
  return htmlResponse(html, status);
}

const banner = (kind: 'ok' | 'error' | 'note', text: string) => `<p class="${kind}" role="${kind === 'error' ? 'alert' : 'status'}">${esc(text)}</p>`;

const STATUS_TEXT: Record<string, string> = {
  requires_approval: 'Waiting for your approval',
  pending_approval: 'Waiting for your approval',
  approved: 'Approved; the payment is completing',
  succeeded: 'Paid; the credit has landed',
  denied: 'Denied',
  expired: 'Expired',
  failed: 'The card was declined',
};

function tierOptions(selected: number | null): string {
  return [
    `<option value="none"${selected === null ? ' selected' : ''}>No automatic top-ups</option>`,
    ...MANDATE_TIERS.map(
      (t, i) =>
        `<option value="${i}"${selected === i ? ' selected' : ''}>Up to ${usd(t.per_topup_cents)} per top-up and ${usd(t.per_30d_cents)} per 30 days</option>`,
    ),
  ].join('');
}

const cardFields = `
<label for="number">Card number</label><input id="number" name="number" inputmode="numeric" autocomplete="cc-number" required>
<label for="exp">Expiry (MM/YY)</label><input id="exp" name="exp" autocomplete="cc-exp" placeholder="12/30" required>
<label for="cvc">Security code</label><input id="cvc" name="cvc" inputmode="numeric" autocomplete="cc-csc" required>`;

function whatFor(p: Payment): string {
  // A signup payment with a wallet spend request is a registration (mode register): the first year and any credit.
  if (p.kind === 'signup')
    return p.spendRequestId
      ? 'Registration of the domain for one year (with the simulated local registrar), plus any initial credit'
      : 'Initial credit for a new account';
  return p.kind === 'mpp' ? 'Wallet top-up (Machine Payments Protocol)' : 'Credit top-up';
}

function describe(p: Payment, account: string): string {
  return `<dl>
<dt>What</dt><dd>${esc(whatFor(p))}</dd>
<dt>Account</dt><dd>${esc(account)}</dd>
<dt>Amount</dt><dd>${esc(usd(p.amountCents))}</dd>
<dt>Status</dt><dd id="status">${esc(STATUS_TEXT[p.status] ?? p.status)}</dd>
<dt>Request</dt><dd><code>${esc(p.id)}</code></dd>
<dt>Expires</dt><dd>${esc(p.expiresAt.toISOString().replace('T', ' ').slice(0, 16))} UTC${p.kind === 'mpp' ? ' (approving does not extend it)' : ''}</dd>
${p.declineCode ? `<dt>Card</dt><dd>declined (${esc(p.declineCode)})</dd>` : ''}
</dl>`;
}

const tierOf = (v: unknown): number | null => (typeof v === 'string' && /^[0-2]$/.test(v) ? Number(v) : null);

function cardFrom(form: Record<string, unknown>) {
  const s = (k: string) => (typeof form[k] === 'string' ? (form[k] as string) : '');
  return s('number') ? { number: s('number'), exp: s('exp'), cvc: s('cvc') } : undefined;
}

/** A form body, or null when it cannot be parsed (a malformed multipart body is a 400, not a 500). */
async function formOf(c: Context): Promise<Record<string, unknown> | null> {
  try {
    return await c.req.parseBody();
  } catch {
    return null;
  }
}

/** Payment ids are pi_/mpp_ plus base32; anything else (a NUL byte the database refuses) is simply not found. */
const plausibleId = (id: string): boolean => /^[A-Za-z0-9_]{1,64}$/.test(id);

export function mountOwnerPages(app: Hono, svc: Services, log: Logger): void {
  const secure = () => svc.config.siteUrl.startsWith('https://');

  const session = async (c: Context): Promise<OwnerSessionInfo | null> => ownerSession(svc, getCookie(c, COOKIE));

  const needSession = () =>
    page('Sign in needed', `<p>Open the link from your latest email from Boxes, or ask for a new one.</p><p><a href="/owner">Get a sign-in link</a></p>`, 401);

  const formOk = (s: OwnerSessionInfo, form: Record<string, unknown>) => form.form_token === s.formToken;

  const failure = (err: unknown, title: string) => {
    if (err instanceof AppError) return page(title, banner('error', err.message), err.status >= 500 ? 500 : err.status);
    log.error({ err }, 'owner page failed');
    return page(title, banner('error', 'Something went wrong; try again.'), 500);
  };

  app.get('/owner', async (c) => {
    const s = await session(c);
    if (!s) {
      return page(
        'Boxes for owners',
        `<p>Approve payments for your agents and manage your saved card. Enter the email address your agent signed up with and we will email you a sign-in link.</p>
<form method="post" action="/owner/link"><label for="email">Your email</label><input id="email" name="email" type="email" autocomplete="email" required><button class="primary" type="submit">Email me a link</button></form>`,
      );
    }
    const payments = await ownerPayments(svc, s.email);
    const rows = payments.length
      ? `<ul>${payments.map((p) => `<li><a href="/owner/payments/${esc(p.id)}">${esc(usd(p.amountCents))} · ${esc(STATUS_TEXT[p.status] ?? p.status)}</a> <small>${esc(p.createdAt.toISOString().slice(0, 16))}</small></li>`).join('')}</ul>`
      : '<p>No payments yet.</p>';
    const done = c.req.query('paused') ? banner('ok', 'Paused: no send goes until you resume it.') : c.req.query('resumed') ? banner('ok', 'Resumed.') : '';
    return page(
      'Your payments',
      `${done}<p>Signed in as ${esc(s.email)}.</p>${rows}<p><a href="/owner/card">Your card and automatic top-ups</a></p>${await pausePanel(s)}
<form method="post" action="/owner/logout"><input type="hidden" name="form_token" value="${esc(s.formToken)}"><button type="submit">Sign out</button></form>`,
    );
  });

  app.post('/owner/link', async (c) => {
    const form = await formOf(c);
    if (!form) return page('Bad request', banner('error', 'The form could not be read; open the page again.'), 400);
    const email = typeof form.email === 'string' ? form.email.trim().toLowerCase() : '';
    if (/^[^@\s\x00-\x1f]+@[^@\s\x00-\x1f]+$/.test(email)) {
      const counts = await Promise.all([
        svc.db.account.count({ where: { OR: [{ humanEmail: email }, { payerEmail: email }] } }),
        svc.db.wallet.count({ where: { ownerEmail: email } }),
        svc.db.payment.count({ where: { OR: [{ ownerEmail: email }, { payerEmail: email }] } }),
      ]);
      const known = counts.some((n) => n > 0);
      // One sign-in mail per address per minute: this public form must not become a way to flood an inbox.
      const recent = await svc.db.ownerLink.count({ where: { ownerEmail: email, purpose: 'home', createdAt: { gt: new Date(Date.now() - 60_000) } } });
      if (known && recent === 0) {
        await svc.db.$transaction(async (tx) => {
          const link = await createOwnerLink(svc, tx, { email, purpose: 'home' });
          await queueNotice(tx, {
            kind: 'owner.link',
            to: email,
            subject: 'Your Boxes sign-in link',
            text: `Sign in to approve payments and manage your card: ${link}\n\nThe link works once, for 24 hours.`,
          });
        });
      }
    }
    // The same answer whether or not the address is known: this page must not reveal who has an account.
    return page('Check your email', '<p>If that address owns an agent on this service, a sign-in link is on its way. It works once.</p>');
  });

  app.get('/owner/l/:token', async (c) => {
    try {
      const info = await peekOwnerLink(svc, c.req.param('token'));
      return page(
        'Continue to Boxes',
        `<p>This link signs you in as ${esc(info.email)}. It works once.</p>
<form method="post"><button class="primary" type="submit">Continue</button></form>`,
      );
    } catch (err) {
      return failure(err, 'Link not valid');
    }
  });

  app.post('/owner/l/:token', async (c) => {
    // A page elsewhere must not sign a visitor in with its own link (login CSRF): the Continue form is ours.
    const origin = c.req.header('origin');
    if (
      c.req.header('sec-fetch-site') === 'cross-site' ||
      (origin && origin !== 'null' && origin !== new URL(svc.config.siteUrl).origin && origin !== new URL(c.req.url).origin)
    ) {
      return page('Link not valid', banner('error', 'Open the link from your email directly.'), 403);
    }
    try {
      const info = await consumeOwnerLink(svc, c.req.param('token'));
      setCookie(c, COOKIE, info.session, { httpOnly: true, sameSite: 'Lax', path: '/', secure: secure(), maxAge: 3600 });
      const to =
        info.purpose === 'payment' && info.paymentId
          ? `/owner/payments/${info.paymentId}`
          : info.purpose === 'close' && info.closeRequestId
            ? `/owner/close/${info.closeRequestId}`
            : info.purpose === 'review' && info.reviewId
              ? `/owner/reviews/${info.reviewId}`
              : info.purpose === 'card'
                ? '/owner/card'
                : '/owner';
      return c.redirect(to, 303);
    } catch (err) {
      return failure(err, 'Link not valid');
    }
  });

  app.post('/owner/logout', async (c) => {
    const cookie = getCookie(c, COOKIE);
    if (cookie) await endOwnerSession(svc, cookie);
    deleteCookie(c, COOKIE, { path: '/' });
    return c.redirect('/owner', 303);
  });

  /**
   * The page of one item the owner decides about (a payment, a close request): GET shows it; POST checks the
   * session, the form and its token, then decides; a refused decision shows the page again with the reason.
   */
  const itemRoutes = (
    path: string,
    title: string,
    notFound: string,
    render: (s: OwnerSessionInfo, id: string, notice?: string, status?: number) => Promise<Response>,
    decide: (s: OwnerSessionInfo, id: string, form: Record<string, unknown>) => Promise<Response>,
  ) => {
    app.get(path, async (c) => {
      const s = await session(c);
      if (!s) return needSession();
      const id = c.req.param('id') ?? '';
      if (!plausibleId(id)) return page(title, banner('error', notFound), 404);
      try {
        return await render(s, id);
      } catch (err) {
        return failure(err, title);
      }
    });
    app.post(path, async (c) => {
      const s = await session(c);
      if (!s) return needSession();
      const form = await formOf(c);
      if (!form) return page('Bad request', banner('error', 'The form could not be read; open the page again.'), 400);
      if (!formOk(s, form)) return page('Expired form', banner('error', 'This form has expired; open the page again.'), 403);
      const id = c.req.param('id') ?? '';
      if (!plausibleId(id)) return page(title, banner('error', notFound), 404);
      try {
        return await decide(s, id, form);
      } catch (err) {
        if (err instanceof AppError && err.status < 500) {
          try {
            return await render(s, id, banner('error', err.message), err.status);
          } catch (inner) {
            return failure(inner, title);
          }
        }
        return failure(err, title);
      }
    });
  };

  const paymentPage = async (s: OwnerSessionInfo, id: string, notice = '', status = 200) => {
    const { payment: p, account, wallet } = await ownerPayment(svc, s.email, id);
    const pending = p.status === 'requires_approval' || p.status === 'pending_approval';
    let actions = '';
    if (pending) {
      const hidden = `<input type="hidden" name="form_token" value="${esc(s.formToken)}">`;
      const savedCard = wallet?.cardRef ? `${wallet.cardBrand} •••• ${wallet.cardLast4}` : null;
      const mayApprove = payerOf(p) === s.email;
      const pay = !mayApprove
        ? `<p class="note">This payment is charged to the wallet of ${esc(maskEmail(payerOf(p)))}; only they can approve it. You can deny it.</p>`
        : p.kind === 'mpp'
          ? savedCard
            ? `<p>Your wallet pays with ${esc(savedCard)}.</p>`
            : `<p>Your wallet has no card. <a href="/owner/card">Add one</a> first.</p>`
          : savedCard && !p.declineCode
            ? `<p>Pay with your saved card ${esc(savedCard)}.</p>`
            : // No card yet, or the card tried last was declined (a typed card is saved before it is charged, so
              // the saved one is that card): the owner types another one right here.
              `<fieldset><legend>${savedCard ? 'Pay with another card' : 'Pay with a card'}</legend>${savedCard ? `<p>${esc(savedCard)} was declined.</p>` : ''}${cardFields}
<label for="mandate">Also allow automatic top-ups with this card</label><select id="mandate" name="mandate">${tierOptions(null)}</select></fieldset>`;
      actions = `<form method="post">${hidden}${pay}
${mayApprove ? `<button class="primary" type="submit" name="action" value="approve">Approve ${esc(usd(p.amountCents))}</button>` : ''}
<button class="danger" type="submit" name="action" value="deny" formnovalidate>Deny</button></form>`;
    }
    return page(
      pending ? `Approve ${usd(p.amountCents)}?` : 'Payment',
      `${describe(p, account)}${actions}<p><small>Signed in as ${esc(s.email)}.</small> <a href="/owner">All your payments</a></p>`,
      status,
      notice,
    );
  };

  itemRoutes('/owner/payments/:id', 'Payment', 'No such payment for you.', paymentPage, async (s, id, form) => {
    const action = form.action === 'deny' ? 'deny' : 'approve';
    const card = action === 'approve' ? cardFrom(form) : undefined;
    const p = await decidePayment(svc, s.email, id, action === 'deny' ? { action } : { action, ...(card ? { card, mandateTier: tierOf(form.mandate) } : {}) });
    const msg =
      p.status === 'denied'
        ? banner('note', 'You denied this payment. Nothing was charged.')
        : p.status === 'expired'
          ? banner('error', 'This request expired before you decided.')
          : banner('ok', p.status === 'approved' ? 'Approved. The payment completes in a few seconds.' : 'Approved and paid. The credit has landed.');
    return await paymentPage(s, id, msg);
  });

  const closePage = async (s: OwnerSessionInfo, id: string, notice = '', status = 200) => {
    const r = await ownerCloseRequest(svc, s.email, id);
    const details = `<dl>
<dt>Account</dt><dd>${esc(r.primaryAddress)}</dd>
<dt>Domain</dt><dd>${esc(r.domain)}</dd>
<dt>Asked by key</dt><dd><code>${esc(r.requestedByKeyId)}</code></dd>
<dt>Status</dt><dd id="status">${esc({ pending: 'Waiting for your decision', approved: 'Approved: the account is closing', denied: 'Denied: the account stays open', expired: 'Expired: the account stays open', replaced: 'Replaced by a newer request' }[r.status] ?? r.status)}</dd>
<dt>Expires</dt><dd>${esc(r.expiresAt.toISOString().replace('T', ' ').slice(0, 16))} UTC</dd>
</dl>`;
    const actions =
      r.status === 'pending'
        ? `<p>Closing revokes every API key at once, refuses new mail for ${esc(r.domain)}, stops pending deliveries and deletes all the account's data after ${esc(svc.config.audit.deletionGraceDays)} days. You get a download link for a data export.</p>
<form method="post"><input type="hidden" name="form_token" value="${esc(s.formToken)}">
<button class="danger" type="submit" name="action" value="approve">Close the account</button>
<button class="primary" type="submit" name="action" value="deny">Keep the account</button></form>`
        : '';
    return page(
      r.status === 'pending' ? `Close ${r.domain}?` : 'Closing the account',
      `${details}${actions}<p><small>Signed in as ${esc(s.email)}.</small></p>`,
      status,
      notice,
    );
  };

  itemRoutes('/owner/close/:id', 'Closing the account', 'No such close request for you.', closePage, async (s, id, form) => {
    const d = await decideCloseRequest(svc, s.email, id, form.action === 'approve' ? 'approve' : 'deny');
    if (d.result?.export) {
      const e = d.result.export;
      return await closePage(
        s,
        id,
        `<div class="ok" role="status"><p>The account is closing. Every key is revoked.</p><p>Your data export: <a id="export-link" href="${esc(e.download_url)}">download the archive</a> (it is being built; the link works until ${esc(e.expires_at.replace('T', ' ').slice(0, 16))} UTC and is also on its way by email). All data is deleted on ${esc((d.result.delete_after ?? '').slice(0, 10))}.</p></div>`,
      );
    }
    return await closePage(s, id, banner('note', 'You kept the account open. Nothing was closed.'));
  });

  mountOwnerReviewPages({ svc, page, banner, esc, itemRoutes });

  const cardPage = async (s: OwnerSessionInfo, notice = '', status = 200) => {
    const { wallet, mandate } = await walletOf(svc, s.email);
    const hidden = `<input type="hidden" name="form_token" value="${esc(s.formToken)}">`;
    const current = wallet?.cardRef
      ? `<p>Saved card: <strong>${esc(`${wallet.cardBrand} •••• ${wallet.cardLast4}`)}</strong> (expires ${esc(wallet.cardExp)}).</p>
<p>${mandate.active ? `Automatic top-ups: up to ${esc(usd(mandate.per_topup_cents!))} per top-up and ${esc(usd(mandate.per_30d_cents!))} per 30 days (${esc(usd(mandate.used_30d_cents))} used).` : 'No automatic top-ups: you approve each payment.'}</p>
<form method="post">${hidden}<label for="tier">Automatic top-ups</label><select id="tier" name="mandate">${tierOptions(mandate.active ? MANDATE_TIERS.findIndex((t) => t.per_topup_cents === mandate.per_topup_cents) : null)}</select>
<button type="submit" name="action" value="mandate">Save limits</button></form>
<form method="post">${hidden}<button class="danger" type="submit" name="action" value="remove">Remove card</button></form>`
      : '<p>No card saved. Your wallet needs one before your agents can ask for wallet payments.</p>';
    return page(
      'Your card',
      `<p>Signed in as <strong>${esc(s.email)}</strong>.</p>${current}<h2>${wallet?.cardRef ? 'Replace the card' : 'Save a card'}</h2>
<form method="post">${hidden}${cardFields}
<label for="mandate">Automatic top-ups (a mandate: your agent's card top-ups within these limits settle without asking you)</label><select id="mandate" name="mandate">${tierOptions(null)}</select>
<button class="primary" type="submit" name="action" value="save">Save card</button></form>
<p><a href="/owner">Your payments</a></p>`,
      status,
      notice,
    );
  };

  app.get('/owner/card', async (c) => {
    const s = await session(c);
    if (!s) return needSession();
    return cardPage(s);
  });

  app.post('/owner/card', async (c) => {
    const s = await session(c);
    if (!s) return needSession();
    const form = await formOf(c);
    if (!form) return page('Bad request', banner('error', 'The form could not be read; open the page again.'), 400);
    if (!formOk(s, form)) return page('Expired form', banner('error', 'This form has expired; open the page again.'), 403);
    try {
      if (form.action === 'remove') {
        await removeCard(svc, s.email);
        return cardPage(s, banner('ok', 'Card removed.'));
      }
      if (form.action === 'mandate') {
        await setMandate(svc, s.email, tierOf(form.mandate));
        return cardPage(s, banner('ok', 'Limits saved.'));
      }
      const card = cardFrom(form);
      if (!card) return cardPage(s, banner('error', 'Enter the card number, expiry and security code.'), 400);
      await saveCard(svc, svc.db, s.email, card, tierOf(form.mandate));
      return cardPage(s, banner('ok', 'Card saved.'));
    } catch (err) {
      if (err instanceof AppError && err.status < 500) return cardPage(s, banner('error', err.message), err.status);
      return failure(err, 'Your card');
    }
  });

  /**
   * Pausing: the home page lists the owner's accounts and their boxes, each with a Pause (or Resume) button, one
   * click. A pause set here is the owner's: no API key can lift it (guard/pause.ts).
   */
  const pausePanel = async (s: OwnerSessionInfo): Promise<string> => {
    const accounts = await svc.db.account.findMany({
      where: { humanEmail: s.email, status: 'active' },
      orderBy: { createdAt: 'asc' },
      select: {
        id: true,
        primaryAddress: true,
        pausedAt: true,
        pausedBy: true,
        boxes: { orderBy: { createdAt: 'asc' }, select: { id: true, address: true, pausedAt: true, pausedBy: true } },
      },
    });
    if (!accounts.length) return '';
    const hidden = `<input type="hidden" name="form_token" value="${esc(s.formToken)}">`;
    const button = (target: 'account' | 'box', id: string, label: string, paused: boolean) =>
      `<form method="post" action="/owner/pause" style="display:inline">${hidden}<input type="hidden" name="target" value="${target}"><input type="hidden" name="id" value="${esc(id)}">` +
      `<button type="submit" name="action" value="${paused ? 'resume' : 'pause'}" class="${paused ? 'primary' : 'danger'}" aria-label="${paused ? 'Resume' : 'Pause'} ${esc(label)}">${paused ? 'Resume' : 'Pause'}</button></form>`;
    const state = (p: Date | null, by: string | null) =>
      p
        ? ` <strong class="paused">paused</strong> <small>since ${esc(p.toISOString().slice(0, 16).replace('T', ' '))} UTC${by === 'owner' ? ' by you' : ' by an API key'}</small>`
        : '';
    const items = accounts
      .map(
        (a) =>
          `<li data-account="${esc(a.id)}"><strong>${esc(a.primaryAddress)}</strong> (whole account)${state(a.pausedAt, a.pausedBy)} ${button('account', a.id, `the account ${a.primaryAddress}`, !!a.pausedAt)}<ul>${a.boxes
            .map((b) => `<li data-box="${esc(b.id)}">${esc(b.address)}${state(b.pausedAt, b.pausedBy)} ${button('box', b.id, b.address, !!b.pausedAt)}</li>`)
            .join('')}</ul></li>`,
      )
      .join('');
    return `<h2>Your agents</h2><p>Pause stops every send of an account or a box at once (mail still arrives); only you can resume what you paused here.</p><ul>${items}</ul>`;
  };

  app.post('/owner/pause', async (c) => {
    const s = await session(c);
    if (!s) return needSession();
    const form = await formOf(c);
    if (!form) return page('Bad request', banner('error', 'The form could not be read; open the page again.'), 400);
    if (!formOk(s, form)) return page('Expired form', banner('error', 'This form has expired; open the page again.'), 403);
    const id = typeof form.id === 'string' ? form.id : '';
    const paused = form.action !== 'resume';
    try {
      if (!plausibleId(id)) throw new AppError('not_found', 'No such account or box for you.');
      if (form.target === 'box') {
        const box = await svc.db.box.findFirst({ where: { id, account: { humanEmail: s.email } }, select: { accountId: true } });
        if (!box) throw new AppError('not_found', 'No such box for you.');
        await setBoxPause(svc, { accountId: box.accountId, scope: null, boxId: id, actor: { kind: 'owner' }, paused });
      } else {
        const account = await svc.db.account.findFirst({ where: { id, humanEmail: s.email }, select: { id: true } });
        if (!account) throw new AppError('not_found', 'No such account for you.');
        await setAccountPause(svc, { accountId: account.id, actor: { kind: 'owner' }, paused });
      }
      return c.redirect(`/owner?${paused ? 'paused' : 'resumed'}=1`, 303);
    } catch (err) {
      return failure(err, 'Pause');
    }
  });

  // Public status page of a payment; with ?client_secret= the card-form path.
  app.get('/pay/:id', async (c) => {
    const id = c.req.param('id');
    const p = plausibleId(id) ? await refreshPayment(svc, id) : null;
    if (!p)
      return (c.req.header('accept') ?? '').includes('application/json')
        ? c.json({ error: { code: 'not_found', message: 'No such payment' } }, 404)
        : page('Not found', '<p>No such payment.</p>', 404);
    const view = paymentView(svc, p);
    if ((c.req.header('accept') ?? '').includes('application/json')) {
      const { spend_request, ...rest } = view;
      return c.json({
        ...rest,
        spend_request: spend_request
          ? {
              ...spend_request,
              payer_email: spend_request.payer_email ? maskEmail(spend_request.payer_email) : null,
              shared_payment_token: spend_request.shared_payment_token ? 'set' : null,
            }
          : null,
      });
    }
    const secret = c.req.query('client_secret');
    const pending = p.status === 'requires_approval';
    const form =
      secret && pending && p.kind !== 'mpp'
        ? `<form method="post"><input type="hidden" name="client_secret" value="${esc(secret)}">${cardFields}<button class="primary" type="submit">Pay ${esc(usd(p.amountCents))}</button></form>`
        : pending || p.status === 'pending_approval'
          ? `<p class="note">The owner (${esc(maskEmail(payerOf(p)))}) was emailed a single-use link to approve or deny this payment.</p>`
          : '';
    return page(`Payment ${usd(p.amountCents)}`, `${describe(p, p.accountId ? 'an agent on Boxes' : 'a new account')}${form}`);
  });

  app.post('/pay/:id', async (c) => {
    const form = await formOf(c);
    if (!form) return page('Bad request', banner('error', 'The form could not be read; open the page again.'), 400);
    const secret = typeof form.client_secret === 'string' ? form.client_secret : '';
    const card = cardFrom(form);
    try {
      if (!card) throw new AppError('validation_error', 'Enter the card number, expiry and security code.');
      if (!plausibleId(c.req.param('id'))) throw new AppError('not_found', 'No such payment.');
      const p = await payWithClientSecret(svc, c.req.param('id'), secret, card);
      return page(`Payment ${usd(p.amountCents)}`, `${describe(p, 'an agent on Boxes')}`, 200, banner('ok', 'Paid. The credit has landed.'));
    } catch (err) {
      return failure(err, 'Payment');
    }
  });
}
