// Audit bundles and chain checkpoints, verified by outside tools: jose (compactVerify with the served PEM) and
// openssl (pkeyutl -rawin over the JWS signing input), with the chain recomputed by canonicalize. Then what
// reclaiming a body (on request, and by the retention window) does to a bundle, a tampered event row against a
// kept checkpoint, and a key rotation against old bundles.
import { createHash } from 'node:crypto';
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compactVerify, importSPKI } from 'jose';
import { AdjustableClock, open } from '@boxes/core';
import { rest, signupAccount, waitFor, startTestServer, type ApiEvent, type TestAccount, type TestServer } from '@boxes/testing';
import { eventHash, opensslVerify, payloadOf, recomputeChain } from './audit-helpers';
import { rawMessage, sendRaw } from './mail-receive-helpers';

const clock = new AdjustableClock();
let t: TestServer;
let a: TestAccount;
const DAY = 86_400_000;

beforeAll(async () => {
  t = await startTestServer({ worker: true, mail: true, clock });
  a = await signupAccount(t, 'audit-owner@example.com');
});
afterAll(() => t?.stop());

/**
 * Delivers a message to the account through the MX; returns the received message and the raw bytes stored: the
 * bytes sent, below the MX's trace headers (Received-SPF, Authentication-Results).
 */
async function receive(subject: string): Promise<{ id: string; raw: string }> {
  const raw = rawMessage(
    { From: 'Sender <sender@outside.test>', To: a.primaryAddress, Subject: subject, 'Message-ID': `<${subject.replace(/\W/g, '')}@outside.test>` },
    `body of ${subject}`,
  );
  const r = await sendRaw(t.smtpPort!, { from: 'sender@outside.test', to: [a.primaryAddress] }, raw);
  expect(r.accepted).toEqual([a.primaryAddress]);
  const m = await waitFor(`received ${subject}`, async () => {
    const list = await rest(t, 'GET', '/messages?direction=received&limit=200', { key: a.apiKey });
    return (list.body.messages as any[]).find((x) => x.subject === subject);
  });
  const row = await t.db.message.findUniqueOrThrow({ where: { id: m.id }, select: { rawEnc: true } });
  const stored = open(t.svc.secretKey, row.rawEnc!).toString();
  expect(stored.endsWith(raw)).toBe(true);
  expect(stored).toMatch(/^Received-SPF: /);
  return { id: m.id, raw: stored };
}

async function publicKey(keyId?: string) {
  const r = await fetch(`${t.apiBase}/audit/public-key${keyId ? `?key_id=${keyId}` : ''}`);
  expect(r.status).toBe(200);
  return (await r.json()) as any;
}

async function allEvents(key: string): Promise<ApiEvent[]> {
  const out: ApiEvent[] = [];
  let since = '0';
  for (;;) {
    const r = await rest(t, 'GET', `/events?since=${since}&limit=500`, { key });
    out.push(...r.body.events);
    if (!r.body.has_more) return out;
    since = r.body.next_cursor;
  }
}

describe('the signing key', () => {
  it('GET /audit/public-key needs no key; GET /account/audit/public-key serves the same PEM to a key', async () => {
    const open = await publicKey();
    expect(open).toMatchObject({ algorithm: 'EdDSA', curve: 'Ed25519', key_id: expect.stringMatching(/^ask_/), retired_at: null });
    expect(open.public_key_pem).toMatch(/^-----BEGIN PUBLIC KEY-----\n[\s\S]+\n-----END PUBLIC KEY-----\n$/);
    const keyed = await rest(t, 'GET', '/account/audit/public-key', { key: a.apiKey });
    expect(keyed.status).toBe(200);
    expect(keyed.body.public_key_pem).toBe(open.public_key_pem);
    expect(keyed.body.key_id).toBe(open.key_id);
    // As a bare PEM file for clients that ask for one.
    const pem = await fetch(`${t.apiBase}/audit/public-key`, { headers: { accept: 'application/x-pem-file' } });
    expect(pem.headers.get('content-type')).toBe('application/x-pem-file');
    expect(await pem.text()).toBe(open.public_key_pem);
    expect((await fetch(`${t.apiBase}/audit/public-key?key_id=nope`, { headers: { accept: 'application/x-pem-file' } })).status).toBe(404);
    // Generated once: asking again gives the same key.
    expect((await publicKey()).key_id).toBe(open.key_id);
    // openssl reads it as an Ed25519 public key.
    expect(execFileSync('openssl', ['pkey', '-pubin', '-noout', '-text'], { input: open.public_key_pem, encoding: 'utf8' })).toMatch(/ED25519 Public-Key/);
  });

  it('the private half is sealed at rest', async () => {
    const row = await t.db.auditSigningKey.findFirstOrThrow({ where: { retiredAt: null } });
    expect(row.privateKeyEnc).toMatch(/^v1\./);
    expect(row.privateKeyEnc).not.toContain('PRIVATE KEY');
  });
});

describe('audit bundles', () => {
  let received: { id: string; raw: string };
  let bundle: string;

  beforeAll(async () => {
    received = await receive('audit one');
    const r = await rest(t, 'GET', `/messages/${received.id}/audit`, { key: a.apiKey });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    bundle = r.body.bundle;
  });

  it('verifies with jose, unchanged, and carries the message, its evidence, retention, raw hash, events and signing key', async () => {
    const pk = await publicKey();
    const { payload, protectedHeader } = await compactVerify(bundle, await importSPKI(pk.public_key_pem, 'EdDSA'));
    expect(protectedHeader).toMatchObject({ alg: 'EdDSA', kid: pk.key_id });
    const p = JSON.parse(new TextDecoder().decode(payload));
    expect(p).toMatchObject({
      typ: 'boxes.audit_bundle',
      account_id: a.accountId,
      account_domain: a.domain,
      message: { id: received.id, direction: 'received', subject: 'audit one', from: 'sender@outside.test' },
      raw_state: 'available',
      evidence: { body_state: 'available' },
      retention: { audit_retention_days: 14, source: 'default' },
      signing: { alg: 'EdDSA', key_id: pk.key_id, public_key_url: `${t.apiBase}/audit/public-key?key_id=${pk.key_id}` },
    });
    // The SHA-256 of the raw bytes stored: those the MX was given, below its trace headers.
    expect(p.raw_sha256).toBe(createHash('sha256').update(received.raw).digest('hex'));
    // When the body is due to go, 14 days after it was recorded.
    expect(Date.parse(p.retention.body_reclaim_due_at_utc) - Date.parse(p.message.recorded_at)).toBe(14 * DAY);
    // Every event about it, with _chain, matching the stream; the chain head at signing time.
    expect(p.events.map((e: ApiEvent) => e.type)).toEqual(['mail.received']);
    const stream = await allEvents(a.apiKey);
    const served = stream.find((e) => e.id === p.events[0].id)!;
    expect(p.events[0]).toEqual(served);
    expect(eventHash(served._chain.prev_hash, served)).toBe(served._chain.hash);
    expect(p.chain_head.seq).toBe(stream[stream.length - 1]!.seq);
    expect(p.chain_head.hash).toBe(stream[stream.length - 1]!._chain.hash);
    // The public key URL in the bundle serves the key that verifies it.
    const named = (await (await fetch(p.signing.public_key_url)).json()) as any;
    expect(named.public_key_pem).toBe(pk.public_key_pem);
  });

  it('verifies with openssl; a changed payload does not', async () => {
    const pk = await publicKey();
    expect(await opensslVerify(bundle, pk.public_key_pem)).toBe(true);
    const [h, p, s] = bundle.split('.');
    const forged = Buffer.from(JSON.stringify({ ...payloadOf(bundle), raw_sha256: '0'.repeat(64) })).toString('base64url');
    expect(p).not.toBe(forged);
    expect(await opensslVerify(`${h}.${forged}.${s}`, pk.public_key_pem)).toBe(false);
    await expect(compactVerify(`${h}.${forged}.${s}`, await importSPKI(pk.public_key_pem, 'EdDSA'))).rejects.toThrow();
  });

  it('after DELETE /messages/{id}: body_state {reclaimed_at_utc}, the raw SHA-256 and the events stay', async () => {
    const del = await rest(t, 'DELETE', `/messages/${received.id}`, { key: a.apiKey });
    expect(del.status).toBe(200);
    const r = await rest(t, 'GET', `/messages/${received.id}/audit`, { key: a.apiKey });
    const pk = await publicKey();
    const p = JSON.parse(new TextDecoder().decode((await compactVerify(r.body.bundle, await importSPKI(pk.public_key_pem, 'EdDSA'))).payload));
    expect(p.evidence.body_state).toEqual({ reclaimed_at_utc: del.body.body_state.reclaimed_at_utc });
    expect(p.raw_state).toBe('reclaimed');
    expect(p.raw_sha256).toBe(createHash('sha256').update(received.raw).digest('hex'));
    expect(p.retention.body_reclaim_due_at_utc).toBeNull();
    expect(p.events.map((e: ApiEvent) => e.type)).toEqual(['mail.received', 'message.deleted']);
    const got = await rest(t, 'GET', `/messages/${received.id}`, { key: a.apiKey });
    expect(got.body).toMatchObject({
      body: null,
      body_state: 'reclaimed',
      body_reclaimed_at_utc: del.body.body_state.reclaimed_at_utc,
      body_reclaim_due_at_utc: null,
    });
  });

  it("another account's message is 404", async () => {
    const b = await signupAccount(t, 'audit-other@example.com');
    expect((await rest(t, 'GET', `/messages/${received.id}/audit`, { key: b.apiKey })).status).toBe(404);
  });
});

describe('the retention window (usermetadata.audit_retention_days)', () => {
  it('defaults to 14 days; 1 to 90 may be set; bodies past it are reclaimed by the audit job, and bundles say when', async () => {
    expect((await rest(t, 'GET', '/account/usermetadata', { key: a.apiKey })).body).toEqual({ audit_retention_days: 14, audit_retention_source: 'default' });
    for (const bad of [0, 91, 1.5]) {
      expect((await rest(t, 'PUT', '/account/usermetadata', { key: a.apiKey, body: { audit_retention_days: bad } })).status).toBe(400);
    }
    const set = await rest(t, 'PUT', '/account/usermetadata', { key: a.apiKey, body: { audit_retention_days: 2 } });
    expect(set.body).toEqual({ audit_retention_days: 2, audit_retention_source: 'usermetadata' });

    const m = await receive('retention one');
    const before = await rest(t, 'GET', `/messages/${m.id}`, { key: a.apiKey });
    expect(before.body.body_state).toBe('available');
    expect(Date.parse(before.body.body_reclaim_due_at_utc) - Date.parse(before.body.recorded_at)).toBe(2 * DAY);

    // A day later nothing is due; three days later the audit job reclaims it.
    clock.advance(DAY);
    expect((await t.runtime.worker!.billing.audit()).reclaimed).toBe(0);
    clock.advance(2 * DAY);
    const pass = await t.runtime.worker!.billing.audit();
    expect(pass.reclaimed).toBeGreaterThanOrEqual(1);

    const after = await rest(t, 'GET', `/messages/${m.id}`, { key: a.apiKey });
    expect(after.body).toMatchObject({ body: null, body_state: 'reclaimed', body_reclaim_due_at_utc: null, subject: 'retention one' });
    const bundle = await rest(t, 'GET', `/messages/${m.id}/audit`, { key: a.apiKey });
    const pk = await publicKey();
    const p = JSON.parse(new TextDecoder().decode((await compactVerify(bundle.body.bundle, await importSPKI(pk.public_key_pem, 'EdDSA'))).payload));
    expect(p.evidence.body_state).toEqual({ reclaimed_at_utc: after.body.body_reclaimed_at_utc });
    expect(p.retention).toMatchObject({ audit_retention_days: 2, source: 'usermetadata', body_reclaim_due_at_utc: null });
    expect(p.raw_sha256).toBe(createHash('sha256').update(m.raw).digest('hex'));
    const deleted = p.events.find((e: ApiEvent) => e.type === 'message.deleted');
    expect(deleted.data).toMatchObject({ message_id: m.id, reason: 'retention', audit_retention_days: 2, by_key_id: null });
    await rest(t, 'PUT', '/account/usermetadata', { key: a.apiKey, body: { audit_retention_days: null } });
  });
});

describe('chain checkpoints', () => {
  it('are signed on request and verify with openssl and jose; the hourly job signs moved heads', async () => {
    const c = await rest(t, 'POST', '/events/checkpoints', { key: a.apiKey });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    const pk = await publicKey();
    expect(await opensslVerify(c.body.checkpoint, pk.public_key_pem)).toBe(true);
    const p = JSON.parse(new TextDecoder().decode((await compactVerify(c.body.checkpoint, await importSPKI(pk.public_key_pem, 'EdDSA'))).payload));
    const stream = await allEvents(a.apiKey);
    expect(p).toMatchObject({
      typ: 'boxes.chain_checkpoint',
      account_id: a.accountId,
      seq: stream.length,
      hash: stream[stream.length - 1]!._chain.hash,
      key_id: pk.key_id,
    });
    // Offline: the chain recomputed from GET /events reaches the signed hash at the signed seq.
    expect(recomputeChain(stream).get(p.seq)).toBe(p.hash);

    // The audit job signs heads that moved since their last checkpoint, and only those.
    await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'moved-head' } });
    const pass = await t.runtime.worker!.billing.audit();
    expect(pass.checkpoints).toBeGreaterThanOrEqual(1);
    const list = await rest(t, 'GET', '/events/checkpoints', { key: a.apiKey });
    expect(list.body.checkpoints[0]).toMatchObject({ seq: stream.length + 1, account_id: a.accountId });
    await t.runtime.worker!.billing.audit();
    const list2 = await rest(t, 'GET', '/events/checkpoints', { key: a.apiKey });
    expect(list2.body.checkpoints.length).toBe(list.body.checkpoints.length);
  });

  it('a tampered event row (every later hash recomputed to hide it) makes a kept checkpoint fail to verify', async () => {
    const victim = await signupAccount(t, 'audit-tamper@example.com');
    await rest(t, 'POST', '/boxes', { key: victim.apiKey, body: { address: 'first' } });
    await rest(t, 'POST', '/boxes', { key: victim.apiKey, body: { address: 'second' } });
    const kept = (await rest(t, 'POST', '/events/checkpoints', { key: victim.apiKey })).body.checkpoint as string;
    expect((await rest(t, 'POST', '/events/checkpoints/verify', { key: victim.apiKey, body: { checkpoint: kept } })).body).toMatchObject({
      ok: true,
      signature_valid: true,
    });

    // The operator rewrites an event (the box's address) and recomputes every hash after it and the head.
    const rows = await t.db.event.findMany({ where: { accountId: victim.accountId }, orderBy: { seq: 'asc' } });
    const target = rows.find((r) => r.type === 'box.created')!;
    const data = JSON.parse(JSON.stringify(target.data));
    data.box.address = `attacker@${victim.domain}`;
    await t.db.event.update({ where: { id: target.id }, data: { data } });
    let prev = '0'.repeat(64);
    for (const r of await t.db.event.findMany({ where: { accountId: victim.accountId }, orderBy: { seq: 'asc' } })) {
      const hash = eventHash(prev, {
        id: r.id,
        seq: r.seq,
        type: r.type,
        account_id: r.accountId,
        created_at: r.createdAt.toISOString(),
        data: r.data,
        _chain: { prev_hash: prev, hash: '' },
      });
      await t.db.event.update({ where: { id: r.id }, data: { prevHash: prev, hash } });
      prev = hash;
    }
    await t.db.account.update({ where: { id: victim.accountId }, data: { chainHash: prev } });

    // The cover-up fools a verifier that has nothing kept...
    expect((await rest(t, 'GET', '/events/verify', { key: victim.apiKey })).body.ok).toBe(true);
    // ...but not the kept checkpoint: on the server,
    const v = await rest(t, 'POST', '/events/checkpoints/verify', { key: victim.apiKey, body: { checkpoint: kept } });
    expect(v.body).toMatchObject({ ok: false, signature_valid: true, reason: expect.stringMatching(/no longer hash to the signed value/) });
    // and offline: the signature still verifies with openssl, and the recomputed chain misses the signed hash.
    const pk = await publicKey(payloadOf(kept).key_id);
    expect(await opensslVerify(kept, pk.public_key_pem)).toBe(true);
    const claim = payloadOf(kept);
    expect(recomputeChain(await allEvents(victim.apiKey)).get(claim.seq)).not.toBe(claim.hash);
  });

  it('a checkpoint of another account, or not a checkpoint at all, does not verify', async () => {
    const other = await signupAccount(t, 'audit-other2@example.com');
    const theirs = (await rest(t, 'POST', '/events/checkpoints', { key: other.apiKey })).body.checkpoint as string;
    expect((await rest(t, 'POST', '/events/checkpoints/verify', { key: a.apiKey, body: { checkpoint: theirs } })).body).toMatchObject({
      ok: false,
      reason: 'this checkpoint is of another account',
    });
    expect((await rest(t, 'POST', '/events/checkpoints/verify', { key: a.apiKey, body: { checkpoint: 'a.b.c' } })).body).toMatchObject({
      ok: false,
      signature_valid: false,
    });
  });
});

describe('key rotation', () => {
  it('old bundles and checkpoints still verify; the old public key stays served', async () => {
    const m = await receive('before rotation');
    const oldBundle = (await rest(t, 'GET', `/messages/${m.id}/audit`, { key: a.apiKey })).body.bundle as string;
    const oldCheckpoint = (await rest(t, 'POST', '/events/checkpoints', { key: a.apiKey })).body.checkpoint as string;
    const oldKey = await publicKey();

    // The operator rotates the key with the CLI.
    const root = path.resolve(import.meta.dirname, '../..');
    const { stdout } = await promisify(execFile)('node', ['--import', 'tsx', 'apps/server/src/cli.ts', 'admin', 'rotate-audit-key'], {
      cwd: root,
      encoding: 'utf8',
      env: { ...process.env, DATABASE_URL: t.config.databaseUrl, BOXES_SECRET_KEY: t.svc.secretKey.toString('hex'), LOG_LEVEL: 'silent' },
      timeout: 60_000,
    });
    expect(stdout).toMatch(new RegExp(`${oldKey.key_id} is retired`));

    const current = await publicKey();
    expect(current.key_id).not.toBe(oldKey.key_id);
    expect(current.keys.map((k: any) => k.key_id)).toEqual([oldKey.key_id, current.key_id]);
    const retired = await publicKey(oldKey.key_id);
    expect(retired).toMatchObject({ key_id: oldKey.key_id, public_key_pem: oldKey.public_key_pem, retired_at: expect.any(String) });

    // New bundles are signed by the new key...
    const newBundle = (await rest(t, 'GET', `/messages/${m.id}/audit`, { key: a.apiKey })).body.bundle as string;
    expect(JSON.parse(Buffer.from(newBundle.split('.')[0]!, 'base64url').toString()).kid).toBe(current.key_id);
    expect(await opensslVerify(newBundle, current.public_key_pem)).toBe(true);
    // ...and the old bundle verifies with the old key, found by its kid, with jose and openssl.
    const kid = JSON.parse(Buffer.from(oldBundle.split('.')[0]!, 'base64url').toString()).kid;
    const byKid = await publicKey(kid);
    await expect(compactVerify(oldBundle, await importSPKI(byKid.public_key_pem, 'EdDSA'))).resolves.toBeTruthy();
    expect(await opensslVerify(oldBundle, byKid.public_key_pem)).toBe(true);
    expect(await opensslVerify(oldBundle, current.public_key_pem)).toBe(false);
    // A checkpoint kept from before the rotation still verifies against the chain.
    expect((await rest(t, 'POST', '/events/checkpoints/verify', { key: a.apiKey, body: { checkpoint: oldCheckpoint } })).body).toMatchObject({
      ok: true,
      key_id: oldKey.key_id,
    });
    // An unknown key id is 404.
    expect((await fetch(`${t.apiBase}/audit/public-key?key_id=ask_00000000000000000000`)).status).toBe(404);
  });
});

describe('the audit guide (docs/guide/audit.md)', () => {
  it('the checkpoint block works as pasted: openssl verifies the signature and the chain matches', async () => {
    const guide = fs.readFileSync(path.resolve(import.meta.dirname, '../../docs/guide/audit.md'), 'utf8');
    const block = [...guide.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!).find((b) => b.includes('openssl pkeyutl -verify'));
    expect(block, 'the audit guide has the openssl checkpoint block').toBeDefined();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-readme-ckp-'));
    const { stdout, stderr } = await promisify(execFile)('bash', ['-euo', 'pipefail', '-c', `BASE=${t.apiBase}\nKEY=${a.apiKey}\n${block}`], {
      cwd: dir,
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(stdout, stderr).toMatch(/Signature Verified Successfully/);
    expect(stdout).toMatch(/chain matches at seq \d+/);
  });
});
