/**
 * Mail between two agents of one fresh instance is verified out of the box. The resolvers (DNS_RESOLVERS, here a
 * stand-in DNS that knows nothing, as the system's resolvers know nothing of a local instance's zones) are not
 * asked about the zones this instance serves: their DKIM keys, DMARC policies and SPF records are read from the
 * instance's own records. The signature is really checked against the published key: once that record holds
 * another key, the same kind of message fails DKIM and is no longer sender_verified. A zone the instance only
 * holds for a pending claim (SOA and NS, nobody proved the name yet) is not taken as the authority: mail from
 * that domain is checked against what the outside DNS publishes.
 */
import { generateKeyPairSync } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { dkimValue, txtContent } from '@boxes/core';
import { rest, signupAccount, startStandInDns, startTestServer, type StandInDns, type TestAccount, type TestServer } from '@boxes/testing';
import { dkimSign } from 'mailauth';
import { rawMessage, sendRaw, waitForReceived } from './mail-receive-helpers';

let dns: StandInDns;
let t: TestServer;
let a: TestAccount;
let b: TestAccount;

beforeAll(async () => {
  dns = await startStandInDns();
  t = await startTestServer({ mail: true, worker: true, env: { DNS_RESOLVERS: dns.address } });
  a = await signupAccount(t, 'own-zones-a@example.com');
  b = await signupAccount(t, 'own-zones-b@example.com');
}, 60_000);
afterAll(async () => {
  await t?.stop();
  await dns?.stop();
});

async function sendAndReceive(from: TestAccount, to: TestAccount, subject: string) {
  const sent = await rest(t, 'POST', '/messages/send', { key: from.apiKey, body: { to: to.primaryAddress, subject, text: 'hello, neighbour' } });
  expect(sent.status, JSON.stringify(sent.body)).toBe(200);
  const listed = await waitForReceived(t, to.apiKey, subject);
  return (await rest(t, 'GET', `/messages/${listed.id}`, { key: to.apiKey })).body;
}

it('two agents of one instance see each other as sender_verified, the DKIM signature checked against their published keys', async () => {
  const da = await t.db.domain.findFirstOrThrow({ where: { accountId: a.accountId } });
  const db = await t.db.domain.findFirstOrThrow({ where: { accountId: b.accountId } });
  const toB = await sendAndReceive(a, b, `a to b ${Date.now()}`);
  expect(toB.authentication.sender_verified).toBe(true);
  expect(toB.authentication.dkim).toEqual([{ domain: da.name, selector: da.dkimSelector, result: 'pass', aligned: true, comment: null }]);
  expect(toB.authentication.dmarc).toMatchObject({ result: 'pass', policy: 'quarantine', from_domain: da.name, alignment: { dkim: true } });
  const toA = await sendAndReceive(b, a, `b to a ${Date.now()}`);
  expect(toA.authentication.sender_verified).toBe(true);
  expect(toA.authentication.dkim).toEqual([{ domain: db.name, selector: db.dkimSelector, result: 'pass', aligned: true, comment: null }]);
  // Nothing about the instance's own zones went to the outside resolvers.
  const ours = dns.queries.filter((q) => q.name.endsWith(t.config.baseDomain));
  expect(ours).toEqual([]);
});

it('the published key is what the signature is checked against: another key in the record fails DKIM and DMARC', async () => {
  const da = await t.db.domain.findFirstOrThrow({ where: { accountId: a.accountId } });
  const { publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const other = publicKey.export({ type: 'spki', format: 'der' }).toString('base64');
  const changed = await t.db.dnsRecord.updateMany({
    where: { name: `${da.dkimSelector}._domainkey.${da.name}`, type: 'TXT' },
    data: { content: txtContent(dkimValue(other)) },
  });
  expect(changed.count).toBe(1);
  const toB = await sendAndReceive(a, b, `a to b under another key ${Date.now()}`);
  expect(toB.authentication.dkim).toHaveLength(1);
  expect(toB.authentication.dkim[0]).toMatchObject({ domain: da.name, selector: da.dkimSelector, aligned: false });
  expect(toB.authentication.dkim[0].result).not.toBe('pass');
  expect(toB.authentication.dmarc.result).toBe('fail');
  expect(toB.authentication.sender_verified).toBe(false);
});

it('a pending delegated claim does not stand in for the real domain: its signed mail is checked against the outside DNS', async () => {
  const domain = `claimed-${Date.now().toString(36)}.test`;
  // Someone claims the name on this instance; the claim stays pending (the parent zone never names us).
  const intent = await rest(t, 'POST', '/signup/agentic', {
    body: { human_email: 'claimer@example.com', domain_intent: { mode: 'byo_delegated', byo_domain: domain } },
  });
  expect(intent.status, JSON.stringify(intent.body)).toBe(200);
  const done = await rest(t, 'POST', '/signup/agentic/confirm', { body: { intent_id: intent.body.intent_id } });
  expect(done.status, JSON.stringify(done.body)).toBe(200);
  expect(await t.db.dnsZone.findUnique({ where: { name: domain } })).toMatchObject({ domainId: null, kind: 'delegated' });
  // The real owner publishes its key and policy where the world looks, and signs its mail.
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  dns.set(`s1._domainkey.${domain}`, 'TXT', [`v=DKIM1; k=rsa; p=${publicKey.export({ type: 'spki', format: 'der' }).toString('base64')}`]);
  dns.set(`_dmarc.${domain}`, 'TXT', ['v=DMARC1; p=reject']);
  const subject = `from the real owner ${Date.now()}`;
  const raw = rawMessage({ From: `ceo@${domain}`, To: b.primaryAddress, Subject: subject }, 'The real thing.');
  const signed = await dkimSign(raw, {
    canonicalization: 'relaxed/relaxed',
    signatureData: [{ signingDomain: domain, selector: 's1', privateKey: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString() }],
  } as Parameters<typeof dkimSign>[1]);
  await sendRaw(t.smtpPort!, { from: `ceo@${domain}`, to: [b.primaryAddress] }, signed.signatures + raw);
  const listed = await waitForReceived(t, b.apiKey, subject);
  const m = (await rest(t, 'GET', `/messages/${listed.id}`, { key: b.apiKey })).body;
  expect(m.authentication.dkim).toEqual([{ domain, selector: 's1', result: 'pass', aligned: true, comment: null }]);
  expect(m.authentication.sender_verified).toBe(true);
});
