/**
 * The certificate mail clients pin. Without SMTP_TLS_CERT_FILE the instance makes a self-signed certificate once
 * and keeps it: `boxes start server mx push` as its own process, stopped and started again, serves the same
 * certificate on IMAP, submission and the MX's STARTTLS (openssl s_client), clients that pinned the first one
 * (mbsync with it as CertificateFile, openssl verifying against it) connect after the restart, as does an MQTT
 * client provisioned before it (the broker's CA is kept too), and the start line and GET /mail-clients/certificate
 * give its SHA-256 fingerprint. With SMTP_TLS_CERT_FILE and
 * SMTP_TLS_KEY_FILE that certificate is served, and the endpoint says so.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generate } from 'selfsigned';
import { createTestDatabase, freePort, rest, signupAccount, startTestServer, waitFor } from '@boxes/testing';
import { mbsyncConfig, requireTool } from './imap-helpers';

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '../..');
let dir: string;

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-mail-tls-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** The certificate a server presents on 127.0.0.1:port (implicit TLS, or SMTP STARTTLS), as PEM. */
async function presented(port: number, starttls = false): Promise<string> {
  const { stdout } = await run(
    'bash',
    ['-c', `openssl s_client -connect 127.0.0.1:${port} ${starttls ? '-starttls smtp' : ''} </dev/null 2>/dev/null | openssl x509`],
    { timeout: 20_000 },
  );
  return stdout;
}

const fingerprint = (pem: string) => new X509Certificate(pem).fingerprint256;

/** Whether openssl, trusting only `pinned`, verifies the server at 127.0.0.1:port. */
async function verifiesPinned(port: number, pinned: string): Promise<string> {
  const { stdout } = await run(
    'bash',
    ['-c', `openssl s_client -connect 127.0.0.1:${port} -CAfile ${pinned} -verify_return_error -verify_ip 127.0.0.1 </dev/null 2>&1`],
    { timeout: 20_000 },
  );
  return stdout;
}

/** mbsync syncing a box's folders into a Maildir, trusting only the pinned certificate (CertificateFile). */
function mbsyncWith(port: number, pinned: string, user: string, password: string): () => Promise<{ code: number; out: string }> {
  const maildir = path.join(dir, 'maildir');
  fs.mkdirSync(maildir, { recursive: true });
  const rc = path.join(dir, 'mbsyncrc');
  fs.writeFileSync(rc, mbsyncConfig({ port, user, password, certificate: pinned, maildir }));
  return async () => {
    try {
      const r = await run('mbsync', ['-c', rc, '-a'], { timeout: 60_000 });
      return { code: 0, out: r.stdout + r.stderr };
    } catch (err) {
      const e = err as { code?: number; stdout?: string; stderr?: string };
      return { code: typeof e.code === 'number' ? e.code : 1, out: `${e.stdout ?? ''}${e.stderr ?? ''}` };
    }
  };
}

/** mosquitto_sub with a provisioned credential, as given: connects, subscribes and gives up after a second. */
function mosquittoWith(p: {
  mqtt_endpoint: string;
  ca_certificate: string;
  certificate: string;
  private_key: string;
  client_id: string;
  topic: string;
}): () => Promise<string> {
  const file = (name: string, pem: string) => {
    const f = path.join(dir, name);
    fs.writeFileSync(f, pem, { mode: 0o600 });
    return f;
  };
  const url = new URL(p.mqtt_endpoint);
  const args = [
    '-h',
    url.hostname,
    '-p',
    url.port,
    '--cafile',
    file('mqtt-ca.pem', p.ca_certificate),
    '--cert',
    file('mqtt-cert.pem', p.certificate),
    '--key',
    file('mqtt-key.pem', p.private_key),
  ];
  return async () => {
    // -W 1: no event is coming; it exits (non-zero) after a second, having printed the CONNACK with -d.
    const r = await run('mosquitto_sub', [...args, '-i', p.client_id, '-t', p.topic, '-C', '1', '-W', '1', '-d'], { timeout: 20_000 }).catch(
      (e: { stdout?: string; stderr?: string }) => e,
    );
    return `${r.stdout ?? ''}${r.stderr ?? ''}`;
  };
}

describe('the self-signed certificate', () => {
  let db: { url: string; drop: () => Promise<void> };
  let child: ChildProcess | null = null;
  let env: Record<string, string>;

  beforeAll(async () => {
    db = await createTestDatabase();
    env = {
      PORT: '0',
      DATABASE_URL: db.url,
      REDIS_PREFIX: `boxes-mail-tls-${Date.now()}`,
      BOXES_SECRET_KEY: 'cd'.repeat(32),
      LOG_LEVEL: 'error',
      SIGNUP_RATE_LIMIT_PER_HOUR: '0',
      SMTP_PORT: String(await freePort()),
      IMAP_PORT: String(await freePort()),
      SUBMISSION_PORT: String(await freePort()),
      MQTT_PORT: String(await freePort()),
    };
  });
  afterAll(async () => {
    child?.kill('SIGKILL');
    await db?.drop();
  });

  async function start(): Promise<{ url: string; line: string }> {
    const c = spawn(process.execPath, ['--import', 'tsx', path.join(root, 'apps/server/src/cli.ts'), 'start', 'server', 'mx', 'push'], {
      cwd: root,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child = c;
    let out = '';
    c.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    c.stderr!.on('data', (d: Buffer) => (out += d.toString()));
    return waitFor(
      'server and mx to start',
      () => {
        if (c.exitCode !== null) throw new Error(`exited ${c.exitCode}: ${out.slice(-2000)}`);
        const m = /boxes: running [^\n]*HTTP on (http:\/\/[^\s;]+)[^\n]*/.exec(out);
        return m ? { url: m[1]!, line: m[0] } : null;
      },
      90_000,
    );
  }

  async function stop(): Promise<void> {
    const c = child!;
    const exited = new Promise((r) => c.once('exit', r));
    c.kill('SIGTERM');
    await exited;
    child = null;
  }

  it('is the same after a restart on IMAP, submission and STARTTLS; a client that pinned it connects; its fingerprint is published', async () => {
    await requireTool('mbsync');
    await requireTool('mosquitto_sub');
    const first = await start();
    const imap1 = await presented(Number(env.IMAP_PORT));
    const fp = fingerprint(imap1);
    expect(fingerprint(await presented(Number(env.SUBMISSION_PORT)))).toBe(fp);
    expect(fingerprint(await presented(Number(env.SMTP_PORT), true))).toBe(fp);
    // The client pins what it was shown the first time: mbsync with it as CertificateFile syncs.
    const pinned = path.join(dir, 'pinned.pem');
    fs.writeFileSync(pinned, imap1);
    const api = { apiBase: `${first.url}/api/v1` };
    const account = await signupAccount(api);
    // An MQTT client provisioned now keeps connecting too: the broker's CA is kept as well.
    const iot = await rest(api, 'POST', '/account/iot/provision', { key: account.apiKey, body: {} });
    expect(iot.status, JSON.stringify(iot.body)).toBe(200);
    const mqttConnects = mosquittoWith(iot.body);
    expect(await mqttConnects()).toMatch(/received CONNACK \(0\)/);
    const pw = await rest(api, 'POST', '/account/app-passwords', { key: account.apiKey, body: { label: 'mbsync' } });
    expect(pw.status, JSON.stringify(pw.body)).toBe(200);
    const mbsync = mbsyncWith(Number(env.IMAP_PORT), pinned, account.primaryAddress, pw.body.password);
    const firstSync = await mbsync();
    expect(firstSync.code, firstSync.out).toBe(0);
    await stop();

    const again = await start();
    const synced = await mbsync();
    expect(synced.code, `mbsync after a restart: ${synced.out}`).toBe(0);
    expect(fingerprint(await presented(Number(env.IMAP_PORT))), 'IMAP after a restart').toBe(fp);
    expect(fingerprint(await presented(Number(env.SUBMISSION_PORT))), 'submission after a restart').toBe(fp);
    expect(fingerprint(await presented(Number(env.SMTP_PORT), true)), 'STARTTLS after a restart').toBe(fp);
    for (const port of [env.IMAP_PORT, env.SUBMISSION_PORT]) expect(await verifiesPinned(Number(port), pinned)).toMatch(/Verify return code: 0 \(ok\)/);
    // Where a user finds it: the start line and the endpoint.
    expect(await mqttConnects()).toMatch(/received CONNACK \(0\)/);
    expect(again.line).toContain(`mail TLS SHA-256 ${fp}`);
    const published = await rest({ apiBase: `${again.url}/api/v1` }, 'GET', '/mail-clients/certificate', { key: account.apiKey });
    expect(published.status, JSON.stringify(published.body)).toBe(200);
    expect(published.body).toMatchObject({ self_signed: true, sha256_fingerprint: fp });
    expect(fingerprint(published.body.certificate_pem)).toBe(fp);
    expect(published.body.names).toEqual(expect.arrayContaining(['mail.boxes.localhost', 'localhost', '127.0.0.1']));
    await stop();
  }, 240_000);
});

describe('a configured certificate', () => {
  it('SMTP_TLS_CERT_FILE and SMTP_TLS_KEY_FILE are served on IMAP, submission and STARTTLS, and published as not self-signed', async () => {
    const pems = await generate([{ name: 'commonName', value: 'mail.example.net' }], {
      keySize: 2048,
      algorithm: 'sha256',
      extensions: [{ name: 'subjectAltName', altNames: [{ type: 2, value: 'mail.example.net' }] }],
    });
    const certFile = path.join(dir, 'cert.pem');
    const keyFile = path.join(dir, 'key.pem');
    fs.writeFileSync(certFile, pems.cert);
    fs.writeFileSync(keyFile, pems.private, { mode: 0o600 });
    const fp = fingerprint(pems.cert);
    const t = await startTestServer({ mail: true, env: { SMTP_TLS_CERT_FILE: certFile, SMTP_TLS_KEY_FILE: keyFile } });
    try {
      expect(fingerprint(await presented(t.imapPort!))).toBe(fp);
      expect(fingerprint(await presented(t.submissionPort!))).toBe(fp);
      expect(fingerprint(await presented(t.smtpPort!, true))).toBe(fp);
      const published = await rest(t, 'GET', '/mail-clients/certificate', { key: (await signupAccount(t)).apiKey });
      expect(published.status).toBe(200);
      expect(published.body).toMatchObject({ self_signed: false, sha256_fingerprint: fp, names: ['mail.example.net'] });
      // Nothing self-signed was made or kept beside it.
      expect(await t.db.platformSetting.findUnique({ where: { key: 'mail_tls' } })).toBeNull();
    } finally {
      await t.stop();
    }
  }, 60_000);
});

describe('GET /mail-clients/certificate on a process without mail listeners', () => {
  it('reads what the mail listeners keep and never makes a certificate or opens its key itself', async () => {
    const api = await startTestServer();
    try {
      const account = await signupAccount(api);
      const before = await rest(api, 'GET', '/mail-clients/certificate', { key: account.apiKey });
      expect(before.status, JSON.stringify(before.body)).toBe(404);
      expect(before.body.error.code).toBe('not_found');
      expect(await api.db.platformSetting.findUnique({ where: { key: 'mail_tls' } })).toBeNull();
      // A mail listener of the same instance starts and keeps its certificate: the API shows that one.
      const mail = await startTestServer({ sameStoreAs: api, mail: true });
      try {
        const after = await rest(api, 'GET', '/mail-clients/certificate', { key: account.apiKey });
        expect(after.status, JSON.stringify(after.body)).toBe(200);
        const kept = JSON.parse((await api.db.platformSetting.findUniqueOrThrow({ where: { key: 'mail_tls' } })).value) as { certPem: string };
        expect(after.body.certificate_pem).toBe(kept.certPem);
        expect(after.body.sha256_fingerprint).toBe(new X509Certificate(kept.certPem).fingerprint256);
      } finally {
        await mail.stop();
      }
    } finally {
      await api.stop();
    }
  }, 60_000);
});
