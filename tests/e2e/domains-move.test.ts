/**
 * POST /account/domain: moving a live account onto a new domain. The new domain is proven on its own path
 * (records at a DNS server the test controls, or a registration paid from the credit) while the old one stays
 * live; then it becomes primary with every box (same ids, same keys), and the old domain keeps receiving for the
 * grace period before it is retired.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AdjustableClock, postEntries, runDomainVerification } from '@boxes/core';
import { mintKey, rest, signupAccount, startStandInDns, startTestServer, waitFor, type StandInDns, type TestServer } from '@boxes/testing';
import { MailSink } from './mail-send-helpers';
import { eventsOf, rawMessage, sendRaw, sendRawExpectingError } from './mail-receive-helpers';

let dns: StandInDns;
let sink: MailSink;
let t: TestServer;
const clock = new AdjustableClock();
const DAY_MS = 24 * 3600_000;

beforeAll(async () => {
  dns = await startStandInDns();
  sink = new MailSink();
  await sink.start();
  t = await startTestServer({ worker: true, mail: true, clock, resolver: sink.resolver(), env: { DNS_RESOLVERS: dns.address } });
});
afterAll(async () => {
  await t?.stop();
  await sink?.close();
  await dns?.stop();
});

let n = 0;
const fresh = (tag: string, tld = 'example') => `${tag}-${Date.now().toString(36)}${n++}.${tld}`;
const move = (key: string, body: unknown) => rest(t, 'POST', '/account/domain', { key, body });
const received = async (key: string, subject: string) =>
  (await rest(t, 'GET', '/messages?direction=received&limit=200', { key })).body.messages.find((m: any) => m.subject === subject);

async function publishFor(key: string, domain: string) {
  const ev = (await eventsOf(t, key, 'domain.dns_required')).find((e) => e.data.domain === domain)!;
  for (const r of ev.data.records as { name: string; type: 'MX' | 'TXT'; values: string[] }[]) {
    dns.set(r.name, r.type, r.type === 'MX' ? r.values.map((v) => v.replace(/\.$/, '')) : r.values);
  }
}

async function credit(accountId: string, cents: number) {
  await t.db.$transaction((tx) =>
    postEntries(t.svc, tx, accountId, [
      { type: 'topup', amountMicros: BigInt(cents) * 10_000n, idempotencyKey: `test-credit:${accountId}:${n++}`, description: 'test credit' },
    ]),
  );
}

describe('POST /account/domain', () => {
  it('subdomain -> byo_manual: the old domain works until the new one is proven; then boxes, keys and mail follow; the old one retires after the grace period', async () => {
    const a = await signupAccount(t);
    const oldDomain = a.primaryAddress.split('@')[1]!;
    const box = (await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'billing' } })).body;
    const restricted = await mintKey(t, a.apiKey, ['receive', 'send'], { allowed_box_ids: [box.id] });
    const target = fresh('moved');

    const started = await move(a.apiKey, { mode: 'byo_manual', domain: target });
    expect(started.status, JSON.stringify(started.body)).toBe(200);
    expect(started.body.domains.map((d: any) => [d.name, d.status, d.primary])).toEqual([
      [oldDomain, 'active', true],
      [target, 'pending_dns', false],
    ]);
    // Meanwhile everything runs on the old domain.
    const before = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: 'friend@outside.test', subject: 'before the move', text: 'x' } });
    expect(before.body.from).toBe(`agent@${oldDomain}`);
    expect(
      (
        await rest(t, 'POST', '/messages/send', {
          key: a.apiKey,
          body: { from: `agent@${target}`, to: 'friend@outside.test', subject: 'too early', text: 'x' },
        })
      ).status,
    ).toBe(403);

    await publishFor(a.apiKey, target);
    const done = await rest(t, 'POST', '/account/domain/verify', { key: a.apiKey });
    expect(done.body.domains.map((d: any) => [d.name, d.status, d.primary])).toEqual([
      [oldDomain, 'retiring', false],
      [target, 'active', true],
    ]);
    const grace = done.body.domains[0].grace_until;
    expect(Math.abs(new Date(grace).getTime() - (clock.now().getTime() + 30 * DAY_MS))).toBeLessThan(60_000);
    const moved = (await eventsOf(t, a.apiKey, 'domain.moved'))[0]!;
    expect(moved.data).toMatchObject({ from: oldDomain, to: target });

    // The same key, the same boxes (ids kept) on the new domain; the restricted key still sees its box.
    const account = (await rest(t, 'GET', '/account', { key: a.apiKey })).body;
    expect(account.primary_address).toBe(`agent@${target}`);
    expect(account.domain).toMatchObject({ name: target, status: 'active' });
    const boxes = (await rest(t, 'GET', '/boxes', { key: a.apiKey })).body.boxes;
    expect(boxes.map((b: any) => b.address).sort()).toEqual([`agent@${target}`, `billing@${target}`]);
    expect(boxes.find((b: any) => b.address === `billing@${target}`).id).toBe(box.id);
    const seen = (await rest(t, 'GET', '/boxes', { key: restricted.api_key })).body.boxes;
    expect(seen.map((b: any) => b.id)).toEqual([box.id]);
    // Mail sent before the move is still there; the event chain runs on.
    expect((await rest(t, 'GET', `/messages/${before.body.message_id}`, { key: a.apiKey })).status).toBe(200);
    expect((await rest(t, 'GET', '/events/verify', { key: a.apiKey })).body.ok).toBe(true);

    // Sending now defaults to the new domain.
    const after = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: 'friend@outside.test', subject: 'after the move', text: 'x' } });
    expect(after.body.from).toBe(`agent@${target}`);
    // Mail to the new address and, during the grace period, to the old one reaches the box.
    await sendRaw(
      t.smtpPort!,
      { from: 'x@outside.test', to: [`billing@${target}`] },
      rawMessage({ From: 'x@outside.test', To: `billing@${target}`, Subject: 'to the new address' }, 'hi'),
    );
    await sendRaw(
      t.smtpPort!,
      { from: 'x@outside.test', to: [`billing@${oldDomain}`] },
      rawMessage({ From: 'x@outside.test', To: `billing@${oldDomain}`, Subject: 'to the old address' }, 'hi'),
    );
    await waitFor(
      'both messages',
      async () => (await received(restricted.api_key, 'to the new address')) && (await received(restricted.api_key, 'to the old address')),
    );
    // Another account on the instance reaching the old address: still local, still delivered.
    const other = await signupAccount(t);
    await rest(t, 'POST', '/messages/send', { key: other.apiKey, body: { to: `agent@${oldDomain}`, subject: 'neighbour to the old address', text: 'hi' } });
    await waitFor('the local message', () => received(a.apiKey, 'neighbour to the old address'));

    // After the grace period the old domain is retired: its mail is refused like any domain's not hosted here.
    clock.advance(31 * DAY_MS);
    const r = await runDomainVerification(t.svc);
    expect(r.retired).toBeGreaterThanOrEqual(1);
    expect((await eventsOf(t, a.apiKey, 'domain.retired'))[0]!.data).toMatchObject({ domain: oldDomain });
    const refused = await sendRawExpectingError(
      t.smtpPort!,
      { from: 'x@outside.test', to: [`billing@${oldDomain}`] },
      rawMessage({ From: 'x@outside.test', To: `billing@${oldDomain}`, Subject: 'too late' }, 'hi'),
    );
    expect(refused.responseCode).toBe(550);
    expect(await t.db.dnsRecord.count({ where: { name: { endsWith: oldDomain } } })).toBe(0);
  });

  it('byo_manual -> register: 402 without the credit; with it, registered, live and moved at once', async () => {
    const a = await signupAccount(t);
    const byo = fresh('byo');
    expect((await move(a.apiKey, { mode: 'byo_manual', domain: byo })).status).toBe(200);
    await publishFor(a.apiKey, byo);
    expect((await rest(t, 'POST', '/account/domain/verify', { key: a.apiKey })).body.domains[1]).toMatchObject({ name: byo, status: 'active', primary: true });

    const name = fresh('registered', 'xyz');
    const poor = await move(a.apiKey, { mode: 'register', domain: name });
    expect(poor.status).toBe(402);
    expect(poor.body.error.code).toBe('payment_required');
    expect(poor.body.error.top_up).toBeDefined();
    expect(await t.db.simulatedRegistryName.count({ where: { name } })).toBe(0);

    const accountId = (await rest(t, 'GET', '/account', { key: a.apiKey })).body.id;
    await credit(accountId, 1000);
    const ok = await move(a.apiKey, { mode: 'register', domain: name });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    const registered = ok.body.domains.find((d: any) => d.name === name);
    expect(registered).toMatchObject({ mode: 'register', status: 'active', primary: true });
    expect(ok.body.domains.find((d: any) => d.name === byo)).toMatchObject({ status: 'retiring', primary: false });
    expect((await rest(t, 'GET', '/account/credit/balance', { key: a.apiKey })).body.credit_balance_cents).toBe(400);
    const types = (await rest(t, 'GET', '/events?limit=100', { key: a.apiKey })).body.events.map((e: any) => e.type);
    expect(types.filter((x: string) => x.startsWith('domain.'))).toEqual(
      expect.arrayContaining(['domain.move_started', 'domain.registered', 'domain.ready', 'domain.moved']),
    );
    const zone = await t.db.dnsZone.findUniqueOrThrow({ where: { name }, include: { records: true } });
    expect(zone.kind).toBe('registered');
    expect(zone.records.some((r) => r.type === 'MX')).toBe(true);
    // Mail goes out from the registered domain.
    const sent = await rest(t, 'POST', '/messages/send', {
      key: a.apiKey,
      body: { to: 'reader@outside.test', subject: 'from the registered domain', text: 'x' },
    });
    expect(sent.body.from).toBe(`agent@${name}`);
    await waitFor('delivery', () => sink.to('reader@outside.test').find((m) => m.raw.toString().includes('from the registered domain')));
  });

  it('a second move while one is pending replaces it; a domain live elsewhere is 409 with suggestions; bad input is 400', async () => {
    const a = await signupAccount(t);
    const first = fresh('first');
    const second = fresh('second');
    expect((await move(a.apiKey, { mode: 'byo_manual', domain: first })).status).toBe(200);
    const r = await move(a.apiKey, { mode: 'byo_delegated', domain: second });
    expect(r.body.domains.map((d: any) => d.name)).not.toContain(first);
    expect(r.body.domains.find((d: any) => d.name === second)).toMatchObject({ status: 'pending_delegation', nameservers: t.config.nameservers });
    expect((await eventsOf(t, a.apiKey, 'domain.move_replaced'))[0]!.data).toMatchObject({ replaced: [first], by: second });

    const b = await signupAccount(t);
    const taken = await move(b.apiKey, { mode: 'byo_manual', domain: a.primaryAddress.split('@')[1]!.replace(/^/, '') });
    expect(taken.status).toBe(400); // a free subdomain is under the shared domain
    const live = fresh('live');
    expect((await move(a.apiKey, { mode: 'byo_manual', domain: live })).status).toBe(200);
    await publishFor(a.apiKey, live);
    await rest(t, 'POST', '/account/domain/verify', { key: a.apiKey });
    const conflict = await move(b.apiKey, { mode: 'byo_delegated', domain: live });
    expect(conflict.status).toBe(409);
    expect(conflict.body.error.code).toBe('domain_taken');
    expect(conflict.body.error.suggestions.length).toBeGreaterThan(0);
    expect((await move(b.apiKey, { mode: 'subdomain', domain: 'x.example' })).status).toBe(400);
    expect((await move(b.apiKey, { mode: 'byo_manual', domain: 'not a domain' })).status).toBe(400);
    expect((await move(b.apiKey, { mode: 'byo_manual', domain: 'x.example', extra: 1 })).status).toBe(400);
  });
});
