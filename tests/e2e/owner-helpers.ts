// Helpers for the owner's side of payments: an inbox for the owner's mail (a stand-in MX for owner.test),
// the single-use links in it, and an owner session driven over plain HTTP (form posts, a cookie).
import { simpleParser } from 'mailparser';
import { staticResolver } from '@boxes/mail';
import { startTestServer, waitFor, type TestServer, type TestServerOptions } from '@boxes/testing';
import { startStandInMx } from './mail-receive-helpers';

export const OWNER_DOMAIN = 'owner.test';

export interface OwnerMail {
  to: string[];
  subject: string;
  text: string;
}

export interface OwnerInbox {
  port: number;
  /** Every message the service mailed to @owner.test so far, parsed. */
  all(): Promise<OwnerMail[]>;
  /** Waits for a message to `to` whose subject matches, and returns it. */
  waitFor(to: string, subject: RegExp, ms?: number): Promise<OwnerMail>;
  close(): Promise<void>;
}

export async function startOwnerInbox(): Promise<OwnerInbox> {
  const mx = await startStandInMx();
  const all = async () =>
    Promise.all(
      mx.received.map(async (r) => {
        const m = await simpleParser(r.raw);
        return { to: r.rcpt, subject: m.subject ?? '', text: m.text ?? '' };
      }),
    );
  return {
    port: mx.port,
    all,
    async waitFor(to, subject, ms = 15_000) {
      return waitFor(
        `mail to ${to} matching ${subject}`,
        async () => (await all()).find((m) => m.to.includes(to.toLowerCase()) && subject.test(m.subject)),
        ms,
      );
    },
    close: () => mx.close(),
  };
}

/** The whole service with the worker, routing @owner.test mail to the inbox. */
export async function startPaymentsServer(inbox: OwnerInbox, opts: TestServerOptions = {}): Promise<TestServer> {
  return startTestServer({ worker: true, ...opts, resolver: staticResolver({ [OWNER_DOMAIN]: { host: '127.0.0.1', port: inbox.port } }) });
}

/** The owner link (…/owner/l/<token>) in a mail. */
export function linkIn(mail: OwnerMail): string {
  const m = /https?:\/\/\S+\/owner\/l\/[A-Za-z0-9_-]+/.exec(mail.text);
  if (!m) throw new Error(`no owner link in: ${mail.text}`);
  return m[0];
}

export interface OwnerSession {
  cookie: string;
  /** Where Continue led (the payment page, the card page or the owner home). */
  landing: string;
  get(path: string): Promise<{ status: number; html: string }>;
  /** Posts a form on an owner page; the session's form token is added. */
  post(path: string, fields: Record<string, string>): Promise<{ status: number; html: string; location: string | null }>;
}

/** Opens a single-use link and presses Continue, as a browser would. */
export async function ownerSignIn(t: TestServer, link: string): Promise<OwnerSession> {
  const res = await fetch(link, { method: 'POST', redirect: 'manual' });
  if (res.status !== 303) throw new Error(`continue failed: ${res.status} ${await res.text()}`);
  const cookie = (res.headers.get('set-cookie') ?? '').split(';')[0]!;
  const landing = res.headers.get('location')!;
  const get = async (path: string) => {
    const r = await fetch(`${t.url}${path}`, { headers: { cookie }, redirect: 'manual' });
    return { status: r.status, html: await r.text() };
  };
  return {
    cookie,
    landing,
    get,
    async post(path, fields) {
      const pageHtml = (await get(path)).html;
      const formToken = /name="form_token" value="([^"]+)"/.exec(pageHtml)?.[1] ?? '';
      const r = await fetch(`${t.url}${path}`, {
        method: 'POST',
        headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ form_token: formToken, ...fields }).toString(),
        redirect: 'manual',
      });
      return { status: r.status, html: await r.text(), location: r.headers.get('location') };
    },
  };
}

/** Test card numbers of the local provider's simulated card network. */
export const CARDS = { ok: '4242424242424242', declined: '4000000000000002', insufficientFunds: '4000000000009995' } as const;

/** Saves a card (and optionally a mandate tier 0..2) in the wallet of `email`, through the card page. */
export async function enrollWallet(
  t: TestServer,
  inbox: OwnerInbox,
  email: string,
  card: string = CARDS.ok,
  tier: number | null = null,
): Promise<OwnerSession> {
  // A sign-in link for the owner home, asked for on the public page.
  const before = (await inbox.all()).length;
  await fetch(`${t.url}/owner/link`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ email }).toString(),
  });
  const mail = await waitFor('sign-in mail', async () => (await inbox.all()).slice(before).find((m) => m.to.includes(email) && /sign-in link/.test(m.subject)));
  const s = await ownerSignIn(t, linkIn(mail));
  const r = await s.post('/owner/card', { action: 'save', number: card, exp: '12/34', cvc: '123', mandate: tier === null ? 'none' : String(tier) });
  if (!/Card saved/.test(r.html)) throw new Error(`saving the card failed: ${r.status} ${r.html}`);
  return s;
}
