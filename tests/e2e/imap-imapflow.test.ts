/**
 * IMAP with imapflow (a client nobody here wrote), over implicit TLS with an app-password: folders, reading
 * (envelope, body structure, parts, the raw bytes), flags that show on GET /messages, search, move, expunge
 * (which reclaims like DELETE /messages/{id}), the Sent folder, IDLE within a second of mail.received, and
 * UIDVALIDITY and UIDs across sessions.
 */
import { randomBytes } from 'node:crypto';
import type { ImapFlow } from 'imapflow';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { appPassword, deliver, imapClient, multipartMessage, waitFor, withImap } from './imap-helpers';
import { eventsOf } from './mail-receive-helpers';
import nodemailer from 'nodemailer';

let t: TestServer;
let a: TestAccount;
let password: string;

const tag = () => Math.random().toString(36).slice(2, 8);

/** SEARCH by UID; imapflow types a failed search as false. */
async function uidsOf(c: ImapFlow, query: Parameters<ImapFlow['search']>[0]): Promise<number[]> {
  const r = await c.search(query, { uid: true });
  if (!r) throw new Error('SEARCH failed');
  return r;
}

async function receivedId(subject: string): Promise<string> {
  return waitFor(`received "${subject}"`, async () => {
    const r = await rest(t, 'GET', '/messages?direction=received&limit=200', { key: a.apiKey });
    return (r.body.messages as { id: string; subject: string }[]).find((m) => m.subject === subject)?.id;
  });
}

beforeAll(async () => {
  t = await startTestServer({ mail: true, worker: true });
  a = await signupAccount(t, 'imapflow-owner@example.com');
  password = (await appPassword(t, a)).password;
});
afterAll(() => t?.stop());

describe('imapflow', () => {
  it('lists the folders of a box with their special use', async () => {
    await withImap(t, a.primaryAddress, password, async (c) => {
      const folders = await c.list();
      expect(folders.map((f) => f.path).sort()).toEqual(['Archive', 'Drafts', 'INBOX', 'Junk', 'Sent', 'Trash']);
      expect(Object.fromEntries(folders.map((f) => [f.path, f.specialUse ?? null]))).toEqual({
        INBOX: '\\Inbox',
        Sent: '\\Sent',
        Drafts: '\\Drafts',
        Trash: '\\Trash',
        Archive: '\\Archive',
        Junk: '\\Junk',
      });
    });
  });

  it('reads a received message: envelope, body structure, a part, the raw bytes', async () => {
    const subject = `multipart ${tag()}`;
    const raw = multipartMessage({ from: 'ann@outside.test', to: a.primaryAddress, subject, text: 'Hello over IMAP', attachment: 'the attached notes' });
    await deliver(t, [a.primaryAddress], raw);
    await receivedId(subject);
    await withImap(t, a.primaryAddress, password, async (c) => {
      const box = await c.mailboxOpen('INBOX');
      expect(box.exists).toBeGreaterThanOrEqual(1);
      const msg = await c.fetchOne('*', { uid: true, envelope: true, bodyStructure: true, flags: true, size: true, internalDate: true, source: true });
      expect(msg).toBeTruthy();
      if (!msg) return;
      expect(msg.envelope?.subject).toBe(subject);
      expect(msg.envelope?.from?.[0]).toMatchObject({ name: 'Sender Person', address: 'ann@outside.test' });
      expect(msg.envelope?.to?.[0]?.address).toBe(a.primaryAddress);
      // The stored copy is the message as received, with the MX's verdict on top (Received-SPF, Authentication-Results).
      const source = msg.source?.toString() ?? '';
      expect(source.endsWith(raw)).toBe(true);
      const stamp = source.slice(0, source.length - raw.length);
      expect(stamp).toMatch(/^Received-SPF: /);
      expect(stamp).toContain(`\r\nAuthentication-Results: ${t.config.mailHost};`);
      expect(msg.size).toBe(Buffer.byteLength(source));
      expect([...(msg.flags ?? [])]).toEqual([]);
      expect(msg.bodyStructure?.type).toBe('multipart/mixed');
      expect(msg.bodyStructure?.childNodes?.map((n) => n.type)).toEqual(['multipart/alternative', 'text/plain']);
      expect(msg.bodyStructure?.childNodes?.[1]).toMatchObject({ part: '2', disposition: 'attachment', dispositionParameters: { filename: 'notes.txt' } });
      const part = await c.download(String(msg.uid), '2', { uid: true });
      const chunks: Buffer[] = [];
      for await (const chunk of part.content!) chunks.push(chunk as Buffer);
      expect(Buffer.concat(chunks).toString()).toBe('the attached notes');
      const text = await c.fetchOne(String(msg.uid), { bodyParts: ['1.1', '2.mime'], headers: ['subject', 'from'] }, { uid: true });
      expect(text && text.bodyParts?.get('1.1')?.toString().trim()).toBe('Hello over IMAP');
      expect(text && text.bodyParts?.get('2.mime')?.toString()).toContain('filename="notes.txt"');
      expect(text && text.headers?.toString()).toBe(`From: Sender Person <ann@outside.test>\r\nSubject: ${subject}\r\n\r\n`);
      // BODY.PEEK did not mark it read.
      const again = await c.fetchOne(String(msg.uid), { flags: true }, { uid: true });
      expect(again && [...(again.flags ?? [])]).toEqual([]);
    });
  });

  it('messages larger than the output buffer, alone and many in one FETCH, come back byte for byte', async () => {
    const subject = `large ${tag()}`;
    // About 330 KB of text lines: several of the server's 64 KB output buffers for one literal.
    const big = Array.from({ length: 5000 }, (_, i) => `line ${i} ${randomBytes(24).toString('hex')}`).join('\n');
    const raws = [0, 1, 2].map((i) =>
      multipartMessage({ from: 'big@outside.test', to: a.primaryAddress, subject: `${subject} ${i}`, text: `part ${i}`, attachment: i === 1 ? 'small' : big }),
    );
    for (const [i, raw] of raws.entries()) {
      await deliver(t, [a.primaryAddress], raw);
      await receivedId(`${subject} ${i}`);
    }
    await withImap(t, a.primaryAddress, password, async (c) => {
      await c.mailboxOpen('INBOX');
      const got = new Map<string, string>();
      for await (const msg of c.fetch('1:*', { envelope: true, source: true, size: true })) {
        if (msg.envelope?.subject?.startsWith(subject)) got.set(msg.envelope.subject, msg.source!.toString());
        expect(msg.size).toBe(msg.source!.length);
      }
      expect(got.size).toBe(3);
      raws.forEach((raw, i) => {
        expect(got.get(`${subject} ${i}`)!.endsWith(raw)).toBe(true);
      });
      const one = await c.fetchOne('*', { source: true });
      expect(one && one.source!.toString().endsWith(raws[2]!)).toBe(true);
    });
  });

  it('flags persist, show on GET /messages, and search finds by flag, header and body', async () => {
    const subject = `flags ${tag()}`;
    await deliver(t, [a.primaryAddress], multipartMessage({ from: 'bob@outside.test', to: a.primaryAddress, subject, text: 'needle in the body' }));
    const id = await receivedId(subject);
    await withImap(t, a.primaryAddress, password, async (c) => {
      await c.mailboxOpen('INBOX');
      const [uid] = await uidsOf(c, { subject });
      expect(uid).toBeGreaterThan(0);
      await c.messageFlagsAdd(String(uid), ['\\Flagged', '\\Seen', '$Important'], { uid: true });
      expect(await c.search({ flagged: true }, { uid: true })).toContain(uid);
      expect(await c.search({ seen: false }, { uid: true })).not.toContain(uid);
      expect(await c.search({ body: 'needle in the' }, { uid: true })).toEqual([uid]);
      expect(await c.search({ from: 'bob@outside' }, { uid: true })).toEqual([uid]);
      expect(await c.search({ keyword: '$Important' }, { uid: true })).toEqual([uid]);
      await c.messageFlagsRemove(String(uid), ['\\Seen'], { uid: true });
    });
    const m = await rest(t, 'GET', `/messages/${id}`, { key: a.apiKey });
    expect(m.body.flags).toEqual(['\\Flagged', '$Important']);
    const list = await rest(t, 'GET', '/messages?direction=received', { key: a.apiKey });
    expect((list.body.messages as { id: string; flags: string[] }[]).find((x) => x.id === id)?.flags).toEqual(['\\Flagged', '$Important']);
    // A new session sees the same flags.
    await withImap(t, a.primaryAddress, password, async (c) => {
      await c.mailboxOpen('INBOX');
      const [uid] = await uidsOf(c, { subject });
      const msg = await c.fetchOne(String(uid), { flags: true }, { uid: true });
      expect(msg && [...(msg.flags ?? [])].sort()).toEqual(['$Important', '\\Flagged']);
    });
  });

  it('moves a message to Archive (COPYUID), then deleting and expunging it there reclaims it like DELETE /messages/{id}', async () => {
    const subject = `move ${tag()}`;
    await deliver(t, [a.primaryAddress], multipartMessage({ from: 'cat@outside.test', to: a.primaryAddress, subject, text: 'move me' }));
    const id = await receivedId(subject);
    await withImap(t, a.primaryAddress, password, async (c) => {
      await c.mailboxOpen('INBOX');
      const [uid] = await uidsOf(c, { subject });
      const moved = await c.messageMove(String(uid), 'Archive', { uid: true });
      expect(moved && moved.uidMap?.get(uid!)).toBeGreaterThan(0);
      expect(await c.search({ subject }, { uid: true })).toEqual([]);
      const archive = await c.mailboxOpen('Archive');
      const [inArchive] = await uidsOf(c, { subject });
      expect(inArchive).toBe(moved && moved.uidMap?.get(uid!));
      expect(archive.exists).toBeGreaterThanOrEqual(1);
      // Still readable over REST while it is in a folder.
      expect((await rest(t, 'GET', `/messages/${id}`, { key: a.apiKey })).body.body_state).toBe('available');
      await c.messageDelete(String(inArchive), { uid: true });
      expect(await c.search({ subject }, { uid: true })).toEqual([]);
    });
    const m = await rest(t, 'GET', `/messages/${id}`, { key: a.apiKey });
    expect(m.body).toMatchObject({ body_state: 'reclaimed', body: null });
    const deleted = (await eventsOf(t, a.apiKey, 'message.deleted')).find((e) => e.data.message_id === id);
    expect(deleted?.data).toMatchObject({ purged: false });
  });

  it('IDLE hears of new mail within a second of mail.received', async () => {
    const c = imapClient(t, a.primaryAddress, password);
    await c.connect();
    try {
      await c.mailboxOpen('INBOX');
      const exists = new Promise<number>((resolve) => c.on('exists', () => resolve(Date.now())));
      const idling = c.idle();
      await new Promise((r) => setTimeout(r, 200));
      const subject = `idle ${tag()}`;
      await deliver(t, [a.primaryAddress], multipartMessage({ from: 'dan@outside.test', to: a.primaryAddress, subject, text: 'wake up' }));
      const heardAt = await exists;
      const event = (await eventsOf(t, a.apiKey, 'mail.received')).find((e) => e.data.message.subject === subject)!;
      expect(heardAt - new Date(event.created_at).getTime()).toBeLessThan(1000);
      void idling;
    } finally {
      await c.logout().catch(() => undefined);
    }
  });

  it('the Sent folder holds what was sent, \\Seen, DKIM-signed; UIDVALIDITY is stable and UIDs grow', async () => {
    const first = await withImap(t, a.primaryAddress, password, async (c) => {
      const box = await c.mailboxOpen('Sent');
      return { uidValidity: box.uidValidity, uidNext: box.uidNext };
    });
    const subject = `sent ${tag()}`;
    const sent = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: 'someone@remote.invalid', subject, text: 'from the API' } });
    expect(sent.status).toBe(200);
    await withImap(t, a.primaryAddress, password, async (c) => {
      const box = await c.mailboxOpen('Sent');
      expect(box.uidValidity).toBe(first.uidValidity);
      const msg = await c.fetchOne('*', { uid: true, envelope: true, flags: true, source: true });
      expect(msg && msg.envelope?.subject).toBe(subject);
      expect(msg && msg.uid).toBeGreaterThanOrEqual(first.uidNext);
      expect(msg && [...(msg.flags ?? [])]).toEqual(['\\Seen']);
      expect(msg && msg.source?.toString()).toMatch(/^DKIM-Signature: /m);
      expect(box.uidNext).toBeGreaterThan(first.uidNext);
    });
  });

  it("a message submitted over SMTP is in Sent, and the client's own copy appended to Sent is that one", async () => {
    const subject = `submitted ${tag()}`;
    const clientId = `<client-${tag()}@laptop.test>`;
    const smtp = nodemailer.createTransport({
      host: '127.0.0.1',
      port: t.submissionPort!,
      secure: true,
      tls: { rejectUnauthorized: false },
      auth: { user: a.primaryAddress, pass: password },
    });
    const info = await smtp.sendMail({ from: a.primaryAddress, to: 'friend@remote.invalid', subject, text: 'from a mail client', messageId: clientId });
    smtp.close();
    expect(info.response).toMatch(/queued as msg_/);
    const copy = `Message-ID: ${clientId}\r\nFrom: ${a.primaryAddress}\r\nTo: friend@remote.invalid\r\nSubject: ${subject}\r\n\r\nfrom a mail client\r\n`;
    await withImap(t, a.primaryAddress, password, async (c) => {
      const sent = await c.mailboxOpen('Sent');
      const [uid] = await uidsOf(c, { subject });
      expect(uid).toBeGreaterThan(0);
      const appended = await c.append('Sent', copy, ['\\Seen']);
      expect(appended && appended.uid).toBe(uid);
      const status = await c.status('Sent', { messages: true });
      expect(status && status.messages).toBe(sent.exists);
      // Anything else is refused (mail enters a box by being received or sent), but for Drafts, where an APPEND
      // saves a draft (drafts.test.ts).
      await expect(c.append('Archive', copy)).rejects.toThrow();
    });
  });

  it('CONDSTORE: HIGHESTMODSEQ moves with every change, FETCH CHANGEDSINCE returns only what changed', async () => {
    const subject = `condstore ${tag()}`;
    await deliver(t, [a.primaryAddress], multipartMessage({ from: 'eve@outside.test', to: a.primaryAddress, subject, text: 'modseq' }));
    await receivedId(subject);
    await withImap(t, a.primaryAddress, password, async (c) => {
      const box = await c.mailboxOpen('INBOX');
      const before = box.highestModseq!;
      expect(before).toBeGreaterThan(0n);
      const [uid] = await uidsOf(c, { subject });
      await c.messageFlagsAdd(String(uid), ['\\Answered'], { uid: true });
      const changed: number[] = [];
      for await (const m of c.fetch('1:*', { uid: true, flags: true }, { changedSince: before })) changed.push(m.uid);
      expect(changed).toEqual([uid]);
      const after = await c.status('INBOX', { highestModseq: true });
      expect(after && after.highestModseq).toBeGreaterThan(before);
    });
  });
});
