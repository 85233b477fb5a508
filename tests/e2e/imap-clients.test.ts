/**
 * IMAP with clients nobody here wrote, each used the way it normally is: Python's imaplib (list, read, flag,
 * copy, expunge, IDLE), curl imaps:// (list, search, fetch, store), mbsync (Debian isync) syncing a box to a
 * Maildir both ways (flags and deletions go back, new mail comes down), neomutt driven by its own key bindings
 * under a pseudo-terminal (read, flag, save to another folder), and fetchmail collecting new mail.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { appPassword, deliver, execFileAsync, mbsyncConfig, multipartMessage, requireTool, waitFor } from './imap-helpers';

let t: TestServer;
let dir: string;

const tag = () => Math.random().toString(36).slice(2, 8);

/** An account with n messages in its INBOX (subjects `${prefix} 1..n`) and an app-password. */
async function mailbox(prefix: string, n: number): Promise<{ a: TestAccount; password: string; ids: string[] }> {
  const a = await signupAccount(t, `${prefix.replace(/\W/g, '')}-${tag()}@example.com`);
  const password = (await appPassword(t, a)).password;
  for (let i = 1; i <= n; i++)
    await deliver(
      t,
      [a.primaryAddress],
      multipartMessage({ from: 'sender@outside.test', to: a.primaryAddress, subject: `${prefix} ${i}`, text: `body ${i} of ${prefix}` }),
    );
  const ids = await waitFor(`${n} messages`, async () => {
    const r = await rest(t, 'GET', '/messages?direction=received&limit=200', { key: a.apiKey });
    const list = r.body.messages as { id: string; subject: string }[];
    return list.length === n ? list.reverse().map((m) => m.id) : null;
  });
  return { a, password, ids };
}

async function message(a: TestAccount, id: string) {
  return (await rest(t, 'GET', `/messages/${id}`, { key: a.apiKey })).body;
}

async function python(script: string, args: string[]): Promise<any> {
  const { stdout } = await execFileAsync('python3', ['-c', script, ...args], { timeout: 30_000 });
  return JSON.parse(stdout);
}

beforeAll(async () => {
  t = await startTestServer({ mail: true, worker: true });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-imap-clients-'));
});
afterAll(async () => {
  await t?.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe("Python's imaplib", () => {
  it('lists, reads, flags, copies, deletes and expunges, and IDLEs', async () => {
    const { a, password, ids } = await mailbox('imaplib', 3);
    const script = `
import imaplib, json, ssl, sys
port, user, pw = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
M = imaplib.IMAP4_SSL('127.0.0.1', port, ssl_context=ctx)
out = {}
out['login'] = M.login(user, pw)[0]
out['list'] = [l.decode() for l in M.list()[1]]
typ, data = M.select('INBOX')
out['exists'] = int(data[0])
out['search'] = M.search(None, 'ALL')[1][0].decode()
out['subject_search'] = M.search(None, 'SUBJECT', '"imaplib 2"')[1][0].decode()
typ, data = M.fetch('1', '(RFC822)')
out['rfc822_starts'] = data[0][1].decode()[:13]
out['seen_after_fetch'] = M.fetch('1', '(FLAGS)')[1][0].decode()
out['store'] = M.store('2', '+FLAGS', '(\\\\Flagged \\\\Answered)')[1][0].decode()
out['copy'] = M.copy('3', 'Archive')[0]
out['delete'] = M.store('3', '+FLAGS', '(\\\\Deleted)')[0]
out['expunge'] = [x.decode() for x in M.expunge()[1] if x]
out['uids'] = M.uid('SEARCH', None, 'ALL')[1][0].decode()
out['archive'] = M.select('Archive')[1][0].decode()
M.select('INBOX')
tag = M._new_tag().decode()
M.send(('%s IDLE\\r\\n' % tag).encode())
out['idle'] = M.readline().decode().strip()
sys.stdout.write(json.dumps(out) + '\\n'); sys.stdout.flush()
out2 = {'heard': M.readline().decode().strip()}
M.send(b'DONE\\r\\n')
out2['done'] = M.readline().decode().strip()
M.logout()
sys.stdout.write(json.dumps(out2) + '\\n')
`;
    // IDLE needs new mail while the script waits: deliver once its first line of output says it is idling.
    const child = execFileAsync('python3', ['-c', script, String(t.imapPort), a.primaryAddress, password], { timeout: 30_000 });
    let seen = '';
    child.child.stdout!.on('data', (d: Buffer) => {
      seen += d.toString();
    });
    await waitFor('imaplib idling', () => seen.includes('"idle"'));
    await deliver(t, [a.primaryAddress], multipartMessage({ from: 'late@outside.test', to: a.primaryAddress, subject: 'imaplib late', text: 'late' }));
    const { stdout } = await child;
    const [out, out2] = stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(out.login).toBe('OK');
    expect(out.list).toEqual(
      expect.arrayContaining(['(\\HasNoChildren) "/" "INBOX"', '(\\HasNoChildren \\Sent) "/" "Sent"', '(\\HasNoChildren \\Archive) "/" "Archive"']),
    );
    expect(out.exists).toBe(3);
    expect(out.search).toBe('1 2 3');
    expect(out.subject_search).toBe('2');
    // The MX's verdict leads the stored message (Received-SPF, then Authentication-Results).
    expect(out.rfc822_starts).toBe('Received-SPF:');
    expect(out.seen_after_fetch).toMatch(/FLAGS \(\\Seen\)/);
    expect(out.store).toMatch(/FLAGS \(\\Answered \\Flagged\)/);
    expect(out.copy).toBe('OK');
    expect(out.expunge).toEqual(['3']);
    expect(out.archive).toBe('1');
    expect(out.idle).toMatch(/^\+/);
    expect(out2.heard).toBe('* 3 EXISTS');
    expect(out2.done).toMatch(/OK IDLE/);
    // What imaplib did shows over REST: read, flagged and answered; the copy in Archive keeps the message.
    expect((await message(a, ids[0]!)).flags).toEqual(['\\Seen']);
    expect((await message(a, ids[1]!)).flags).toEqual(['\\Answered', '\\Flagged']);
    expect((await message(a, ids[2]!)).body_state).toBe('available');
  });
});

describe('curl imaps://', () => {
  it('lists folders, searches, fetches a message by UID and stores a flag', async () => {
    await requireTool('curl');
    const { a, password, ids } = await mailbox('curl', 2);
    const base = `imaps://127.0.0.1:${t.imapPort}`;
    const curl = async (url: string, extra: string[] = []) =>
      (await execFileAsync('curl', ['--silent', '--show-error', '--insecure', '--user', `${a.primaryAddress}:${password}`, ...extra, url], { timeout: 20_000 }))
        .stdout;
    expect(await curl(`${base}/`)).toContain('* LIST (\\HasNoChildren \\Sent) "/" "Sent"');
    expect(await curl(`${base}/INBOX?SUBJECT%20%22curl%202%22`)).toBe('* SEARCH 2\r\n');
    const fetched = await curl(`${base}/INBOX;UID=1`);
    expect(fetched).toContain('Subject: curl 1');
    expect(fetched).toContain('body 1 of curl');
    await curl(`${base}/INBOX`, ['--request', 'UID STORE 2 +FLAGS (\\Flagged)']);
    expect((await message(a, ids[1]!)).flags).toEqual(['\\Flagged']);
  });
});

describe('mbsync (isync)', () => {
  it('syncs a box to a Maildir, sends flags and deletions back, and brings new mail down', async () => {
    await requireTool('mbsync');
    const { a, password, ids } = await mailbox('mbsync', 4);
    await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: 'someone@remote.invalid', subject: 'mbsync sent', text: 'sent one' } });
    const cert = await new Promise<string>((resolve, reject) => {
      const s = tls.connect({ host: '127.0.0.1', port: t.imapPort!, rejectUnauthorized: false }, () => {
        const der = s.getPeerCertificate().raw;
        s.end();
        resolve(`-----BEGIN CERTIFICATE-----\n${der.toString('base64').replace(/.{64}/g, '$&\n')}\n-----END CERTIFICATE-----\n`);
      });
      s.on('error', reject);
    });
    const root = path.join(dir, 'mbsync');
    fs.mkdirSync(root);
    fs.writeFileSync(path.join(root, 'cert.pem'), cert);
    const maildir = path.join(root, 'mail');
    fs.mkdirSync(maildir);
    const rc = path.join(root, 'mbsyncrc');
    fs.writeFileSync(
      rc,
      mbsyncConfig({ port: t.imapPort!, user: a.primaryAddress, password, certificate: path.join(root, 'cert.pem'), maildir, expunge: true }),
    );
    const mbsync = async () => {
      const r = await execFileAsync('mbsync', ['-V', '-c', rc, '-a'], { timeout: 60_000 });
      if (process.env.SHOW_MBSYNC) console.log(r.stdout, r.stderr);
      return r.stdout;
    };
    const files = (folder: string) =>
      ['cur', 'new'].flatMap((d) =>
        fs.existsSync(path.join(maildir, folder, d)) ? fs.readdirSync(path.join(maildir, folder, d)).map((f) => path.join(maildir, folder, d, f)) : [],
      );

    // mbsync stores messages with LF line ends.
    const subjectOf = (file: string) => /^Subject: (.*?)\r?$/m.exec(fs.readFileSync(file, 'utf8'))![1];
    await mbsync();
    expect(files('INBOX')).toHaveLength(4);
    expect(files('Sent')).toHaveLength(1);
    expect(fs.readFileSync(files('Sent')[0]!, 'utf8')).toContain('Subject: mbsync sent');
    for (const folder of ['Archive', 'Drafts', 'Junk', 'Trash']) expect(fs.existsSync(path.join(maildir, folder))).toBe(true);

    expect(files('INBOX').map(subjectOf).sort()).toEqual(['mbsync 1', 'mbsync 2', 'mbsync 3', 'mbsync 4']);

    // Locally: flag "mbsync 1" (F), mark "mbsync 2" read (S), delete "mbsync 3" (T, expunged by the sync).
    const bySubject = (s: string) => files('INBOX').find((f) => subjectOf(f) === s)!;
    const setFlags = (file: string, flags: string) => {
      const base = path.basename(file).split(':2,')[0]!;
      fs.renameSync(file, path.join(maildir, 'INBOX', 'cur', `${base}:2,${flags}`));
    };
    setFlags(bySubject('mbsync 1'), 'F');
    setFlags(bySubject('mbsync 2'), 'S');
    setFlags(bySubject('mbsync 3'), 'T');
    // Meanwhile a new message arrives on the server.
    await deliver(t, [a.primaryAddress], multipartMessage({ from: 'sender@outside.test', to: a.primaryAddress, subject: 'mbsync 5', text: 'fifth' }));
    await waitFor('fifth message', async () => (await rest(t, 'GET', '/messages?direction=received', { key: a.apiKey })).body.messages.length === 5);
    await mbsync();

    expect((await message(a, ids[0]!)).flags).toEqual(['\\Flagged']);
    expect((await message(a, ids[1]!)).flags).toEqual(['\\Seen']);
    expect((await message(a, ids[2]!)).body_state).toBe('reclaimed');
    expect((await message(a, ids[3]!)).flags).toEqual([]);
    expect(files('INBOX').map(subjectOf).sort()).toEqual(['mbsync 1', 'mbsync 2', 'mbsync 4', 'mbsync 5']);
    // A third run has nothing to do.
    await mbsync();
    expect(files('INBOX')).toHaveLength(4);
  });
});

describe('neomutt', () => {
  it('reads, flags and saves to another folder, driven by its own key bindings under a pseudo-terminal', async () => {
    await requireTool('neomutt');
    await requireTool('script');
    const { a, password, ids } = await mailbox('neomutt', 2);
    const root = path.join(dir, 'neomutt');
    fs.mkdirSync(root);
    const cert = await new Promise<string>((resolve, reject) => {
      const s = tls.connect({ host: '127.0.0.1', port: t.imapPort!, rejectUnauthorized: false }, () => {
        const der = s.getPeerCertificate().raw;
        s.end();
        resolve(`-----BEGIN CERTIFICATE-----\n${der.toString('base64').replace(/.{64}/g, '$&\n')}\n-----END CERTIFICATE-----\n`);
      });
      s.on('error', reject);
    });
    fs.writeFileSync(path.join(root, 'cert.pem'), cert);
    fs.writeFileSync(
      path.join(root, 'muttrc'),
      [
        `set folder="imaps://${encodeURIComponent(a.primaryAddress)}@127.0.0.1:${t.imapPort}/"`,
        'set spoolfile="+INBOX"',
        `set imap_pass="${password}"`,
        `set certificate_file=${root}/cert.pem`,
        'set ssl_verify_host=no',
        'set mail_check=0',
        'set header_cache=""',
        'set sort=date',
        'set confirmappend=no',
        'set quit=yes',
        'set move=no',
        'set delete=yes',
        'set resolve=no',
        'set mark_old=no',
        'set pager_stop=yes',
        '',
      ].join('\n'),
    );
    // Message 1 (oldest first): flag it and read it. Message 2: save it to Archive (neomutt deletes the original).
    const keys = '<flag-message><display-message><exit><next-undeleted><save-message><kill-line>=Archive<enter><sync-mailbox><quit>';
    await execFileAsync('script', ['-qfec', `neomutt -n -F ${root}/muttrc -e 'push "${keys}"'`, '/dev/null'], {
      timeout: 20_000,
      env: { ...process.env, TERM: 'xterm', COLUMNS: '120', LINES: '40', HOME: root },
    }).catch((err: { stdout?: string }) => {
      // The last screen says where it stopped.
      throw new Error(`neomutt did not finish: ${(err.stdout ?? '').replace(/\x1b\[[0-9;?]*[A-Za-z]/g, ' ').slice(-1500)}`);
    });
    expect((await message(a, ids[0]!)).flags).toEqual(['\\Seen', '\\Flagged']);
    const second = await message(a, ids[1]!);
    expect(second.body_state).toBe('available');
    const { ImapFlow } = await import('imapflow');
    const c = new ImapFlow({
      host: '127.0.0.1',
      port: t.imapPort!,
      secure: true,
      tls: { rejectUnauthorized: false },
      auth: { user: a.primaryAddress, pass: password },
      logger: false,
    });
    await c.connect();
    await c.mailboxOpen('INBOX');
    expect(await c.search({ subject: 'neomutt 2' })).toEqual([]);
    await c.mailboxOpen('Archive');
    expect(await c.search({ subject: 'neomutt 2' })).toHaveLength(1);
    await c.logout();
  });
});

describe('fetchmail', () => {
  it('collects the unread mail of a box and keeps it on the server, marked read', async () => {
    await requireTool('fetchmail');
    const { a, password, ids } = await mailbox('fetchmail', 2);
    const root = path.join(dir, 'fetchmail');
    fs.mkdirSync(root);
    const out = path.join(root, 'collected.mbox');
    const rc = path.join(root, 'fetchmailrc');
    fs.writeFileSync(
      rc,
      `poll 127.0.0.1 protocol IMAP port ${t.imapPort}\n  user "${a.primaryAddress}" password "${password}" is "nobody" here\n  ssl no sslcertck keep\n  mda "/bin/sh -c 'cat >> ${out}'"\n`,
      { mode: 0o600 },
    );
    // Exit status 1 would be "no mail": a failure here as any other.
    await execFileAsync('fetchmail', ['-f', rc, '--nosyslog', '-v', '-i', path.join(root, 'ids')], {
      timeout: 60_000,
      env: { ...process.env, HOME: root, FETCHMAILHOME: root },
    }).catch((err: { stdout?: string; stderr?: string }) => {
      throw new Error(`fetchmail failed: ${err.stdout ?? ''}${err.stderr ?? ''}`);
    });
    const collected = fs.readFileSync(out, 'utf8');
    expect(collected).toContain('Subject: fetchmail 1');
    expect(collected).toContain('Subject: fetchmail 2');
    for (const id of ids) expect((await message(a, id)).flags).toEqual(['\\Seen']);
  });
});
