// The evidence envelope (beta): absent until the account opts in (POST /beta/evidence/opt-in, admin), then on
// every send (and message delete, key mint and key revoke) with the checks that really ran for that call.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintKey, rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';

let t: TestServer;
let a: TestAccount;
beforeAll(async () => {
  t = await startTestServer();
  a = await signupAccount(t, 'evidence-owner@example.com');
});
afterAll(() => t?.stop());

const names = (ev: any): string[] => ev.policy_checks.map((c: any) => c.check);

describe('not enrolled', () => {
  it('status says so and no response carries evidence', async () => {
    const s = await rest(t, 'GET', '/beta/evidence/status', { key: a.apiKey });
    expect(s.body).toMatchObject({ enrolled: false, enrolled_at: null, covers: ['messages.send', 'messages.delete', 'keys.create', 'keys.revoke'] });
    const sent = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: 'x@remote.invalid', text: 'hi', idempotency_key: 'not-enrolled-1' } });
    expect(sent.status).toBe(200);
    expect(sent.body).not.toHaveProperty('evidence');
    const del = await rest(t, 'DELETE', `/messages/${sent.body.message_id}`, { key: a.apiKey });
    expect(del.body).not.toHaveProperty('evidence');
    const k = await rest(t, 'POST', '/account/keys', { key: a.apiKey, body: { label: 'plain', scopes: ['send'] } });
    expect(k.body).not.toHaveProperty('evidence');
  });
});

describe('enrolled', () => {
  let restricted: { id: string; api_key: string };
  let boxAddress: string;

  beforeAll(async () => {
    const box = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'billing' } });
    boxAddress = box.body.address;
    restricted = await mintKey(t, a.apiKey, ['send', 'receive', 'admin'], { allowed_boxes: ['billing'] });
  });

  it('opting in needs admin and an unrestricted key; it is recorded once', async () => {
    const sendOnly = await mintKey(t, a.apiKey, ['send']);
    expect((await rest(t, 'POST', '/beta/evidence/opt-in', { key: sendOnly.api_key })).status).toBe(403);
    expect((await rest(t, 'POST', '/beta/evidence/opt-in', { key: restricted.api_key })).body.error.code).toBe('box_restricted_key');
    const r = await rest(t, 'POST', '/beta/evidence/opt-in', { key: a.apiKey });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ enrolled: true, enrolled_at: expect.any(String) });
    const again = await rest(t, 'POST', '/beta/evidence/opt-in', { key: a.apiKey });
    expect(again.body.enrolled_at).toBe(r.body.enrolled_at);
    expect((await rest(t, 'GET', '/beta/evidence/status', { key: sendOnly.api_key })).body).toMatchObject({ enrolled: true, enrolled_at: r.body.enrolled_at });
    const events = await rest(t, 'GET', '/events?type=account.evidence.enrolled', { key: a.apiKey });
    expect(events.body.events).toHaveLength(1);
  });

  it('a send with a restricted key, headers, context and an idempotency_key: every check that ran', async () => {
    const res = await rest(t, 'POST', '/messages/send', {
      key: restricted.api_key,
      body: {
        from: boxAddress,
        to: ['one@remote.invalid', 'two@remote.invalid'],
        subject: 'evidence',
        text: 'hi',
        headers: { 'X-Campaign': 'nov' },
        context: { ticket: 7 },
        idempotency_key: 'ev-1',
      },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const ev = res.body.evidence;
    expect(ev).toMatchObject({
      request_id: res.headers.get('x-request-id'),
      capability: 'messages.send',
      action: 'taken',
      acted_by_key: restricted.id,
      idempotency_key: 'ev-1',
      next_verification_step: { method: 'GET', url: `${t.apiBase}/messages/${res.body.message_id}/audit` },
    });
    expect(names(ev)).toEqual([
      'api_key',
      'scope',
      'idempotency',
      'recipients',
      'header_rules',
      'context_size',
      'from_domain',
      'domain_verified',
      'box_restriction',
      'suppression',
      'credit',
    ]);
    expect(ev.policy_checks.every((c: any) => c.result === 'passed' && c.detail.length > 0)).toBe(true);
    expect(ev.policy_checks.find((c: any) => c.check === 'from_domain').detail).toContain(boxAddress);
    expect(ev.policy_checks.find((c: any) => c.check === 'credit').detail).toMatch(/2 message\(s\) reserved/);
    // The key's id, never the key.
    expect(JSON.stringify(ev)).not.toContain(restricted.api_key);
    // The next step works as written.
    const bundle = await rest(t, 'GET', ev.next_verification_step.url.replace(t.apiBase, ''), { key: restricted.api_key });
    expect(bundle.status).toBe(200);
    expect(bundle.body.payload.message.id).toBe(res.body.message_id);

    // The replay of the same idempotency_key: only what ran for it.
    const replay = await rest(t, 'POST', '/messages/send', {
      key: restricted.api_key,
      body: {
        from: boxAddress,
        to: ['one@remote.invalid', 'two@remote.invalid'],
        subject: 'evidence',
        text: 'hi',
        headers: { 'X-Campaign': 'nov' },
        context: { ticket: 7 },
        idempotency_key: 'ev-1',
      },
    });
    expect(replay.body.idempotent_replay).toBe(true);
    expect(names(replay.body.evidence)).toEqual(['api_key', 'scope', 'idempotency']);
    expect(replay.body.evidence.policy_checks[2].detail).toMatch(/replayed/);
    expect(replay.body.evidence.request_id).toBe(replay.headers.get('x-request-id'));
    expect(replay.body.evidence.request_id).not.toBe(ev.request_id);
  });

  it('a plain send with the owner key: no box restriction, header or context check, because none ran', async () => {
    const res = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: 'three@remote.invalid', text: 'plain' } });
    expect(names(res.body.evidence)).toEqual(['api_key', 'scope', 'recipients', 'from_domain', 'domain_verified', 'suppression', 'credit']);
    expect(res.body.evidence).toMatchObject({ acted_by_key: a.keyId, idempotency_key: null });
  });

  it('every recipient suppressed: nothing is reserved, so there is no credit check', async () => {
    await t.db.suppression.create({ data: { accountId: a.accountId, address: 'gone@remote.invalid', reason: 'bounce' } });
    const res = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: 'gone@remote.invalid', text: 'x' } });
    expect(res.body.status).toBe('suppressed');
    expect(names(res.body.evidence)).toEqual(['api_key', 'scope', 'recipients', 'from_domain', 'domain_verified', 'suppression']);
    expect(res.body.evidence.policy_checks.at(-1).detail).toMatch(/1 suppressed and skipped/);
  });

  it('a refused send carries no evidence (nothing was taken)', async () => {
    const res = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { from: 'agent@elsewhere.example', to: 'x@remote.invalid', text: 'x' } });
    expect(res.status).toBe(403);
    expect(res.body).not.toHaveProperty('evidence');
  });

  it('message delete, key mint and key revoke carry evidence too', async () => {
    const sent = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: 'four@remote.invalid', text: 'x' } });
    const del = await rest(t, 'DELETE', `/messages/${sent.body.message_id}`, { key: a.apiKey });
    expect(del.body.evidence).toMatchObject({
      capability: 'messages.delete',
      action: 'taken',
      acted_by_key: a.keyId,
      next_verification_step: { url: `${t.apiBase}/messages/${sent.body.message_id}/audit` },
    });
    expect(names(del.body.evidence)).toEqual(['api_key', 'scope', 'ownership']);
    const restrictedDel = await rest(
      t,
      'DELETE',
      `/messages/${(await rest(t, 'POST', '/messages/send', { key: restricted.api_key, body: { from: boxAddress, to: 'five@remote.invalid', text: 'x' } })).body.message_id}`,
      { key: restricted.api_key },
    );
    expect(names(restrictedDel.body.evidence)).toEqual(['api_key', 'scope', 'box_restriction', 'ownership']);

    const k = await rest(t, 'POST', '/account/keys', { key: a.apiKey, body: { label: 'restricted', scopes: ['receive'], allowed_boxes: ['billing'] } });
    expect(k.body.evidence).toMatchObject({ capability: 'keys.create', acted_by_key: a.keyId });
    expect(names(k.body.evidence)).toEqual(['api_key', 'scope', 'account_wide_key', 'box_restriction']);
    const r = await rest(t, 'DELETE', `/account/keys/${k.body.id}`, { key: a.apiKey });
    expect(names(r.body.evidence)).toEqual(['api_key', 'scope', 'account_wide_key', 'owner_key_protected']);
    expect(r.body.evidence.capability).toBe('keys.revoke');
  });

  it('another account, not enrolled, still gets none', async () => {
    const b = await signupAccount(t, 'evidence-other@example.com');
    const res = await rest(t, 'POST', '/messages/send', { key: b.apiKey, body: { to: 'x@remote.invalid', text: 'x' } });
    expect(res.body).not.toHaveProperty('evidence');
  });
});
