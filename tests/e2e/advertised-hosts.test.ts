/**
 * What the API tells clients to connect to works as given. On an instance with the local default MAIL_HOST
 * (mail.boxes.localhost, which resolvers and getaddrinfo do not know), the servers are advertised at the address
 * they listen on: the IMAP and SMTP host and port of a new app-password take Python's imaplib and smtplib there
 * (the certificate verified against that host name), and the mqtt_endpoint of IoT provisioning takes
 * mosquitto_sub there, which then receives the account's events. With a public MAIL_HOST that host is advertised
 * (packages/config tests that).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { execFileAsync, requireTool } from './mail-receive-helpers';
import { mqttCaughtUp, sendMailToMx, waitFor } from './push-helpers';

let t: TestServer;
let a: TestAccount;
let dir: string;

beforeAll(async () => {
  t = await startTestServer({ mail: true, push: true, worker: true });
  a = await signupAccount(t, 'advertised@example.com');
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-advertised-'));
}, 60_000);
afterAll(async () => {
  await t?.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

const file = (name: string, content: string) => {
  const f = path.join(dir, name);
  fs.writeFileSync(f, content, { mode: 0o600 });
  return f;
};

it('the instance runs with the local default MAIL_HOST', () => {
  expect(t.config.mailHost).toBe('mail.boxes.localhost');
});

it('an app-password names IMAP and SMTP servers that imaplib and smtplib reach as given, verifying the certificate', async () => {
  await requireTool('python3');
  const r = await rest(t, 'POST', '/account/app-passwords', { key: a.apiKey, body: { label: 'advertised' } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  const { imap, smtp, password } = r.body;
  // The certificate the servers present, trusted as a client that pinned it would.
  const cert = await rest(t, 'GET', '/mail-clients/certificate', { key: a.apiKey });
  expect(cert.status, JSON.stringify(cert.body)).toBe(200);
  const ca = file('mail.pem', cert.body.certificate_pem);
  const script = `
import imaplib, smtplib, json, ssl, sys
imap_host, imap_port, smtp_host, smtp_port, user, pw, ca = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7]
ctx = ssl.create_default_context(cafile=ca)
M = imaplib.IMAP4_SSL(imap_host, imap_port, ssl_context=ctx)
out = {'imap': M.login(user, pw)[0]}
M.logout()
S = smtplib.SMTP_SSL(smtp_host, smtp_port, context=ctx, timeout=20)
out['smtp'] = S.login(user, pw)[0]
S.quit()
print(json.dumps(out))
`;
  const { stdout } = await execFileAsync(
    'python3',
    ['-c', script, imap.host, String(imap.port), smtp.host, String(smtp.port), a.primaryAddress, password, ca],
    { timeout: 30_000 },
  );
  expect(JSON.parse(stdout)).toEqual({ imap: 'OK', smtp: 235 });
});

it('mosquitto_sub connects to the provisioned mqtt_endpoint as given and receives mail.received', async () => {
  await requireTool('mosquitto_sub');
  const p = await rest(t, 'POST', '/account/iot/provision', { key: a.apiKey, body: {} });
  expect(p.status, JSON.stringify(p.body)).toBe(200);
  const endpoint = new URL(p.body.mqtt_endpoint);
  expect(endpoint.protocol).toBe('mqtts:');
  // The provisioning's own event (account.iot.provisioned) published first: on a busy machine the push engine
  // could still be on it when mosquitto_sub subscribes, which would then take it for its one message.
  await mqttCaughtUp(t, a.accountId);
  const args = [
    '-h',
    endpoint.hostname,
    '-p',
    endpoint.port,
    '--cafile',
    file('ca.pem', p.body.ca_certificate),
    '--cert',
    file('cert.pem', p.body.certificate),
    '--key',
    file('key.pem', p.body.private_key),
  ];
  // -d prints the SUBACK, so the mail is sent only once subscribed; stdbuf keeps the debug lines coming as they happen.
  const child = spawn('stdbuf', ['-oL', 'mosquitto_sub', ...args, '-i', p.body.client_id, '-t', p.body.topic, '-q', '1', '-C', '1', '-W', '20', '-d'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  try {
    await waitFor(`mosquitto_sub subscribed (output so far: ${out})`, () => /Subscribed \(mid: \d+\): 1\b/.test(out) || child.exitCode !== null);
    expect(out, out).toMatch(/received CONNACK \(0\)/);
    const subject = `advertised mqtt ${Date.now()}`;
    await sendMailToMx(t.smtpPort!, a.primaryAddress, subject);
    expect(await exited, out).toBe(0);
    const line = out.split('\n').find((l) => l.startsWith('{'));
    expect(JSON.parse(line!).type).toBe('mail.received');
  } finally {
    if (child.exitCode === null) child.kill();
  }
});
