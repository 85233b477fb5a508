/**
 * Backup and restore for real (docs/operator/backup.md). An instance with accounts, mail sent and received, events,
 * ledger entries, signed chain checkpoints, an IMAP app-password and a custom domain whose outbound mail is
 * DKIM-signed is backed up with `pnpm boxes backup` (tsx) while it keeps writing, with a passphrase; the archive
 * is restored by the compiled bundle (`node apps/server/dist/cli.mjs restore`) into a new database and a new data
 * dir, after the refusals (encrypted without a passphrase, a wrong one, a non-empty database) are seen to change
 * nothing. Then the bundle starts every app on the restored copy, and outside clients check it: the event chains
 * and the kept checkpoints verify (the server, and jose with the served key), message bodies decrypt over REST,
 * Python's imaplib logs in with the old app-password and fetches, the restored DNS server publishes the DKIM key
 * that mail signed before the backup verifies against (mailauth), and the mail certificate is the one clients
 * pinned.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promises as dnsPromises } from 'node:dns';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { compactVerify, importSPKI } from 'jose';
import { dkimVerify } from 'mailauth';
import pg from 'pg';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import {
  adminUrl,
  buildBundle,
  createTestDatabase,
  databaseUrlFor,
  deleteKeysWithPrefix,
  EPHEMERAL_PORTS,
  rest,
  signupAccount,
  spawnNode,
  startTestServer,
  waitFor,
  type ApiEvent,
  type TestAccount,
  type TestServer,
} from '@boxes/testing';
import { delegatedAccount } from './dns-helpers';
import { MailSink } from './mail-send-helpers';
import { execFileAsync, rawMessage, requireTool, sendRaw } from './mail-receive-helpers';

const root = path.resolve(import.meta.dirname, '../..');
const run = promisify(execFile);

let t: TestServer;
let sink: MailSink;
let work: string;
const cleanups: (() => Promise<unknown> | unknown)[] = [];

beforeAll(async () => {
  await requireTool('python3');
  sink = new MailSink();
  await sink.start();
  t = await startTestServer({ worker: true, mail: true, push: true, resolver: sink.resolver() });
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-backup-test-'));
}, 120_000);
afterAll(async () => {
  for (const c of cleanups.reverse()) await Promise.resolve(c()).catch(() => undefined);
  await t?.stop();
  await sink?.close();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

/** The operator CLI with the given environment (no BOXES_SECRET_KEY: the data dir holds the key); never throws. */
async function cli(runner: 'tsx' | 'bundle', args: string[], env: Record<string, string>, limitMs = 240_000): Promise<{ code: number; out: string }> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'BOXES_SECRET_KEY' && k !== 'BOXES_DATA_DIR'));
  const argv =
    runner === 'tsx'
      ? [path.join(root, 'node_modules/.bin/tsx'), [path.join(root, 'apps/server/src/cli.ts')]]
      : [process.execPath, [path.join(root, 'apps/server/dist/cli.mjs')]];
  try {
    const { stdout, stderr } = await run(argv[0] as string, [...(argv[1] as string[]), ...args], {
      cwd: root,
      env: { ...base, LOG_LEVEL: 'warn', ...env },
      timeout: limitMs,
      maxBuffer: 16 * 1024 * 1024,
    });
    return { code: 0, out: stdout + stderr };
  } catch (err) {
    const e = err as { code?: number | null; killed?: boolean; stdout?: string; stderr?: string };
    const out = (e.stdout ?? '') + (e.stderr ?? '');
    // Killed at the limit: a command that has answered must exit, so say so rather than report the signal's code.
    if (e.killed) return { code: -1, out: `${out}\n[the command did not exit within ${limitMs / 1000} s and was killed]` };
    if (typeof e.code !== 'number') throw err;
    return { code: e.code, out };
  }
}

async function allEvents(base: Pick<TestServer, 'apiBase'>, key: string): Promise<ApiEvent[]> {
  const out: ApiEvent[] = [];
  let since = '0';
  for (;;) {
    const r = await rest(base, 'GET', `/events?since=${since}&limit=500`, { key });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    out.push(...r.body.events);
    if (!r.body.has_more) return out;
    since = r.body.next_cursor;
  }
}

/** Relations in a database (0: empty), or null when it does not exist. */
async function relations(name: string): Promise<number | null> {
  const admin = new pg.Client({ connectionString: adminUrl() });
  await admin.connect();
  try {
    if (!(await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).rowCount) return null;
  } finally {
    await admin.end();
  }
  const c = new pg.Client({ connectionString: databaseUrlFor(name) });
  await c.connect();
  try {
    const r = await c.query(`SELECT count(*)::int AS n FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'`);
    return r.rows[0].n as number;
  } finally {
    await c.end();
  }
}

async function dropDatabase(name: string): Promise<void> {
  const admin = new pg.Client({ connectionString: adminUrl() });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  await admin.end();
}

/** imaplib over implicit TLS, trusting the pinned certificate: login, then every INBOX message's subject and one body. */
async function imapFetch(
  port: number,
  caFile: string,
  user: string,
  password: string,
  subject: string,
): Promise<{ login: string; uidvalidity: string; uids: string[]; subjects: string[]; body: string }> {
  const script = `
import imaplib, json, ssl, sys, email
port, ca, user, pw, want = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
ctx = ssl.create_default_context(cafile=ca)
M = imaplib.IMAP4_SSL('127.0.0.1', port, ssl_context=ctx)
out = {'login': M.login(user, pw)[0], 'subjects': [], 'body': ''}
M.select('INBOX', readonly=True)
out['uidvalidity'] = M.response('UIDVALIDITY')[1][0].decode()
typ, data = M.uid('SEARCH', None, 'ALL')
out['uids'] = [u.decode() for u in data[0].split()]
for uid in data[0].split():
    typ, msg = M.uid('FETCH', uid, '(BODY.PEEK[])')
    m = email.message_from_bytes(msg[0][1])
    out['subjects'].append(str(m['Subject']))
    if m['Subject'] == want:
        out['body'] = m.get_payload(decode=True).decode()
M.logout()
print(json.dumps(out))
`;
  const { stdout } = await execFileAsync('python3', ['-c', script, String(port), caFile, user, password, subject], { timeout: 60_000 });
  return JSON.parse(stdout);
}

it('an instance backed up while it runs is restored into a new database and data dir, and works there as before', async () => {
  // ---- The source instance: accounts, mail both ways, a custom domain, events, ledger, checkpoints, app-password.
  const a: TestAccount = await signupAccount(t, 'backup-owner@example.com');
  const zone = `restore-${randomBytes(3).toString('hex')}.example`;
  const b = await delegatedAccount(t, zone);
  const bAddress = (await rest(t, 'GET', '/account', { key: b.key })).body.primary_address as string;

  // Inbound through the MX, from outside.
  const inSubject = 'before the backup';
  const inText = `a body only the secret key opens ${randomBytes(6).toString('hex')}`;
  await sendRaw(
    t.smtpPort!,
    { from: 'friend@outside.test', to: [a.primaryAddress] },
    rawMessage(
      { From: 'friend@outside.test', To: a.primaryAddress, Subject: inSubject, 'Message-ID': `<${randomBytes(6).toString('hex')}@outside.test>` },
      inText,
    ),
  );
  const received = await waitFor('the inbound message', async () =>
    ((await rest(t, 'GET', '/messages?direction=received&limit=50', { key: a.apiKey })).body.messages as any[]).find((m) => m.subject === inSubject),
  );
  // Mail between the two accounts (sent and received on the instance), and out through the custom domain, DKIM-signed.
  const local = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: bAddress, subject: 'neighbourly', text: 'hello over the fence' } });
  expect(local.status, JSON.stringify(local.body)).toBe(200);
  const out = await rest(t, 'POST', '/messages/send', {
    key: b.key,
    body: { to: 'reader@outside.test', subject: 'signed before the backup', text: 'verify me later' },
  });
  expect(out.status, JSON.stringify(out.body)).toBe(200);
  const signed = await waitFor('the DKIM-signed outbound message', () => sink.to('reader@outside.test')[0]);
  await waitFor('the local message', async () =>
    ((await rest(t, 'GET', '/messages?direction=received', { key: b.key })).body.messages as any[]).find((m) => m.subject === 'neighbourly'),
  );
  // Ledger: the custom domain's hosting is billed by the billing cycle.
  await t.runtime.worker!.billing.cycle();
  expect(await t.db.ledgerEntry.count()).toBeGreaterThan(0);
  // The DKIM record as the source instance's DNS serves it.
  const dkimName = `boxes1._domainkey.${zone}`;
  const sourceDns = new dnsPromises.Resolver();
  sourceDns.setServers([`127.0.0.1:${t.dnsPort}`]);
  const dkimBefore = (await sourceDns.resolveTxt(dkimName)).map((r) => r.join(''));
  expect(dkimBefore[0]).toMatch(/^v=DKIM1; /);
  // An app-password, used once before the backup (its folders are folded then).
  const ap = await rest(t, 'POST', '/account/app-passwords', { key: a.apiKey, body: { label: 'mail client' } });
  expect(ap.status, JSON.stringify(ap.body)).toBe(200);
  const cert = await rest(t, 'GET', '/mail-clients/certificate', { key: a.apiKey });
  expect(cert.status, JSON.stringify(cert.body)).toBe(200);
  const caFile = path.join(work, 'mail-ca.pem');
  fs.writeFileSync(caFile, cert.body.certificate_pem);
  const imapBefore = await imapFetch(t.imapPort!, caFile, a.primaryAddress, ap.body.password, inSubject);
  expect(imapBefore).toMatchObject({ login: 'OK', body: expect.stringContaining(inText) });
  // Signed checkpoints: one on request (kept by the agent), and the audit job's; a message's audit bundle.
  const checkpoint = (await rest(t, 'POST', '/events/checkpoints', { key: a.apiKey })).body.checkpoint as string;
  expect(checkpoint).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
  await rest(t, 'POST', '/boxes', { key: b.key, body: { address: 'moved-head' } });
  expect((await t.runtime.worker!.billing.audit()).checkpoints).toBeGreaterThanOrEqual(1);
  const bundle = (await rest(t, 'GET', `/messages/${received.id}/audit`, { key: a.apiKey })).body.bundle as string;
  expect(bundle).toBeTruthy();
  const before = {
    aEvents: await allEvents(t, a.apiKey),
    bEvents: await allEvents(t, b.key),
    aBalance: (await rest(t, 'GET', '/account/credit/balance', { key: a.apiKey })).body,
    bBalance: (await rest(t, 'GET', '/account/credit/balance', { key: b.key })).body,
    bCheckpoints: (await rest(t, 'GET', '/events/checkpoints', { key: b.key })).body.checkpoints,
  };
  expect(before.bCheckpoints.length).toBeGreaterThan(0);

  // ---- Backup with `pnpm boxes backup` (tsx), the instance's key in its data dir, while an account keeps writing.
  const sourceData = path.join(work, 'source-data');
  fs.mkdirSync(sourceData, { mode: 0o700 });
  fs.writeFileSync(path.join(sourceData, 'secret-key'), t.svc.secretKey.toString('hex'), { mode: 0o600 });
  const passFile = path.join(work, 'passphrase');
  fs.writeFileSync(passFile, `${randomBytes(24).toString('base64')}\n`, { mode: 0o600 });
  const archive = path.join(work, 'instance.boxes-backup.tar');
  const busy = await signupAccount(t, 'busy@example.com');
  let writing = true;
  const writes = (async () => {
    let n = 0;
    while (writing) {
      await rest(t, 'POST', '/boxes', { key: busy.apiKey, body: { address: `busy${n++}` } });
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    return n;
  })();
  const backup = await cli('tsx', ['backup', archive, '--passphrase-file', passFile], { DATABASE_URL: t.config.databaseUrl, BOXES_DATA_DIR: sourceData });
  writing = false;
  expect(await writes).toBeGreaterThan(0);
  expect(backup.code, backup.out).toBe(0);
  expect(backup.out).toMatch(
    /secret key \(.*secret-key\) opens platform_settings mail_tls, platform_settings mqtt_ca, audit signing key ask_\w+, DKIM key of /,
  );
  expect(fs.statSync(archive).mode & 0o777).toBe(0o600);
  // The archive is a tar whose manifest is readable; the key and the mail are not in it in clear.
  const listing = (await run('tar', ['tf', archive])).stdout.trim().split('\n');
  expect(listing).toEqual(['manifest.json', 'keys.json.enc', 'database.dump.enc']);
  const manifest = JSON.parse((await run('tar', ['xOf', archive, 'manifest.json'])).stdout);
  const migrations = fs
    .readdirSync(path.join(root, 'prisma/migrations'))
    .filter((d) => fs.existsSync(path.join(root, 'prisma/migrations', d, 'migration.sql')));
  expect(manifest).toMatchObject({
    format: 'boxes-backup',
    format_version: 1,
    schema: { latest: migrations.sort().at(-1) },
    keys: { secret_key_source: 'file', files: [] },
    encryption: { kdf: 'scrypt', cipher: 'aes-256-gcm' },
  });
  expect(manifest.schema.migrations).toEqual(migrations.sort());
  const bytes = fs.readFileSync(archive);
  expect(bytes.includes(Buffer.from(t.svc.secretKey.toString('hex')))).toBe(false);
  expect(bytes.includes(Buffer.from(a.primaryAddress))).toBe(false);

  // ---- Restore with the compiled bundle, into a database that does not exist yet and an empty data dir.
  await buildBundle();
  const targetName = `boxes_test_${inject('boxesRunId')}_restored_${randomBytes(4).toString('hex')}`;
  cleanups.push(() => dropDatabase(targetName));
  const targetData = path.join(work, 'restored-data');
  const target = { DATABASE_URL: databaseUrlFor(targetName), BOXES_DATA_DIR: targetData };

  // Refusals change nothing: no passphrase, a wrong one, then a database that is not empty.
  const noPass = await cli('bundle', ['restore', archive], target);
  expect(noPass.code, noPass.out).toBe(1);
  expect(noPass.out).toContain('the archive is encrypted: give its passphrase with --passphrase-file');
  const wrongFile = path.join(work, 'wrong');
  fs.writeFileSync(wrongFile, 'not the passphrase at all\n');
  const wrong = await cli('bundle', ['restore', archive, '--passphrase-file', wrongFile], target);
  expect(wrong.code, wrong.out).toBe(1);
  expect(wrong.out).toMatch(/keys\.json\.enc does not open: a wrong passphrase, or the archive was altered/);
  expect(await relations(targetName)).toBeNull();
  expect(fs.existsSync(targetData)).toBe(false);
  const occupied = await createTestDatabase();
  cleanups.push(() => occupied.drop());
  const occupiedName = new URL(occupied.url).pathname.slice(1);
  const tablesBefore = await relations(occupiedName);
  const refused = await cli('bundle', ['restore', archive, '--passphrase-file', passFile], { DATABASE_URL: occupied.url, BOXES_DATA_DIR: targetData });
  expect(refused.code, refused.out).toBe(1);
  expect(refused.out).toMatch(/database \S+ is not empty \(\d+ relations\): restore into a new, empty database, or --force/);
  expect(await relations(occupiedName)).toBe(tablesBefore);
  expect(fs.existsSync(path.join(targetData, 'secret-key'))).toBe(false);
  // --check reads it whole and touches nothing.
  const check = await cli('bundle', ['restore', archive, '--check', '--passphrase-file', passFile], target);
  expect(check.code, check.out).toBe(0);
  expect(check.out).toContain('the archive is whole');
  expect(await relations(targetName)).toBeNull();

  const restore = await cli('bundle', ['restore', archive, '--passphrase-file', passFile], target);
  expect(restore.code, restore.out).toBe(0);
  // Same schema level: nothing to migrate.
  expect(restore.out).not.toContain('applied');
  expect(restore.out).toMatch(/the backup's secret key opens the restored platform_settings mail_tls/);
  expect(fs.readFileSync(path.join(targetData, 'secret-key'), 'utf8')).toBe(t.svc.secretKey.toString('hex'));
  expect(fs.statSync(path.join(targetData, 'secret-key')).mode & 0o777).toBe(0o600);
  // A second restore into the now filled database is refused.
  const again = await cli('bundle', ['restore', archive, '--passphrase-file', passFile], target);
  expect(again.code, again.out).toBe(1);
  expect(again.out).toContain('is not empty');

  // ---- The bundle starts every app on the restored copy (its own Redis prefix: an empty Redis).
  const prefix = `boxes-restored-${randomBytes(4).toString('hex')}`;
  cleanups.push(() => deleteKeysWithPrefix(t.config.redisUrl, prefix));
  // The restored data directory's secret key, not one of the test's environment.
  const restored = spawnNode([path.join(root, 'apps/server/dist/cli.mjs'), 'start'], {
    BOXES_SECRET_KEY: undefined,
    ...target,
    ...EPHEMERAL_PORTS,
    BOXES_SINGLE_PROCESS: '1',
    REDIS_PREFIX: prefix,
    LOG_LEVEL: 'warn',
    SIGNUP_RATE_LIMIT_PER_HOUR: '0',
    KEY_RATE_LIMIT_PER_MINUTE: '0',
  });
  const { child, exited } = restored;
  cleanups.push(async () => {
    if (child.exitCode === null) {
      child.kill('SIGTERM');
      await exited;
    }
  });
  const url = await waitFor('the restored instance to start', () => /Listening on\s+(\S+)/.exec(restored.out())?.[1], 90_000);
  const port = (name: string) => Number(new RegExp(`${name}:\\s+(?:udp\\+tcp )?[\\d.]+:(\\d+)`).exec(restored.out())?.[1]);
  const r = { apiBase: `${url}/api/v1` };

  // Event chains verify, and hold what they held.
  for (const [key, events] of [
    [a.apiKey, before.aEvents],
    [b.key, before.bEvents],
  ] as const) {
    const v = await rest(r, 'GET', '/events/verify', { key });
    expect(v.status, JSON.stringify(v.body)).toBe(200);
    expect(v.body).toMatchObject({ ok: true, anomalies: [] });
    const now = await allEvents(r, key);
    expect(now.slice(0, events.length)).toEqual(events);
  }
  // The account written during the backup: its chain verifies at whatever instant the snapshot caught it.
  expect((await rest(r, 'GET', '/events/verify', { key: busy.apiKey })).body).toMatchObject({ ok: true });

  // Signed checkpoints verify: the kept one on the server, and offline with jose and the served public key.
  const kept = await rest(r, 'POST', '/events/checkpoints/verify', { key: a.apiKey, body: { checkpoint } });
  expect(kept.body).toMatchObject({ ok: true, signature_valid: true });
  const pk = (await (await fetch(`${r.apiBase}/audit/public-key`)).json()) as { public_key_pem: string };
  const spki = await importSPKI(pk.public_key_pem, 'EdDSA');
  const payload = JSON.parse(new TextDecoder().decode((await compactVerify(checkpoint, spki)).payload));
  expect(payload).toMatchObject({ typ: 'boxes.chain_checkpoint', account_id: a.accountId });
  expect(before.aEvents.find((e) => e.seq === payload.seq)?._chain.hash).toBe(payload.hash);
  const jobCheckpoints = (await rest(r, 'GET', '/events/checkpoints', { key: b.key })).body.checkpoints;
  // The same signed checkpoints (the key's URL names the instance's address, which moved).
  const signedPart = ({ public_key_url: _, ...c }: Record<string, unknown>) => c;
  expect(jobCheckpoints.map(signedPart)).toEqual(before.bCheckpoints.map(signedPart));
  for (const c of jobCheckpoints) {
    const v = await rest(r, 'POST', '/events/checkpoints/verify', { key: b.key, body: { checkpoint: c.checkpoint } });
    expect(v.body, JSON.stringify(c)).toMatchObject({ ok: true, signature_valid: true });
  }
  await compactVerify(bundle, spki);

  // Stored mail decrypts: the body over REST.
  const read = await rest(r, 'GET', `/messages/${received.id}`, { key: a.apiKey });
  expect(read.status, JSON.stringify(read.body)).toBe(200);
  expect(read.body.body.text).toContain(inText);
  // The ledger: the same balances.
  expect((await rest(r, 'GET', '/account/credit/balance', { key: a.apiKey })).body).toEqual(before.aBalance);
  expect((await rest(r, 'GET', '/account/credit/balance', { key: b.key })).body).toEqual(before.bBalance);

  // The mail certificate clients pinned is the one served; imaplib logs in with the old app-password and fetches.
  const certAfter = await rest(r, 'GET', '/mail-clients/certificate', { key: a.apiKey });
  expect(certAfter.body.sha256).toBe(cert.body.sha256);
  const imapAfter = await imapFetch(port('IMAP'), caFile, a.primaryAddress, ap.body.password, inSubject);
  expect(imapAfter.login).toBe('OK');
  expect(imapAfter.subjects).toEqual(imapBefore.subjects);
  // The same UIDs under the same UIDVALIDITY: a client's cache stays valid.
  expect(imapAfter.uidvalidity).toBe(imapBefore.uidvalidity);
  expect(imapAfter.uids).toEqual(imapBefore.uids);
  expect(imapAfter.body).toContain(inText);

  // The DNS the restored instance serves publishes the same DKIM key, and mail signed before the backup verifies.
  const restoredDns = new dnsPromises.Resolver();
  restoredDns.setServers([`127.0.0.1:${port('DNS')}`]);
  expect((await restoredDns.resolveTxt(dkimName)).map((x) => x.join(''))).toEqual(dkimBefore);
  const dkim = await dkimVerify(signed.raw, {
    resolver: async (name: string, type: string) => {
      if (type !== 'TXT') throw Object.assign(new Error('not asked'), { code: 'ENOTFOUND' });
      return restoredDns.resolveTxt(name);
    },
  });
  expect(dkim.results[0]?.signingDomain).toBe(zone);
  expect(dkim.results[0]?.status.result).toBe('pass');

  // It goes on working: new mail through the restored MX is stored and read.
  await sendRaw(
    port('MX \\(SMTP\\)'),
    { from: 'friend@outside.test', to: [a.primaryAddress] },
    rawMessage({ From: 'friend@outside.test', To: a.primaryAddress, Subject: 'after the restore' }, 'still here'),
  );
  await waitFor('mail received after the restore', async () =>
    ((await rest(r, 'GET', '/messages?direction=received', { key: a.apiKey })).body.messages as any[]).find((m) => m.subject === 'after the restore'),
  );
  child.kill('SIGTERM');
  expect(await exited, restored.out()).toBe(0);
}, 600_000);

it('a backup of an older schema is migrated when restored (--force over a database that is not empty); one of a newer schema is refused', async () => {
  // A database at the schema of one migration ago, with its own key in its own data dir.
  const all = fs
    .readdirSync(path.join(root, 'prisma/migrations'))
    .filter((d) => fs.existsSync(path.join(root, 'prisma/migrations', d, 'migration.sql')))
    .sort();
  const olderDir = path.join(work, 'older-migrations');
  for (const m of all.slice(0, -1)) fs.cpSync(path.join(root, 'prisma/migrations', m), path.join(olderDir, m), { recursive: true });
  const source = `boxes_test_${inject('boxesRunId')}_older_${randomBytes(4).toString('hex')}`;
  cleanups.push(() => dropDatabase(source));
  const { ensureDatabase, migrate } = await import('@boxes/db');
  await ensureDatabase(databaseUrlFor(source));
  expect((await migrate(databaseUrlFor(source), olderDir)).applied).toEqual(all.slice(0, -1));
  const data = path.join(work, 'older-data');
  fs.mkdirSync(data, { mode: 0o700 });
  fs.writeFileSync(path.join(data, 'secret-key'), randomBytes(32).toString('hex'), { mode: 0o600 });
  // A certificate and key of the operator's own, and a CA for webhooks: their files go into the archive.
  const caFile = path.join(work, 'webhook-ca.pem');
  fs.writeFileSync(caFile, `-----BEGIN CERTIFICATE-----\n${randomBytes(60).toString('base64')}\n-----END CERTIFICATE-----\n`, { mode: 0o644 });
  const certFile = path.join(work, 'own-cert.pem');
  const keyFile = path.join(work, 'own-key.pem');
  fs.writeFileSync(certFile, `-----BEGIN CERTIFICATE-----\n${randomBytes(60).toString('base64')}\n-----END CERTIFICATE-----\n`, { mode: 0o644 });
  fs.writeFileSync(keyFile, `-----BEGIN PRIVATE KEY-----\n${randomBytes(60).toString('base64')}\n-----END PRIVATE KEY-----\n`, { mode: 0o600 });
  const archive = path.join(work, 'older.tar');
  const backup = await cli('tsx', ['backup', archive], {
    DATABASE_URL: databaseUrlFor(source),
    BOXES_DATA_DIR: data,
    SMTP_TLS_CERT_FILE: certFile,
    SMTP_TLS_KEY_FILE: keyFile,
    WEBHOOK_CA_FILE: caFile,
  });
  expect(backup.code, backup.out).toBe(0);
  // Without a passphrase the archive holds the key in clear: written 0600, and the operator is warned.
  expect(backup.out).toContain(`WARNING: ${archive} holds the instance's secret key in clear`);
  expect(fs.statSync(archive).mode & 0o777).toBe(0o600);
  // A backup never replaces a file.
  const twice = await cli('tsx', ['backup', archive], { DATABASE_URL: databaseUrlFor(source), BOXES_DATA_DIR: data });
  expect(twice.code, twice.out).toBe(1);
  expect(twice.out).toContain('exists: name a new file');

  // Restored over a database that is not empty, with --force: dropped, created again, restored, then migrated.
  const occupied = await createTestDatabase();
  cleanups.push(() => occupied.drop());
  const marker = new pg.Client({ connectionString: occupied.url });
  await marker.connect();
  await marker.query('CREATE TABLE leftover_marker (x int)');
  await marker.end();
  const restoredData = path.join(work, 'older-restored');
  // A BOXES_SECRET_KEY here that is not the backup's: refused, even with --force.
  const otherKey = await cli('tsx', ['restore', archive, '--force'], {
    DATABASE_URL: occupied.url,
    BOXES_DATA_DIR: restoredData,
    BOXES_SECRET_KEY: '0f'.repeat(32),
  });
  expect(otherKey.code, otherKey.out).toBe(1);
  expect(otherKey.out).toContain("BOXES_SECRET_KEY in this environment is not the backup's key");
  expect(await relations(new URL(occupied.url).pathname.slice(1))).toBeGreaterThan(0);
  // The target names where its webhook CA goes, not the mail certificate: that goes into the data dir, with the settings to add.
  const targetCa = path.join(work, 'target', 'webhook-ca.pem');
  const restore = await cli('tsx', ['restore', archive, '--force'], { DATABASE_URL: occupied.url, BOXES_DATA_DIR: restoredData, WEBHOOK_CA_FILE: targetCa });
  expect(restore.code, restore.out).toBe(0);
  expect(fs.readFileSync(targetCa, 'utf8')).toBe(fs.readFileSync(caFile, 'utf8'));
  expect(fs.statSync(targetCa).mode & 0o777).toBe(0o644);
  const restoredCert = path.join(restoredData, 'restored', 'smtp-tls-cert-file-own-cert.pem');
  const restoredKey = path.join(restoredData, 'restored', 'smtp-tls-key-file-own-key.pem');
  expect(fs.readFileSync(restoredCert, 'utf8')).toBe(fs.readFileSync(certFile, 'utf8'));
  expect(fs.readFileSync(restoredKey, 'utf8')).toBe(fs.readFileSync(keyFile, 'utf8'));
  expect(fs.statSync(restoredKey).mode & 0o777).toBe(0o600);
  expect(restore.out).toContain(`to do: set SMTP_TLS_CERT_FILE=${restoredCert}`);
  expect(restore.out).toContain(`to do: set SMTP_TLS_KEY_FILE=${restoredKey}`);
  expect(restore.out).toContain('--force: dropping database');
  expect(restore.out).toContain(`applied 1 migration(s) (${all.at(-1)})`);
  const c = new pg.Client({ connectionString: occupied.url });
  await c.connect();
  try {
    const applied = await c.query(`SELECT migration_name FROM "_prisma_migrations" WHERE finished_at IS NOT NULL ORDER BY migration_name`);
    expect(applied.rows.map((x) => x.migration_name)).toEqual(all);
    // What was in the database before is gone.
    expect((await c.query(`SELECT to_regclass('leftover_marker') IS NULL AS gone`)).rows[0].gone).toBe(true);
  } finally {
    await c.end();
  }
  expect(fs.readFileSync(path.join(restoredData, 'secret-key'), 'utf8')).toBe(fs.readFileSync(path.join(data, 'secret-key'), 'utf8'));

  // The same archive with a manifest naming a migration this Boxes does not have: refused before anything is done.
  const unpacked = path.join(work, 'unpacked');
  fs.mkdirSync(unpacked);
  await run('tar', ['xf', archive, '-C', unpacked]);
  const manifest = JSON.parse(fs.readFileSync(path.join(unpacked, 'manifest.json'), 'utf8'));
  manifest.schema.migrations.push('29991231000000_from_the_future');
  fs.writeFileSync(path.join(unpacked, 'manifest.json'), JSON.stringify(manifest));
  const future = path.join(work, 'future.tar');
  await run('tar', ['cf', future, '-C', unpacked, 'manifest.json', 'keys.json', 'database.dump']);
  const fresh = `boxes_test_${inject('boxesRunId')}_future_${randomBytes(4).toString('hex')}`;
  cleanups.push(() => dropDatabase(fresh));
  const refused = await cli('tsx', ['restore', future], { DATABASE_URL: databaseUrlFor(fresh), BOXES_DATA_DIR: path.join(work, 'future-data') });
  expect(refused.code, refused.out).toBe(1);
  expect(refused.out).toContain("the backup's schema is newer than this Boxes (1 migration(s) it does not have, e.g. 29991231000000_from_the_future)");
  expect(await relations(fresh)).toBeNull();
  // A damaged member is found by its checksum.
  const dump = fs.readFileSync(path.join(unpacked, 'database.dump'));
  dump[dump.length >> 1] = dump[dump.length >> 1]! ^ 1;
  fs.writeFileSync(path.join(unpacked, 'database.dump'), dump);
  fs.writeFileSync(path.join(unpacked, 'manifest.json'), JSON.stringify({ ...manifest, schema: { ...manifest.schema, migrations: all.slice(0, -1) } }));
  const damaged = path.join(work, 'damaged.tar');
  await run('tar', ['cf', damaged, '-C', unpacked, 'manifest.json', 'keys.json', 'database.dump']);
  // It must also exit once it has said so (a bounded wait: reading a few MB and refusing takes seconds, even on a busy machine).
  const bad = await cli(
    'tsx',
    ['restore', damaged, '--check'],
    { DATABASE_URL: databaseUrlFor(fresh), BOXES_DATA_DIR: path.join(work, 'future-data') },
    90_000,
  );
  expect(bad.code, bad.out).toBe(1);
  expect(bad.out).toContain("database.dump is damaged: its SHA-256 is not the manifest's");
}, 300_000);
