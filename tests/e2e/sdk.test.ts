/**
 * The typed SDK (@boxes/sdk) against the real server's /trpc: the whole account lifecycle, and errors as
 * BoxesError with the code, status and request_id the REST API would give.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BoxesError, confirmSignup, createBoxesClient, sentMessage, signup, type BoxesClient, type Draft, type SentDraft } from '@boxes/sdk';
import { startTestServer, type TestServer } from '@boxes/testing';

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(() => t?.stop());

const uniq = () => randomBytes(5).toString('hex');
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** Awaits a call that must fail and returns its BoxesError after checking the common members. */
async function boxesError(p: Promise<unknown>, code: string, status: number): Promise<BoxesError> {
  let caught: unknown;
  try {
    await p;
  } catch (err) {
    caught = err;
  }
  expect(caught, 'the call should have failed').toBeInstanceOf(Error);
  const e = caught as BoxesError;
  expect({ code: e.code, status: e.status }, e.message).toEqual({ code, status });
  expect(e.requestId).toMatch(/^req_[0-9a-z]{20}$/);
  expect(e.message).toEqual(expect.any(String));
  expect(e.message.length).toBeGreaterThan(0);
  expect(e.name).toBe('BoxesError');
  expect(e.details).toEqual(expect.any(Object));
  // instanceof BoxesError is asserted once, in its own test below, so one defect there fails one test.
  return e;
}

async function newAccount(human = `sdk-${uniq()}@example.com`) {
  const intent = await signup(t.url, { human_email: human, domain_intent: { mode: 'subdomain', slug_style: 'word_pair' } });
  const done = await confirmSignup(t.url, { intent_id: intent.intent_id });
  return { intent, done, client: createBoxesClient({ baseUrl: t.url, apiKey: done.api_key }) };
}

describe('SDK', () => {
  let owner: BoxesClient;
  let primaryAddress: string;
  let domain: string;
  let ownerKeyId: string;

  it('signup -> confirm -> account.get', async () => {
    const human = `sdk-${uniq()}@example.com`;
    const intent = await signup(t.url, { human_email: human, domain_intent: { mode: 'subdomain', slug_style: 'word_pair' } });
    expect(intent.intent_id).toMatch(/^int_[0-9a-z]{20}$/);
    expect(intent.full_domain).toMatch(new RegExp(`^[a-z]+-[a-z]+\\.${t.config.baseDomain.replace(/\./g, '\\.')}$`));
    expect(intent.status).toBe('pending_confirmation');

    // The API base URL works as well as the site URL.
    const done = await confirmSignup(t.apiBase, { intent_id: intent.intent_id });
    expect(done.primary_address).toBe(`agent@${intent.full_domain}`);
    expect(done.api_key).toMatch(/^bxs_live_[0-9A-Za-z]{43,}$/);
    expect(done.account_status).toBe('active');
    expect(done.domain_status).toBe('active');

    owner = createBoxesClient({ baseUrl: t.url, apiKey: done.api_key });
    primaryAddress = done.primary_address;
    domain = done.domain;
    ownerKeyId = done.key_id;
    const account = await owner.account.get.query();
    expect(account).toEqual({
      id: done.account_id,
      account_status: 'active',
      primary_address: done.primary_address,
      owner_email: human,
      domain: { name: intent.full_domain, mode: 'subdomain', status: 'active' },
      agent_callback_webhook: null,
      credit_balance_cents: 0,
      balance_state: 'ok',
      low_balance: false,
      emails_covered: 250,
      trailer: { enabled: true, status: 'on', surcharge_per_message_usd: '0', surcharge_paid_usd: '0', surcharge_remaining_usd: '5' },
      close_protection: { enabled: false, enabled_at: null },
      created_at: expect.stringMatching(ISO),
    });

    const again = await boxesError(confirmSignup(t.url, { intent_id: intent.intent_id }), 'intent_already_confirmed', 409);
    expect(again.details.account_id).toBe(done.account_id);
  });

  it('signs up a byo_manual domain and sees domain.dns_required', async () => {
    const name = `sdk-${uniq()}.example.org`;
    const intent = await signup(t.url, { human_email: 'o@example.com', domain_intent: { mode: 'byo_manual', byo_domain: name } });
    expect(intent.full_domain).toBe(name);
    const done = await confirmSignup(t.url, { intent_id: intent.intent_id });
    expect(done.domain_status).toBe('pending_dns');
    const c = createBoxesClient({ baseUrl: t.url, apiKey: done.api_key });
    const page = await c.events.list.query({ type: 'domain.dns_required' });
    expect(page.events).toHaveLength(1);
    const records = (page.events[0]!.data as { records: { type: string; values: string[] }[] }).records;
    expect(records.map((r) => r.type).sort()).toEqual(['MX', 'TXT', 'TXT', 'TXT']);
  });

  it('boxes: create, list, setSignature, delete', async () => {
    const box = await owner.boxes.create.mutate({ address: 'Support' });
    expect(box).toEqual({
      id: expect.stringMatching(/^box_[0-9a-z]{20}$/),
      address: `support@${domain}`,
      local_part: 'support',
      domain,
      is_primary: false,
      signature: null,
      review: 'none',
      created_at: expect.stringMatching(ISO),
    });
    const { boxes } = await owner.boxes.list.query();
    expect(boxes.map((b) => b.address)).toEqual([primaryAddress, `support@${domain}`]);

    const signed = await owner.boxes.setSignature.mutate({ id: box.id, signature: '-- \nSupport bot' });
    expect(signed.signature).toBe('-- \nSupport bot');
    const cleared = await owner.boxes.setSignature.mutate({ id: box.id, signature: null });
    expect(cleared.signature).toBeNull();

    await boxesError(owner.boxes.create.mutate({ address: 'support' }), 'box_exists', 409);
    const bad = await boxesError(owner.boxes.create.mutate({ address: 'a..b' }), 'validation_error', 400);
    expect(bad.details.fields).toEqual([expect.objectContaining({ path: 'address' })]);
    const primary = boxes.find((b) => b.is_primary)!;
    await boxesError(owner.boxes.delete.mutate({ id: primary.id }), 'primary_box', 409);

    expect(await owner.boxes.delete.mutate({ id: box.id })).toEqual({ id: box.id, deleted: true });
    expect((await owner.boxes.list.query()).boxes.map((b) => b.id)).toEqual([primary.id]);
    await boxesError(owner.boxes.delete.mutate({ id: box.id }), 'not_found', 404);
    await boxesError(owner.boxes.setSignature.mutate({ id: box.id, signature: 'x' }), 'not_found', 404);
  });

  it('keys: create, list, revoke; a revoked key is refused at once', async () => {
    const created = await owner.keys.create.mutate({ label: 'reader', scopes: ['receive'] });
    expect(created.api_key).toMatch(/^bxs_live_/);
    expect(created).toMatchObject({ label: 'reader', scopes: ['receive'], is_owner: false, allowed_box_ids: null, allowed_boxes: null });

    const { keys } = await owner.keys.list.query();
    expect(keys.map((k) => k.id)).toEqual([ownerKeyId, created.id]);
    for (const k of keys) expect(k).not.toHaveProperty('api_key');

    const reader = createBoxesClient({ baseUrl: t.url, apiKey: created.api_key });
    expect((await reader.events.list.query({})).events.length).toBeGreaterThan(0);
    const scope = await boxesError(reader.boxes.create.mutate({ address: 'nope' }), 'insufficient_scope', 403);
    expect(scope.details).toMatchObject({ required_scope: 'admin', key_scopes: ['receive'] });

    const revoked = await owner.keys.revoke.mutate({ id: created.id });
    expect(revoked).toEqual({ id: created.id, revoked: true, revoked_at: expect.stringMatching(ISO) });
    const gone = await boxesError(reader.events.list.query({}), 'unauthorized', 401);
    expect(gone.details.getting_started).toBeDefined();
    expect((await owner.keys.list.query()).keys.map((k) => k.id)).toEqual([ownerKeyId]);

    await boxesError(owner.keys.revoke.mutate({ id: ownerKeyId }), 'owner_key_protected', 403);
    await boxesError(owner.keys.revoke.mutate({ id: created.id }), 'not_found', 404);
    const invalid = await boxesError(owner.keys.create.mutate({ label: 'x', scopes: ['root' as 'send'] }), 'validation_error', 400);
    expect((invalid.details.fields as { path: string }[]).map((f) => f.path)).toContain('scopes.0');
  });

  it('a box-restricted key sees only its boxes', async () => {
    const mine = await owner.boxes.create.mutate({ address: 'mine' });
    await owner.boxes.create.mutate({ address: 'theirs' });
    const k = await owner.keys.create.mutate({ label: 'mine-only', scopes: ['receive', 'admin'], allowed_boxes: ['mine'] });
    expect(k.allowed_box_ids).toEqual([mine.id]);
    const restricted = createBoxesClient({ baseUrl: t.url, apiKey: k.api_key });
    expect((await restricted.boxes.list.query()).boxes.map((b) => b.id)).toEqual([mine.id]);
    await boxesError(restricted.boxes.create.mutate({ address: 'more' }), 'box_restricted_key', 403);
  });

  it('events: list with type, limit and since; verify', async () => {
    const all = await owner.events.list.query({ limit: 500 });
    expect(all.has_more).toBe(false);
    const types = all.events.map((e) => e.type);
    for (const type of ['signup.completed', 'domain.ready', 'box.created', 'api_key.created', 'api_key.revoked', 'box.deleted', 'box.signature_updated']) {
      expect(types).toContain(type);
    }
    expect(all.events.map((e) => e.seq)).toEqual(all.events.map((_, i) => i + 1));
    expect(all.next_cursor).toBe(String(all.events.length));

    const first = await owner.events.list.query({ limit: 2 });
    expect(first.events.map((e) => e.seq)).toEqual([1, 2]);
    expect(first.has_more).toBe(true);
    expect(first.next_cursor).toBe('2');
    const second = await owner.events.list.query({ limit: 2, since: first.next_cursor });
    expect(second.events.map((e) => e.seq)).toEqual([3, 4]);

    const created = await owner.events.list.query({ type: 'box.created' });
    expect(created.events.every((e) => e.type === 'box.created')).toBe(true);
    expect(created.events.length).toBe(types.filter((x) => x === 'box.created').length);

    await boxesError(owner.events.list.query({ since: 'nope' }), 'invalid_cursor', 400);
    await boxesError(owner.events.list.query({ limit: 0 }), 'validation_error', 400);

    const v = await owner.events.verify.query();
    expect(v).toMatchObject({ ok: true, events_verified: all.events.length, last_verified_seq: all.events.length, anomalies: [], reason: null });
    expect(v.hash_at_seq).toBe(all.events.at(-1)!._chain.hash);
  });

  it('account callback webhook: set, get, clear; http is refused', async () => {
    expect(await owner.account.getCallbackWebhook.query()).toEqual({ agent_callback_webhook: null });
    const url = 'https://agent.example.com/hook';
    expect(await owner.account.setCallbackWebhook.mutate({ agent_callback_webhook: url })).toEqual({ agent_callback_webhook: url });
    expect(await owner.account.getCallbackWebhook.query()).toEqual({ agent_callback_webhook: url });
    expect((await owner.account.get.query()).agent_callback_webhook).toBe(url);
    const bad = await boxesError(owner.account.setCallbackWebhook.mutate({ agent_callback_webhook: 'http://agent.example.com/hook' }), 'validation_error', 400);
    expect((bad.details.fields as { path: string }[]).map((f) => f.path)).toEqual(['agent_callback_webhook']);
    expect(await owner.account.setCallbackWebhook.mutate({ agent_callback_webhook: null })).toEqual({ agent_callback_webhook: null });
    expect(await owner.account.getCallbackWebhook.query()).toEqual({ agent_callback_webhook: null });
  });
});

describe('SDK drafts', () => {
  it('create, update, list, send (once), and the errors of an incomplete one', async () => {
    const { client } = await newAccount();
    const draft: Draft = await client.drafts.create.mutate({ subject: 'from the SDK' });
    expect(draft).toMatchObject({ to: [], ready: false, subject: 'from the SDK' });
    await boxesError(client.drafts.send.mutate({ id: draft.id }), 'validation_error', 400);
    const ready = await client.drafts.update.mutate({ id: draft.id, to: 'sdk@remote.invalid', text: 'hello' });
    expect(ready).toMatchObject({ to: ['sdk@remote.invalid'], text: 'hello', ready: true });
    expect((await client.drafts.list.query({})).drafts.map((d) => d.id)).toEqual([draft.id]);
    const sent: SentDraft = sentMessage(await client.drafts.send.mutate({ id: draft.id }));
    expect(sent).toMatchObject({ draft_id: draft.id, status: 'queued', recipients: ['sdk@remote.invalid'] });
    expect(await client.drafts.send.mutate({ id: draft.id })).toMatchObject({ message_id: sent.message_id, idempotent_replay: true });
    expect((await client.messages.get.query({ id: sent.message_id })).draft_id).toBe(draft.id);
    await boxesError(client.drafts.get.query({ id: draft.id }), 'not_found', 404);
  });
});

describe('SDK errors', () => {
  it('every error is an instance of BoxesError', async () => {
    const anon = createBoxesClient({ baseUrl: t.url });
    const failures: [string, Promise<unknown>][] = [
      ['unauthorized', anon.account.get.query()],
      ['validation_error', signup(t.url, { human_email: 'nope', domain_intent: { mode: 'subdomain' } })],
      ['not_found', confirmSignup(t.url, { intent_id: `int_${'0'.repeat(20)}` })],
    ];
    for (const [label, p] of failures) {
      const err = await p.then(
        () => null,
        (e: unknown) => e,
      );
      expect(err, label).toBeInstanceOf(Error);
      expect((err as BoxesError).code, label).toBe(label);
      // The SDK's contract: catch (err) { if (err instanceof BoxesError) switch (err.code) ... }
      expect(err instanceof BoxesError, `${label}: err instanceof BoxesError`).toBe(true);
    }
  });

  it('an unauthenticated call: unauthorized, 401, with details.getting_started', async () => {
    const anon = createBoxesClient({ baseUrl: t.url });
    const e = await boxesError(anon.account.get.query(), 'unauthorized', 401);
    const gs = e.details.getting_started as Record<string, string>;
    expect(gs.signup).toBe(`${t.apiBase}/signup/agentic`);
    expect(gs.docs).toBe(`${t.url}/docs`);
    await boxesError(anon.boxes.list.query(), 'unauthorized', 401);
  });

  it('a malformed or unknown key: unauthorized', async () => {
    const unknown = createBoxesClient({ baseUrl: t.url, apiKey: `bxs_live_${'A'.repeat(43)}` });
    const e = await boxesError(unknown.account.get.query(), 'unauthorized', 401);
    expect(e.details.getting_started).toBeDefined();
    const wrong = createBoxesClient({ baseUrl: t.url, apiKey: 'not a key at all' });
    await boxesError(wrong.account.get.query(), 'unauthorized', 401);
  });

  it('validation errors of signup carry the offending fields', async () => {
    const e = await boxesError(signup(t.url, { human_email: 'nope', domain_intent: { mode: 'subdomain' } }), 'validation_error', 400);
    expect((e.details.fields as { path: string }[]).map((f) => f.path)).toEqual(['human_email']);
    const byo = await boxesError(signup(t.url, { human_email: 'o@example.com', domain_intent: { mode: 'byo_delegated' } }), 'validation_error', 400);
    expect((byo.details.fields as { path: string }[]).map((f) => f.path)).toEqual(['domain_intent.byo_domain']);
    await boxesError(confirmSignup(t.url, { intent_id: `int_${'0'.repeat(20)}` }), 'not_found', 404);
  });

  it("another account's box is not_found", async () => {
    const a = await newAccount();
    const b = await newAccount();
    const box = await a.client.boxes.create.mutate({ address: 'private' });
    await boxesError(b.client.boxes.delete.mutate({ id: box.id }), 'not_found', 404);
    await boxesError(b.client.boxes.setSignature.mutate({ id: box.id, signature: 'x' }), 'not_found', 404);
    await boxesError(b.client.keys.revoke.mutate({ id: a.done.key_id }), 'not_found', 404);
    expect((await a.client.boxes.list.query()).boxes.map((x) => x.id)).toContain(box.id);
  });
});
