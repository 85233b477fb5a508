/**
 * Every REST procedure over real HTTP (/api/v1) against a real server and a real PostgreSQL database:
 * signup and confirm in every available domain mode, the account, its callback webhook, API keys, boxes and
 * the hash-chained event log. Security cases shared by every keyed route live in security.test.ts.
 */
import { goLive } from '@boxes/core';
import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintKey, rest, signupAccount, startTestServer, type TestAccount, type TestServer, type ApiEvent } from '@boxes/testing';
import { exec, k as kysely, rows as sqlRows, sql, tbl } from '@boxes/db';

const countInt = sql<number>`count(*)::int`.as('n');

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(() => t?.stop());

const uniq = () => randomBytes(5).toString('hex');
const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const RAW_KEY = /^bxs_live_[0-9A-Za-z]{43,}$/;
const GENESIS = '0'.repeat(64);

/** RFC 8785 canonical JSON for the JSON values events carry (objects, arrays, strings, integers, booleans, null). */
function jcs(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(jcs).join(',')}]`;
  const o = v as Record<string, unknown>;
  return `{${Object.keys(o)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${jcs(o[k])}`)
    .join(',')}}`;
}

async function allEvents(key: string, query = ''): Promise<ApiEvent[]> {
  const r = await rest<{ events: ApiEvent[]; next_cursor: string; has_more: boolean }>(t, 'GET', `/events?limit=500${query}`, { key });
  expect(r.status).toBe(200);
  expect(r.body.has_more).toBe(false);
  return r.body.events;
}

async function startSignup(body: Record<string, unknown>) {
  return rest(t, 'POST', '/signup/agentic', { body });
}

async function confirm(intentId: string) {
  return rest(t, 'POST', '/signup/agentic/confirm', { body: { intent_id: intentId } });
}

function expectError(r: { status: number; body: any; headers: Headers }, status: number, code: string) {
  expect(r.status, JSON.stringify(r.body)).toBe(status);
  expect(r.body.error.code).toBe(code);
  expect(r.body.error.message).toEqual(expect.any(String));
  expect(r.body.error.request_id).toMatch(/^req_[0-9a-z]{20}$/);
  expect(r.headers.get('x-request-id')).toBe(r.body.error.request_id);
  expect(JSON.stringify(r.body)).not.toMatch(/\bat .+\.(ts|js):\d+/); // never a stack trace
}

function fieldPaths(r: { body: any }): string[] {
  return (r.body.error.fields as { path: string; message: string }[]).map((f) => f.path);
}

describe('POST /signup/agentic and /signup/agentic/confirm', () => {
  it('subdomain word_pair: <word>-<word>.<base_domain>, then confirm gives agent@<domain>, a bxs_live_ key and active; the signup callback URL is kept', async () => {
    const r = await startSignup({
      human_email: `Owner.${uniq()}@Example.COM`,
      domain_intent: { mode: 'subdomain', slug_style: 'word_pair' },
      agent_callback_webhook: 'https://agent.example.com/boxes',
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.intent_id).toMatch(/^int_[0-9a-z]{20}$/);
    expect(r.body.full_domain).toMatch(new RegExp(`^[a-z]+-[a-z]+\\.${escapeRe(t.config.baseDomain)}$`));
    expect(r.body.mode).toBe('subdomain');
    expect(r.body.status).toBe('pending_confirmation');
    expect(r.body.expires_at).toMatch(ISO);
    expect(new Date(r.body.expires_at).getTime()).toBeGreaterThan(Date.now());
    expect(r.body.next_step).toEqual({ method: 'POST', url: `${t.apiBase}/signup/agentic/confirm`, body: { intent_id: r.body.intent_id } });

    const c = await confirm(r.body.intent_id);
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect(c.body.primary_address).toBe(`agent@${r.body.full_domain}`);
    expect(c.body.api_key).toMatch(RAW_KEY);
    expect(c.body.account_status).toBe('active');
    expect(c.body.account_id).toMatch(/^acct_[0-9a-z]{20}$/);
    expect(c.body.key_id).toMatch(/^key_[0-9a-z]{20}$/);
    expect(c.body.domain).toBe(r.body.full_domain);
    expect(c.body.domain_status).toBe('active');

    const events = await allEvents(c.body.api_key);
    expect(events.map((e) => e.type)).toEqual(['signup.completed', 'domain.ready', 'box.created', 'api_key.created']);
    expect(events[0]!.data).toMatchObject({
      account_id: c.body.account_id,
      primary_address: c.body.primary_address,
      domain: r.body.full_domain,
      account_status: 'active',
    });
    expect(events[1]!.data).toEqual({ domain: r.body.full_domain });
    // The raw key is never written into the event log.
    expect(JSON.stringify(events)).not.toContain(c.body.api_key);

    // The callback URL given at signup is kept; the owner email is stored lower-case.
    const acct = await rest(t, 'GET', '/account', { key: c.body.api_key });
    expect(acct.status).toBe(200);
    expect(acct.body.agent_callback_webhook).toBe('https://agent.example.com/boxes');
    expect(acct.body.owner_email).toMatch(/^owner\.[0-9a-f]{10}@example\.com$/);
  });

  it('slug_style may be omitted and defaults to a word pair; two signups get different domains', async () => {
    const a = await startSignup({ human_email: 'a@example.com', domain_intent: { mode: 'subdomain' } });
    const b = await startSignup({ human_email: 'b@example.com', domain_intent: { mode: 'subdomain' } });
    expect(a.status).toBe(200);
    expect(b.status).toBe(200);
    for (const r of [a, b]) expect(r.body.full_domain).toMatch(new RegExp(`^[a-z]+-[a-z]+\\.${escapeRe(t.config.baseDomain)}$`));
    expect(a.body.full_domain).not.toBe(b.body.full_domain);
    expect(a.body.intent_id).not.toBe(b.body.intent_id);
  });

  const byoCases = [
    { mode: 'byo_manual', level: 'apex', domain: () => `acme-${uniq()}.com` },
    { mode: 'byo_manual', level: 'third-level', domain: () => `mail.acme-${uniq()}.org` },
    { mode: 'byo_delegated', level: 'apex', domain: () => `agents-${uniq()}.net` },
    { mode: 'byo_delegated', level: 'third-level', domain: () => `bots.agents-${uniq()}.io` },
  ] as const;

  it.each(byoCases)('$mode with an $level domain creates intent, account and key', async ({ mode, domain: make }) => {
    const domain = make();
    const r = await startSignup({ human_email: `owner-${uniq()}@example.com`, domain_intent: { mode, byo_domain: domain } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.intent_id).toMatch(/^int_[0-9a-z]{20}$/);
    expect(r.body.full_domain).toBe(domain);
    expect(r.body.mode).toBe(mode);

    const c = await confirm(r.body.intent_id);
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect(c.body.primary_address).toBe(`agent@${domain}`);
    expect(c.body.api_key).toMatch(RAW_KEY);
    expect(c.body.account_status).toBe('active');
    expect(c.body.domain).toBe(domain);
    expect(c.body.domain_status).toBe(mode === 'byo_manual' ? 'pending_dns' : 'pending_delegation');

    const acct = await rest(t, 'GET', '/account', { key: c.body.api_key });
    expect(acct.status).toBe(200);
    expect(acct.body.domain).toEqual({ name: domain, mode, status: mode === 'byo_manual' ? 'pending_dns' : 'pending_delegation' });

    const events = await allEvents(c.body.api_key);
    const types = events.map((e) => e.type);
    expect(types).toContain('signup.completed');
    expect(types).not.toContain('domain.ready'); // not ready until DNS resolves or delegation propagates
    if (mode === 'byo_manual') {
      expect(types).not.toContain('domain.delegation_required');
      const filtered = await allEvents(c.body.api_key, '&type=domain.dns_required');
      expect(filtered).toHaveLength(1);
      const data = filtered[0]!.data as { domain: string; records: { name: string; type: string; ttl: number; values: string[] }[] };
      expect(data.domain).toBe(domain);
      const mx = data.records.filter((x) => x.type === 'MX');
      expect(mx).toHaveLength(1);
      expect(mx[0]!.name).toBe(domain);
      expect(mx[0]!.values.join(' ')).toContain(t.config.mailHost);
      const spf = data.records.filter((x) => x.type === 'TXT' && x.values.some((v) => v.startsWith('v=spf1')));
      expect(spf).toHaveLength(1);
      expect(spf[0]!.name).toBe(domain);
      const dkim = data.records.filter((x) => x.values.some((v) => v.startsWith('v=DKIM1')));
      expect(dkim).toHaveLength(1);
      expect(dkim[0]!.type).toBe('TXT');
      expect(dkim[0]!.name).toMatch(new RegExp(`^[a-z0-9-]+\\._domainkey\\.${escapeRe(domain)}$`));
      expect(dkim[0]!.values[0]).toMatch(/p=[A-Za-z0-9+/]{200,}={0,2}$/);
      const dmarc = data.records.filter((x) => x.values.some((v) => v.startsWith('v=DMARC1')));
      expect(dmarc).toHaveLength(1);
      expect(dmarc[0]!.name).toBe(`_dmarc.${domain}`);
      for (const rec of data.records) expect(rec.ttl).toBeGreaterThan(0);
    } else {
      expect(types).not.toContain('domain.dns_required');
      const filtered = await allEvents(c.body.api_key, '&type=domain.delegation_required');
      expect(filtered).toHaveLength(1);
      expect(filtered[0]!.data).toMatchObject({ domain, nameservers: t.config.nameservers });
      expect(t.config.nameservers.length).toBeGreaterThanOrEqual(2);
    }
  });

  it('normalises a byo domain (case, trailing dot)', async () => {
    const name = `Case-${uniq()}.Example.COM.`;
    const r = await startSignup({ human_email: 'o@example.com', domain_intent: { mode: 'byo_manual', byo_domain: name } });
    expect(r.status).toBe(200);
    expect(r.body.full_domain).toBe(name.toLowerCase().replace(/\.$/, ''));
  });

  // A function body where the value depends on the running server.
  const invalid: { name: string; body: Record<string, unknown> | (() => Record<string, unknown>); field: string | RegExp }[] = [
    { name: 'a bad email', body: { human_email: 'not-an-email', domain_intent: { mode: 'subdomain' } }, field: 'human_email' },
    { name: 'a missing email', body: { domain_intent: { mode: 'subdomain' } }, field: 'human_email' },
    { name: 'an unknown mode', body: { human_email: 'o@example.com', domain_intent: { mode: 'carrier_pigeon' } }, field: 'domain_intent.mode' },
    { name: 'a missing domain_intent', body: { human_email: 'o@example.com' }, field: 'domain_intent' },
    { name: 'byo_manual without byo_domain', body: { human_email: 'o@example.com', domain_intent: { mode: 'byo_manual' } }, field: 'domain_intent.byo_domain' },
    {
      name: 'byo_delegated without byo_domain',
      body: { human_email: 'o@example.com', domain_intent: { mode: 'byo_delegated' } },
      field: 'domain_intent.byo_domain',
    },
    {
      name: 'a byo_domain that is not a domain',
      body: { human_email: 'o@example.com', domain_intent: { mode: 'byo_manual', byo_domain: 'not a domain' } },
      field: 'domain_intent.byo_domain',
    },
    {
      name: 'a byo_domain under the shared domain',
      body: () => ({ human_email: 'o@example.com', domain_intent: { mode: 'byo_manual', byo_domain: `mine.${t.config.baseDomain}` } }),
      field: 'domain_intent.byo_domain',
    },
    {
      name: 'an unknown slug_style',
      body: { human_email: 'o@example.com', domain_intent: { mode: 'subdomain', slug_style: 'emoji' } },
      field: 'domain_intent.slug_style',
    },
    {
      name: 'an http callback webhook',
      body: { human_email: 'o@example.com', domain_intent: { mode: 'subdomain' }, agent_callback_webhook: 'http://agent.example.com/x' },
      field: 'agent_callback_webhook',
    },
    {
      name: 'an unknown top-level field',
      body: { human_email: 'o@example.com', domain_intent: { mode: 'subdomain' }, favourite_colour: 'blue' },
      field: /favourite_colour/,
    },
    { name: 'an unknown field in domain_intent', body: { human_email: 'o@example.com', domain_intent: { mode: 'subdomain', tld: 'xyz' } }, field: /tld/ },
  ];

  it.each(invalid)('rejects $name with 400 naming the field', async ({ body, field }) => {
    const r = await startSignup(typeof body === 'function' ? body() : body);
    expectError(r, 400, 'validation_error');
    const fields = r.body.error.fields as { path: string; message: string }[];
    expect(Array.isArray(fields)).toBe(true);
    if (typeof field === 'string') {
      expect(fieldPaths(r)).toContain(field);
      expect(r.body.error.message).toContain(field);
    } else {
      expect(fields.some((f) => field.test(f.path) || field.test(f.message))).toBe(true);
    }
  });

  it('rejects malformed JSON with 400 and a non-JSON body with 415', async () => {
    const bad = await rest(t, 'POST', '/signup/agentic', { rawBody: '{"human_email": ', headers: { 'content-type': 'application/json' } });
    expectError(bad, 400, 'invalid_json');
    const form = await rest(t, 'POST', '/signup/agentic', {
      rawBody: 'human_email=o@example.com',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expectError(form, 415, 'unsupported_media_type');
  });

  it('a byo domain: pending claims do not block each other; one live on another account is 409 with suggestions', async () => {
    const domain = `taken-${uniq()}.com`;
    const first = await startSignup({ human_email: 'first@example.com', domain_intent: { mode: 'byo_manual', byo_domain: domain } });
    expect(first.status).toBe(200);

    // A pending claim (intent or confirmed, not yet proven) does not block another claim, in either mode.
    for (const [mode, name] of [
      ['byo_manual', domain],
      ['byo_delegated', domain],
      ['byo_manual', domain.toUpperCase()],
    ] as const) {
      const r = await startSignup({ human_email: 'second@example.com', domain_intent: { mode, byo_domain: name } });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
    }
    expect((await confirm(first.body.intent_id)).status).toBe(200);

    // Once proven (live) on the first account, the name is taken: 409 with free names to claim instead.
    await t.db.domain.updateMany({ where: { name: domain }, data: { status: 'active', liveName: domain } });
    const again = await startSignup({ human_email: 'third@example.com', domain_intent: { mode: 'byo_delegated', byo_domain: domain } });
    expectError(again, 409, 'domain_taken');
    expect(again.body.error.suggestions.length).toBeGreaterThan(0);
    expect(again.body.error.suggestions[0]).toMatchObject({ mode: 'subdomain', domain: expect.stringMatching(/^taken-/) });
    const rows = await sqlRows(t.db, kysely.selectFrom('domains').select(countInt).where('name', '=', domain));
    expect(rows[0]!.n).toBe(1);
  });

  it('confirming twice gives 409 and leaves exactly one account, one domain and one key', async () => {
    const human = `twice-${uniq()}@example.com`;
    const r = await startSignup({ human_email: human, domain_intent: { mode: 'subdomain' } });
    const first = await confirm(r.body.intent_id);
    expect(first.status).toBe(200);
    const second = await confirm(r.body.intent_id);
    expectError(second, 409, 'intent_already_confirmed');
    expect(second.body.error).not.toHaveProperty('api_key');
    expect(JSON.stringify(second.body)).not.toContain(first.body.api_key);

    const accounts = await sqlRows(t.db, kysely.selectFrom('accounts').select('id').where('human_email', '=', human));
    expect(accounts.map((a) => a.id)).toEqual([first.body.account_id]);
    const domains = await sqlRows(t.db, kysely.selectFrom('domains').select(countInt).where('name', '=', r.body.full_domain));
    expect(domains[0]!.n).toBe(1);
    const keys = await sqlRows(t.db, kysely.selectFrom('api_keys').select(countInt).where('account_id', '=', first.body.account_id));
    expect(keys[0]!.n).toBe(1);
    // The first key still works.
    expect((await rest(t, 'GET', '/account', { key: first.body.api_key })).status).toBe(200);
  });

  it('concurrent confirms of one intent: one 200, the rest 409, and one account', async () => {
    const r = await startSignup({ human_email: `race-${uniq()}@example.com`, domain_intent: { mode: 'subdomain' } });
    const results = await Promise.all([1, 2, 3].map(() => confirm(r.body.intent_id)));
    expect(results.map((x) => x.status).sort()).toEqual([200, 409, 409]);
    for (const x of results.filter((y) => y.status === 409)) expect(x.body.error.code).toBe('intent_already_confirmed');
    const rows = await sqlRows(
      t.db,
      kysely.selectFrom('accounts as a').innerJoin('domains as d', 'd.account_id', 'a.id').select(countInt).where('d.name', '=', r.body.full_domain),
    );
    expect(rows[0]!.n).toBe(1);
  });

  it('concurrent byo claims on one domain all stay pending; proven at once, exactly one goes live', async () => {
    const domain = `race-${uniq()}.com`;
    const starts = await Promise.all(
      [1, 2, 3, 4].map((i) => startSignup({ human_email: `r${i}@example.com`, domain_intent: { mode: 'byo_manual', byo_domain: domain } })),
    );
    for (const x of starts) expect(x.status, JSON.stringify(x.body)).toBe(200);
    const confirms = await Promise.all(starts.map((x) => confirm(x.body.intent_id)));
    for (const x of confirms) expect(x.body.domain_status, JSON.stringify(x.body)).toBe('pending_dns');
    const pending = await t.db.domain.findMany({ where: { name: domain } });
    expect(pending.map((d) => [d.status, d.liveName])).toEqual(pending.map(() => ['pending_dns', null]));
    // Every claim found proven at the same moment (the verifier's last step): one takes the name.
    const results = await Promise.all(pending.map((d) => t.db.$transaction((tx) => goLive(t.svc, tx, d))));
    expect(results.filter((d) => d.status === 'active')).toHaveLength(1);
    const rows = await sqlRows(t.db, kysely.selectFrom('domains').select(countInt).where('live_name', '=', domain).where('status', '=', sql.lit('active')));
    expect(rows[0]!.n).toBe(1);
    for (const d of results.filter((x) => x.status !== 'active')) expect((d.checks as any).blocked_by).toMatch(/another account proved this domain first/);
  });

  it('an expired intent gets 410, creates nothing and no longer holds its domain', async () => {
    const domain = `expired-${uniq()}.com`;
    const r = await startSignup({ human_email: 'late@example.com', domain_intent: { mode: 'byo_delegated', byo_domain: domain } });
    expect(r.status).toBe(200);
    await exec(t.db, kysely.updateTable('signup_intents').set({ expires_at: sql<Date>`now() - interval '1 minute'` }).where('id', '=', r.body.intent_id));
    const c = await confirm(r.body.intent_id);
    expectError(c, 410, 'intent_expired');
    const rows = await sqlRows(t.db, kysely.selectFrom('domains').select(countInt).where('name', '=', domain));
    expect(rows[0]!.n).toBe(0);
    const again = await startSignup({ human_email: 'other@example.com', domain_intent: { mode: 'byo_manual', byo_domain: domain } });
    expect(again.status, JSON.stringify(again.body)).toBe(200);
  });

  it('confirm with an unknown intent id gives 404 and a malformed one 400', async () => {
    const unknown = await confirm(`int_${'0'.repeat(20)}`);
    expectError(unknown, 404, 'not_found');
    const malformed = await confirm('not-an-intent');
    expectError(malformed, 400, 'validation_error');
    expect(fieldPaths(malformed)).toContain('intent_id');
    const extra = await rest(t, 'POST', '/signup/agentic/confirm', { body: { intent_id: `int_${'0'.repeat(20)}`, api_key: 'x' } });
    expectError(extra, 400, 'validation_error');
  });
});

describe('GET /account and the callback webhook', () => {
  let a: TestAccount;
  beforeAll(async () => {
    a = await signupAccount(t, `acct-${uniq()}@example.com`);
  });

  it('GET /account describes the account', async () => {
    const r = await rest(t, 'GET', '/account', { key: a.apiKey });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      id: a.accountId,
      account_status: 'active',
      primary_address: a.primaryAddress,
      owner_email: expect.stringMatching(/^acct-[0-9a-f]{10}@example\.com$/),
      domain: { name: a.domain, mode: 'subdomain', status: 'active' },
      agent_callback_webhook: null,
      credit_balance_cents: 0,
      balance_state: 'ok',
      low_balance: false,
      emails_covered: 250,
      trailer: { enabled: true, status: 'on', surcharge_per_message_usd: '0', surcharge_paid_usd: '0', surcharge_remaining_usd: '5' },
      close_protection: { enabled: false, enabled_at: null },
      created_at: expect.stringMatching(ISO),
    });
  });

  it('sets, reads and clears the callback webhook; https only', async () => {
    const get0 = await rest(t, 'GET', '/account/callback-webhook', { key: a.apiKey });
    expect(get0.status).toBe(200);
    expect(get0.body).toEqual({ agent_callback_webhook: null });

    const url = 'https://agent.example.com/boxes/events?token=abc';
    const put = await rest(t, 'PUT', '/account/callback-webhook', { key: a.apiKey, body: { agent_callback_webhook: url } });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    expect(put.body).toEqual({ agent_callback_webhook: url });
    expect((await rest(t, 'GET', '/account/callback-webhook', { key: a.apiKey })).body).toEqual({ agent_callback_webhook: url });
    expect((await rest(t, 'GET', '/account', { key: a.apiKey })).body.agent_callback_webhook).toBe(url);

    for (const bad of ['http://agent.example.com/boxes', 'ftp://agent.example.com/', 'not a url', '']) {
      const r = await rest(t, 'PUT', '/account/callback-webhook', { key: a.apiKey, body: { agent_callback_webhook: bad } });
      expectError(r, 400, 'validation_error');
      expect(fieldPaths(r)).toContain('agent_callback_webhook');
    }
    // The field is not named url, and it is required (null, not absence, clears it).
    const wrongName = await rest(t, 'PUT', '/account/callback-webhook', { key: a.apiKey, body: { url: 'https://agent.example.com/x' } });
    expectError(wrongName, 400, 'validation_error');
    const missing = await rest(t, 'PUT', '/account/callback-webhook', { key: a.apiKey, body: {} });
    expectError(missing, 400, 'validation_error');
    // Rejected calls changed nothing.
    expect((await rest(t, 'GET', '/account/callback-webhook', { key: a.apiKey })).body).toEqual({ agent_callback_webhook: url });

    const clear = await rest(t, 'PUT', '/account/callback-webhook', { key: a.apiKey, body: { agent_callback_webhook: null } });
    expect(clear.status).toBe(200);
    expect(clear.body).toEqual({ agent_callback_webhook: null });
    expect((await rest(t, 'GET', '/account/callback-webhook', { key: a.apiKey })).body).toEqual({ agent_callback_webhook: null });
    expect((await rest(t, 'GET', '/account', { key: a.apiKey })).body.agent_callback_webhook).toBeNull();

    const updates = await allEvents(a.apiKey, '&type=account.callback_webhook_updated');
    expect(updates.map((e) => e.data.agent_callback_webhook)).toEqual([url, null]);
  });
});

describe('API keys', () => {
  let a: TestAccount;
  beforeAll(async () => {
    a = await signupAccount(t);
  });

  it('mints a key: the raw api_key only in the creation response', async () => {
    const r = await rest(t, 'POST', '/account/keys', { key: a.apiKey, body: { label: 'invoice-bot', scopes: ['send', 'receive'] } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toEqual({
      id: expect.stringMatching(/^key_[0-9a-z]{20}$/),
      api_key: expect.stringMatching(RAW_KEY),
      prefix: expect.any(String),
      label: 'invoice-bot',
      scopes: ['send', 'receive'],
      allowed_box_ids: null,
      allowed_boxes: null,
      is_owner: false,
      review: 'none',
      expires_at: null,
      caps: null,
      created_at: expect.stringMatching(ISO),
      last_used_at: null,
    });
    expect(r.body.api_key.startsWith(r.body.prefix)).toBe(true);
    expect(r.body.prefix.startsWith('bxs_live_')).toBe(true);
    expect(r.body.prefix.length).toBeLessThan(r.body.api_key.length - 30);

    // The new key works for what it was given.
    expect((await rest(t, 'GET', '/events', { key: r.body.api_key })).status).toBe(200);

    const list = await rest(t, 'GET', '/account/keys', { key: a.apiKey });
    expect(list.status).toBe(200);
    const keys = list.body.keys as Record<string, unknown>[];
    expect(keys.map((k) => k.id)).toEqual([a.keyId, r.body.id]);
    for (const k of keys) {
      expect(k).not.toHaveProperty('api_key');
      expect(Object.keys(k).sort()).toEqual([
        'allowed_box_ids',
        'allowed_boxes',
        'caps',
        'created_at',
        'expires_at',
        'id',
        'is_owner',
        'label',
        'last_used_at',
        'prefix',
        'review',
        'scopes',
      ]);
    }
    expect(keys[0]).toMatchObject({ id: a.keyId, is_owner: true, scopes: ['send', 'receive', 'admin'], allowed_box_ids: null, allowed_boxes: null });
    expect(keys[1]).toMatchObject({ id: r.body.id, prefix: r.body.prefix, label: 'invoice-bot', scopes: ['send', 'receive'], is_owner: false });
    expect(JSON.stringify(list.body)).not.toContain(r.body.api_key);
    expect(JSON.stringify(list.body)).not.toContain(a.apiKey);

    const created = (await allEvents(a.apiKey, '&type=api_key.created')).map((e) => e.data);
    expect(created.map((d) => d.key_id)).toEqual([a.keyId, r.body.id]);
    expect(created[1]).toMatchObject({ label: 'invoice-bot', scopes: ['send', 'receive'], by_key_id: a.keyId });
  });

  it('stores only a SHA-256 hash: no table holds a raw key', async () => {
    const minted = await mintKey(t, a.apiKey, ['receive']);
    const raws = [a.apiKey, minted.api_key];
    const rows = await sqlRows(t.db, kysely.selectFrom('api_keys').selectAll().where('account_id', '=', a.accountId));
    expect(rows.length).toBeGreaterThanOrEqual(2);
    const dump = JSON.stringify(rows);
    for (const raw of raws) {
      expect(dump).not.toContain(raw);
      expect(dump).not.toContain(raw.slice('bxs_live_'.length));
      const row = rows.find((x) => x.hash === sha256(raw));
      expect(row, 'a row whose hash is sha256(raw key)').toBeDefined();
    }
    // Nor anywhere else in the database.
    for (const table of ['accounts', 'signup_intents', 'domains', 'boxes', 'events'] as const) {
      const all = await sqlRows(t.db, sql<{ j: string }>`SELECT row_to_json(x)::text AS j FROM ${tbl(table, 'x').$}`);
      const text = all.map((x) => x.j).join('\n');
      for (const raw of raws) expect(text, table).not.toContain(raw);
    }
  });

  it('restricts a key to boxes by address, local part or id', async () => {
    const box = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: `keybox-${uniq()}` } });
    expect(box.status).toBe(200);
    const byAddress = await rest(t, 'POST', '/account/keys', { key: a.apiKey, body: { label: 'r1', scopes: ['receive'], allowed_boxes: [box.body.address] } });
    expect(byAddress.status, JSON.stringify(byAddress.body)).toBe(200);
    expect(byAddress.body.allowed_box_ids).toEqual([box.body.id]);
    expect(byAddress.body.allowed_boxes).toEqual([box.body.address]);
    const byLocal = await rest(t, 'POST', '/account/keys', { key: a.apiKey, body: { label: 'r2', scopes: ['receive'], allowed_boxes: [box.body.local_part] } });
    expect(byLocal.status).toBe(200);
    expect(byLocal.body.allowed_box_ids).toEqual([box.body.id]);
    const byId = await rest(t, 'POST', '/account/keys', { key: a.apiKey, body: { label: 'r3', scopes: ['receive'], allowed_box_ids: [box.body.id] } });
    expect(byId.status).toBe(200);
    expect(byId.body.allowed_boxes).toEqual([box.body.address]);

    const list = await rest(t, 'GET', '/account/keys', { key: a.apiKey });
    const listed = (list.body.keys as { id: string; allowed_box_ids: string[] | null; allowed_boxes: string[] | null }[]).find((k) => k.id === byId.body.id);
    expect(listed).toMatchObject({ allowed_box_ids: [box.body.id], allowed_boxes: [box.body.address] });
  });

  const badKeys: { name: string; body: Record<string, unknown>; field: string }[] = [
    { name: 'an unknown scope', body: { label: 'x', scopes: ['root'] }, field: 'scopes.0' },
    { name: 'no scopes', body: { label: 'x', scopes: [] }, field: 'scopes' },
    { name: 'repeated scopes', body: { label: 'x', scopes: ['send', 'send'] }, field: 'scopes' },
    { name: 'an empty label', body: { label: '  ', scopes: ['send'] }, field: 'label' },
    { name: 'a missing label', body: { scopes: ['send'] }, field: 'label' },
    { name: 'an unknown box', body: { label: 'x', scopes: ['send'], allowed_boxes: ['nobody'] }, field: 'allowed_boxes' },
    { name: 'an unknown box id', body: { label: 'x', scopes: ['send'], allowed_box_ids: ['box_00000000000000000000'] }, field: 'allowed_box_ids' },
    {
      name: 'both restrictions',
      body: { label: 'x', scopes: ['send'], allowed_boxes: ['agent'], allowed_box_ids: ['box_00000000000000000000'] },
      field: 'allowed_box_ids',
    },
  ];

  it.each(badKeys)('rejects $name with 400', async ({ body, field }) => {
    const before = await rest(t, 'GET', '/account/keys', { key: a.apiKey });
    const r = await rest(t, 'POST', '/account/keys', { key: a.apiKey, body });
    expectError(r, 400, 'validation_error');
    expect(fieldPaths(r)).toContain(field);
    const after = await rest(t, 'GET', '/account/keys', { key: a.apiKey });
    expect(after.body.keys).toHaveLength(before.body.keys.length);
  });

  it('revoking takes effect on the very next request', async () => {
    const k = await mintKey(t, a.apiKey, ['send', 'receive', 'admin']);
    expect((await rest(t, 'GET', '/account', { key: k.api_key })).status).toBe(200);

    const r = await rest(t, 'DELETE', `/account/keys/${k.id}`, { key: a.apiKey });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toEqual({ id: k.id, revoked: true, revoked_at: expect.stringMatching(ISO) });

    const next = await rest(t, 'GET', '/account', { key: k.api_key });
    expectError(next, 401, 'unauthorized');
    expect(next.body.error.getting_started).toBeDefined();

    const list = await rest(t, 'GET', '/account/keys', { key: a.apiKey });
    expect((list.body.keys as { id: string }[]).map((x) => x.id)).not.toContain(k.id);
    const revoked = await allEvents(a.apiKey, '&type=api_key.revoked');
    expect(revoked.at(-1)!.data).toMatchObject({ key_id: k.id, by_key_id: a.keyId });

    // Revoking again, or an id that never existed: 404.
    expectError(await rest(t, 'DELETE', `/account/keys/${k.id}`, { key: a.apiKey }), 404, 'not_found');
    expectError(await rest(t, 'DELETE', '/account/keys/key_00000000000000000000', { key: a.apiKey }), 404, 'not_found');
  });

  it('a key can revoke another admin key, and a revoked key cannot revoke anything', async () => {
    const k1 = await mintKey(t, a.apiKey, ['admin']);
    const k2 = await mintKey(t, a.apiKey, ['admin']);
    expect((await rest(t, 'DELETE', `/account/keys/${k2.id}`, { key: k1.api_key })).status).toBe(200);
    const k3 = await mintKey(t, a.apiKey, ['admin']);
    expectError(await rest(t, 'DELETE', `/account/keys/${k3.id}`, { key: k2.api_key }), 401, 'unauthorized');
    expect((await rest(t, 'GET', '/account/keys', { key: k3.api_key })).status).toBe(200);
  });

  it('the owner key cannot be revoked (403 owner_key_protected) and keeps working', async () => {
    const other = await mintKey(t, a.apiKey, ['admin']);
    for (const key of [a.apiKey, other.api_key]) {
      const r = await rest(t, 'DELETE', `/account/keys/${a.keyId}`, { key });
      expectError(r, 403, 'owner_key_protected');
    }
    expect((await rest(t, 'GET', '/account', { key: a.apiKey })).status).toBe(200);
    const list = await rest(t, 'GET', '/account/keys', { key: a.apiKey });
    expect((list.body.keys as { id: string; is_owner: boolean }[]).find((k) => k.id === a.keyId)?.is_owner).toBe(true);
  });
});

describe('boxes', () => {
  let a: TestAccount;
  beforeAll(async () => {
    a = await signupAccount(t);
  });

  it('lists the primary box of a new account', async () => {
    const r = await rest(t, 'GET', '/boxes', { key: a.apiKey });
    expect(r.status).toBe(200);
    expect(r.body.boxes).toEqual([
      {
        id: expect.stringMatching(/^box_[0-9a-z]{20}$/),
        address: a.primaryAddress,
        local_part: 'agent',
        domain: a.domain,
        is_primary: true,
        signature: null,
        review: 'none',
        created_at: expect.stringMatching(ISO),
      },
    ]);
  });

  it('creates boxes from a local part or a full address, stored lower-case', async () => {
    const r = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'Billing' } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toEqual({
      id: expect.stringMatching(/^box_[0-9a-z]{20}$/),
      address: `billing@${a.domain}`,
      local_part: 'billing',
      domain: a.domain,
      is_primary: false,
      signature: null,
      review: 'none',
      created_at: expect.stringMatching(ISO),
    });
    const full = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: `sales.team@${a.domain}` } });
    expect(full.status).toBe(200);
    expect(full.body.address).toBe(`sales.team@${a.domain}`);
    const odd = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: "o'brien+tag_1!#$%&*/=?^`{|}~-x" } });
    expect(odd.status, JSON.stringify(odd.body)).toBe(200);
    const max = 'm'.repeat(64);
    const long = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: max } });
    expect(long.status).toBe(200);
    expect(long.body.local_part).toBe(max);

    const list = await rest(t, 'GET', '/boxes', { key: a.apiKey });
    expect((list.body.boxes as { address: string }[]).map((b) => b.address)).toEqual([
      a.primaryAddress,
      `billing@${a.domain}`,
      `sales.team@${a.domain}`,
      `o'brien+tag_1!#$%&*/=?^\`{|}~-x@${a.domain}`,
      `${max}@${a.domain}`,
    ]);
    const created = await allEvents(a.apiKey, '&type=box.created');
    expect(created.map((e) => e.data.box.id)).toEqual((list.body.boxes as { id: string }[]).map((b) => b.id));
  });

  it.each(['a..b', '.a', 'a.', 'a b', 'x'.repeat(65), '', 'a"b', 'a@b@c', 'a(b)', 'ü'])('rejects the local part %j with 400', async (address) => {
    const r = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address } });
    expectError(r, 400, 'validation_error');
    expect(fieldPaths(r)).toContain('address');
  });

  it('rejects an address on another domain, and a missing or extra field', async () => {
    const r = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'x@other.example.com' } });
    expectError(r, 400, 'validation_error');
    expect(fieldPaths(r)).toContain('address');
    expectError(await rest(t, 'POST', '/boxes', { key: a.apiKey, body: {} }), 400, 'validation_error');
    expectError(await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'ok', domain: 'x.com' } }), 400, 'validation_error');
  });

  it('duplicates get 409, whatever the case', async () => {
    expect((await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'dup' } })).status).toBe(200);
    for (const address of ['dup', 'DUP', `Dup@${a.domain}`, 'agent']) {
      const r = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address } });
      expectError(r, 409, 'box_exists');
    }
    const list = await rest(t, 'GET', '/boxes', { key: a.apiKey });
    expect((list.body.boxes as { local_part: string }[]).filter((b) => b.local_part === 'dup')).toHaveLength(1);
  });

  it('deletes a box (the primary box: 409), and the address can be created again', async () => {
    const list0 = await rest(t, 'GET', '/boxes', { key: a.apiKey });
    const primary = (list0.body.boxes as { id: string; is_primary: boolean }[]).find((b) => b.is_primary)!;
    const p = await rest(t, 'DELETE', `/boxes/${primary.id}`, { key: a.apiKey });
    expectError(p, 409, 'primary_box');

    const box = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'temp' } });
    const del = await rest(t, 'DELETE', `/boxes/${box.body.id}`, { key: a.apiKey });
    expect(del.status, JSON.stringify(del.body)).toBe(200);
    expect(del.body).toEqual({ id: box.body.id, deleted: true });
    const list = await rest(t, 'GET', '/boxes', { key: a.apiKey });
    const ids = (list.body.boxes as { id: string }[]).map((b) => b.id);
    expect(ids).not.toContain(box.body.id);
    expect(ids).toContain(primary.id);
    expectError(await rest(t, 'DELETE', `/boxes/${box.body.id}`, { key: a.apiKey }), 404, 'not_found');
    expectError(await rest(t, 'DELETE', '/boxes/box_00000000000000000000', { key: a.apiKey }), 404, 'not_found');

    const deleted = await allEvents(a.apiKey, '&type=box.deleted');
    expect(deleted.map((e) => e.data)).toEqual([{ box_id: box.body.id, address: `temp@${a.domain}` }]);

    const again = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'temp' } });
    expect(again.status).toBe(200);
    expect(again.body.id).not.toBe(box.body.id);
  });

  it('sets and clears a signature', async () => {
    const box = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'signed' } });
    const sig = '-- \nBilling bot, Example Inc.';
    const put = await rest(t, 'PUT', `/boxes/${box.body.id}/signature`, { key: a.apiKey, body: { signature: sig } });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    expect(put.body).toEqual({ ...box.body, signature: sig });
    const listed = (await rest(t, 'GET', '/boxes', { key: a.apiKey })).body.boxes as { id: string; signature: string | null }[];
    expect(listed.find((b) => b.id === box.body.id)?.signature).toBe(sig);

    const tooLong = await rest(t, 'PUT', `/boxes/${box.body.id}/signature`, { key: a.apiKey, body: { signature: 'x'.repeat(4001) } });
    expectError(tooLong, 400, 'validation_error');
    expect(fieldPaths(tooLong)).toContain('signature');
    expectError(await rest(t, 'PUT', `/boxes/${box.body.id}/signature`, { key: a.apiKey, body: {} }), 400, 'validation_error');
    expectError(await rest(t, 'PUT', '/boxes/box_00000000000000000000/signature', { key: a.apiKey, body: { signature: 'x' } }), 404, 'not_found');

    const clear = await rest(t, 'PUT', `/boxes/${box.body.id}/signature`, { key: a.apiKey, body: { signature: null } });
    expect(clear.status).toBe(200);
    expect(clear.body.signature).toBeNull();
    const after = (await rest(t, 'GET', '/boxes', { key: a.apiKey })).body.boxes as { id: string; signature: string | null }[];
    expect(after.find((b) => b.id === box.body.id)?.signature).toBeNull();

    const updates = await allEvents(a.apiKey, '&type=box.signature_updated');
    expect(updates.map((e) => e.data)).toEqual([
      { box_id: box.body.id, address: box.body.address, signature: sig },
      { box_id: box.body.id, address: box.body.address, signature: null },
    ]);
  });
});

describe('GET /events and GET /events/verify', () => {
  // The first two tests share one account: fresh, then after every kind of change.
  let a: TestAccount;

  it('a fresh account: four chained events and a verification that passes', async () => {
    a = await signupAccount(t);
    const r = await rest(t, 'GET', '/events', { key: a.apiKey });
    expect(r.status).toBe(200);
    const events = r.body.events as ApiEvent[];
    expect(events.map((e) => e.type)).toEqual(['signup.completed', 'domain.ready', 'box.created', 'api_key.created']);
    expect(events.map((e) => e.seq)).toEqual([1, 2, 3, 4]);
    expect(r.body.next_cursor).toBe('4');
    expect(r.body.has_more).toBe(false);
    let prev = GENESIS;
    for (const e of events) {
      expect(e.id).toMatch(/^evt_[0-9a-z]{20}$/);
      expect(e.account_id).toBe(a.accountId);
      expect(e.created_at).toMatch(ISO);
      expect(e._chain.prev_hash).toBe(prev);
      const { _chain, ...body } = e;
      // hash = hex(SHA-256(prev_hash + "\n" + JCS(event without _chain))), recomputed here independently.
      expect(_chain.hash).toBe(sha256(`${prev}\n${jcs(body)}`));
      prev = _chain.hash;
    }

    const v = await rest(t, 'GET', '/events/verify', { key: a.apiKey });
    expect(v.status).toBe(200);
    expect(v.body).toEqual({
      ok: true,
      events_verified: 4,
      last_verified_seq: 4,
      hash_at_seq: events[3]!._chain.hash,
      anomalies: [],
      reason: null,
      verified_at: expect.stringMatching(ISO),
    });
  });

  it('records every kind of change, pages with limit and since, filters by type', async () => {
    const box = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'ev' } });
    await rest(t, 'PUT', `/boxes/${box.body.id}/signature`, { key: a.apiKey, body: { signature: 'sig' } });
    const k = await mintKey(t, a.apiKey, ['receive']);
    await rest(t, 'DELETE', `/account/keys/${k.id}`, { key: a.apiKey });
    await rest(t, 'DELETE', `/boxes/${box.body.id}`, { key: a.apiKey });
    await rest(t, 'PUT', '/account/callback-webhook', { key: a.apiKey, body: { agent_callback_webhook: 'https://agent.example.com/e' } });

    const all = await allEvents(a.apiKey);
    expect(all.map((e) => e.type)).toEqual([
      'signup.completed',
      'domain.ready',
      'box.created',
      'api_key.created',
      'box.created',
      'box.signature_updated',
      'api_key.created',
      'api_key.revoked',
      'box.deleted',
      'account.callback_webhook_updated',
    ]);
    expect(all.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);

    // type filter, single and comma-separated
    const boxEvents = await rest(t, 'GET', '/events?type=box.created', { key: a.apiKey });
    expect(boxEvents.status).toBe(200);
    expect((boxEvents.body.events as ApiEvent[]).map((e) => e.seq)).toEqual([3, 5]);
    const keyEvents = await rest(t, 'GET', '/events?type=api_key.created,api_key.revoked', { key: a.apiKey });
    expect((keyEvents.body.events as ApiEvent[]).map((e) => [e.seq, e.type])).toEqual([
      [4, 'api_key.created'],
      [7, 'api_key.created'],
      [8, 'api_key.revoked'],
    ]);
    const none = await rest(t, 'GET', '/events?type=no.such.type', { key: a.apiKey });
    expect(none.body.events).toEqual([]);
    expect(none.body.has_more).toBe(false);

    // limit and since: pages of 3 cover the stream exactly once, in order
    const seen: number[] = [];
    let cursor: string | undefined;
    let pages = 0;
    for (;;) {
      const q = `/events?limit=3${cursor === undefined ? '' : `&since=${cursor}`}`;
      const page = await rest(t, 'GET', q, { key: a.apiKey });
      expect(page.status).toBe(200);
      const evs = page.body.events as ApiEvent[];
      expect(evs.length).toBeLessThanOrEqual(3);
      seen.push(...evs.map((e) => e.seq));
      pages += 1;
      cursor = page.body.next_cursor;
      if (!page.body.has_more) break;
      expect(evs).toHaveLength(3);
      expect(cursor).toBe(String(evs[2]!.seq));
    }
    expect(seen).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(pages).toBe(4);
    expect(cursor).toBe('10');

    const fromSeven = await rest(t, 'GET', '/events?since=7', { key: a.apiKey });
    expect((fromSeven.body.events as ApiEvent[]).map((e) => e.seq)).toEqual([8, 9, 10]);
    const atEnd = await rest(t, 'GET', '/events?since=10', { key: a.apiKey });
    expect(atEnd.body).toEqual({ events: [], next_cursor: '10', has_more: false });
    // The cursor picks up later events.
    await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'later' } });
    const later = await rest(t, 'GET', '/events?since=10', { key: a.apiKey });
    expect((later.body.events as ApiEvent[]).map((e) => [e.seq, e.type])).toEqual([[11, 'box.created']]);
    expect(later.body.next_cursor).toBe('11');

    // type filter and limit combined
    const oneBox = await rest(t, 'GET', '/events?type=box.created&limit=1', { key: a.apiKey });
    expect((oneBox.body.events as ApiEvent[]).map((e) => e.seq)).toEqual([3]);
    expect(oneBox.body.has_more).toBe(true);
    const nextBox = await rest(t, 'GET', `/events?type=box.created&limit=1&since=${oneBox.body.next_cursor}`, { key: a.apiKey });
    expect((nextBox.body.events as ApiEvent[]).map((e) => e.seq)).toEqual([5]);

    const v = await rest(t, 'GET', '/events/verify', { key: a.apiKey });
    expect(v.status).toBe(200);
    expect(v.body).toMatchObject({ ok: true, events_verified: 11, last_verified_seq: 11, anomalies: [], reason: null });
  });

  it.each([
    ['since=abc', 'invalid_cursor'],
    ['since=-1', 'invalid_cursor'],
    ['since=1.5', 'invalid_cursor'],
    ['limit=0', 'validation_error'],
    ['limit=501', 'validation_error'],
    ['limit=abc', 'validation_error'],
    ['bogus=1', 'validation_error'],
  ])('GET /events?%s gets 400 %s', async (query, code) => {
    const a = await signupAccountOnce();
    const r = await rest(t, 'GET', `/events?${query}`, { key: a.apiKey });
    expectError(r, 400, code);
  });

  it('a cursor beyond the head is refused or clamped, so no later event is skipped', async () => {
    const a = await signupAccountOnce();
    const head = Number((await rest(t, 'GET', '/events?limit=500', { key: a.apiKey })).body.next_cursor);
    const r = await rest(t, 'GET', `/events?since=${head + 1000}`, { key: a.apiKey });
    if (r.status !== 200) {
      expectError(r, 400, 'invalid_cursor');
      return;
    }
    expect(r.body.events).toEqual([]);
    expect(Number(r.body.next_cursor)).toBeLessThanOrEqual(head);
    // Polling on with the cursor we were given must still deliver the next event.
    await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'after-cursor' } });
    const next = await rest(t, 'GET', `/events?since=${r.body.next_cursor}`, { key: a.apiKey });
    expect((next.body.events as ApiEvent[]).map((e) => e.type)).toContain('box.created');
  });

  it('verify reports an event altered in the database', async () => {
    // Runs last on the account of the first two tests: seq 2 is its domain.ready event.
    const head = Number((await rest(t, 'GET', '/events?limit=500', { key: a.apiKey })).body.next_cursor);
    await exec(
      t.db,
      kysely
        .updateTable('events')
        .set((eb) => ({ data: sql`jsonb_set(${eb.ref('data')}, '{domain}', '"evil.example.com"')` }))
        .where('account_id', '=', a.accountId)
        .where('seq', '=', sql.lit(2))
        .where('type', '=', sql.lit('domain.ready')),
    );
    const v = await rest(t, 'GET', '/events/verify', { key: a.apiKey });
    expect(v.status).toBe(200);
    expect(v.body.ok).toBe(false);
    expect(v.body.events_verified).toBe(head);
    expect(head).toBeGreaterThan(2);
    expect(v.body.last_verified_seq).toBe(1);
    expect(v.body.anomalies[0]).toMatchObject({ at_seq: 2, kind: 'hash_mismatch' });
    expect(v.body.anomalies).toHaveLength(1);
    expect(v.body.reason).toEqual(expect.any(String));
  });
});

let sharedAccount: Promise<TestAccount> | undefined;
function signupAccountOnce(): Promise<TestAccount> {
  sharedAccount ??= signupAccount(t);
  return sharedAccount;
}
