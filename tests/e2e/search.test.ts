/**
 * GET /messages/search: mail received through the MX and sent over REST, searched with curl, the REST helper,
 * the SDK and MCP: ranking, highlights, every filter, cursor paging, a box-restricted key, attachment text
 * indexed later (indexMessageText), a reclaimed message leaving the index, the account switch, the backfill,
 * and IMAP SEARCH TEXT/BODY through Python's imaplib.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { k, rows } from '@boxes/db';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createBoxesClient } from '@boxes/sdk';
import { backfillSearchIndex, indexMessageText, reclaimExpiredBodies } from '@boxes/core';
import { mintKey, rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { appPassword, deliver, execFileAsync, multipartMessage, waitFor } from './imap-helpers';
import { waitForReceived } from './mail-receive-helpers';

let t: TestServer;
let a: TestAccount;
let ops: { id: string; address: string };
/** The messages of account a, by role. */
const m: Record<'overdue' | 'lunch' | 'report' | 'scan' | 'other', string> = { overdue: '', lunch: '', report: '', scan: '', other: '' };
let overdueThread = '';

const search = (query: string, key = a.apiKey) => rest(t, 'GET', `/messages/search?${query}`, { key });
const ids = (r: { body: any }) => (r.body.results as any[]).map((x) => x.message.id);
const vectors = async (id: string) =>
  BigInt(
    (
      await rows(
        t.db,
        k
          .selectFrom('message_search')
          .select((e) => e.fn.countAll<string>().as('n'))
          .where('message_id', '=', id),
      )
    )[0]!.n,
  );

beforeAll(async () => {
  t = await startTestServer({ mail: true, worker: true, env: { MAIL_AUTH_DELAY_MS: '0' } });
  a = await signupAccount(t, 'search-a@example.com');
  const box = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'ops' } });
  expect(box.status, JSON.stringify(box.body)).toBe(200);
  ops = { id: box.body.id, address: box.body.address };
  const mail = [
    { subject: 'Quarterly invoice overdue', text: 'Your invoice 1234 is overdue: the invoice total is due now.' },
    { subject: 'Lunch on Friday', text: 'Shall we meet at noon? Somewhere near the office. Also, I forwarded the invoice to accounting.' },
    { subject: 'Scanned papers', text: 'See the attachment.' },
  ];
  for (const x of mail) await deliver(t, [a.primaryAddress], multipartMessage({ from: 'partner@outside.test', to: a.primaryAddress, ...x }));
  m.overdue = (await waitForReceived(t, a.apiKey, mail[0]!.subject)).id;
  overdueThread = (await waitForReceived(t, a.apiKey, mail[0]!.subject)).thread_id;
  m.lunch = (await waitForReceived(t, a.apiKey, mail[1]!.subject)).id;
  m.scan = (await waitForReceived(t, a.apiKey, mail[2]!.subject)).id;
  const sent = await rest(t, 'POST', '/messages/send', {
    key: a.apiKey,
    body: { from: ops.address, to: 'auditor@remote.invalid', subject: 'Status report', text: 'The monthly report: revenue grew, costs fell.' },
  });
  expect(sent.status, JSON.stringify(sent.body)).toBe(200);
  m.report = sent.body.message_id;
  // Another account's mail with the same words: never found by a.
  const b = await signupAccount(t, 'search-b@example.com');
  const other = await rest(t, 'POST', '/messages/send', {
    key: b.apiKey,
    body: { to: 'auditor@remote.invalid', subject: 'Invoice overdue report', text: 'invoice invoice invoice' },
  });
  expect(other.status).toBe(200);
  m.other = other.body.message_id;
});
afterAll(async () => {
  await t?.stop();
});

describe('GET /messages/search', () => {
  it('ranks the best match first, highlights with <mark>, and keeps to the account', async () => {
    const r = await search('q=invoice');
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    // The subject counts most, then the body; another account's mail is not there.
    expect(ids(r)).toEqual([m.overdue, m.lunch]);
    expect(r.body.results[0].rank).toBeGreaterThan(r.body.results[1].rank);
    expect(r.body.results[0].highlights.subject).toBe('Quarterly <mark>invoice</mark> overdue');
    expect(r.body.results[0].highlights.body).toContain('<mark>invoice</mark>');
    expect(r.body.results[1].highlights.subject).toBe('Lunch on Friday');
    expect(r.body.results[1].highlights.body).toContain('forwarded the <mark>invoice</mark> to accounting');
    expect(r.body.results[0].message).toMatchObject({ id: m.overdue, direction: 'received', subject: 'Quarterly invoice overdue', flags: [] });
    expect(r.body.next_cursor).toBeNull();

    // Web search syntax: stems (invoices), a phrase, or, exclusion; addresses (local part and domain).
    expect(ids(await search('q=invoices'))).toEqual([m.overdue, m.lunch]);
    expect(ids(await search(`q=${encodeURIComponent('"invoice total"')}`))).toEqual([m.overdue]);
    expect(ids(await search(`q=${encodeURIComponent('invoice -lunch')}`))).toEqual([m.overdue]);
    expect(new Set(ids(await search(`q=${encodeURIComponent('revenue or noon')}`)))).toEqual(new Set([m.report, m.lunch]));
    expect(ids(await search('q=auditor'))).toEqual([m.report]);
    expect(ids(await search('q=remote.invalid'))).toEqual([m.report]);
    expect(ids(await search('q=nothingmatchesthis'))).toEqual([]);
  });

  it('filters by box, direction, time, thread and label', async () => {
    expect(ids(await search(`q=${encodeURIComponent('invoice or report')}&direction=sent`))).toEqual([m.report]);
    expect(ids(await search(`q=${encodeURIComponent('invoice or report')}&direction=received`))).toEqual([m.overdue, m.lunch]);
    expect(ids(await search(`q=${encodeURIComponent('invoice or report')}&box=${ops.id}`))).toEqual([m.report]);
    expect(ids(await search(`q=${encodeURIComponent('invoice or report')}&box=${encodeURIComponent(ops.address)}`))).toEqual([m.report]);
    expect((await search(`q=invoice&box=box_00000000000000000000`)).status).toBe(404);
    expect(ids(await search(`q=invoice&thread=${overdueThread}`))).toEqual([m.overdue]);
    const future = new Date(Date.now() + 3_600_000).toISOString();
    const past = new Date(Date.now() - 3_600_000).toISOString();
    expect(ids(await search(`q=invoice&after=${future}`))).toEqual([]);
    expect(ids(await search(`q=invoice&before=${past}`))).toEqual([]);
    expect(ids(await search(`q=invoice&after=${past}&before=${future}`))).toEqual([m.overdue, m.lunch]);

    // Labels are IMAP keywords (case-insensitive) and system flags: set them on the overdue message.
    await t.db.messageFlags.create({ data: { messageId: m.overdue, accountId: a.accountId, flags: 1, keywords: ['ProjectX'] } });
    expect(ids(await search('q=invoice&label=projectx'))).toEqual([m.overdue]);
    expect(ids(await search('q=invoice&label=PROJECTX'))).toEqual([m.overdue]);
    expect(ids(await search('q=invoice&label=unread'))).toEqual([m.lunch]);
    expect(ids(await search('q=invoice&label=read'))).toEqual([m.overdue]);
    expect(ids(await search('q=invoice&label=flagged'))).toEqual([]);
    // A sent message without flags is read.
    expect(ids(await search('q=report&label=read'))).toEqual([m.report]);
    expect(ids(await search('q=report&label=unread'))).toEqual([]);
  });

  it('pages with an opaque cursor, in rank order, nothing repeated; a bad cursor is 400 invalid_cursor', async () => {
    const all = ids(await search(`q=${encodeURIComponent('invoice or report or papers')}`));
    expect(all).toHaveLength(4);
    const paged: string[] = [];
    let cursor: string | null = null;
    do {
      const page: any = await search(`q=${encodeURIComponent('invoice or report or papers')}&limit=1${cursor ? `&cursor=${cursor}` : ''}`);
      expect(page.status, JSON.stringify(page.body)).toBe(200);
      expect(page.body.results.length).toBeLessThanOrEqual(1);
      paged.push(...ids(page));
      cursor = page.body.next_cursor;
    } while (cursor);
    expect(paged).toEqual(all);
    const bad = await search('q=invoice&cursor=bm90LWEtY3Vyc29y');
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('invalid_cursor');
    const empty = await search('q=');
    expect(empty.status).toBe(400);
  });

  it('a box-restricted key finds only the mail of its boxes', async () => {
    const key = await mintKey(t, a.apiKey, ['receive'], { allowed_boxes: [ops.address] });
    expect(ids(await search(`q=${encodeURIComponent('invoice or report')}`, key.api_key))).toEqual([m.report]);
    const primary = (await rest(t, 'GET', '/boxes', { key: a.apiKey })).body.boxes.find((x: any) => x.address === a.primaryAddress);
    expect((await search(`q=invoice&box=${primary.id}`, key.api_key)).status).toBe(404);
  });

  it('attachment text indexed later (indexMessageText) is found; the snippet stays the body', async () => {
    expect(ids(await search('q=zebra'))).toEqual([]);
    expect(await indexMessageText(t.svc, m.scan, { attachmentTexts: ['Shipping manifest: one zebra, two giraffes'] })).toBe(true);
    // Idempotent: the same text again replaces the vector.
    expect(await indexMessageText(t.svc, m.scan, { attachmentTexts: ['Shipping manifest: one zebra, two giraffes'] })).toBe(true);
    const r = await search('q=zebra');
    expect(ids(r)).toEqual([m.scan]);
    expect(r.body.results[0].highlights.body).not.toContain('<mark>');
    expect(r.body.results[0].highlights.body).toContain('See the attachment');
    // Subject and body still count.
    expect(ids(await search('q=scanned'))).toEqual([m.scan]);
  });

  it('curl, the SDK and MCP answer the same search', async () => {
    const { stdout } = await execFileAsync('curl', ['-sS', '-H', `authorization: Bearer ${a.apiKey}`, `${t.apiBase}/messages/search?q=invoice&limit=1`]);
    const viaCurl = JSON.parse(stdout);
    expect(viaCurl.results.map((x: any) => x.message.id)).toEqual([m.overdue]);
    expect(viaCurl.next_cursor).toEqual(expect.any(String));

    const sdk = createBoxesClient({ baseUrl: t.url, apiKey: a.apiKey });
    const viaSdk = await sdk.messages.search.query({ q: 'invoice', direction: 'received' });
    expect(viaSdk.results.map((x) => x.message.id)).toEqual([m.overdue, m.lunch]);
    expect(viaSdk.results[0]!.highlights.subject).toBe('Quarterly <mark>invoice</mark> overdue');

    const mcp = new Client({ name: 'search-e2e', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${a.apiKey}` } } }));
    try {
      const got = await mcp.callTool({ name: 'messages_search', arguments: { q: 'report', direction: 'sent' } });
      expect(got.isError, JSON.stringify(got.content)).toBeFalsy();
      expect((got.structuredContent as any).results.map((x: any) => x.message.id)).toEqual([m.report]);
    } finally {
      await mcp.close();
    }
  });

  it('IMAP SEARCH TEXT and BODY (imaplib) answer through the index with substring semantics', async () => {
    const password = (await appPassword(t, a)).password;
    const script = `
import imaplib, json, ssl, sys
port, user, pw = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
M = imaplib.IMAP4_SSL('127.0.0.1', port, ssl_context=ctx)
M.login(user, pw)
M.select('INBOX', readonly=True)
out = {}
def subjects(typ, data):
    nums = data[0].decode().split()
    res = []
    for n in nums:
        d = M.fetch(n, '(BODY.PEEK[HEADER.FIELDS (SUBJECT)])')[1][0][1].decode().strip()
        res.append(d[len('Subject: '):])
    return sorted(res)
out['text'] = subjects(*M.search(None, 'TEXT', 'invoice'))
out['body_prefix'] = subjects(*M.search(None, 'BODY', 'invoi'))
out['text_phrase'] = subjects(*M.search(None, 'TEXT', '"invoice total"'))
out['text_and'] = subjects(*M.search(None, 'TEXT', 'invoice', 'TEXT', 'noon'))
out['not_text'] = subjects(*M.search(None, 'NOT', 'TEXT', 'invoice'))
out['punctuation'] = subjects(*M.search(None, 'BODY', '":"'))
out['from_header'] = subjects(*M.search(None, 'TEXT', 'outside.test'))
out['inside_word'] = subjects(*M.search(None, 'BODY', 'nvoice'))
M.logout()
print(json.dumps(out))
`;
    const { stdout } = await execFileAsync('python3', ['-c', script, String(t.imapPort), a.primaryAddress, password], { timeout: 30_000 });
    const out = JSON.parse(stdout);
    expect(out.text).toEqual(['Lunch on Friday', 'Quarterly invoice overdue']);
    expect(out.body_prefix).toEqual(['Lunch on Friday', 'Quarterly invoice overdue']);
    // Words in the index, then the exact substring: "invoice total" only where those words follow each other.
    expect(out.text_phrase).toEqual(['Quarterly invoice overdue']);
    expect(out.text_and).toEqual(['Lunch on Friday']);
    // NOT, and values without words, read every message.
    expect(out.not_text).toEqual(['Scanned papers']);
    expect(out.punctuation).toEqual(['Quarterly invoice overdue']);
    expect(out.from_header).toEqual(['Lunch on Friday', 'Quarterly invoice overdue', 'Scanned papers']);
    // What the index cannot see: a value inside a word is not found (the index answered, no message was read).
    expect(out.inside_word).toEqual([]);
  });

  it("a bulk job's messages are indexed in the statement that writes their batch", async () => {
    const job = await rest(t, 'POST', '/messages/send/bulk', {
      key: a.apiKey,
      body: {
        from: ops.address,
        messages: [
          { to: 'k1@remote.invalid', subject: 'Kiwi harvest', text: 'The kiwi crop is in.' },
          { to: 'k2@remote.invalid', subject: 'Kiwi harvest', text: 'More kiwi next week.' },
        ],
      },
    });
    expect(job.status, JSON.stringify(job.body)).toBe(200);
    const written = await waitFor('the bulk messages', async () => {
      const r = await rest(t, 'GET', `/messages?box=${ops.id}&direction=sent`, { key: a.apiKey });
      const bulk = (r.body.messages as any[]).filter((x) => x.subject === 'Kiwi harvest');
      return bulk.length === 2 ? bulk.map((x) => x.id as string) : undefined;
    });
    for (const id of written) expect(await vectors(id)).toBe(1n);
    expect(new Set(ids(await search('q=kiwi')))).toEqual(new Set(written));
  });

  it('a reclaimed message leaves the index with its body', async () => {
    expect(await vectors(m.lunch)).toBe(1n);
    const del = await rest(t, 'DELETE', `/messages/${m.lunch}`, { key: a.apiKey });
    expect(del.status, JSON.stringify(del.body)).toBe(200);
    expect(await vectors(m.lunch)).toBe(0n);
    expect(ids(await search('q=invoice'))).toEqual([m.overdue]);
    expect(ids(await search('q=noon'))).toEqual([]);
    // Nothing brings it back: re-indexing a message without a body writes nothing.
    expect(await indexMessageText(t.svc, m.lunch, { attachmentTexts: ['invoice'] })).toBe(false);
    expect(ids(await search('q=invoice'))).toEqual([m.overdue]);

    // The retention window reclaims the body of a message past it (here: one recorded 30 days ago), and its vector.
    expect(ids(await search('q=zebra'))).toEqual([m.scan]);
    await t.db.message.update({ where: { id: m.scan }, data: { recordedAt: new Date(Date.now() - 30 * 86_400_000) } });
    expect(await reclaimExpiredBodies(t.svc)).toBe(1);
    expect(await vectors(m.scan)).toBe(0n);
    expect(ids(await search('q=zebra'))).toEqual([]);
  });

  it('PUT /account/search-indexing off drops the vectors and writes none; on again, the backfill indexes the messages', async () => {
    const off = await rest(t, 'PUT', '/account/search-indexing', { key: a.apiKey, body: { enabled: false } });
    expect(off.status, JSON.stringify(off.body)).toBe(200);
    expect(off.body).toEqual({ search_indexing: false });
    const left = (
      await rows(
        t.db,
        k
          .selectFrom('message_search')
          .select((e) => e.fn.countAll<string>().as('n'))
          .where('account_id', '=', a.accountId),
      )
    ).map((r) => ({ n: BigInt(r.n) }));
    expect(left[0]!.n).toBe(0n);
    expect(ids(await search('q=invoice'))).toEqual([]);
    const sent = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: 'x@remote.invalid', subject: 'Unindexed pelican', text: 'pelican' } });
    expect(sent.status).toBe(200);
    expect(await vectors(sent.body.message_id)).toBe(0n);
    expect(await indexMessageText(t.svc, sent.body.message_id)).toBe(false);

    const on = await rest(t, 'PUT', '/account/search-indexing', { key: a.apiKey, body: { enabled: true } });
    expect(on.body).toEqual({ search_indexing: true });
    await waitFor('the backfill', async () => (await backfillSearchIndex(t.svc)) === 0 || undefined);
    expect(ids(await search('q=pelican'))).toEqual([sent.body.message_id]);
    expect(ids(await search('q=invoice'))).toEqual([m.overdue]);
    // The other account's message kept its vector all along.
    expect(await vectors(m.other)).toBe(1n);
  });
});
