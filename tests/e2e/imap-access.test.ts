/**
 * Who sees what over IMAP: a box login sees its box, an account login (the owner's email) every box, a
 * box-limited app-password only its box, and nobody another account's mail. Wrong, revoked and API-key
 * passwords are refused, repeated failures lock the username out, revoking an app-password closes its open
 * sessions, and IDLE on one process hears of mail that another process received.
 */
import { ImapFlow } from 'imapflow';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { receiveMessage, syncMailboxes } from '@boxes/core';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { appPassword, deliver, imapClient, multipartMessage, waitFor, withImap } from './imap-helpers';
import { eventsOf } from './mail-receive-helpers';
import { exec, k, rows, sql, type Tx } from '@boxes/db';

const countAll = sql<bigint>`count(*)`.as('n');
/** The entries of an account's INBOX folders. */
const inboxEntriesOf = (accountId: string) =>
  k
    .selectFrom('mail_folder_entries as e')
    .innerJoin('mail_folders as f', 'f.id', 'e.folder_id')
    .select(countAll)
    .where('f.account_id', '=', accountId)
    .where('f.role', '=', sql.lit('inbox'));

let t: TestServer;

const tag = () => Math.random().toString(36).slice(2, 8);

async function subjects(c: ImapFlow, folder: string): Promise<string[]> {
  const box = await c.mailboxOpen(folder);
  if (!box.exists) return [];
  const out: string[] = [];
  for await (const m of c.fetch('1:*', { envelope: true })) out.push(m.envelope?.subject ?? '');
  return out;
}

async function loginError(user: string, pass: string): Promise<{ authenticationFailed?: boolean; responseText?: string; serverResponseCode?: string }> {
  const c = imapClient(t, user, pass);
  c.on('error', () => undefined);
  try {
    await c.connect();
  } catch (err) {
    return err as { authenticationFailed?: boolean; responseText?: string };
  }
  await c.logout();
  throw new Error('the login succeeded');
}

beforeAll(async () => {
  t = await startTestServer({
    mail: true,
    worker: true,
    env: { MAIL_AUTH_USER_MAX_FAILURES: '3', MAIL_AUTH_ADDRESS_MAX_FAILURES: '1000', MAIL_AUTH_DELAY_MS: '10', MAIL_AUTH_LOCKOUT_SECONDS: '120' },
  });
});
afterAll(() => t?.stop());

describe('what each login sees', () => {
  let a: TestAccount;
  let b: TestAccount;
  let sales: { id: string; address: string };
  const mark = tag();

  beforeAll(async () => {
    a = await signupAccount(t, `owner-${mark}@example.com`);
    b = await signupAccount(t, `other-${mark}@example.com`);
    sales = (await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'sales' } })).body;
    await deliver(t, [a.primaryAddress], multipartMessage({ from: 'x@outside.test', to: a.primaryAddress, subject: `for agent ${mark}`, text: 'a' }));
    await deliver(t, [sales.address], multipartMessage({ from: 'x@outside.test', to: sales.address, subject: `for sales ${mark}`, text: 's' }));
    await deliver(t, [b.primaryAddress], multipartMessage({ from: 'x@outside.test', to: b.primaryAddress, subject: `for other account ${mark}`, text: 'b' }));
    await waitFor(
      'three received',
      async () => (await eventsOf(t, a.apiKey, 'mail.received')).length === 2 && (await eventsOf(t, b.apiKey, 'mail.received')).length === 1,
    );
  });

  it('a box login sees its own box: INBOX is what that box received', async () => {
    const pw = (await appPassword(t, a)).password;
    await withImap(t, sales.address, pw, async (c) => {
      expect((await c.list()).map((f) => f.path).sort()).toEqual(['Archive', 'Drafts', 'INBOX', 'Junk', 'Sent', 'Trash']);
      expect(await subjects(c, 'INBOX')).toEqual([`for sales ${mark}`]);
    });
    await withImap(t, a.primaryAddress, pw, async (c) => {
      expect(await subjects(c, 'INBOX')).toEqual([`for agent ${mark}`]);
    });
  });

  it("an account login (the owner's email) sees every box: the primary's folders and Boxes/<local part>/...", async () => {
    const pw = (await appPassword(t, a)).password;
    await withImap(t, `owner-${mark}@example.com`, pw, async (c) => {
      const paths = (await c.list()).map((f) => f.path);
      expect(paths).toEqual(expect.arrayContaining(['INBOX', 'Sent', 'Boxes/sales/INBOX', 'Boxes/sales/Sent', 'Boxes/sales/Trash']));
      expect(await subjects(c, 'INBOX')).toEqual([`for agent ${mark}`]);
      expect(await subjects(c, 'Boxes/sales/INBOX')).toEqual([`for sales ${mark}`]);
      // "Boxes" and "Boxes/sales" only group folders.
      await expect(c.mailboxOpen('Boxes/sales')).rejects.toThrow();
      // Mail stays in its own box's folders.
      await c.mailboxOpen('INBOX');
      const moved = await c.messageMove('1', 'Boxes/sales/Archive').catch((e: Error) => e);
      expect(moved === false || moved instanceof Error).toBe(true);
      expect(await subjects(c, 'INBOX')).toEqual([`for agent ${mark}`]);
    });
  });

  it('a box-limited app-password logs in with its box only, and sees only that box', async () => {
    const pw = (await appPassword(t, a, { label: 'sales only', box: 'sales' })).password;
    await withImap(t, sales.address, pw, async (c) => {
      expect(await subjects(c, 'INBOX')).toEqual([`for sales ${mark}`]);
      expect((await c.list()).map((f) => f.path)).not.toContain('Boxes/sales/INBOX');
    });
    expect((await loginError(a.primaryAddress, pw)).authenticationFailed).toBe(true);
    expect((await loginError(`owner-${mark}@example.com`, pw)).authenticationFailed).toBe(true);
  });

  it("another account's mail is never visible, and its password does not open this account", async () => {
    const pwB = (await appPassword(t, b)).password;
    await withImap(t, b.primaryAddress, pwB, async (c) => {
      expect(await subjects(c, 'INBOX')).toEqual([`for other account ${mark}`]);
      expect((await c.list()).map((f) => f.path)).not.toContain('Boxes/sales/INBOX');
    });
    expect((await loginError(a.primaryAddress, pwB)).authenticationFailed).toBe(true);
    expect((await loginError(sales.address, pwB)).authenticationFailed).toBe(true);
  });

  it('deleting a box takes its folders and what they held with it; the other boxes keep theirs', async () => {
    const pw = (await appPassword(t, a)).password;
    await withImap(t, `owner-${mark}@example.com`, pw, async (c) => {
      expect(await subjects(c, 'Boxes/sales/INBOX')).toEqual([`for sales ${mark}`]);
    });
    const entries = (boxId: string) =>
      rows(
        t.db,
        k
          .selectFrom('mail_folder_entries as e')
          .select(countAll)
          .where('e.folder_id', 'in', (eb) => eb.selectFrom('mail_folders').select('id').where('box_id', '=', boxId)),
      ).then((r) => Number(r[0]!.n));
    const folderIds = (await rows(t.db, k.selectFrom('mail_folders').select('id').where('box_id', '=', sales.id))).map((f) => f.id);
    expect(await entries(sales.id)).toBe(1);
    expect((await rest(t, 'DELETE', `/boxes/${sales.id}`, { key: a.apiKey })).status).toBe(200);
    // Folder entries have no foreign keys (a fold inserts thousands at once): a statement trigger cascades instead.
    const left = await rows(t.db, k.selectFrom('mail_folder_entries').select(countAll).where('folder_id', '=', sql<string>`ANY(${folderIds}::text[])`));
    expect(Number(left[0]!.n)).toBe(0);
    const primary = await t.db.box.findFirstOrThrow({ where: { accountId: a.accountId, isPrimary: true } });
    expect(await entries(primary.id)).toBe(1);
  });
});

describe('refusals', () => {
  it('wrong, revoked and API-key passwords are refused with AUTHENTICATIONFAILED', async () => {
    const a = await signupAccount(t, `refuse-${tag()}@example.com`);
    const old = await appPassword(t, a);
    await rest(t, 'DELETE', `/account/app-passwords/${old.id}`, { key: a.apiKey });
    for (const pass of ['AAAA-BBBB-CCCC-DDDD', a.apiKey, old.password]) {
      const err = await loginError(a.primaryAddress, pass);
      expect(err.authenticationFailed, pass).toBe(true);
    }
  });

  it('repeated failures lock the username out for a while, the right password included', async () => {
    const a = await signupAccount(t, `lock-${tag()}@example.com`);
    const pw = (await appPassword(t, a)).password;
    for (let i = 0; i < 3; i++) expect((await loginError(a.primaryAddress, 'AAAA-BBBB-CCCC-DDDD')).authenticationFailed).toBe(true);
    const locked = await loginError(a.primaryAddress, pw);
    expect(locked.responseText).toMatch(/Too many failed logins; try again in \d+ seconds/);
  });

  it('one connection gets three tries, then the server says BYE and closes it', async () => {
    const tls = await import('node:tls');
    const socket = tls.connect({ host: '127.0.0.1', port: t.imapPort!, rejectUnauthorized: false });
    let transcript = '';
    socket.on('data', (d) => (transcript += d.toString()));
    const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    await new Promise((r) => socket.once('secureConnect', r));
    for (let i = 1; i <= 3; i++) socket.write(`a${i} LOGIN nobody-${tag()}@example.com AAAA-BBBB-CCCC-DDDD\r\n`);
    await closed;
    expect(transcript).toMatch(/^\* OK \[CAPABILITY IMAP4rev1 /);
    expect(transcript.match(/^a\d NO \[AUTHENTICATIONFAILED\]/gm)).toHaveLength(3);
    expect(transcript).toMatch(/\* BYE Too many failed logins on this connection\r\n$/);
  });

  it('revoking an app-password closes its open sessions (an idling one included); other passwords go on', async () => {
    const a = await signupAccount(t, `revoke-${tag()}@example.com`);
    const doomed = await appPassword(t, a, { label: 'doomed' });
    const kept = await appPassword(t, a, { label: 'kept' });
    const idling = imapClient(t, a.primaryAddress, doomed.password);
    const selected = imapClient(t, a.primaryAddress, doomed.password);
    const other = imapClient(t, a.primaryAddress, kept.password);
    for (const c of [idling, selected, other]) {
      c.on('error', () => undefined);
      await c.connect();
      await c.mailboxOpen('INBOX');
    }
    const closed = (c: ImapFlow) => new Promise<void>((resolve) => c.once('close', () => resolve()));
    const bothClosed = Promise.all([closed(idling), closed(selected)]);
    void idling.idle().catch(() => undefined);
    await new Promise((r) => setTimeout(r, 200));
    await rest(t, 'DELETE', `/account/app-passwords/${doomed.id}`, { key: a.apiKey });
    await bothClosed;
    expect(other.usable).toBe(true);
    const st = await other.status('INBOX', { messages: true });
    expect(st && st.messages).toBe(0);
    await other.logout();
  });
});

describe('more than one process', () => {
  it('IDLE on one process hears of mail received by another within a second (it follows the event stream)', async () => {
    const t2 = await startTestServer({ mail: true, sameStoreAs: t });
    try {
      const a = await signupAccount(t, `multi-${tag()}@example.com`);
      const pw = (await appPassword(t, a)).password;
      const c = new ImapFlow({
        host: '127.0.0.1',
        port: t2.imapPort!,
        secure: true,
        tls: { rejectUnauthorized: false },
        auth: { user: a.primaryAddress, pass: pw },
        logger: false,
        disableAutoIdle: true,
      });
      await c.connect();
      await c.mailboxOpen('INBOX');
      const heard = new Promise<number>((resolve) => c.on('exists', () => resolve(Date.now())));
      void c.idle();
      await new Promise((r) => setTimeout(r, 200));
      const subject = `across processes ${tag()}`;
      // Received by the first process's MX; the session is on the second process.
      await deliver(t, [a.primaryAddress], multipartMessage({ from: 'x@outside.test', to: a.primaryAddress, subject, text: 'hello' }));
      const at = await heard;
      const event = (await eventsOf(t, a.apiKey, 'mail.received')).find((e) => e.data.message.subject === subject)!;
      expect(at - new Date(event.created_at).getTime()).toBeLessThan(1000);
      await c.logout();
    } finally {
      await t2.stop();
    }
  });
});

describe('folders follow mail with no client connected', () => {
  it('an account with an app-password has its mail folded in as it arrives; one without is left alone until a client logs in', async () => {
    const mark = tag();
    const user = await signupAccount(t, `follow-${mark}@example.com`);
    const bystander = await signupAccount(t, `bystander-${mark}@example.com`);
    const pw = (await appPassword(t, user)).password;
    const inboxEntries = async (accountId: string) => Number((await rows(t.db, inboxEntriesOf(accountId)))[0]!.n);
    for (let i = 1; i <= 3; i++) {
      await deliver(
        t,
        [user.primaryAddress],
        multipartMessage({ from: 'x@outside.test', to: user.primaryAddress, subject: `followed ${i} ${mark}`, text: 'f' }),
      );
    }
    await deliver(
      t,
      [bystander.primaryAddress],
      multipartMessage({ from: 'x@outside.test', to: bystander.primaryAddress, subject: `not followed ${mark}`, text: 'n' }),
    );
    // Nobody has logged in: the IMAP server folds the three messages itself.
    await waitFor('folded with no session', async () => (await inboxEntries(user.accountId)) === 3);
    await waitFor('the bystander received', async () => (await eventsOf(t, bystander.apiKey, 'mail.received')).length === 1);
    expect(await t.db.mailSyncState.findUnique({ where: { accountId: bystander.accountId } })).toBeNull();
    expect(await inboxEntries(bystander.accountId)).toBe(0);
    await withImap(t, user.primaryAddress, pw, async (c) => {
      expect(await subjects(c, 'INBOX')).toEqual([1, 2, 3].map((i) => `followed ${i} ${mark}`));
    });
  });
});

/**
 * A new account with a fold cursor at 0, written directly (no notification: the IMAP server of this test does not
 * follow the account), and readers of its cursor and its stream's head.
 */
async function accountWithCursor(name: string) {
  const acct = await signupAccount(t, `${name}-${tag()}@example.com`);
  await exec(t.db, k.insertInto('mail_sync_state').values({ account_id: acct.accountId, seq: sql.lit(0), updated_at: sql<Date>`now()` }));
  const cursor = async () => (await t.db.mailSyncState.findUniqueOrThrow({ where: { accountId: acct.accountId } })).seq;
  const chainSeq = async () => (await t.db.account.findUniqueOrThrow({ where: { id: acct.accountId } })).chainSeq;
  return { acct, cursor, chainSeq };
}

/**
 * Another fold holding an account's fold cursor (its row locked in a transaction) until release() is called;
 * then, before it commits, it runs andThen in its transaction. Resolves once the lock is held.
 */
async function holdCursor(accountId: string, andThen?: (tx: Tx) => Promise<unknown>) {
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let locked!: () => void;
  const isLocked = new Promise<void>((r) => (locked = r));
  const done = t.db.$transaction(async (tx) => {
    await rows(tx, k.selectFrom('mail_sync_state').select('seq').where('account_id', '=', accountId).forUpdate());
    locked();
    await held;
    await andThen?.(tx);
  });
  await isLocked;
  return { release, done };
}

describe('folds someone waits for', () => {
  it('move the cursor past events with nothing to fold in one update, and go on with the whole fold when another fold moved it meanwhile', async () => {
    const { acct, cursor, chainSeq } = await accountWithCursor('waited');
    // Signing up appended events, none of them mail: the cursor moves to the head and nothing is folded.
    expect(await syncMailboxes(t.svc, acct.accountId)).toBe(false);
    expect(await cursor()).toBe(await chainSeq());
    expect(await rows(t.db, k.selectFrom('mail_folders').select(sql.lit(1).as('one')).where('account_id', '=', acct.accountId))).toHaveLength(0);

    // More events with nothing to fold; another fold holds the cursor and moves it part of the way while this fold
    // waits for it: this fold must then go on to the head, not stop where the other one left the cursor.
    const before = await cursor();
    expect((await rest(t, 'POST', '/account/mcp/disable', { key: acct.apiKey, body: {} })).status).toBe(200);
    expect((await rest(t, 'POST', '/account/mcp/enable', { key: acct.apiKey, body: {} })).status).toBe(200);
    const head = await chainSeq();
    expect(head).toBeGreaterThan(before + 1);
    const holder = await holdCursor(acct.accountId, (tx) =>
      exec(
        tx,
        k
          .updateTable('mail_sync_state')
          .set({ seq: head - 1 })
          .where('account_id', '=', acct.accountId),
      ),
    );
    const waiting = syncMailboxes(t.svc, acct.accountId);
    // The waiting fold's update of the cursor blocks on the holder's lock; the holder then moves the cursor itself.
    await waitFor('the fold waits for the cursor', async () => {
      const [w] = await rows(
        t.db,
        sql<{ n: bigint }>`SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE '%mail_sync_state%'`,
      );
      return Number(w?.n ?? 0) > 0;
    });
    holder.release();
    await holder.done;
    expect(await waiting).toBe(false);
    expect(await cursor()).toBe(head);

    // A folded event beyond the cursor is folded, not passed over.
    const box = await t.db.box.findFirstOrThrow({ where: { accountId: acct.accountId, isPrimary: true } });
    const raw = Buffer.from(multipartMessage({ from: 'x@outside.test', to: box.address, subject: 'folded', text: 'f' }));
    await receiveMessage(t.svc, { raw, recipients: [{ kind: 'box', box }], mailFrom: 'x@outside.test', via: 'smtp' });
    expect(await syncMailboxes(t.svc, acct.accountId)).toBe(true);
    expect(await cursor()).toBe(await chainSeq());
    expect(Number((await rows(t.db, inboxEntriesOf(acct.accountId)))[0]!.n)).toBe(1);
  });
});

describe('background folds (an IMAP server following an account with no session open)', () => {
  it('move the cursor past events with nothing to fold, and give way to a fold already running instead of waiting for it', async () => {
    const { acct, cursor, chainSeq } = await accountWithCursor('background');
    // Signing up appended events, none of them mail: nothing is folded, the cursor moves to the head, no folder is made.
    expect(await syncMailboxes(t.svc, acct.accountId, { background: true })).toBe(false);
    expect(await cursor()).toBe(await chainSeq());
    expect(await rows(t.db, k.selectFrom('mail_folders').select(sql.lit(1).as('one')).where('account_id', '=', acct.accountId))).toHaveLength(0);

    const box = await t.db.box.findFirstOrThrow({ where: { accountId: acct.accountId, isPrimary: true } });
    const raw = Buffer.from(multipartMessage({ from: 'x@outside.test', to: box.address, subject: 'held back', text: 'h' }));
    await receiveMessage(t.svc, { raw, recipients: [{ kind: 'box', box }], mailFrom: 'x@outside.test', via: 'smtp' });
    // Another fold holds the cursor: a background fold returns at once without folding (a waiting one would hang here).
    const holder = await holdCursor(acct.accountId);
    try {
      expect(await syncMailboxes(t.svc, acct.accountId, { background: true })).toBe(false);
    } finally {
      holder.release();
      await holder.done;
    }
    expect(await cursor()).toBeLessThan(await chainSeq());
    expect(await syncMailboxes(t.svc, acct.accountId, { background: true })).toBe(true);
    expect(await cursor()).toBe(await chainSeq());
    const entries = await rows(t.db, inboxEntriesOf(acct.accountId));
    expect(Number(entries[0]!.n)).toBe(1);
  });
});
