// Closing an account (DELETE /account): a missing or wrong confirm_domain (400, the owner mailed), close
// protection (set-only, the owner decides by an emailed link, support turns it off with the CLI), and a real
// close: keys dead at once, the MX refusing, a deferred delivery stopped, a registered domain held for transfer,
// the export archive opened with tar and checked message by message, and the data deleted after the grace.
import { createHash } from 'node:crypto';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AdjustableClock } from '@boxes/core';
import { staticResolver } from '@boxes/mail';
import { hasMessageId, mintKey, rest, signupAccount, startTestServer, waitFor, type ApiEvent, type TestAccount, type TestServer } from '@boxes/testing';
import { linkIn, OWNER_DOMAIN, ownerSignIn, startOwnerInbox, type OwnerInbox } from './owner-helpers';
import { rawMessage, sendRaw, sendRawExpectingError } from './mail-receive-helpers';
import { recomputeChain } from './audit-helpers';

const run = promisify(execFile);
const DAY = 86_400_000;
const clock = new AdjustableClock();
let t: TestServer;
let inbox: OwnerInbox;

/** A port nothing listens on: deliveries there fail temporarily (connection refused) and are deferred. */
async function deadPort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

beforeAll(async () => {
  inbox = await startOwnerInbox();
  t = await startTestServer({
    worker: true,
    mail: true,
    clock,
    // A deferred delivery waits its first retry (1 minute): the close happens while it is pending.
    env: { DELIVERY_RETRY_SCALE: '1' },
    resolver: staticResolver({ [OWNER_DOMAIN]: { host: '127.0.0.1', port: inbox.port }, 'slow.test': { host: '127.0.0.1', port: await deadPort() } }),
  });
});
afterAll(async () => {
  await t?.stop();
  await inbox?.close();
});

const CLI = (args: string[]) =>
  run('node', ['--import', 'tsx', 'apps/server/src/cli.ts', 'admin', ...args], {
    cwd: path.resolve(import.meta.dirname, '../..'),
    encoding: 'utf8',
    env: { ...process.env, DATABASE_URL: t.config.databaseUrl, BOXES_SECRET_KEY: t.svc.secretKey.toString('hex'), LOG_LEVEL: 'silent' },
    timeout: 60_000,
  });

async function eventTypes(accountId: string): Promise<string[]> {
  return (await t.db.event.findMany({ where: { accountId }, orderBy: { seq: 'asc' }, select: { type: true } })).map((e) => e.type);
}

describe('confirm_domain', () => {
  it('missing or wrong: 400, nothing closes, the owner is mailed and the attempt recorded', async () => {
    const a = await signupAccount(t, 'wrong@owner.test');
    const missing = await rest(t, 'DELETE', '/account', { key: a.apiKey });
    expect(missing.status).toBe(400);
    expect(missing.body.error).toMatchObject({ code: 'validation_error', fields: [{ path: 'confirm_domain', message: 'required' }] });
    const wrong = await rest(t, 'DELETE', '/account', { key: a.apiKey, body: { confirm_domain: `not-${a.domain}` } });
    expect(wrong.status).toBe(400);
    expect(wrong.body.error.fields).toEqual([{ path: 'confirm_domain', message: "not the account's domain" }]);
    // As a query parameter too.
    expect((await rest(t, 'DELETE', `/account?confirm_domain=example.com`, { key: a.apiKey })).status).toBe(400);

    const acct = await rest(t, 'GET', '/account', { key: a.apiKey });
    expect(acct.body.account_status).toBe('active');
    const mail = await inbox.waitFor('wrong@owner.test', /Someone tried to close your Boxes account/);
    expect(mail.text).toContain(a.domain);
    expect(mail.text).toContain(a.keyId);
    expect(mail.text).toMatch(/Nothing was closed/);
    const refused = await rest(t, 'GET', '/events?type=account.close_refused', { key: a.apiKey });
    expect(refused.body.events.map((e: ApiEvent) => e.data.reason)).toEqual([
      'confirm_domain missing',
      'confirm_domain does not match',
      'confirm_domain does not match',
    ]);
    // One mail per 10 minutes, however many attempts.
    await new Promise((r) => setTimeout(r, 500));
    expect((await inbox.all()).filter((m) => m.to.includes('wrong@owner.test'))).toHaveLength(1);
    // Only an admin key of an unrestricted kind may try at all.
    const send = await mintKey(t, a.apiKey, ['send', 'receive']);
    expect((await rest(t, 'DELETE', '/account', { key: send.api_key, body: { confirm_domain: a.domain } })).status).toBe(403);
  });
});

describe('close protection', () => {
  it('is set-only, shown on the account, and makes DELETE /account wait for the owner (who may keep the account)', async () => {
    const a = await signupAccount(t, 'protect@owner.test');
    expect((await rest(t, 'GET', '/account/close-protection', { key: a.apiKey })).body).toEqual({ enabled: false, enabled_at: null });
    for (const body of [{ enabled: false }, {}, { enabled: true, extra: 1 }]) {
      expect((await rest(t, 'POST', '/account/close-protection', { key: a.apiKey, body })).status, JSON.stringify(body)).toBe(400);
    }
    const on = await rest(t, 'POST', '/account/close-protection', { key: a.apiKey, body: { enabled: true } });
    expect(on.body).toEqual({ enabled: true, enabled_at: expect.any(String) });
    expect((await rest(t, 'GET', '/account', { key: a.apiKey })).body.close_protection).toEqual(on.body);

    const del = await rest(t, 'DELETE', '/account', { key: a.apiKey, body: { confirm_domain: a.domain } });
    expect(del.status, JSON.stringify(del.body)).toBe(200);
    expect(del.body).toMatchObject({
      status: 'pending_owner_approval',
      account_status: 'active',
      export: null,
      keys_revoked: 0,
      close_request: { id: expect.stringMatching(/^clr_/) },
    });
    // Nothing closed: the key still works.
    expect((await rest(t, 'GET', '/account', { key: a.apiKey })).body.account_status).toBe('active');

    // The owner opens the link and keeps the account.
    const mail = await inbox.waitFor('protect@owner.test', /Approve closing your Boxes account/);
    const s = await ownerSignIn(t, linkIn(mail));
    expect(s.landing).toBe(`/owner/close/${del.body.close_request.id}`);
    const page = await s.get(s.landing);
    expect(page.html).toContain(`Close ${a.domain}?`);
    // Without the session the page asks to sign in; without the form token the decision is refused.
    expect((await fetch(`${t.url}${s.landing}`)).status).toBe(401);
    const forged = await fetch(`${t.url}${s.landing}`, {
      method: 'POST',
      headers: { cookie: s.cookie, 'content-type': 'application/x-www-form-urlencoded' },
      body: 'action=approve',
    });
    expect(forged.status).toBe(403);
    expect((await rest(t, 'GET', '/account', { key: a.apiKey })).body.account_status).toBe('active');
    const kept = await s.post(s.landing, { action: 'deny' });
    expect(kept.html).toContain('You kept the account open');
    expect((await rest(t, 'GET', '/account', { key: a.apiKey })).body.account_status).toBe('active');
    expect(await eventTypes(a.accountId)).toEqual(
      expect.arrayContaining(['account.close_protection.enabled', 'account.close_requested', 'account.close_denied']),
    );
    // Another owner, signed in, cannot see the request.
    await signupAccount(t, 'someone-else@owner.test');
    await fetch(`${t.url}/owner/link`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'email=someone-else%40owner.test',
    });
    const otherSession = await ownerSignIn(t, linkIn(await inbox.waitFor('someone-else@owner.test', /sign-in link/)));
    const hidden = await otherSession.get(`/owner/close/${del.body.close_request.id}`);
    expect(hidden.status).toBe(404);
    expect(hidden.html).toContain('No such close request for you.');

    // Support turns protection off with the CLI; then DELETE /account closes at once.
    const { stdout } = await CLI(['close-protection-off', a.accountId]);
    expect(stdout).toMatch(/close protection of acct_\w+ is off/);
    expect((await rest(t, 'GET', '/account/close-protection', { key: a.apiKey })).body).toEqual({ enabled: false, enabled_at: null });
    const closed = await rest(t, 'DELETE', '/account', { key: a.apiKey, body: { confirm_domain: a.domain } });
    expect(closed.body).toMatchObject({ status: 'closing', account_status: 'closing' });
    expect(await eventTypes(a.accountId)).toContain('account.close_protection.disabled');
  });
});

describe('a registered domain', () => {
  it('is held for transfer when the account closes; the auth code goes to the owner', async () => {
    const a = await signupAccount(t, 'registered@owner.test');
    // The account's domain as a registration of the (simulated) local registrar.
    const domain = await t.db.domain.findFirstOrThrow({ where: { accountId: a.accountId } });
    await t.db.simulatedRegistryName.create({ data: { name: domain.name, holder: a.accountId, expiresAt: new Date(Date.now() + 365 * DAY) } });
    await t.db.domainRegistration.create({
      data: {
        id: `reg_${a.accountId.slice(5)}`,
        domainId: domain.id,
        name: domain.name,
        registrar: 'local',
        priceCentsPerYear: 600,
        registeredAt: new Date(),
        expiresAt: new Date(Date.now() + 365 * DAY),
      },
    });
    const r = await rest(t, 'DELETE', '/account', { key: a.apiKey, body: { confirm_domain: a.domain } });
    expect(r.body.domains_held_for_transfer).toEqual([a.domain]);
    const registry = await t.db.simulatedRegistryName.findUniqueOrThrow({ where: { name: domain.name } });
    expect(registry.authCode).toMatch(/^[\w-]{8,}$/);
    expect((await t.db.domainRegistration.findUniqueOrThrow({ where: { domainId: domain.id } })).status).toBe('held_for_transfer');
    const mail = await inbox.waitFor('registered@owner.test', /is closing/);
    expect(mail.text).toContain(`${domain.name}: auth code ${registry.authCode}`);
  });
});

describe('closing for real', () => {
  let a: TestAccount;
  let b: TestAccount;
  let extraKey: { id: string; api_key: string };
  const inbound: { raw: string; messageId: string }[] = [];
  let deferredId: string;
  let closeBody: any;

  beforeAll(async () => {
    a = await signupAccount(t, 'closer@owner.test');
    b = await signupAccount(t, 'neighbour@owner.test');
    extraKey = await mintKey(t, a.apiKey, ['send', 'receive']);
    const sales = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'sales' } });
    // Two messages through the MX (to two boxes), one from another account of this instance.
    for (const [i, to] of [a.primaryAddress, sales.body.address].entries()) {
      const messageId = `<inbound-${i}@outside.test>`;
      const raw = rawMessage({ From: 'Outside <outside@outside.test>', To: to, Subject: `inbound ${i}`, 'Message-ID': messageId }, `inbound body ${i}`);
      expect((await sendRaw(t.smtpPort!, { from: 'outside@outside.test', to: [to] }, raw)).accepted).toEqual([to]);
      inbound.push({ raw, messageId });
    }
    await rest(t, 'POST', '/messages/send', { key: b.apiKey, body: { to: a.primaryAddress, subject: 'from the neighbour', text: 'hello A' } });
    // A sends to B (delivered locally) and to a host that refuses connections (deferred).
    const toB = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: b.primaryAddress, subject: 'to the neighbour', text: 'hello B' } });
    const slow = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: 'someone@slow.test', subject: 'stuck', text: 'stuck' } });
    deferredId = slow.body.message_id;
    let seen = '';
    await waitFor(
      'deliveries settled',
      async () => {
        const got = await rest(t, 'GET', '/messages?limit=50', { key: a.apiKey });
        const msgs = got.body.messages as any[];
        const slowMsg = (await rest(t, 'GET', `/messages/${deferredId}`, { key: a.apiKey })).body;
        const toBMsg = (await rest(t, 'GET', `/messages/${toB.body.message_id}`, { key: a.apiKey })).body;
        seen = JSON.stringify({ messages: msgs.length, slow: slowMsg.deliveries, toB: toBMsg.status });
        return msgs.length === 5 && slowMsg.deliveries[0].status === 'deferred' && toBMsg.status === 'delivered';
      },
      30_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}: ${seen}`);
    });
    closeBody = (await rest(t, 'DELETE', '/account', { key: a.apiKey, body: { confirm_domain: ` ${a.domain.toUpperCase()}. ` } })).body;
  });

  it('answers with the close: keys revoked, the deferred delivery stopped, the export link and the deletion date', () => {
    expect(closeBody).toMatchObject({
      status: 'closing',
      account_status: 'closing',
      keys_revoked: 2,
      deliveries_stopped: 1,
      domains_held_for_transfer: [],
      export: {
        id: expect.stringMatching(/^exp_/),
        status: 'building',
        download_url: expect.stringMatching(new RegExp(`^${t.url}/exports/[\\w-]{40,}$`)),
        format: 'application/x-tar',
      },
      close_request: null,
    });
    expect(Date.parse(closeBody.delete_after) - Date.parse(closeBody.closed_at)).toBe(30 * DAY);
    expect(Date.parse(closeBody.export.expires_at) - Date.parse(closeBody.closed_at)).toBe(7 * DAY);
  });

  it('every key is dead at once', async () => {
    for (const key of [a.apiKey, extraKey.api_key]) {
      const r = await rest(t, 'GET', '/account', { key });
      expect(r.status).toBe(401);
      expect((await rest(t, 'POST', '/messages/send', { key, body: { to: b.primaryAddress, text: 'after' } })).status).toBe(401);
    }
    // The other account is untouched.
    expect((await rest(t, 'GET', '/account', { key: b.apiKey })).body.account_status).toBe('active');
  });

  it('account.closing is appended; the deferred delivery failed with mail.failed', async () => {
    const types = await eventTypes(a.accountId);
    expect(types).toContain('account.closing');
    expect(types).toContain('mail.failed');
    const closing = await t.db.event.findFirstOrThrow({ where: { accountId: a.accountId, type: 'account.closing' } });
    expect(closing.data).toMatchObject({ by_key_id: a.keyId, keys_revoked: 2, deliveries_stopped: 1, domains: [a.domain], export_id: closeBody.export.id });
    const d = await t.db.delivery.findFirstOrThrow({ where: { messageId: deferredId } });
    expect(d).toMatchObject({ status: 'failed', lastError: 'stopped: the account is closing' });
    expect((await t.db.message.findUniqueOrThrow({ where: { id: deferredId } })).status).toBe('failed');
    const acct = await t.db.account.findUniqueOrThrow({ where: { id: a.accountId } });
    expect(acct).toMatchObject({ status: 'closing', heldMicros: 0n, heldFreeMessages: 0 });
  });

  it('the MX refuses new mail for the domain (550), and mail from this instance no longer lands there', async () => {
    for (const to of [a.primaryAddress, `sales@${a.domain}`]) {
      const err = await sendRawExpectingError(
        t.smtpPort!,
        { from: 'late@outside.test', to: [to] },
        rawMessage({ From: 'late@outside.test', To: to, Subject: 'late' }, 'late'),
      );
      expect(err.responseCode, err.message).toBe(550);
    }
    const before = await t.db.message.count({ where: { accountId: a.accountId } });
    const late = await rest(t, 'POST', '/messages/send', { key: b.apiKey, body: { to: a.primaryAddress, text: 'late' } });
    expect(late.status).toBe(200);
    await new Promise((r) => setTimeout(r, 1000));
    expect(await t.db.message.count({ where: { accountId: a.accountId } })).toBe(before);
  });

  it('the owner is mailed the close and then the export link, which serves a tar archive checked message by message', async () => {
    const closing = await inbox.waitFor('closer@owner.test', /is closing/);
    expect(closing.text).toMatch(/Every API key is revoked/);
    const ready = await inbox.waitFor('closer@owner.test', /data export .* is ready/, 30_000);
    expect(ready.text).toContain(closeBody.export.download_url);

    const res = await waitFor('the archive', async () => {
      const r = await fetch(closeBody.export.download_url);
      return r.status === 200 ? r : null;
    });
    expect(res.headers.get('content-type')).toBe('application/x-tar');
    expect(res.headers.get('content-disposition')).toContain(`boxes-export-${a.domain}-`);
    const archive = Buffer.from(await res.arrayBuffer());
    expect(res.headers.get('x-content-sha256')).toBe(createHash('sha256').update(archive).digest('hex'));

    // Opened with tar, not with our code.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-export-'));
    try {
      fs.writeFileSync(path.join(dir, 'export.tar'), archive);
      const listing = (await run('tar', ['-tf', 'export.tar'], { cwd: dir })).stdout.trim().split('\n');
      expect(listing).toEqual(
        expect.arrayContaining(['README.txt', 'account.json', 'messages.json', 'events.json', 'ledger.json', 'boxes.json', 'keys.json', 'checkpoints.json']),
      );
      fs.mkdirSync(path.join(dir, 'x'));
      await run('tar', ['-xf', '../export.tar'], { cwd: path.join(dir, 'x') });
      const read = (f: string) => fs.readFileSync(path.join(dir, 'x', f));
      const json = (f: string) => JSON.parse(read(f).toString('utf8'));

      // Every message of the account, each with its .eml, whose bytes hash to raw_sha256.
      const messages = json('messages.json') as any[];
      const stored = await t.db.message.findMany({ where: { accountId: a.accountId } });
      expect(messages.map((m) => m.id).sort()).toEqual(stored.map((m) => m.id).sort());
      expect(messages).toHaveLength(5);
      for (const m of messages) {
        expect(m.eml, m.id).toBe(`messages/${m.id}.eml`);
        expect(listing).toContain(m.eml);
        const eml = read(m.eml);
        expect(createHash('sha256').update(eml).digest('hex'), m.id).toBe(m.raw_sha256);
        expect(hasMessageId(eml, m.rfc_message_id), `${m.id} carries ${m.rfc_message_id}`).toBe(true);
        expect(eml.toString('utf8')).toMatch(new RegExp(`^Subject: ${m.subject}`, 'm'));
      }
      // What came through the MX is byte for byte what was sent, below the MX's trace headers.
      for (const i of inbound) {
        const m = messages.find((x) => x.rfc_message_id === i.messageId);
        const eml = read(m.eml).toString('utf8');
        expect(eml.endsWith(i.raw)).toBe(true);
        expect(eml.slice(0, eml.length - i.raw.length)).toMatch(/^Received-SPF: [\s\S]*\r\nAuthentication-Results: /);
      }
      expect(
        messages
          .filter((m) => m.direction === 'sent')
          .map((m) => m.subject)
          .sort(),
      ).toEqual(['stuck', 'to the neighbour']);
      expect(messages.find((m) => m.id === deferredId).status).toBe('failed');

      // The events, chained as served; the ledger, boxes and keys (metadata, never a key).
      const events = json('events.json') as ApiEvent[];
      const dbEvents = await t.db.event.findMany({ where: { accountId: a.accountId, type: { not: 'account.export_ready' } }, orderBy: { seq: 'asc' } });
      expect(events.map((e) => e.id)).toEqual(dbEvents.map((e) => e.id));
      const recomputed = recomputeChain(events);
      for (const e of events) expect(recomputed.get(e.seq), `event ${e.seq}`).toBe(e._chain.hash);
      expect(events.at(-1)!.type).toBe('account.closing');
      const ledger = json('ledger.json') as any[];
      expect(ledger.length).toBe(await t.db.ledgerEntry.count({ where: { accountId: a.accountId } }));
      expect((json('boxes.json') as any[]).map((x) => x.local_part).sort()).toEqual(['agent', 'sales']);
      const keys = json('keys.json') as any[];
      expect(keys.map((k) => k.id).sort()).toEqual([a.keyId, extraKey.id].sort());
      for (const k of keys) expect(k.revoked_at).toEqual(expect.any(String));
      const whole = archive.toString('latin1');
      for (const raw of [a.apiKey, extraKey.api_key]) expect(whole).not.toContain(raw);
      expect(json('account.json')).toMatchObject({ id: a.accountId, status: 'closing', delete_after: closeBody.delete_after });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    // account.export_ready records it on the chain.
    expect(await eventTypes(a.accountId)).toContain('account.export_ready');
  });

  it('the link expires after 7 days; the data is deleted after 30, not before', async () => {
    clock.advance(8 * DAY);
    const expired = await fetch(closeBody.export.download_url);
    expect(expired.status).toBe(410);
    clock.advance(21 * DAY); // 29 days after closing
    expect((await t.runtime.worker!.billing.audit()).deleted).not.toContain(a.accountId);
    expect(await t.db.account.count({ where: { id: a.accountId } })).toBe(1);

    clock.advance(2 * DAY); // 31 days
    const pass = await t.runtime.worker!.billing.audit();
    expect(pass.deleted).toContain(a.accountId);
    const id = a.accountId;
    const counts = await Promise.all([
      t.db.account.count({ where: { id } }),
      t.db.message.count({ where: { accountId: id } }),
      t.db.event.count({ where: { accountId: id } }),
      t.db.ledgerEntry.count({ where: { accountId: id } }),
      t.db.box.count({ where: { accountId: id } }),
      t.db.apiKey.count({ where: { accountId: id } }),
      t.db.domain.count({ where: { accountId: id } }),
      t.db.delivery.count({ where: { accountId: id } }),
      t.db.accountExport.count({ where: { accountId: id } }),
      t.db.auditCheckpoint.count({ where: { accountId: id } }),
      t.db.notice.count({ where: { accountId: id } }),
      t.db.dnsRecord.count({ where: { name: { endsWith: a.domain } } }),
    ]);
    expect(counts).toEqual(Array(counts.length).fill(0));
    expect((await fetch(closeBody.export.download_url)).status).toBe(404);
    // Made-up links are 404 too, and say nothing more.
    for (const bad of ['x', 'A'.repeat(43), '..%2F..%2Fetc%2Fpasswd']) {
      const r = await fetch(`${t.url}/exports/${bad}`);
      expect(r.status, bad).toBe(404);
      expect(((await r.json()) as any).error.code).toBe('not_found');
    }
    // The neighbour keeps its mail, including what A sent it.
    const bMsgs = await rest(t, 'GET', '/messages?limit=50', { key: b.apiKey });
    expect((bMsgs.body.messages as any[]).map((m) => m.subject)).toContain('to the neighbour');
  });
});
