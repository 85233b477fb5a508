/**
 * Drafts over REST: saved incomplete but well formed, changed field by field, listed in pages (per box and for
 * the account), deleted, and sent through the send path (its rules, its answer, send_at, replies), once however
 * many calls race; and the same drafts in the Drafts folder of mail clients (python imaplib and imapflow):
 * FETCH the rendering, APPEND a draft, STORE \Deleted + EXPUNGE one, a change over REST under a new UID.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintKey, rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { appPassword, execFileAsync, withImap } from './imap-helpers';

let t: TestServer;
let a: TestAccount;

const tag = () => Math.random().toString(36).slice(2, 8);
const post = (path: string, body?: unknown, key = a.apiKey) => rest(t, 'POST', path, { key, ...(body !== undefined ? { body } : {}) });
const get = (path: string, key = a.apiKey) => rest(t, 'GET', path, { key });
const put = (path: string, body: unknown, key = a.apiKey) => rest(t, 'PUT', path, { key, body });

beforeAll(async () => {
  t = await startTestServer({ mail: true });
  a = await signupAccount(t, `drafts-${tag()}@example.com`);
});
afterAll(() => t?.stop());

describe('saving', () => {
  it('keeps an incomplete draft, which the send refuses for what it lacks', async () => {
    const d = await post('/drafts', { subject: 'not yet' });
    expect(d.status, JSON.stringify(d.body)).toBe(200);
    expect(d.body).toMatchObject({ from: a.primaryAddress, to: [], cc: [], bcc: [], subject: 'not yet', text: null, html: null, ready: false });
    expect(d.body.id).toMatch(/^drf_[0-9a-z]{20}$/);
    const s = await post(`/drafts/${d.body.id}/send`);
    expect(s.status).toBe(400);
    expect(s.body.error.code).toBe('validation_error');
    expect(s.body.error.message).toMatch(/^to:/);
    // Refused: still a draft.
    expect((await get(`/drafts/${d.body.id}`)).status).toBe(200);
  });

  it('is strict about format: addresses, header injection, base64, sizes, boxes', async () => {
    const cases: [unknown, string][] = [
      [{ to: 'not an address' }, 'to'],
      [{ to: ['ok@example.com', 'bad@'] }, 'to.1'],
      [{ cc: 'x@example.com\r\nBcc: victim@example.com' }, 'cc'],
      [{ subject: 'hello\r\nBcc: victim@example.com' }, 'subject'],
      [{ from: 'Evil\r\nX: y <agent@nowhere.example>' }, 'from'],
      [{ from: `nobody@${a.domain}` }, 'from'],
      [{ attachments: [{ filename: 'a.txt', content_type: 'text/plain', content_b64: '***' }] }, 'attachments.0.content_b64'],
      [{ send_at: '2020-01-01T00:00:00Z' }, 'send_at'],
      [{ to: Array.from({ length: 51 }, (_, i) => `r${i}@example.com`) }, 'to'],
    ];
    for (const [body, field] of cases) {
      const r = await post('/drafts', body);
      expect(r.status, `${JSON.stringify(body)}: ${JSON.stringify(r.body)}`).toBe(400);
      expect(r.body.error.code).toBe('validation_error');
      expect(JSON.stringify(r.body.error), JSON.stringify(body)).toContain(field);
    }
    const tooBig = await post('/drafts', {
      to: 'big@example.com',
      attachments: [
        { filename: 'big.bin', content_type: 'application/octet-stream', content_b64: Buffer.alloc(t.svc.config.smtp.maxMessageBytes).toString('base64') },
      ],
    });
    expect([400, 413]).toContain(tooBig.status);
    expect((await post('/drafts', { in_reply_to: 'msg_00000000000000000000' })).status).toBe(404);
  });

  it('PUT replaces the fields given, keeps the others, clears what is null; each save is a new UID', async () => {
    const d = await post('/drafts', {
      to: ['Ann <ann@example.com>'],
      subject: 'first',
      text: 'one',
      attachments: [{ filename: 'a.txt', content_type: 'text/plain', content_b64: Buffer.from('attached').toString('base64') }],
    });
    expect(d.status).toBe(200);
    expect(d.body.to).toEqual(['"Ann" <ann@example.com>']);
    expect(d.body.attachments).toEqual([{ filename: 'a.txt', content_type: 'text/plain', content_id: null, size_bytes: 8 }]);
    const u = await put(`/drafts/${d.body.id}`, { subject: 'second', cc: 'cc@example.com', html: '<p>two</p>' });
    expect(u.status, JSON.stringify(u.body)).toBe(200);
    expect(u.body).toMatchObject({ subject: 'second', to: ['"Ann" <ann@example.com>'], cc: ['cc@example.com'], text: 'one', html: '<p>two</p>', ready: true });
    expect(u.body.attachments).toHaveLength(1);
    expect(u.body.imap_uid).toBeGreaterThan(d.body.imap_uid);
    const c = await put(`/drafts/${d.body.id}`, { text: null, attachments: null, cc: null });
    expect(c.body).toMatchObject({ text: null, html: '<p>two</p>', cc: [], attachments: [] });
    const full = await get(`/drafts/${d.body.id}?include=attachment_content`);
    expect(full.body.attachments).toEqual([]);
    expect((await put('/drafts/drf_00000000000000000000', { subject: 'x' })).status).toBe(404);
  });

  it('changes made at the same moment all apply', async () => {
    const d = await post('/drafts', { subject: 'racing' });
    const changes = [{ to: 'one@example.com' }, { cc: 'two@example.com' }, { bcc: 'three@example.com' }, { text: 'four' }, { html: '<p>five</p>' }];
    const all = await Promise.all(changes.map((c) => put(`/drafts/${d.body.id}`, c)));
    for (const r of all) expect(r.status, JSON.stringify(r.body)).toBe(200);
    const now = await get(`/drafts/${d.body.id}`);
    expect(now.body).toMatchObject({
      subject: 'racing',
      to: ['one@example.com'],
      cc: ['two@example.com'],
      bcc: ['three@example.com'],
      text: 'four',
      html: '<p>five</p>',
    });
    expect(new Set(all.map((r) => r.body.imap_uid)).size).toBe(changes.length);
  });

  it('lists in pages, per box and for the account; deletes', async () => {
    const b = await signupAccount(t, `drafts-list-${tag()}@example.com`);
    const spare = await rest(t, 'POST', '/boxes', { key: b.apiKey, body: { address: 'spare' } });
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await post('/drafts', { subject: `primary ${i}` }, b.apiKey)).body.id);
    ids.push((await post('/drafts', { from: spare.body.address, subject: 'spare' }, b.apiKey)).body.id);
    const page1 = await get('/drafts?limit=3', b.apiKey);
    expect(page1.body.drafts.map((d: { id: string }) => d.id)).toEqual([ids[3], ids[2], ids[1]]);
    expect(page1.body.drafts[0].text).toBeUndefined();
    const page2 = await get(`/drafts?limit=3&cursor=${page1.body.next_cursor}`, b.apiKey);
    expect(page2.body).toMatchObject({ drafts: [{ id: ids[0] }], next_cursor: null });
    const perBox = await get(`/drafts?box=${encodeURIComponent(spare.body.address)}&include=body`, b.apiKey);
    expect(perBox.body.drafts.map((d: { id: string; text: null }) => [d.id, d.text])).toEqual([[ids[3], null]]);
    expect((await get('/drafts?cursor=nope', b.apiKey)).body.error.code).toBe('invalid_cursor');
    // Another account's draft is 404 everywhere.
    expect((await get(`/drafts/${ids[0]}`)).status).toBe(404);
    expect((await rest(t, 'DELETE', `/drafts/${ids[0]}`, { key: a.apiKey })).status).toBe(404);
    const del = await rest(t, 'DELETE', `/drafts/${ids[0]}`, { key: b.apiKey });
    expect(del.body).toEqual({ id: ids[0], deleted: true });
    expect((await get(`/drafts/${ids[0]}`, b.apiKey)).status).toBe(404);
    expect((await get('/drafts', b.apiKey)).body.drafts).toHaveLength(3);
  });

  it('a box-restricted key writes and reads only the drafts of its boxes', async () => {
    const own = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: `own-${tag()}` } });
    const k = await mintKey(t, a.apiKey, ['send'], { allowed_box_ids: [own.body.id] });
    expect((await post('/drafts', { subject: 'x' }, k.api_key)).body.error.code).toBe('box_restricted_key');
    const mine = await post('/drafts', { from: own.body.address, subject: 'mine' }, k.api_key);
    expect(mine.status).toBe(200);
    const other = await post('/drafts', { subject: 'primary' });
    expect((await get(`/drafts/${other.body.id}`, k.api_key)).status).toBe(404);
    expect((await put(`/drafts/${mine.body.id}`, { from: a.primaryAddress }, k.api_key)).body.error.code).toBe('box_restricted_key');
    const listed = await get('/drafts', k.api_key);
    expect(listed.body.drafts.map((d: { id: string }) => d.id)).toEqual([mine.body.id]);
    const receiveOnly = await mintKey(t, a.apiKey, ['receive']);
    expect((await get('/drafts', receiveOnly.api_key)).body.error.code).toBe('insufficient_scope');
  });
});

describe('sending', () => {
  it('goes through the send path once, and the message names the draft', async () => {
    const d = await post('/drafts', { to: 'Bob <bob@remote.invalid>', subject: 'from a draft', text: 'hello' });
    const s = await post(`/drafts/${d.body.id}/send`);
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    expect(s.body).toMatchObject({ draft_id: d.body.id, status: 'queued', recipients: ['bob@remote.invalid'], from: a.primaryAddress });
    expect(s.body.idempotent_replay).toBeUndefined();
    const m = await get(`/messages/${s.body.message_id}`);
    expect(m.body).toMatchObject({ draft_id: d.body.id, subject: 'from a draft', to: ['bob@remote.invalid'] });
    expect(m.body.body.text).toContain('hello');
    expect((await get(`/drafts/${d.body.id}`)).status).toBe(404);
    expect((await get('/drafts')).body.drafts.map((x: { id: string }) => x.id)).not.toContain(d.body.id);
    const again = await post(`/drafts/${d.body.id}/send`);
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ message_id: s.body.message_id, draft_id: d.body.id, idempotent_replay: true });
    const events = await get('/events?type=mail.sent');
    expect(events.body.events.filter((e: { data: { message_id: string } }) => e.data.message_id === s.body.message_id)).toHaveLength(1);
  });

  it('concurrent sends of one draft store one message', async () => {
    const d = await post('/drafts', { to: 'race@remote.invalid', subject: 'race', text: 'once' });
    const all = await Promise.all(Array.from({ length: 8 }, () => post(`/drafts/${d.body.id}/send`)));
    for (const r of all) expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(new Set(all.map((r) => r.body.message_id)).size).toBe(1);
    expect(all.filter((r) => !r.body.idempotent_replay)).toHaveLength(1);
    expect(await t.db.message.count({ where: { draftId: d.body.id } })).toBe(1);
    expect(await t.db.delivery.count({ where: { message: { draftId: d.body.id } } })).toBe(1);
  });

  it('applies the send rules: suppression, box restriction, and send_at makes a scheduled send', async () => {
    await t.db.suppression.create({ data: { accountId: a.accountId, address: 'gone@remote.invalid', reason: 'bounce' } });
    const sup = await post('/drafts', { to: 'gone@remote.invalid', text: 'x' });
    const s = await post(`/drafts/${sup.body.id}/send`);
    expect(s.body).toMatchObject({ status: 'suppressed', suppressed: ['gone@remote.invalid'], recipients: [] });

    const own = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: `lim-${tag()}` } });
    const k = await mintKey(t, a.apiKey, ['send'], { allowed_box_ids: [own.body.id] });
    const primary = await post('/drafts', { to: 'p@remote.invalid', text: 'x' });
    expect((await post(`/drafts/${primary.body.id}/send`, undefined, k.api_key)).status).toBe(404);
    const receiveOnly = await mintKey(t, a.apiKey, ['receive']);
    expect((await post(`/drafts/${primary.body.id}/send`, undefined, receiveOnly.api_key)).body.error.code).toBe('insufficient_scope');

    const at = new Date(Date.now() + 3_600_000).toISOString();
    const later = await post('/drafts', { to: 'later@remote.invalid', text: 'later', send_at: at });
    expect(later.body.send_at).toBe(at);
    const sl = await post(`/drafts/${later.body.id}/send`);
    expect(sl.body).toMatchObject({ status: 'scheduled', send_at: at, draft_id: later.body.id });
    expect((await post(`/messages/${sl.body.message_id}/cancel`)).body.status).toBe('cancelled');
  });

  it('a paused box sends no draft, which stays a draft until the box resumes', async () => {
    const box = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: `paused-${tag()}` } });
    const d = await post('/drafts', { from: box.body.address, to: 'pause@remote.invalid', text: 'held' });
    expect((await post(`/boxes/${box.body.id}/pause`)).status).toBe(200);
    const refused = await post(`/drafts/${d.body.id}/send`);
    expect(refused.body.error?.code, JSON.stringify(refused.body)).toBe('box_paused');
    expect((await get(`/drafts/${d.body.id}`)).status).toBe(200);
    expect(await t.db.message.count({ where: { draftId: d.body.id } })).toBe(0);
    expect((await post(`/boxes/${box.body.id}/resume`)).status).toBe(200);
    expect((await post(`/drafts/${d.body.id}/send`)).body).toMatchObject({ draft_id: d.body.id, status: 'queued' });
  });

  it('a draft in reply to a message takes its recipients, subject and thread', async () => {
    const original = await post('/messages/send', { to: 'Carol <carol@remote.invalid>', subject: 'Question', text: 'q?' });
    const d = await post('/drafts', { in_reply_to: original.body.message_id, text: 'an answer' });
    expect(d.status, JSON.stringify(d.body)).toBe(200);
    expect(d.body).toMatchObject({ to: ['carol@remote.invalid'], subject: 'Re: Question', in_reply_to: original.body.message_id, ready: true });
    await put(`/drafts/${d.body.id}`, { cc: 'dave@remote.invalid' });
    const s = await post(`/drafts/${d.body.id}/send`);
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    expect(s.body.thread_id).toBe(original.body.thread_id);
    const m = await get(`/messages/${s.body.message_id}`);
    expect(m.body).toMatchObject({
      subject: 'Re: Question',
      to: ['carol@remote.invalid'],
      cc: ['dave@remote.invalid'],
      in_reply_to: original.body.rfc_message_id,
    });
  });
});

describe('the Drafts folder (IMAP)', () => {
  it('python imaplib: a REST draft is there flagged \\Draft; an APPEND becomes a draft; STORE \\Deleted + EXPUNGE deletes one; a change is a new UID', async () => {
    const b = await signupAccount(t, `drafts-imap-${tag()}@example.com`);
    const pw = (await appPassword(t, b)).password;
    const first = await post(
      '/drafts',
      { to: 'Eve <eve@example.com>', bcc: 'hidden@example.com', subject: 'over REST', text: 'written by an agent' },
      b.apiKey,
    );
    const raw = [
      'From: Agent <' + b.primaryAddress + '>',
      'To: Frank <frank@example.com>',
      'Subject: from a mail client',
      'MIME-Version: 1.0',
      'Content-Type: text/plain; charset=utf-8',
      '',
      'typed in a client',
      '',
    ].join('\r\n');
    const script = `
import imaplib, json, ssl, sys
port, user, pw, raw = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
M = imaplib.IMAP4_SSL('127.0.0.1', port, ssl_context=ctx)
M.login(user, pw)
out = {}
out['select'] = int(M.select('Drafts')[1][0])
typ, data = M.uid('FETCH', '1:*', '(FLAGS RFC822)')
out['first'] = [data[0][0].decode(), data[0][1].decode()]
typ, data = M.append('Drafts', '(\\\\Draft)', None, raw.encode())
out['append'] = data[0].decode()
M.noop()
out['uids'] = M.uid('SEARCH', None, 'ALL')[1][0].decode()
print(json.dumps(out))
`;
    const { stdout } = await execFileAsync('python3', ['-c', script, String(t.imapPort), b.primaryAddress, pw, raw], { timeout: 30_000 });
    const out = JSON.parse(stdout);
    expect(out.select).toBe(1);
    expect(out.first[0]).toContain(`UID ${first.body.imap_uid}`);
    expect(out.first[0]).toMatch(/FLAGS \([^)]*\\Draft/);
    expect(out.first[1]).toContain('Subject: over REST');
    expect(out.first[1]).toContain('Bcc: hidden@example.com');
    expect(out.first[1]).toContain('written by an agent');
    const appended = /APPENDUID (\d+) (\d+)/.exec(out.append);
    expect(appended, out.append).not.toBeNull();
    const uid = Number(appended![2]);
    expect(out.uids.split(' ').map(Number)).toEqual([first.body.imap_uid, uid]);

    // Over REST, the appended draft is a draft like any other.
    const listed = await get('/drafts?include=body', b.apiKey);
    const fromClient = listed.body.drafts.find((d: { subject: string }) => d.subject === 'from a mail client');
    expect(fromClient).toMatchObject({ to: ['"Frank" <frank@example.com>'], imap_uid: uid, ready: true });
    expect(fromClient.text).toContain('typed in a client');

    // A change over REST: the old UID goes, a new one comes.
    const changed = await put(`/drafts/${first.body.id}`, { subject: 'changed over REST' }, b.apiKey);
    const script2 = `
import imaplib, json, ssl, sys
port, user, pw, uid = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
M = imaplib.IMAP4_SSL('127.0.0.1', port, ssl_context=ctx)
M.login(user, pw)
M.select('Drafts')
out = {}
out['uids'] = M.uid('SEARCH', None, 'ALL')[1][0].decode()
out['subjects'] = [x.decode() if isinstance(x, bytes) else [y.decode() for y in x] for x in M.uid('FETCH', '1:*', '(BODY.PEEK[HEADER.FIELDS (SUBJECT)])')[1]]
out['store'] = M.uid('STORE', uid, '+FLAGS', '(\\\\Deleted)')[0]
out['expunge'] = M.expunge()[0]
out['after'] = M.uid('SEARCH', None, 'ALL')[1][0].decode()
print(json.dumps(out))
`;
    const o2 = JSON.parse((await execFileAsync('python3', ['-c', script2, String(t.imapPort), b.primaryAddress, pw, String(uid)], { timeout: 30_000 })).stdout);
    expect(o2.uids.split(' ').map(Number)).toEqual([uid, changed.body.imap_uid]);
    expect(JSON.stringify(o2.subjects)).toContain('changed over REST');
    expect(o2.store).toBe('OK');
    expect(o2.after).toBe(String(changed.body.imap_uid));
    expect((await get(`/drafts/${fromClient.id}`, b.apiKey)).status).toBe(404);
  });

  it('imapflow: a client idling in Drafts hears of a draft saved over REST at once', async () => {
    const b = await signupAccount(t, `drafts-idle-${tag()}@example.com`);
    const pw = (await appPassword(t, b)).password;
    await withImap(t, b.primaryAddress, pw, async (c) => {
      const lock = await c.getMailboxLock('Drafts');
      try {
        const heard = new Promise<number>((resolve) => c.on('exists', (e: { count: number }) => resolve(e.count)));
        const idling = c.idle();
        await new Promise((r) => setTimeout(r, 300));
        const d = await post('/drafts', { subject: 'heard while idling' }, b.apiKey);
        const count = await Promise.race([heard, new Promise<number>((_, reject) => setTimeout(() => reject(new Error('no EXISTS while idling')), 5000))]);
        expect(count).toBe(1);
        await c.noop();
        await idling;
        const msg = await c.fetchOne(String(d.body.imap_uid), { envelope: true }, { uid: true });
        expect(msg && msg.envelope?.subject).toBe('heard while idling');
      } finally {
        lock.release();
      }
    });
  });

  it('imapflow: append, fetch, a REST send takes the draft out of the folder', async () => {
    const b = await signupAccount(t, `drafts-flow-${tag()}@example.com`);
    const pw = (await appPassword(t, b)).password;
    await withImap(t, b.primaryAddress, pw, async (c) => {
      const added = await c.append(
        'Drafts',
        ['To: gina@remote.invalid', 'Subject: imapflow draft', 'Content-Type: text/plain', '', 'from imapflow', ''].join('\r\n'),
        ['\\Draft'],
      );
      expect(added).toBeTruthy();
      const uid = (added as { uid: number }).uid;
      const lock = await c.getMailboxLock('Drafts');
      try {
        const msg = await c.fetchOne(String(uid), { envelope: true, flags: true, source: true }, { uid: true });
        expect(msg && msg.envelope?.subject).toBe('imapflow draft');
        expect(msg && [...(msg.flags ?? [])]).toContain('\\Draft');
        const d = (await get('/drafts', b.apiKey)).body.drafts[0];
        expect(d).toMatchObject({ subject: 'imapflow draft', imap_uid: uid });
        const s = await post(`/drafts/${d.id}/send`, undefined, b.apiKey);
        expect(s.status, JSON.stringify(s.body)).toBe(200);
        await c.noop();
        expect(await c.search({ all: true }, { uid: true })).toEqual([]);
        // Moved out of Drafts (a client's delete to Trash): the draft is deleted.
        const second = (await c.append('Drafts', ['To: hal@remote.invalid', 'Subject: moved away', '', 'x', ''].join('\r\n'), ['\Draft'])) as { uid: number };
        await c.noop();
        const moving = (await get('/drafts', b.apiKey)).body.drafts[0];
        expect(moving).toMatchObject({ subject: 'moved away', imap_uid: second.uid });
        await c.messageMove(String(second.uid), 'Trash', { uid: true });
        expect((await get(`/drafts/${moving.id}`, b.apiKey)).status).toBe(404);
        expect(await c.search({ all: true }, { uid: true })).toEqual([]);
      } finally {
        lock.release();
      }
    });
  });
});
