/**
 * Dedicated sending IPs over real SMTP: the instance offers 127.0.0.2 (SENDING_IPS) and a stand-in MX on
 * 127.0.0.1 records, for every message, the address the connection came from and the HELO name it announced.
 * Live mode (402 without credit, provisioning then warming, bound connections, the configuration-set header,
 * the monthly charge), the warm-up caps day by day on an advanced clock (over-cap mail through the shared
 * address), simulated mode (routes nothing), the address taken, and teardown.
 */
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AdjustableClock, finishProvisioning, postEntries } from '@boxes/core';
import { createBoxesClient } from '@boxes/sdk';
import { rest, signupAccount, startTestServer, waitFor, type TestAccount, type TestServer } from '@boxes/testing';
import { events } from './mail-send-helpers';

const DEDICATED = '127.0.0.2';
const HELO = 'mail2.ipfwd.test';
const DAY = 86_400_000;

interface Seen {
  remoteAddress: string;
  helo: string;
  rcpt: string[];
  raw: string;
}

/** A stand-in MX that records where each message came from and what the client said in EHLO/HELO. */
class SourceSink {
  readonly seen: Seen[] = [];
  port = 0;
  private readonly server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onData: (stream, session, cb) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        this.seen.push({
          remoteAddress: session.remoteAddress.replace(/^::ffff:/, ''),
          helo: session.hostNameAppearsAs,
          rcpt: session.envelope.rcptTo.map((r) => r.address.toLowerCase()),
          raw: Buffer.concat(chunks).toString('utf8'),
        });
        cb();
      });
    },
  });
  async start() {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', () => r()));
    this.port = (this.server.server.address() as AddressInfo).port;
  }
  to(address: string) {
    return this.seen.filter((s) => s.rcpt.includes(address.toLowerCase()));
  }
  close() {
    return new Promise<void>((r) => this.server.close(() => r()));
  }
}

const clock = new AdjustableClock();
let t: TestServer;
let sink: SourceSink;

beforeAll(async () => {
  sink = new SourceSink();
  await sink.start();
  t = await startTestServer({
    worker: true,
    clock,
    resolver: { resolve: async () => [{ host: '127.0.0.1', port: sink.port }] },
    env: { SENDING_IPS: `${DEDICATED}=${HELO}`, SENDING_IP_WARMUP_CAPS: '2,3' },
  });
});
afterAll(async () => {
  await t?.stop();
  await sink?.close();
});

async function topUp(accountId: string, usd: number) {
  await t.db.$transaction((tx) =>
    postEntries(t.svc, tx, accountId, [{ type: 'topup', amountMicros: BigInt(usd) * 1_000_000n, idempotencyKey: `test-topup:${randomUUID()}` }]),
  );
}

/** Sends `n` single-recipient messages and waits until the stand-in MX has each; returns what it saw. */
async function sendEach(a: TestAccount, n: number, tag: string): Promise<Seen[]> {
  const rcpts = Array.from({ length: n }, (_, i) => `${tag}-${i}-${randomUUID().slice(0, 8)}@remote.test`);
  for (const to of rcpts) {
    const r = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to, subject: tag, text: 'x' } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  }
  return waitFor(`${n} messages of ${tag} at the MX`, () => {
    const got = rcpts.map((r) => sink.to(r)[0]);
    return got.every(Boolean) ? (got as Seen[]) : null;
  });
}

const fromDedicated = (seen: Seen[]) => seen.filter((s) => s.remoteAddress === DEDICATED && s.helo === HELO).length;
const fromShared = (seen: Seen[]) => seen.filter((s) => s.remoteAddress === '127.0.0.1' && s.helo === t.config.mailHost).length;

describe('a live dedicated IP', () => {
  let a: TestAccount;
  let other: TestAccount;

  beforeAll(async () => {
    [a, other] = await Promise.all([signupAccount(t, 'ip-owner@example.com'), signupAccount(t, 'ip-other@example.com')]);
  });

  it('without the first month in credit: 402 with the top-up guidance, nothing provisioned', async () => {
    const r = await rest(t, 'POST', '/account/sending-ip', { key: a.apiKey, body: { mode: 'live' } });
    expect(r.status, JSON.stringify(r.body)).toBe(402);
    expect(r.body.error).toMatchObject({ code: 'payment_required', required_usd: '24.95' });
    expect(r.body.error.top_up.mpp.url).toContain('/account/credit/topup/mpp');
    expect((await rest(t, 'GET', '/account/sending-ip', { key: a.apiKey })).status).toBe(404);
    expect(await t.db.sendingIp.count()).toBe(0);
  });

  it('bad input is a 400 naming the field', async () => {
    const r = await rest(t, 'POST', '/account/sending-ip', { key: a.apiKey, body: { mode: 'dedicated' } });
    expect(r.status).toBe(400);
    expect(r.body.error.fields.map((f: { path: string }) => f.path)).toContain('mode');
    const extra = await rest(t, 'POST', '/account/sending-ip', { key: a.apiKey, body: { mode: 'live', ip: '127.0.0.9' } });
    expect(extra.status).toBe(400);
  });

  it('mode live: provisioning, then warming once the worker bound the address; the first month is charged', async () => {
    await topUp(a.accountId, 30);
    const r = await rest(t, 'POST', '/account/sending-ip', { key: a.apiKey, body: { mode: 'live' } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({
      ip: DEDICATED,
      helo_name: HELO,
      status: 'provisioning',
      provisioning_mode: 'live',
      phase: 'checking_address',
      configuration_set: `dedicated-${a.accountId}`,
      monthly_price_usd: '24.95',
    });
    expect(r.body.warmup.schedule).toEqual([
      { day: 1, daily_cap: 2, date: null },
      { day: 2, daily_cap: 3, date: null },
    ]);
    const warming = await waitFor('the row warming', async () => {
      const g = await rest(t, 'GET', '/account/sending-ip', { key: a.apiKey });
      return g.body.status === 'warming' ? g.body : null;
    });
    expect(warming).toMatchObject({ phase: 'warmup_day_1_of_2', warmup: { day: 1, today_cap: 2, sent_today: 0 } });
    expect(warming.note).toContain('at most 2 messages');
    const provisioned = await events(t, a.apiKey, 'account.sending_ip.provisioned');
    expect(provisioned).toHaveLength(1);
    expect(provisioned[0]!.data).toMatchObject({ ip: DEDICATED, helo_name: HELO, provisioning_mode: 'live', status: 'warming' });
    const charges = await t.db.ledgerEntry.findMany({ where: { accountId: a.accountId, type: 'dedicated_ip' } });
    expect(charges.map((c) => c.amountMicros)).toEqual([-24_950_000n]);
    // Over tRPC (the SDK) the same row.
    const sdk = createBoxesClient({ baseUrl: t.url, apiKey: a.apiKey });
    expect(await sdk.sendingIp.get.query()).toMatchObject({ ip: DEDICATED, status: 'warming' });
  });

  it('a second row, or the address taken by another account: 409', async () => {
    const again = await rest(t, 'POST', '/account/sending-ip', { key: a.apiKey, body: { mode: 'live' } });
    expect(again.status).toBe(409);
    expect(again.body.error).toMatchObject({ code: 'sending_ip_exists', sending_ip: { ip: DEDICATED } });
    await topUp(other.accountId, 30);
    const taken = await rest(t, 'POST', '/account/sending-ip', { key: other.apiKey, body: { mode: 'live' } });
    expect(taken.status).toBe(409);
    expect(taken.body.error.code).toBe('sending_ip_unavailable');
  });

  it('warm-up day 1 (cap 2): two messages leave from 127.0.0.2 with its HELO name, the third through the shared address; every one carries the configuration set', async () => {
    const seen = await sendEach(a, 3, 'day1');
    expect({ dedicated: fromDedicated(seen), shared: fromShared(seen) }).toEqual({ dedicated: 2, shared: 1 });
    for (const s of seen) expect(s.raw).toMatch(new RegExp(`^X-Boxes-Configuration-Set: dedicated-${a.accountId}\\r?$`, 'm'));
    const g = await rest(t, 'GET', '/account/sending-ip', { key: a.apiKey });
    expect(g.body.warmup).toMatchObject({ day: 1, today_cap: 2, sent_today: 2 });
  });

  it('an account without one keeps the shared address and carries no configuration set', async () => {
    const seen = await sendEach(other, 2, 'shared');
    expect(fromShared(seen)).toBe(2);
    for (const s of seen) expect(s.raw).not.toContain('X-Boxes-Configuration-Set');
  });

  it('warm-up day 2 (cap 3), then active with no cap', async () => {
    clock.advance(DAY);
    const day2 = await rest(t, 'GET', '/account/sending-ip', { key: a.apiKey });
    expect(day2.body).toMatchObject({ status: 'warming', phase: 'warmup_day_2_of_2', warmup: { day: 2, today_cap: 3, sent_today: 0 } });
    const seen2 = await sendEach(a, 4, 'day2');
    expect({ dedicated: fromDedicated(seen2), shared: fromShared(seen2) }).toEqual({ dedicated: 3, shared: 1 });

    clock.advance(DAY);
    const active = await rest(t, 'GET', '/account/sending-ip', { key: a.apiKey });
    expect(active.body).toMatchObject({ status: 'active', phase: 'warmed_up', warmup: { day: 3, today_cap: null } });
    const seen3 = await sendEach(a, 4, 'day3');
    expect(fromDedicated(seen3)).toBe(4);
  });

  it('a bulk job leaves from the dedicated IP too', async () => {
    const tag = randomUUID().slice(0, 8);
    const to = [1, 2, 3].map((i) => `bulk-${tag}-${i}@remote.test`);
    const job = await rest(t, 'POST', '/messages/send/bulk', { key: a.apiKey, body: { messages: to.map((x) => ({ to: x, subject: 'bulk', text: 'bulk' })) } });
    expect(job.status, JSON.stringify(job.body)).toBe(200);
    await waitFor('the bulk job to reach the MX', () => to.every((x) => sink.to(x).length === 1), 30_000);
    const seen = to.flatMap((x) => sink.to(x));
    expect({ dedicated: fromDedicated(seen), shared: fromShared(seen) }).toEqual({ dedicated: 3, shared: 0 });
  });

  it('the billing cycle charges each later month once', async () => {
    const now = clock.now();
    const nextMonth = Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 2);
    clock.advance(nextMonth - now.getTime());
    await t.runtime.worker!.billing.cycle();
    await t.runtime.worker!.billing.cycle();
    const charges = await t.db.ledgerEntry.findMany({ where: { accountId: a.accountId, type: 'dedicated_ip' }, orderBy: { createdAt: 'asc' } });
    expect(charges.map((c) => c.amountMicros)).toEqual([-24_950_000n, -24_950_000n]);
    expect(charges.map((c) => c.idempotencyKey)).toEqual([expect.stringMatching(/^dedicated_ip:sip_/), expect.stringMatching(/^dedicated_ip:sip_/)]);
    const usage = await rest(t, 'GET', '/account/credit/usage', { key: a.apiKey });
    expect(JSON.stringify(usage.body)).toContain('dedicated_ip');
    // A mandatory recurring debit: it took the balance below zero (30 - 2 x 24.95), and sending waits for a top-up.
    const balance = await rest(t, 'GET', '/account/credit/balance', { key: a.apiKey });
    expect(balance.body).toMatchObject({ deficit: true, sending_blocked: true });
    await topUp(a.accountId, 30);
  });

  it('DELETE tears it down: event, shared address again, no configuration set, the address free for another account', async () => {
    const del = await rest(t, 'DELETE', '/account/sending-ip', { key: a.apiKey });
    expect(del.status, JSON.stringify(del.body)).toBe(200);
    expect(del.body).toMatchObject({ deleted: true, ip: DEDICATED });
    expect((await rest(t, 'GET', '/account/sending-ip', { key: a.apiKey })).status).toBe(404);
    expect((await rest(t, 'DELETE', '/account/sending-ip', { key: a.apiKey })).status).toBe(404);
    const gone = await events(t, a.apiKey, 'account.sending_ip.deprovisioned');
    expect(gone.map((e) => e.data)).toEqual([expect.objectContaining({ ip: DEDICATED, provisioning_mode: 'live' })]);
    const seen = await sendEach(a, 2, 'after');
    expect(fromShared(seen)).toBe(2);
    for (const s of seen) expect(s.raw).not.toContain('X-Boxes-Configuration-Set');

    const taken = await rest(t, 'POST', '/account/sending-ip', { key: other.apiKey, body: {} });
    expect(taken.status, JSON.stringify(taken.body)).toBe(200);
    expect(taken.body).toMatchObject({ ip: DEDICATED, provisioning_mode: 'live' });
    await rest(t, 'DELETE', '/account/sending-ip', { key: other.apiKey });
  });
});

describe('a simulated dedicated IP', () => {
  it('starts at warming, says it routes nothing, costs nothing, and mail keeps the shared address', async () => {
    const s = await signupAccount(t, 'ip-sim@example.com');
    const r = await rest(t, 'POST', '/account/sending-ip', { key: s.apiKey, body: { mode: 'simulated' } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({
      status: 'warming',
      provisioning_mode: 'simulated',
      phase: 'simulated',
      monthly_price_usd: '0',
      configuration_set: `dedicated-${s.accountId}`,
    });
    expect(r.body.ip).toMatch(/^198\.51\.100\.\d+$/);
    expect(r.body.note).toContain('nothing is routed');
    expect(r.body.warmup.schedule.map((d: { daily_cap: number }) => d.daily_cap)).toEqual([2, 3]);
    expect((await events(t, s.apiKey, 'account.sending_ip.provisioned')).map((e) => e.data)).toEqual([
      expect.objectContaining({ provisioning_mode: 'simulated', status: 'warming' }),
    ]);
    expect(await t.db.ledgerEntry.count({ where: { accountId: s.accountId, type: 'dedicated_ip' } })).toBe(0);

    const seen = await sendEach(s, 3, 'sim');
    expect(fromShared(seen)).toBe(3);
    // The configuration set is carried while the row exists, simulated too.
    for (const m of seen) expect(m.raw).toContain(`X-Boxes-Configuration-Set: dedicated-${s.accountId}`);
    // Over MCP, the same row.
    const client = new Client({ name: 'boxes-e2e', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${s.apiKey}` } } }));
    try {
      const tool = await client.callTool({ name: 'sendingIp_get', arguments: {} });
      expect(tool.isError, JSON.stringify(tool.content)).toBeFalsy();
      expect(tool.structuredContent).toMatchObject({ provisioning_mode: 'simulated', phase: 'simulated' });
    } finally {
      await client.close();
    }
    expect((await rest(t, 'DELETE', '/account/sending-ip', { key: s.apiKey })).status).toBe(200);
  });
});

describe('an address this machine cannot bind', () => {
  it('stays provisioning, says why, and routes nothing', async () => {
    // 192.0.2.77 (TEST-NET-1) is no address of this machine. No worker here: the provisioning job is run by hand.
    const t2 = await startTestServer({ env: { SENDING_IPS: '192.0.2.77=mail-x.ipfwd.test' } });
    try {
      const a = await signupAccount(t2, 'ip-unbindable@example.com');
      await t2.db.$transaction((tx) =>
        postEntries(t2.svc, tx, a.accountId, [{ type: 'topup', amountMicros: 30_000_000n, idempotencyKey: `test-topup:${randomUUID()}` }]),
      );
      const r = await rest(t2, 'POST', '/account/sending-ip', { key: a.apiKey, body: { mode: 'live' } });
      expect(r.body).toMatchObject({ ip: '192.0.2.77', status: 'provisioning' });
      await expect(finishProvisioning(t2.svc, r.body.id)).rejects.toThrow(/cannot be bound/);
      const g = await rest(t2, 'GET', '/account/sending-ip', { key: a.apiKey });
      expect(g.body).toMatchObject({ status: 'provisioning', phase: 'checking_address' });
      expect(g.body.note).toMatch(/cannot bind 192\.0\.2\.77: EADDRNOTAVAIL/);
      expect(await events(t2, a.apiKey, 'account.sending_ip.provisioned')).toEqual([]);
    } finally {
      await t2.stop();
    }
  });
});
