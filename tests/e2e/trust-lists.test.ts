/**
 * Who may reach a box: block lists refuse at RCPT (envelope sender) or after DATA (From header) with 5xx, as
 * swaks sees it; a box in allow_list mode takes only listed senders, and with require_verified_sender only
 * verified ones (DKIM-signed by a key published at a DNS server the test controls); refused mail is counted on
 * the box, never stored or charged; sending to a blocked address is refused with 403 recipient_blocked.
 */
import { generateKeyPairSync } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dkimSign } from 'mailauth';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { BoxesError, createBoxesClient } from '@boxes/sdk';
import { rest, signupAccount, startStandInDns, startTestServer, type StandInDns, type TestAccount, type TestServer } from '@boxes/testing';
import { MailSink } from './mail-send-helpers';
import { rawMessage, requireTool, sendRaw, swaks, waitForReceived } from './mail-receive-helpers';

let dns: StandInDns;
let sink: MailSink;
let t: TestServer;

const stamp = Date.now().toString(36);
const FRIEND = `friend-${stamp}.test`;
const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const friendKey = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();

beforeAll(async () => {
  await requireTool('swaks');
  dns = await startStandInDns();
  dns.set(`s1._domainkey.${FRIEND}`, 'TXT', [`v=DKIM1; k=rsa; p=${publicKey.export({ type: 'spki', format: 'der' }).toString('base64')}`]);
  dns.set(`_dmarc.${FRIEND}`, 'TXT', ['v=DMARC1; p=reject']);
  dns.set(FRIEND, 'TXT', ['v=spf1 -all']);
  sink = new MailSink();
  await sink.start();
  t = await startTestServer({ mail: true, worker: true, resolver: sink.resolver(), env: { DNS_RESOLVERS: dns.address } });
}, 60_000);

afterAll(async () => {
  await t?.stop();
  await sink?.close();
  await dns?.stop();
});

async function boxOf(a: TestAccount) {
  const r = await rest(t, 'GET', '/boxes', { key: a.apiKey });
  return r.body.boxes[0] as { id: string; address: string };
}

const policy = async (a: TestAccount, boxId: string) => (await rest(t, 'GET', `/boxes/${boxId}/policy`, { key: a.apiKey })).body;
const stored = async (a: TestAccount) => await t.db.message.count({ where: { accountId: a.accountId, direction: 'received' } });

async function addEntry(a: TestAccount, body: Record<string, unknown>) {
  const r = await rest(t, 'POST', '/lists', { key: a.apiKey, body });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body;
}

describe('lists', () => {
  it('entries: addresses and domains, normalized, idempotent, listed and removed; bad values are 400', async () => {
    const a = await signupAccount(t);
    const box = await boxOf(a);
    const e1 = await addEntry(a, { list: 'block', value: '  *.Spam.Example ', direction: 'receive' });
    expect(e1).toMatchObject({ list: 'block', value: 'spam.example', kind: 'domain', direction: 'receive', box_id: null, created: true });
    const again = await addEntry(a, { list: 'block', value: '@spam.example', direction: 'receive' });
    expect(again).toMatchObject({ id: e1.id, created: false });
    const e2 = await addEntry(a, { list: 'allow', value: 'Boss <Boss@Example.com>', box: box.address, note: 'the boss' });
    expect(e2).toMatchObject({ value: 'boss@example.com', kind: 'address', direction: 'both', box_id: box.id, note: 'the boss' });
    const all = await rest(t, 'GET', '/lists', { key: a.apiKey });
    expect(all.body.entries.map((e: any) => e.id)).toEqual([e1.id, e2.id]);
    const onlyBox = await rest(t, 'GET', `/lists?box=${box.id}&list=allow`, { key: a.apiKey });
    expect(onlyBox.body.entries.map((e: any) => e.id)).toEqual([e2.id]);
    for (const value of ['not an address', 'localhost', 'a@@b.example', 'x@']) {
      const bad = await rest(t, 'POST', '/lists', { key: a.apiKey, body: { list: 'block', value } });
      expect(bad.status, value).toBe(400);
      expect(bad.body.error.code).toBe('validation_error');
    }
    expect((await rest(t, 'POST', '/lists', { key: a.apiKey, body: { list: 'maybe', value: 'x.example' } })).status).toBe(400);
    const del = await rest(t, 'DELETE', `/lists/${e1.id}`, { key: a.apiKey });
    expect(del.body).toEqual({ id: e1.id, deleted: true });
    expect((await rest(t, 'DELETE', `/lists/${e1.id}`, { key: a.apiKey })).status).toBe(404);
    const types = (await rest(t, 'GET', '/events?type=list.entry_added,list.entry_removed', { key: a.apiKey })).body.events.map((e: any) => e.type);
    expect(types).toEqual(['list.entry_added', 'list.entry_added', 'list.entry_removed']);
  });

  it('a blocked envelope sender is refused at RCPT with 550 (swaks), counted, not stored, not charged', async () => {
    const a = await signupAccount(t);
    const box = await boxOf(a);
    await addEntry(a, { list: 'block', value: 'spam.example', direction: 'receive' });
    const r = await swaks(t.smtpPort!, ['--from', `promo@news.spam.example`, '--to', box.address, '--header', 'Subject: buy now']);
    expect(r.code).not.toBe(0);
    expect(r.out).toMatch(/<\*\* +550 5\.7\.1 .*block list/);
    expect(r.out).not.toMatch(/^ -> DATA/m);
    // The domain entry covers subdomains but not lookalikes.
    const ok = await swaks(t.smtpPort!, ['--from', 'someone@notspam.example', '--to', box.address, '--header', 'Subject: fine']);
    expect(ok.code, ok.out).toBe(0);
    await waitForReceived(t, a.apiKey, 'fine');
    expect(await stored(a)).toBe(1);
    expect((await policy(a, box.id)).refused_count).toBe(1);
    // Exactly one message charged (the accepted one): the refused one cost nothing.
    expect(await t.db.ledgerEntry.count({ where: { accountId: a.accountId, type: 'message_received' } })).toBe(1);
  });

  it('at RCPT the entries read with the box apply by scope: its own and the account-wide ones, receive or both, an allowed address over a blocked domain', async () => {
    const a = await signupAccount(t);
    const box = await boxOf(a);
    const other = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'other' } });
    expect(other.status, JSON.stringify(other.body)).toBe(200);
    await addEntry(a, { list: 'block', value: 'boxonly.example', direction: 'receive', box: other.body.address });
    await addEntry(a, { list: 'block', value: 'sendonly.example', direction: 'send' });
    await addEntry(a, { list: 'block', value: 'both.example', direction: 'both' });
    await addEntry(a, { list: 'allow', value: 'friend@both.example', direction: 'receive', box: box.address });
    const refusedAtRcpt = async (from: string, to: string) => {
      const r = await swaks(t.smtpPort!, ['--from', from, '--to', to, '--header', `Subject: scope ${from} ${to}`]);
      return /<\*\* +550 5\.7\.1 .*block list/.test(r.out);
    };
    // Another box's entry does not apply to this one, and a send-only entry never refuses inbound mail.
    expect(await refusedAtRcpt('x@boxonly.example', box.address)).toBe(false);
    expect(await refusedAtRcpt('x@boxonly.example', other.body.address)).toBe(true);
    expect(await refusedAtRcpt('x@sendonly.example', box.address)).toBe(false);
    // An account-wide entry for both directions applies to every box; the box's allowed address gets through.
    expect(await refusedAtRcpt('x@both.example', box.address)).toBe(true);
    expect(await refusedAtRcpt('friend@both.example', box.address)).toBe(false);
    expect(await refusedAtRcpt('friend@both.example', other.body.address)).toBe(true);
  });

  it('a blocked From header behind an innocent envelope is refused after DATA with 550', async () => {
    const a = await signupAccount(t);
    const box = await boxOf(a);
    await addEntry(a, { list: 'block', value: 'fraud@phish.example', box: box.id });
    const r = await swaks(t.smtpPort!, [
      '--from',
      'bounces@esp.example',
      '--to',
      box.address,
      '--header',
      'From: CEO <fraud@phish.example>',
      '--header',
      'Subject: urgent',
    ]);
    expect(r.code).not.toBe(0);
    expect(r.out).toMatch(/<\*\* +550 5\.7\.1 .*fraud@phish\.example.*block list/);
    expect(r.out).toContain('354');
    expect(await stored(a)).toBe(0);
    expect((await policy(a, box.id)).refused_count).toBe(1);
    // An exact allow entry beats the domain block.
    await addEntry(a, { list: 'block', value: 'corp.example', box: box.id });
    await addEntry(a, { list: 'allow', value: 'ceo@corp.example', box: box.id });
    const ceo = await swaks(t.smtpPort!, ['--from', 'ceo@corp.example', '--to', box.address, '--header', 'Subject: from the ceo']);
    expect(ceo.code, ceo.out).toBe(0);
    const cfo = await swaks(t.smtpPort!, ['--from', 'cfo@corp.example', '--to', box.address, '--header', 'Subject: from the cfo']);
    expect(cfo.out).toMatch(/<\*\* +550 5\.7\.1/);
  });

  it('allow_list mode accepts only listed senders; with several recipients the others still get it', async () => {
    const a = await signupAccount(t);
    const box = await boxOf(a);
    const other = (await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'open' } })).body;
    const set = await rest(t, 'PUT', `/boxes/${box.id}/policy`, { key: a.apiKey, body: { receive_mode: 'allow_list' } });
    expect(set.body).toMatchObject({ receive_mode: 'allow_list', require_verified_sender: false, spam_action: 'label', refused_count: 0 });
    await addEntry(a, { list: 'allow', value: 'partner.example', direction: 'receive' });
    const stranger = await swaks(t.smtpPort!, ['--from', 'x@stranger.example', '--to', box.address, '--header', 'Subject: hello stranger']);
    expect(stranger.out).toMatch(/<\*\* +550 5\.7\.1 .*allow list/);
    const partner = await swaks(t.smtpPort!, ['--from', 'bob@partner.example', '--to', box.address, '--header', 'Subject: hello partner']);
    expect(partner.code, partner.out).toBe(0);
    await waitForReceived(t, a.apiKey, 'hello partner');
    // One transaction for two boxes: the open box stores it, the allow-list box refuses and counts it.
    const both = await sendRaw(
      t.smtpPort!,
      { from: 'x@stranger.example', to: [box.address, other.address] },
      rawMessage({ From: 'x@stranger.example', To: box.address, Subject: 'to both' }, 'hi'),
    );
    expect(both.accepted.sort()).toEqual([box.address, other.address].sort());
    const got = await waitForReceived(t, a.apiKey, 'to both');
    expect(got.box_id).toBe(other.id);
    expect(await t.db.message.count({ where: { accountId: a.accountId, subject: 'to both' } })).toBe(1);
    expect((await policy(a, box.id)).refused_count).toBe(2);
  });

  it('require_verified_sender: a listed sender passes only when DKIM-signed and DMARC-aligned', async () => {
    const a = await signupAccount(t);
    const box = await boxOf(a);
    await rest(t, 'PUT', `/boxes/${box.id}/policy`, { key: a.apiKey, body: { receive_mode: 'allow_list', require_verified_sender: true } });
    await addEntry(a, { list: 'allow', value: `boss@${FRIEND}`, box: box.id });
    const forged = await swaks(t.smtpPort!, ['--from', `boss@${FRIEND}`, '--to', box.address, '--header', 'Subject: forged boss']);
    expect(forged.out).toMatch(/<\*\* +550 5\.7\.1 .*verified senders/);
    const raw = rawMessage({ From: `boss@${FRIEND}`, To: box.address, Subject: 'real boss' }, 'signed');
    const sig = await dkimSign(raw, { signatureData: [{ signingDomain: FRIEND, selector: 's1', privateKey: friendKey }] } as Parameters<typeof dkimSign>[1]);
    const res = await sendRaw(t.smtpPort!, { from: `boss@${FRIEND}`, to: [box.address] }, sig.signatures + raw);
    expect(res.accepted).toEqual([box.address]);
    const m = await waitForReceived(t, a.apiKey, 'real boss');
    expect(m.authentication.sender_verified).toBe(true);
    expect((await policy(a, box.id)).refused_count).toBe(1);
    expect(await stored(a)).toBe(1);
  });

  it('send-side: a blocked recipient is refused with 403 recipient_blocked, nothing is queued; box-to-box mail obeys the receiver', async () => {
    const a = await signupAccount(t);
    const b = await signupAccount(t);
    const aBox = await boxOf(a);
    await addEntry(a, { list: 'block', value: 'competitor.example', direction: 'send' });
    const r = await rest(t, 'POST', '/messages/send', {
      key: a.apiKey,
      body: { to: ['ok@partner.example', 'ceo@competitor.example'], subject: 'leak', text: 'x' },
    });
    expect(r.status).toBe(403);
    expect(r.body.error).toMatchObject({ code: 'recipient_blocked', blocked: ['ceo@competitor.example'] });
    expect(await t.db.message.count({ where: { accountId: a.accountId, direction: 'sent' } })).toBe(0);
    // Receive-only entries do not stop sending, and another box's entry does not apply.
    await addEntry(a, { list: 'block', value: 'inbound-only.example', direction: 'receive' });
    const spare = (await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'spare' } })).body;
    await addEntry(a, { list: 'block', value: 'x@other.example', direction: 'send', box: spare.id });
    const fine = await rest(t, 'POST', '/messages/send', {
      key: a.apiKey,
      body: { to: ['y@inbound-only.example', 'x@other.example'], subject: 'fine', text: 'x' },
    });
    expect(fine.status, JSON.stringify(fine.body)).toBe(200);
    const fromSpare = await rest(t, 'POST', '/messages/send', {
      key: a.apiKey,
      body: { from: spare.address, to: 'x@other.example', subject: 'no', text: 'x' },
    });
    expect(fromSpare.status).toBe(403);
    // B blocks A's domain: A's local delivery bounces with the 550, B stores nothing and counts it.
    const bBox = await boxOf(b);
    await addEntry(b, { list: 'block', value: a.domain, direction: 'receive' });
    const toB = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: bBox.address, subject: 'hello neighbour', text: 'x' } });
    expect(toB.status).toBe(200);
    const { waitFor } = await import('@boxes/testing');
    const m = await waitFor('bounce', async () => {
      const got = await rest(t, 'GET', `/messages/${toB.body.message_id}`, { key: a.apiKey });
      return got.body.status === 'bounced' ? got.body : null;
    });
    expect(m.deliveries[0].last_error).toMatch(/5\.7\.1 .*block list/);
    expect(await stored(b)).toBe(0);
    expect((await policy(b, bBox.id)).refused_count).toBe(1);
    expect(aBox.address).toContain(a.domain);
  });
});

describe('the same routes through the SDK (tRPC) and MCP', () => {
  it('the SDK adds, lists and removes entries and sets a policy; errors are BoxesError', async () => {
    const a = await signupAccount(t);
    const client = createBoxesClient({ baseUrl: t.url, apiKey: a.apiKey });
    const box = (await client.boxes.list.query()).boxes[0]!;
    const e = await client.lists.add.mutate({ list: 'block', value: 'sdk.example', direction: 'receive' });
    expect(e).toMatchObject({ value: 'sdk.example', kind: 'domain', created: true });
    expect((await client.lists.list.query({})).entries.map((x) => x.id)).toEqual([e.id]);
    const p = await client.lists.setPolicy.mutate({ id: box.id, receive_mode: 'allow_list', require_verified_sender: true });
    expect(p).toMatchObject({ receive_mode: 'allow_list', require_verified_sender: true, spam_action: 'label' });
    expect(await client.lists.getPolicy.query({ id: box.id })).toEqual(p);
    await client.lists.remove.mutate({ id: e.id });
    const err = await client.lists.remove.mutate({ id: e.id }).catch((x: unknown) => x);
    expect(err).toBeInstanceOf(BoxesError);
    expect((err as BoxesError).code).toBe('not_found');
    // A received message read through the SDK carries authentication too.
    await swaks(t.smtpPort!, ['--from', 'someone@outside.example', '--to', box.address, '--header', 'Subject: via sdk']).then((r) =>
      expect(r.out).toMatch(/allow list/),
    );
    await client.lists.setPolicy.mutate({ id: box.id, receive_mode: 'open' });
    await swaks(t.smtpPort!, ['--from', 'someone@outside.example', '--to', box.address, '--header', 'Subject: via sdk']);
    await waitForReceived(t, a.apiKey, 'via sdk');
    const msgs = await client.messages.list.query({ direction: 'received', include: 'body' });
    expect(msgs.messages[0]!.authentication).toMatchObject({ sender_verified: false, spf: { domain: 'outside.example' } });
    expect(msgs.messages[0]!.body?.extracted_text).toBeDefined();
  });

  it('MCP lists the tools and they work with the same scopes', async () => {
    const a = await signupAccount(t);
    const mcp = new Client({ name: 'boxes-e2e', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${a.apiKey}` } } }));
    try {
      const names = (await mcp.listTools()).tools.map((x) => x.name);
      expect(names).toEqual(expect.arrayContaining(['lists_list', 'lists_add', 'lists_remove', 'lists_getPolicy', 'lists_setPolicy']));
      const added = await mcp.callTool({ name: 'lists_add', arguments: { list: 'allow', value: 'mcp@partner.example' } });
      expect(added.isError, JSON.stringify(added.content)).toBeFalsy();
      expect(added.structuredContent).toMatchObject({ value: 'mcp@partner.example', direction: 'both', created: true });
      const listed = await mcp.callTool({ name: 'lists_list', arguments: {} });
      expect((listed.structuredContent as { entries: unknown[] }).entries).toHaveLength(1);
    } finally {
      await mcp.close();
    }
    const receiveOnly = await (await import('@boxes/testing')).mintKey(t, a.apiKey, ['receive']);
    const denied = await rest(t, 'POST', '/lists', { key: receiveOnly.api_key, body: { list: 'block', value: 'x.example' } });
    expect(denied.status).toBe(403);
  });
});
