/**
 * App-passwords over REST (create, list, revoke, events) and the one core verify call the mail servers use:
 * which usernames work, box limits, revoked and API-key passwords, account.app_password.used at most once a
 * minute, the lockout after repeated failures, and that a password verified lately skips scrypt without outliving
 * its row.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashAppPassword, mailLoginChecks, normalizeAppPassword, verifyMailLogin } from '@boxes/core';
import { rest, signupAccount, type TestAccount, type TestServer, startTestServer } from '@boxes/testing';

let t: TestServer;
let a: TestAccount;

const FORMAT = /^[A-Z2-7]{4}-[A-Z2-7]{4}-[A-Z2-7]{4}-[A-Z2-7]{4}$/;

async function events(key: string, type: string) {
  const r = await rest(t, 'GET', `/events?type=${type}&limit=500`, { key });
  return r.body.events as { type: string; data: any }[];
}

beforeAll(async () => {
  t = await startTestServer({
    env: {
      MAIL_AUTH_USER_MAX_FAILURES: '4',
      MAIL_AUTH_ADDRESS_MAX_FAILURES: '6',
      MAIL_AUTH_FREE_FAILURES: '1',
      MAIL_AUTH_DELAY_MS: '20',
      MAIL_AUTH_LOCKOUT_SECONDS: '60',
    },
  });
  a = await signupAccount(t, 'apw-owner@example.com');
});
afterAll(() => t?.stop());

describe('POST /account/app-passwords', () => {
  it('returns the value once (four groups of four base32 characters), the usernames and the servers; lists never show it', async () => {
    const r = await rest(t, 'POST', '/account/app-passwords', { key: a.apiKey, body: { label: 'laptop' } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.password).toMatch(FORMAT);
    expect(r.body).toMatchObject({ label: 'laptop', box_id: null, box: null, last_used_at: null });
    expect(r.body.id).toMatch(/^apw_/);
    expect(r.body.usernames).toEqual(['apw-owner@example.com', a.primaryAddress]);
    expect(r.body.imap).toEqual({ host: '127.0.0.1', port: t.config.mailClients.imapPort, security: 'ssl/tls' });
    expect(r.body.smtp.security).toBe('ssl/tls');

    const list = await rest(t, 'GET', '/account/app-passwords', { key: a.apiKey });
    expect(list.status).toBe(200);
    expect(list.body.app_passwords.map((p: { id: string }) => p.id)).toContain(r.body.id);
    expect(JSON.stringify(list.body)).not.toContain(r.body.password);
    // Stored only as a hash.
    const row = await t.db.appPassword.findUniqueOrThrow({ where: { id: r.body.id } });
    expect(row.hash).toMatch(/^scrypt\$/);
    expect(JSON.stringify(row)).not.toContain(r.body.password.replace(/-/g, ''));

    const created = await events(a.apiKey, 'account.app_password.created');
    expect(created.at(-1)?.data).toMatchObject({ app_password_id: r.body.id, label: 'laptop', box_id: null, by_key_id: a.keyId });
  });

  it('limits a password to one box (address, local part or id); an unknown box is 400', async () => {
    const box = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'billing' } });
    for (const ref of [box.body.address, 'billing', box.body.id]) {
      const r = await rest(t, 'POST', '/account/app-passwords', { key: a.apiKey, body: { label: 'phone', box: ref } });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body).toMatchObject({ box_id: box.body.id, box: box.body.address, usernames: [box.body.address] });
    }
    const bad = await rest(t, 'POST', '/account/app-passwords', { key: a.apiKey, body: { label: 'phone', box: 'nobody' } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('validation_error');
    const unknownField = await rest(t, 'POST', '/account/app-passwords', { key: a.apiKey, body: { label: 'x', scopes: ['send'] } });
    expect(unknownField.status).toBe(400);
  });

  it('an app-password never works on the HTTP API', async () => {
    const r = await rest(t, 'POST', '/account/app-passwords', { key: a.apiKey, body: { label: 'api probe' } });
    for (const header of [`Bearer ${r.body.password}`, `Basic ${Buffer.from(`${a.primaryAddress}:${r.body.password}`).toString('base64')}`]) {
      const res = await rest(t, 'GET', '/account', { headers: { authorization: header } });
      expect(res.status).toBe(401);
    }
  });

  it('DELETE revokes it (404 the second time and for other accounts) and appends account.app_password.revoked', async () => {
    const r = await rest(t, 'POST', '/account/app-passwords', { key: a.apiKey, body: { label: 'old' } });
    const other = await signupAccount(t, 'other-apw@example.com');
    expect((await rest(t, 'DELETE', `/account/app-passwords/${r.body.id}`, { key: other.apiKey })).status).toBe(404);
    const del = await rest(t, 'DELETE', `/account/app-passwords/${r.body.id}`, { key: a.apiKey });
    expect(del.status).toBe(200);
    expect(del.body).toMatchObject({ id: r.body.id, revoked: true });
    expect((await rest(t, 'DELETE', `/account/app-passwords/${r.body.id}`, { key: a.apiKey })).status).toBe(404);
    const list = await rest(t, 'GET', '/account/app-passwords', { key: a.apiKey });
    expect(list.body.app_passwords.map((p: { id: string }) => p.id)).not.toContain(r.body.id);
    const revoked = await events(a.apiKey, 'account.app_password.revoked');
    expect(revoked.at(-1)?.data).toMatchObject({ app_password_id: r.body.id, by_key_id: a.keyId });
  });
});

describe('verifyMailLogin (the internal verify call)', () => {
  const verify = (username: string, password: string, remoteAddress = '192.0.2.1') =>
    verifyMailLogin(t.svc, { username, password, service: 'imap', remoteAddress });

  it("logs in with the owner's email (every box) or a box address (that box); case and hyphens do not matter", async () => {
    const acct = await signupAccount(t, 'verify-owner@example.com');
    const pw = (await rest(t, 'POST', '/account/app-passwords', { key: acct.apiKey, body: { label: 'all' } })).body;
    const asOwner = await verify('Verify-Owner@Example.com', pw.password, '192.0.2.10');
    expect(asOwner).toMatchObject({ ok: true, login: { accountId: acct.accountId, kind: 'account', boxId: null, sendBoxIds: null, appPasswordId: pw.id } });
    const asBox = await verify(acct.primaryAddress, pw.password.toLowerCase().replace(/-/g, ''), '192.0.2.10');
    expect(asBox).toMatchObject({ ok: true, login: { kind: 'box', sendBoxIds: null } });
    expect(asBox.ok && asBox.login.boxId).toMatch(/^box_/);
  });

  it('a box-limited password works only with its box address', async () => {
    const acct = await signupAccount(t, 'limited-owner@example.com');
    const box = (await rest(t, 'POST', '/boxes', { key: acct.apiKey, body: { address: 'sales' } })).body;
    const pw = (await rest(t, 'POST', '/account/app-passwords', { key: acct.apiKey, body: { label: 'sales', box: 'sales' } })).body;
    expect(await verify(box.address, pw.password, '192.0.2.11')).toMatchObject({ ok: true, login: { kind: 'box', boxId: box.id, sendBoxIds: [box.id] } });
    expect((await verify(acct.primaryAddress, pw.password, '192.0.2.11')).ok).toBe(false);
    expect((await verify('limited-owner@example.com', pw.password, '192.0.2.11')).ok).toBe(false);
    // Deleting the box does not widen the password: it stops working.
    await rest(t, 'DELETE', `/boxes/${box.id}`, { key: acct.apiKey });
    expect((await verify(box.address, pw.password, '192.0.2.11')).ok).toBe(false);
  });

  it("wrong, revoked, another account's and API-key passwords are refused", async () => {
    const acct = await signupAccount(t, 'refused-owner@example.com');
    const other = await signupAccount(t, 'refused-other@example.com');
    const pw = (await rest(t, 'POST', '/account/app-passwords', { key: acct.apiKey, body: { label: 'x' } })).body;
    const otherPw = (await rest(t, 'POST', '/account/app-passwords', { key: other.apiKey, body: { label: 'y' } })).body;
    const ip = '192.0.2.12';
    expect((await verify(acct.primaryAddress, 'AAAA-BBBB-CCCC-DDDD', ip)).ok).toBe(false);
    expect((await verify(acct.primaryAddress, acct.apiKey, ip)).ok).toBe(false);
    expect((await verify(acct.primaryAddress, otherPw.password, '192.0.2.13')).ok).toBe(false);
    await rest(t, 'DELETE', `/account/app-passwords/${pw.id}`, { key: acct.apiKey });
    expect((await verify(acct.primaryAddress, pw.password, '192.0.2.14')).ok).toBe(false);
  });

  it('a password verified lately skips scrypt; the same row revoked, or holding another hash, fails at once', async () => {
    const acct = await signupAccount(t, 'cache-owner@example.com');
    const pw = (await rest(t, 'POST', '/account/app-passwords', { key: acct.apiKey, body: { label: 'cache' } })).body;
    const ip = '192.0.2.30';
    const before = { ...mailLoginChecks };
    for (let i = 0; i < 3; i++) expect((await verify(acct.primaryAddress, pw.password, ip)).ok).toBe(true);
    expect(mailLoginChecks.scrypt - before.scrypt).toBe(1);
    expect(mailLoginChecks.cached - before.cached).toBe(2);
    // A wrong password (same shape) is never answered from what was remembered.
    expect((await verify(acct.primaryAddress, 'AAAA-BBBB-CCCC-DDDD', ip)).ok).toBe(false);
    // The row now holds another password's hash (same lookup tag kept): the remembered match was for the old hash.
    const row = await t.db.appPassword.findUniqueOrThrow({ where: { id: pw.id } });
    await t.db.appPassword.update({ where: { id: pw.id }, data: { hash: await hashAppPassword(normalizeAppPassword('EEEE-FFFF-GGGG-HHHH')!) } });
    expect((await verify(acct.primaryAddress, pw.password, ip)).ok).toBe(false);
    await t.db.appPassword.update({ where: { id: pw.id }, data: { hash: row.hash } });
    expect((await verify(acct.primaryAddress, pw.password, ip)).ok).toBe(true);
    // Revoked: refused at once, though it was verified a moment ago.
    await rest(t, 'DELETE', `/account/app-passwords/${pw.id}`, { key: acct.apiKey });
    expect((await verify(acct.primaryAddress, pw.password, ip)).ok).toBe(false);
  });

  it('account.app_password.used is appended at most once a minute per credential', async () => {
    const acct = await signupAccount(t, 'used-owner@example.com');
    const pw = (await rest(t, 'POST', '/account/app-passwords', { key: acct.apiKey, body: { label: 'used' } })).body;
    for (let i = 0; i < 3; i++) expect((await verify(acct.primaryAddress, pw.password, '192.0.2.20')).ok).toBe(true);
    let used = await events(acct.apiKey, 'account.app_password.used');
    expect(used).toHaveLength(1);
    expect(used[0]!.data).toMatchObject({ app_password_id: pw.id, service: 'imap', username: acct.primaryAddress, remote_address: '192.0.2.20' });
    // A minute later it is recorded again.
    await t.db.appPassword.update({ where: { id: pw.id }, data: { lastUsedAt: new Date(Date.now() - 61_000) } });
    expect((await verify(acct.primaryAddress, pw.password, '192.0.2.20')).ok).toBe(true);
    used = await events(acct.apiKey, 'account.app_password.used');
    expect(used).toHaveLength(2);
    const list = await rest(t, 'GET', '/account/app-passwords', { key: acct.apiKey });
    expect(list.body.app_passwords[0].last_used_at).not.toBeNull();
  });

  it('repeated failures for one username are slowed down, then refused for a while even with the right password', async () => {
    const acct = await signupAccount(t, 'lock-owner@example.com');
    const pw = (await rest(t, 'POST', '/account/app-passwords', { key: acct.apiKey, body: { label: 'lock' } })).body;
    // Failures from different addresses: the username's own count (limit 4 here) decides.
    const times: number[] = [];
    for (let i = 0; i < 4; i++) {
      const started = Date.now();
      const r = await verify(acct.primaryAddress, 'AAAA-BBBB-CCCC-DDDD', `198.51.100.${i + 1}`);
      times.push(Date.now() - started);
      expect(r).toMatchObject({ ok: false, reason: 'invalid' });
    }
    // After the free failure, each one waits a step (20 ms here) longer.
    expect(times[3]!).toBeGreaterThanOrEqual(60);
    const locked = await verify(acct.primaryAddress, pw.password, '198.51.100.99');
    expect(locked).toMatchObject({ ok: false, reason: 'locked' });
    expect(!locked.ok && locked.retryAfterSeconds).toBeGreaterThan(50);
    // Another username of the same account is not locked.
    expect((await verify('lock-owner@example.com', pw.password, '198.51.100.98')).ok).toBe(true);
  });

  it('repeated failures from one address are refused for a while, whatever the username', async () => {
    const acct = await signupAccount(t, 'addr-owner@example.com');
    const pw = (await rest(t, 'POST', '/account/app-passwords', { key: acct.apiKey, body: { label: 'addr' } })).body;
    for (let i = 0; i < 6; i++) expect((await verify(`nobody${i}@example.com`, 'AAAA-BBBB-CCCC-DDDD', '203.0.113.5')).ok).toBe(false);
    expect(await verify(acct.primaryAddress, pw.password, '203.0.113.5')).toMatchObject({ ok: false, reason: 'locked' });
    expect((await verify(acct.primaryAddress, pw.password, '203.0.113.6')).ok).toBe(true);
  });
});
