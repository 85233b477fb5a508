// MQTT push over mutual TLS (IoT credentials): a certificate
// from POST /account/iot/provision lets mosquitto_sub and the mqtt package receive the account's events
// (mail.received through the MX); without a certificate, with a foreign or revoked one, or with another client
// id the broker refuses; a client sees only its own topic and may not publish.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import { generate } from 'selfsigned';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { mqttCaughtUp, sendMailToMx, sleep, waitFor } from './push-helpers';

let t: TestServer;
let pool: Promise<TestAccount>[] = [];
const take = () => pool.shift() ?? signupAccount(t);
const clients: MqttClient[] = [];

beforeAll(async () => {
  t = await startTestServer({ worker: true, push: true, mail: true });
  pool = Array.from({ length: 8 }, () => signupAccount(t));
  for (const p of pool) p.catch(() => undefined);
});
afterAll(async () => {
  for (const c of clients) c.end(true);
  await t?.stop();
});

interface Provisioned {
  client_id: string;
  certificate: string;
  private_key: string;
  ca_certificate: string;
  mqtt_endpoint: string;
  topic: string;
  not_after: string;
  qos: 1;
}

async function provision(a: TestAccount): Promise<Provisioned> {
  const r = await rest(t, 'POST', '/account/iot/provision', { key: a.apiKey });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body;
}

const options = (p: Pick<Provisioned, 'certificate' | 'private_key' | 'ca_certificate' | 'client_id'>, extra: IClientOptions = {}): IClientOptions => ({
  clientId: p.client_id,
  cert: p.certificate,
  key: p.private_key,
  ca: [p.ca_certificate],
  servername: 'localhost',
  reconnectPeriod: 0,
  connectTimeout: 5_000,
  ...extra,
});

/**
 * Connects without ever hanging: resolves with the client once CONNACK accepts, or with the error (or a close)
 * that ended the attempt. mqtt.connectAsync is not used: it waits forever when the broker drops the handshake.
 */
function tryConnect(opts: IClientOptions, ms = 10_000): Promise<{ client: MqttClient | null; error: (Error & { code?: number }) | null }> {
  return new Promise((resolve) => {
    const client = mqtt.connect(`mqtts://127.0.0.1:${t.mqttPort}`, opts);
    clients.push(client);
    let settled = false;
    const finish = (r: { client: MqttClient | null; error: (Error & { code?: number }) | null }) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (!r.client) client.end(true);
      resolve(r);
    };
    const timer = setTimeout(() => finish({ client: null, error: new Error(`no CONNACK within ${ms} ms`) }), ms);
    client.once('connect', () => finish({ client, error: null }));
    client.once('error', (error) => finish({ client: null, error }));
    client.once('close', () => finish({ client: null, error: new Error('connection closed before CONNACK') }));
  });
}

/** Subscribes and reports the granted QoS (128 is a refusal), or that the connection went away instead. */
function subscribe(client: MqttClient, topic: string, ms = 5_000): Promise<{ granted: number | null; closed: boolean }> {
  return new Promise((resolve) => {
    let settled = false;
    const finish = (r: { granted: number | null; closed: boolean }) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      client.off('close', onClose);
      resolve(r);
    };
    const onClose = () => finish({ granted: null, closed: true });
    const timer = setTimeout(() => finish({ granted: null, closed: !client.connected }), ms);
    client.on('close', onClose);
    // mqtt reports a refusal in the SUBACK as an error that carries the SUBACK packet.
    client.subscribe(topic, { qos: 1 }, (err, granted, packet) => {
      const code = (packet as { granted?: number[] } | undefined)?.granted?.[0] ?? (err ? null : (granted?.[0]?.qos ?? null));
      finish({ granted: typeof code === 'number' ? code : null, closed: !client.connected });
    });
  });
}

/** Every message a client receives, parsed. */
function collect(client: MqttClient): { topic: string; event: any }[] {
  const got: { topic: string; event: any }[] = [];
  client.on('message', (topic, payload) => {
    let event: any;
    try {
      event = JSON.parse(payload.toString());
    } catch {
      event = { raw: payload.toString() };
    }
    got.push({ topic, event });
  });
  return got;
}

async function connected(p: Provisioned): Promise<{ client: MqttClient; got: { topic: string; event: any }[] }> {
  const r = await tryConnect(options(p));
  expect(r.error).toBeNull();
  const got = collect(r.client!);
  expect(await subscribe(r.client!, p.topic)).toEqual({ granted: 1, closed: false });
  return { client: r.client!, got };
}

async function addBox(a: TestAccount, address: string): Promise<void> {
  const r = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
}

describe('receiving events', () => {
  it('mosquitto_sub with the provisioned certificate receives mail.received', async () => {
    const a = await take();
    const p = await provision(a);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-mqtt-'));
    const file = (name: string, pem: string) => {
      const f = path.join(dir, name);
      fs.writeFileSync(f, pem, { mode: 0o600 });
      return f;
    };
    const ca = file('ca.pem', p.ca_certificate);
    const cert = file('cert.pem', p.certificate);
    const key = file('key.pem', p.private_key);
    await mqttCaughtUp(t, a.accountId);

    // Asynchronously: the broker runs in this process. -d prints the SUBACK, so the mail is sent only once subscribed.
    // No --insecure: the broker's certificate names 127.0.0.1.
    // stdbuf: line-buffered stdout, so the debug lines arrive while it runs rather than at exit.
    const child = spawn(
      'stdbuf',
      [
        '-oL',
        'mosquitto_sub',
        '-h',
        '127.0.0.1',
        '-p',
        String(t.mqttPort),
        '--cafile',
        ca,
        '--cert',
        cert,
        '--key',
        key,
        '-i',
        p.client_id,
        '-t',
        p.topic,
        '-q',
        '1',
        '-C',
        '1',
        '-W',
        '20',
        '-d',
      ],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
    try {
      await waitFor(`mosquitto_sub subscribed (output so far: ${out})`, () => /Subscribed \(mid: \d+\): 1\b/.test(out) || child.exitCode !== null);
      expect(out).toMatch(/received CONNACK \(0\)/);
      const subject = `mqtt mosquitto ${Date.now()}`;
      await sendMailToMx(t.smtpPort!, a.primaryAddress, subject);
      expect(await exited, out).toBe(0);
      const line = out.split('\n').find((l) => l.startsWith('{'));
      expect(line, out).toBeTruthy();
      const event = JSON.parse(line!);
      expect(event.type).toBe('mail.received');
      expect(event.account_id).toBe(a.accountId);
      expect(JSON.stringify(event.data)).toContain(subject);
    } finally {
      if (child.exitCode === null) child.kill();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the mqtt package with the provisioned certificate receives mail.received', async () => {
    const a = await take();
    const p = await provision(a);
    expect(p.client_id.startsWith(a.accountId)).toBe(true);
    expect(p.topic).toBe(`boxes/accounts/${a.accountId}/events`);
    expect(p.qos).toBe(1);
    expect(p.mqtt_endpoint).toMatch(/^mqtts:\/\//);
    expect(p.private_key).toMatch(/PRIVATE KEY/);
    const { client, got } = await connected(p);
    const subject = `mqtt package ${Date.now()}`;
    await sendMailToMx(t.smtpPort!, a.primaryAddress, subject);
    const m = await waitFor('mail.received over MQTT', () => got.find((g) => g.event.type === 'mail.received'));
    expect(m.topic).toBe(p.topic);
    expect(JSON.stringify(m.event.data)).toContain(subject);
    // The same event as GET /events serves it.
    const polled = await rest(t, 'GET', '/events?type=mail.received', { key: a.apiKey });
    expect(polled.body.events.map((e: { id: string }) => e.id)).toContain(m.event.id);
    await client.endAsync();
  });
});

describe('refusals', () => {
  it('no client certificate: refused', async () => {
    const r = await tryConnect({
      clientId: 'anonymous',
      ca: [(await provision(await take())).ca_certificate],
      servername: 'localhost',
      reconnectPeriod: 0,
      connectTimeout: 5_000,
    });
    expect(r.client).toBeNull();
    expect(r.error).toBeTruthy();
  });

  it('a certificate from another CA (with a valid client id as its name): refused', async () => {
    const a = await take();
    const p = await provision(a);
    const otherCa = await generate([{ name: 'commonName', value: 'Boxes MQTT CA' }], {
      keyType: 'ec',
      algorithm: 'sha256',
      extensions: [
        { name: 'basicConstraints', cA: true, critical: true },
        { name: 'keyUsage', keyCertSign: true, cRLSign: true, digitalSignature: true, critical: true },
      ],
    });
    const forged = await generate([{ name: 'commonName', value: p.client_id }], {
      keyType: 'ec',
      algorithm: 'sha256',
      ca: { key: otherCa.private, cert: otherCa.cert },
      extensions: [
        { name: 'basicConstraints', cA: false },
        { name: 'extKeyUsage', clientAuth: true },
      ],
    });
    const r = await tryConnect(options({ ...p, certificate: forged.cert, private_key: forged.private }));
    expect(r.client).toBeNull();
    expect(r.error).toBeTruthy();
    // A self-signed one too.
    const self = await generate([{ name: 'commonName', value: p.client_id }], { keyType: 'ec', algorithm: 'sha256' });
    const r2 = await tryConnect(options({ ...p, certificate: self.cert, private_key: self.private }));
    expect(r2.client).toBeNull();
    // The real one works.
    const ok = await tryConnect(options(p));
    expect(ok.error).toBeNull();
    await ok.client!.endAsync();
  });

  it('a revoked certificate: refused at connect, and a client connected with it is disconnected after re-provisioning', async () => {
    const a = await take();
    const first = await provision(a);
    const { client, got } = await connected(first);
    let closedAt: number | null = null;
    client.on('close', () => (closedAt ??= Date.now()));

    const second = await provision(a);
    expect(second.client_id).not.toBe(first.client_id);
    await waitFor('the revoked client disconnected', () => closedAt !== null, 15_000);

    const again = await tryConnect(options(first));
    expect(again.client).toBeNull();
    expect(again.error?.code).toBe(5); // CONNACK: not authorized

    // The new certificate works and receives the account's events.
    const fresh = await connected(second);
    await addBox(a, 'after-revocation');
    await waitFor('box.created on the new certificate', () => fresh.got.find((g) => g.event.type === 'box.created'));
    expect(got.find((g) => g.event.type === 'box.created')).toBeUndefined();
    await fresh.client.endAsync();
  });

  it('a client id that does not match the certificate: refused', async () => {
    const a = await take();
    const p = await provision(a);
    for (const clientId of ['someone-else', `${a.accountId}-xxxxxxxx`, `${p.client_id}x`]) {
      const r = await tryConnect(options(p, { clientId }));
      expect(r.client, clientId).toBeNull();
      expect(r.error?.code, clientId).toBe(5);
    }
  });

  it("another account's topic, '#', 'boxes/#': SUBACK failure and no messages, while the own topic works", async () => {
    const a = await take();
    const b = await take();
    const pa = await provision(a);
    const pb = await provision(b);
    await Promise.all([mqttCaughtUp(t, a.accountId), mqttCaughtUp(t, b.accountId)]);
    const victim = await connected(pb);

    const r = await tryConnect(options(pa));
    expect(r.error).toBeNull();
    const attacker = r.client!;
    const got = collect(attacker);
    for (const topic of [pb.topic, '#', 'boxes/#', 'boxes/accounts/+/events', `boxes/accounts/${b.accountId}/#`]) {
      expect(await subscribe(attacker, topic), topic).toEqual({ granted: 128, closed: false });
    }
    expect(await subscribe(attacker, pa.topic)).toEqual({ granted: 1, closed: false });
    // One SUBSCRIBE with an allowed and a refused topic: each gets its own answer.
    const both = await new Promise<number[] | undefined>((resolve) =>
      attacker.subscribe([pa.topic, pb.topic], { qos: 1 }, (_err, _granted, packet) => resolve((packet as { granted?: number[] } | undefined)?.granted)),
    );
    expect(both).toEqual([1, 128]);
    expect(attacker.connected).toBe(true);

    await addBox(b, 'victim-box');
    await waitFor("b's event at b's subscriber", () => victim.got.find((g) => g.event.type === 'box.created'));
    await addBox(a, 'attacker-box');
    const own = await waitFor("a's own event", () => got.find((g) => g.event.type === 'box.created'));
    expect(own.topic).toBe(pa.topic);
    expect(got.every((g) => g.topic === pa.topic && g.event.account_id === a.accountId)).toBe(true);
    await attacker.endAsync();
    await victim.client.endAsync();
  });

  it('a client may not publish, not even to its own topic', async () => {
    const a = await take();
    const p = await provision(a);
    await mqttCaughtUp(t, a.accountId);
    const listener = await connected(p);
    const forged = JSON.stringify({ id: 'evt_forged', type: 'mail.received', account_id: a.accountId, data: { forged: true } });
    // The publisher is the subscriber itself (only this account's certificate may subscribe to its topic, and
    // one connection per client id): a broker that accepted the publish would deliver it right back.
    listener.client.publish(p.topic, forged, { qos: 1 }, () => undefined);
    await sleep(300);
    // Whether the broker dropped the publish or the connection, a subscriber then gets the real events only.
    let sub = listener;
    if (!listener.client.connected) sub = await connected(p);
    await addBox(a, 'after-publish');
    await waitFor('the real event', () => sub.got.find((g) => g.event.type === 'box.created'));
    expect([...listener.got, ...sub.got].find((g) => g.event.id === 'evt_forged' || g.event.data?.forged)).toBeUndefined();
    await sub.client.endAsync();
  });
});
