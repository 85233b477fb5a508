/**
 * Bring-your-own domains are claims until proven. Against a DNS server the test controls (standing in for the
 * internet's DNS, named by DNS_RESOLVERS): nothing is delivered into or sent from an unproven domain; byo_manual
 * goes live when MX, SPF, DKIM and DMARC can be seen, byo_delegated when the parent's NS name this instance;
 * stale claims expire; of two accounts claiming one domain, the first proven wins.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dkimVerify } from 'mailauth';
import { AdjustableClock, runDomainVerification } from '@boxes/core';
import { rest, signupAccount, startStandInDns, startTestServer, waitFor, type StandInDns, type TestServer } from '@boxes/testing';
import { MailSink } from './mail-send-helpers';
import { eventsOf, rawMessage, sendRaw, sendRawExpectingError } from './mail-receive-helpers';

let dns: StandInDns;
let sink: MailSink;
let t: TestServer;
const clock = new AdjustableClock();

beforeAll(async () => {
  dns = await startStandInDns();
  sink = new MailSink();
  await sink.start();
  t = await startTestServer({
    worker: true,
    mail: true,
    clock,
    resolver: sink.resolver(),
    // The verifier asks only the stand-in; its repeatable job runs often so the test sees it work unprompted.
    env: { DNS_RESOLVERS: dns.address, DOMAIN_VERIFY_INTERVAL_MS: '200' },
  });
});
afterAll(async () => {
  await t?.stop();
  await sink?.close();
  await dns?.stop();
});

let n = 0;
const uniqueDomain = (tag: string) => `${tag}-${Date.now().toString(36)}${n++}.example`;

async function claim(mode: 'byo_manual' | 'byo_delegated', domain: string, human = 'owner@example.com') {
  const intent = await rest(t, 'POST', '/signup/agentic', { body: { human_email: human, domain_intent: { mode, byo_domain: domain } } });
  expect(intent.status, JSON.stringify(intent.body)).toBe(200);
  const done = await rest(t, 'POST', '/signup/agentic/confirm', { body: { intent_id: intent.body.intent_id } });
  expect(done.status, JSON.stringify(done.body)).toBe(200);
  return {
    key: done.body.api_key as string,
    accountId: done.body.account_id as string,
    address: done.body.primary_address as string,
    status: done.body.domain_status as string,
  };
}

/** The records domain.dns_required asked this account to publish, published at the stand-in DNS. */
async function publishRequired(key: string, only?: (r: { name: string; type: string; purpose: string }) => boolean) {
  const [ev] = await eventsOf(t, key, 'domain.dns_required');
  const records = ev!.data.records as { name: string; type: 'MX' | 'TXT'; values: string[]; purpose: string }[];
  for (const r of records.filter((x) => !only || only(x))) {
    if (r.type === 'MX')
      dns.set(
        r.name,
        'MX',
        r.values.map((v) => v.replace(/\.$/, '')),
      );
    else dns.set(r.name, 'TXT', r.values);
  }
  return records;
}

const verifyNow = async (key: string) => rest(t, 'POST', '/account/domain/verify', { key });
const domainOf = async (key: string) => (await rest(t, 'GET', '/account/domain', { key })).body.domains[0];

describe('an unproven domain is not usable (the interception and spoofing hole)', () => {
  for (const mode of ['byo_manual', 'byo_delegated'] as const) {
    it(`${mode}: no local delivery into the claimer's boxes, the MX refuses it, sending from it is refused`, async () => {
      const domain = uniqueDomain(`bank-${mode.replace('_', '-')}`);
      const claimer = await claim(mode, domain);
      expect(claimer.status).toBe(mode === 'byo_manual' ? 'pending_dns' : 'pending_delegation');
      expect((await rest(t, 'POST', '/boxes', { key: claimer.key, body: { address: 'ceo' } })).status).toBe(200);

      // The account itself works: keys, events, credit.
      expect((await rest(t, 'GET', '/account', { key: claimer.key })).body.domain).toMatchObject({ name: domain, status: claimer.status });
      expect((await rest(t, 'GET', '/account/credit/balance', { key: claimer.key })).status).toBe(200);

      // (1) Another account of the instance sends to ceo@<domain>: it leaves like mail to any outside domain.
      const other = await signupAccount(t);
      const sent = await rest(t, 'POST', '/messages/send', { key: other.apiKey, body: { to: `ceo@${domain}`, subject: `intercept ${mode}`, text: 'secret' } });
      expect(sent.status, JSON.stringify(sent.body)).toBe(200);
      await waitFor(`the mail to reach the outside MX`, () => sink.to(`ceo@${domain}`)[0]);
      const inbox = await rest(t, 'GET', '/messages?direction=received', { key: claimer.key });
      expect(inbox.body.messages.filter((m: any) => m.subject === `intercept ${mode}`)).toEqual([]);

      // ... and the instance's MX refuses mail for it like any domain it does not host.
      const refused = await sendRawExpectingError(
        t.smtpPort!,
        { from: 'someone@outside.test', to: [`ceo@${domain}`] },
        rawMessage({ From: 'someone@outside.test', To: `ceo@${domain}`, Subject: 'direct' }, 'hi'),
      );
      expect(refused.responseCode).toBe(550);
      expect(await t.db.message.count({ where: { accountId: claimer.accountId, direction: 'received' } })).toBe(0);

      // (2) The claimer cannot send as ceo@<domain>: 403 domain_not_verified listing what is missing.
      const spoof = await rest(t, 'POST', '/messages/send', {
        key: claimer.key,
        body: { from: `ceo@${domain}`, to: 'victim@outside.test', subject: 'wire the money', text: 'now' },
      });
      expect(spoof.status).toBe(403);
      expect(spoof.body.error.code).toBe('domain_not_verified');
      expect(spoof.body.error.message).toContain(domain);
      expect(spoof.body.error.missing_records.length).toBeGreaterThan(0);
      expect(sink.to('victim@outside.test')).toEqual([]);
      expect(await t.db.message.count({ where: { accountId: claimer.accountId, direction: 'sent' } })).toBe(0);
    });
  }
});

describe('byo_manual: records missing, then partly there, then all there', () => {
  it('goes live (domain.ready) only with MX, SPF, DKIM and DMARC, then mail flows both ways', async () => {
    const domain = uniqueDomain('manual');
    const a = await claim('byo_manual', domain);

    const none = await verifyNow(a.key);
    expect(none.status, JSON.stringify(none.body)).toBe(200);
    expect(none.body.domains[0].status).toBe('pending_dns');
    expect(none.body.domains[0].records.map((r: any) => [r.type, r.state])).toEqual([
      ['MX', 'missing'],
      ['TXT', 'missing'],
      ['TXT', 'missing'],
      ['TXT', 'missing'],
    ]);
    expect(none.body.domains[0].records[0].last_checked_at).toEqual(expect.any(String));

    // MX and SPF, and a DKIM record with another key (someone else's, or an old one): different, not found.
    await publishRequired(a.key, (r) => r.type === 'MX' || r.purpose.startsWith('SPF'));
    const [ev] = await eventsOf(t, a.key, 'domain.dns_required');
    const dkimName = ev!.data.records.find((r: any) => r.name.includes('._domainkey.')).name;
    dns.set(dkimName, 'TXT', ['v=DKIM1; k=rsa; p=MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAnotthekey']);
    const partly = (await verifyNow(a.key)).body.domains[0];
    expect(partly.status).toBe('pending_dns');
    expect(Object.fromEntries(partly.records.map((r: any) => [r.name === domain ? r.type : r.name.split('.')[0], r.state]))).toMatchObject({
      MX: 'found',
      boxes1: 'different',
      _dmarc: 'missing',
    });
    const stillRefused = await rest(t, 'POST', '/messages/send', { key: a.key, body: { to: 'x@outside.test', subject: 's', text: 't' } });
    expect(stillRefused.body.error.code).toBe('domain_not_verified');
    expect(stillRefused.body.error.missing_records.map((r: any) => r.state).sort()).toEqual(['different', 'missing']);

    // Everything: the scheduled verifier (no call from us) makes it live within its backoff. Move the clock
    // past the next check so the backoff does not make the test wait.
    await publishRequired(a.key);
    clock.advance(10 * 60_000);
    await waitFor('domain.ready', async () => (await eventsOf(t, a.key, 'domain.ready'))[0], 15_000);
    const live = await domainOf(a.key);
    expect(live).toMatchObject({ status: 'active', name: domain, claim_expires_at: null });
    expect(live.verified_at).toEqual(expect.any(String));
    expect((await rest(t, 'GET', '/account', { key: a.key })).body.domain.status).toBe('active');

    // Inbound through the MX.
    await sendRaw(
      t.smtpPort!,
      { from: 'friend@outside.test', to: [a.address] },
      rawMessage({ From: 'friend@outside.test', To: a.address, Subject: 'welcome' }, 'hello'),
    );
    await waitFor('the inbound message', async () =>
      (await rest(t, 'GET', '/messages?direction=received', { key: a.key })).body.messages.find((m: any) => m.subject === 'welcome'),
    );
    // Outbound, DKIM-signed with the key published in the claim's record.
    const out = await rest(t, 'POST', '/messages/send', { key: a.key, body: { to: 'reader@outside.test', subject: 'from my domain', text: 'signed' } });
    expect(out.status, JSON.stringify(out.body)).toBe(200);
    const got = await waitFor('the outbound message', () => sink.to('reader@outside.test')[0]);
    const dkimRecord = ev!.data.records.find((r: any) => r.name === dkimName).values[0] as string;
    const verified = await dkimVerify(got.raw, {
      resolver: async (name: string, type: string) => {
        if (type === 'TXT' && name === dkimName) return [[dkimRecord]];
        throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
      },
    });
    expect(verified.results[0]?.status.result).toBe('pass');
    // Local delivery from another account now stays on the instance.
    const other = await signupAccount(t);
    await rest(t, 'POST', '/messages/send', { key: other.apiKey, body: { to: a.address, subject: 'neighbour', text: 'hi' } });
    await waitFor('the local message', async () =>
      (await rest(t, 'GET', '/messages?direction=received', { key: a.key })).body.messages.find((m: any) => m.subject === 'neighbour'),
    );
    expect(sink.to(a.address)).toEqual([]);
  });
});

describe('byo_delegated: the parent zone names this instance', () => {
  it('goes live when NS match; the zone is served with the mail records; hosting is billed from then', async () => {
    const domain = uniqueDomain('deleg');
    const a = await claim('byo_delegated', domain);
    // While pending the instance serves only the zone's SOA and NS, so resolvers can follow the delegation.
    const pendingZone = await t.db.dnsZone.findUniqueOrThrow({ where: { name: domain }, include: { records: true } });
    expect(pendingZone.domainId).toBeNull();
    expect(pendingZone.records.map((r) => r.type)).toEqual(['NS', 'NS']);

    dns.set(domain, 'NS', ['ns1.elsewhere.test', 'ns2.elsewhere.test']);
    const wrong = (await verifyNow(a.key)).body.domains[0];
    expect(wrong.status).toBe('pending_delegation');
    expect(wrong.records[0]).toMatchObject({ type: 'NS', state: 'different', found: ['ns1.elsewhere.test', 'ns2.elsewhere.test'] });
    expect(wrong.nameservers).toEqual(t.config.nameservers);
    const usage = await t.db.ledgerEntry.count({ where: { accountId: a.accountId, type: 'domain_hosting' } });
    await t.runtime.worker!.billing.cycle();
    expect(await t.db.ledgerEntry.count({ where: { accountId: a.accountId, type: 'domain_hosting' } })).toBe(usage);

    dns.set(domain, 'NS', t.config.nameservers);
    const live = (await verifyNow(a.key)).body.domains[0];
    expect(live.status).toBe('active');
    expect((await eventsOf(t, a.key, 'domain.ready'))[0]!.data).toMatchObject({ domain, mode: 'byo_delegated' });
    const zone = await t.db.dnsZone.findUniqueOrThrow({ where: { name: domain }, include: { records: true } });
    expect(zone.domainId).toEqual(expect.any(String));
    expect(zone.records.map((r) => `${r.name} ${r.type}`).sort()).toEqual(
      [`${domain} NS`, `${domain} NS`, `${domain} MX`, `${domain} TXT`, `boxes1._domainkey.${domain} TXT`, `_dmarc.${domain} TXT`].sort(),
    );
    expect(zone.serial).toBeGreaterThan(pendingZone.serial);
    await t.runtime.worker!.billing.cycle();
    expect(await t.db.ledgerEntry.count({ where: { accountId: a.accountId, type: 'domain_hosting' } })).toBe(usage + 1);
  });
});

describe('claims', () => {
  it('a claim not proven in time expires (domain.claim_expired); verifying it then is 410', async () => {
    const domain = uniqueDomain('stale');
    const a = await claim('byo_manual', domain);
    const d = await domainOf(a.key);
    // DOMAIN_CLAIM_TTL_DAYS (7 by default) from the claim, on the service's clock.
    expect(Math.abs(new Date(d.claim_expires_at).getTime() - (clock.now().getTime() + 7 * 24 * 3600_000))).toBeLessThan(60_000);
    clock.advance(7 * 24 * 3600_000 + 60_000);
    await runDomainVerification(t.svc);
    expect((await domainOf(a.key)).status).toBe('expired');
    expect((await eventsOf(t, a.key, 'domain.claim_expired'))[0]!.data).toMatchObject({ domain });
    const late = await verifyNow(a.key);
    expect(late.status).toBe(410);
    expect(late.body.error.code).toBe('domain_claim_expired');
    // Publishing the records afterwards changes nothing.
    await publishRequired(a.key);
    await runDomainVerification(t.svc);
    expect((await domainOf(a.key)).status).toBe('expired');
  });

  it('two accounts claim one domain: neither blocks the other, the first proven wins, a third is 409 with suggestions', async () => {
    const domain = uniqueDomain('contested');
    const squatter = await claim('byo_manual', domain, 'squatter@example.com');
    const owner = await claim('byo_manual', domain, 'owner@example.com');
    expect(squatter.address).toBe(owner.address);

    // Only the owner can publish: its records (with its own DKIM key) go up.
    await publishRequired(owner.key);
    expect((await verifyNow(squatter.key)).body.domains[0]).toMatchObject({ status: 'pending_dns', blocked_by: null });
    expect((await verifyNow(owner.key)).body.domains[0].status).toBe('active');
    const sq = (await verifyNow(squatter.key)).body.domains[0];
    expect(sq.status).toBe('pending_dns');
    expect(sq.records.find((r: any) => r.name.includes('._domainkey.')).state).toBe('different');

    // Mail for the domain now reaches the owner only.
    await sendRaw(
      t.smtpPort!,
      { from: 'x@outside.test', to: [owner.address] },
      rawMessage({ From: 'x@outside.test', To: owner.address, Subject: 'for the owner' }, 'hi'),
    );
    await waitFor('the owner to receive it', async () =>
      (await rest(t, 'GET', '/messages?direction=received', { key: owner.key })).body.messages.find((m: any) => m.subject === 'for the owner'),
    );
    expect(await t.db.message.count({ where: { accountId: squatter.accountId, direction: 'received' } })).toBe(0);

    // Even if the squatter's records were all published too, the name is taken.
    const third = await rest(t, 'POST', '/signup/agentic', {
      body: { human_email: 'third@example.com', domain_intent: { mode: 'byo_delegated', byo_domain: domain.toUpperCase() } },
    });
    expect(third.status).toBe(409);
    expect(third.body.error.code).toBe('domain_taken');
    expect(third.body.error.suggestions.length).toBeGreaterThan(0);
    // A name inside the live domain is the owner's too: a claim there would shadow its records.
    const inside = await rest(t, 'POST', '/signup/agentic', {
      body: { human_email: 'third@example.com', domain_intent: { mode: 'byo_delegated', byo_domain: `www.${domain}` } },
    });
    expect(inside.status).toBe(409);
    expect(inside.body.error.code).toBe('domain_taken');
    expect(inside.body.error.message).toContain(`inside ${domain}`);
    for (const s of third.body.error.suggestions) {
      expect(s.mode).toBe('subdomain');
      expect(s.domain.endsWith(`.${t.config.baseDomain}`)).toBe(true);
      expect(await t.db.domain.count({ where: { name: s.domain } })).toBe(0);
    }
  });

  it('two delegated claims: NS alone cannot tell them apart, so the one whose DKIM key was published wins', async () => {
    const domain = uniqueDomain('deleg-contested');
    const first = await claim('byo_delegated', domain, 'first@example.com');
    const second = await claim('byo_delegated', domain, 'second@example.com');
    dns.set(domain, 'NS', t.config.nameservers);
    const a = (await verifyNow(first.key)).body.domains[0];
    expect(a.status).toBe('pending_delegation');
    expect(a.blocked_by).toMatch(/another account also claims/);
    // The real owner (the second) publishes its DKIM record where the domain's DNS was served.
    const dkim = await t.db.domain.findFirstOrThrow({ where: { accountId: second.accountId } });
    dns.set(`boxes1._domainkey.${domain}`, 'TXT', [`v=DKIM1; k=rsa; p=${dkim.dkimPublicKey}`]);
    expect((await verifyNow(second.key)).body.domains[0].status).toBe('active');
    const firstAfter = (await verifyNow(first.key)).body.domains[0];
    expect(firstAfter.status).toBe('pending_delegation');
    expect(firstAfter.blocked_by).toMatch(/another account/);
  });
});
