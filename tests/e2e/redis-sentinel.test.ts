/**
 * Redis behind Sentinel, for real: one primary and one replica (redis-server on free loopback ports) watched by
 * three sentinels (`redis-server --sentinel`, quorum 2). The service finds the primary through them
 * (REDIS_SENTINELS, REDIS_SENTINEL_NAME). During a burst of sends the primary is killed with SIGKILL: the sentinels
 * promote the replica and the running service follows it without a restart. Senders retry what was refused
 * (503 while no primary answers) under the same idempotency key. Afterwards every accepted send has been delivered
 * to the local SMTP sink exactly once, counted by Message-ID: Redis replicates asynchronously, so jobs the old
 * primary acknowledged may be missing on the new one; PostgreSQL holds every delivery and the worker's sweep
 * enqueues the missing ones again (the job id is the delivery id, and a delivery already recorded is not sent).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  redisCommand,
  rest,
  signupAccount,
  startPrivateRedisSentinel,
  startTestServer,
  waitFor,
  type PrivateRedisSentinel,
  type TestAccount,
  type TestServer,
} from '@boxes/testing';
import { MailSink } from './mail-send-helpers';

const SENDS = 400;
const KILL_AFTER = 120;
const SENDERS = 6;

let rs: PrivateRedisSentinel;
let sink: MailSink;
let t: TestServer;
let a: TestAccount;

beforeAll(async () => {
  rs = await startPrivateRedisSentinel({ downAfterMs: 1000 });
  sink = new MailSink();
  await sink.start();
  t = await startTestServer({
    worker: true,
    resolver: sink.resolver(),
    // The per-key limit on (high), as in production: every call counts in Redis, so calls fail while no primary answers.
    env: { ...rs.env, KEY_RATE_LIMIT_PER_MINUTE: '1000000' },
  });
  a = await signupAccount(t, 'sentinel@example.com');
  await t.db.account.update({ where: { id: a.accountId }, data: { balanceMicros: 100_000_000n } });
}, 120_000);

afterAll(async () => {
  await t?.stop();
  await sink?.close();
  await rs?.destroy();
}, 60_000);

/** Message-ID headers of what the sink received, with how often each came. */
function sinkCounts(): Map<string, number> {
  const counts = new Map<string, number>();
  for (const m of sink.messages) {
    const head = m.raw
      .toString('latin1')
      .split(/\r?\n\r?\n/)[0]!
      .replace(/\r?\n[ \t]+/g, ' ');
    const id = /^message-id:\s*(<[^>]+>)/im.exec(head)?.[1];
    if (id) counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}

interface Burst {
  accepted: Map<number, string>;
  refused: number;
  networkErrors: number;
  unexpected: string[];
  acceptedAtFault: number;
  /** From the fault until the first request made after it was accepted (ms). */
  firstAcceptedAfterFault: number | null;
  faultAt: number;
}

/**
 * `total` sends to outside addresses from SENDERS senders, each retrying a refused send (503, a failed request)
 * under its idempotency key after 100 ms. After `faultAfter` were accepted, fault() runs while the sends go on.
 */
async function burst(tag: string, total: number, faultAfter: number, fault: () => Promise<void>): Promise<Burst> {
  const b: Burst = { accepted: new Map(), refused: 0, networkErrors: 0, unexpected: [], acceptedAtFault: 0, firstAcceptedAfterFault: null, faultAt: 0 };
  let next = 0;
  const sender = async () => {
    for (let i = next++; i < total; i = next++) {
      for (;;) {
        let res: { status: number; body: any } | null = null;
        const startedAt = Date.now();
        try {
          res = await rest(t, 'POST', '/messages/send', {
            key: a.apiKey,
            body: { to: `${tag}-${i}@outside.test`, subject: `${tag} ${i}`, text: `message ${i}`, idempotency_key: `${tag}-${i}` },
          });
        } catch {
          b.networkErrors++;
        }
        if (res?.status === 200) {
          b.accepted.set(i, res.body.rfc_message_id);
          // The first request made after the fault that was accepted (one already in flight may finish before).
          if (b.faultAt && startedAt > b.faultAt && b.firstAcceptedAfterFault === null) b.firstAcceptedAfterFault = Date.now() - b.faultAt;
          break;
        }
        if (res?.status === 503 && res.body?.error?.code === 'service_unavailable') b.refused++;
        else if (res) b.unexpected.push(`send ${i}: ${res.status} ${JSON.stringify(res.body).slice(0, 300)}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  };
  const load = Promise.all(Array.from({ length: SENDERS }, sender));
  await waitFor(`${faultAfter} sends accepted before the fault`, () => b.accepted.size >= faultAfter, 60_000);
  b.acceptedAtFault = b.accepted.size;
  b.faultAt = Date.now();
  await fault();
  await load;
  return b;
}

/** Waits for every delivery to be recorded and the sink to hold every accepted Message-ID; then the counts. */
async function settle(b: Burst): Promise<{ twice: string[]; missing: string[]; atSink: number }> {
  await waitFor(
    'every delivery to be delivered',
    async () => (await t.db.delivery.count({ where: { accountId: a.accountId, status: { not: 'delivered' } } })) === 0,
    120_000,
  );
  const ids = [...b.accepted.values()];
  await waitFor(
    'every accepted send at the sink',
    () => {
      const c = sinkCounts();
      return ids.every((id) => c.has(id));
    },
    30_000,
  );
  // A late second copy (a job run again after the failover) would arrive within a sweep or two.
  await new Promise((r) => setTimeout(r, 6_000));
  const counts = sinkCounts();
  return { twice: ids.filter((id) => (counts.get(id) ?? 0) > 1), missing: ids.filter((id) => !counts.has(id)), atSink: ids.length };
}

/** The service's connections answer from the given primary, without a restart. */
async function followed(port: number): Promise<void> {
  // A connection the sentinels just disconnected (a demoted primary's clients) is back within a retry or two.
  await waitFor(
    'the command connection to answer',
    () =>
      t.svc.redis.ping().then(
        (r) => r === 'PONG',
        () => false,
      ),
    10_000,
  );
  const role = (await t.svc.jobs.connection.call('ROLE')) as [string];
  expect(role[0]).toBe('master');
  const info = String(await t.svc.jobs.connection.info('server'));
  expect(/tcp_port:(\d+)/.exec(info)?.[1]).toBe(String(port));
  expect((await fetch(`${t.url}/readyz`)).status).toBe(200);
}

const promoted = (from: number) =>
  waitFor(
    'the sentinels to promote the replica',
    async () => {
      const p = await rs.primaryPort().catch(() => from);
      return p !== from ? p : null;
    },
    60_000,
  ).catch((err: Error) => {
    throw new Error(`${err.message}\n${rs.logs()}`);
  });

describe('Redis Sentinel failover under sends', () => {
  it('the primary killed (SIGKILL) mid-burst: the replica is promoted, the service follows without a restart, every accepted send is delivered exactly once', async () => {
    const oldPort = await rs.primaryPort();
    const primary = rs.nodes.find((n) => n.port === oldPort)!;
    let unacked = 0;
    let failoverMs = 0;
    let newPort = 0;
    const b = await burst('kill', SENDS, KILL_AFTER, async () => {
      // What the primary had written that its replica had not yet acknowledged, at the kill (bytes of the stream).
      const info = String(await redisCommand(oldPort, 'INFO', 'replication'));
      unacked = Number(/master_repl_offset:(\d+)/.exec(info)?.[1]) - Number(/slave0:.*offset=(\d+)/.exec(info)?.[1]);
      await primary.kill();
      const killedAt = Date.now();
      newPort = await promoted(oldPort);
      failoverMs = Date.now() - killedAt;
    });
    expect(b.unexpected).toEqual([]);
    expect(b.accepted.size).toBe(SENDS);
    expect(newPort).toBe(rs.nodes.find((n) => n.port !== oldPort)!.port);
    await followed(newPort);
    const { twice, missing, atSink } = await settle(b);
    const stored = await t.db.message.count({ where: { accountId: a.accountId, direction: 'sent', subject: { startsWith: 'kill ' } } });
    console.log(
      [
        `sentinel kill: ${b.accepted.size} sends accepted (${b.acceptedAtFault} before the kill); ${b.refused} answers 503 and ${b.networkErrors} failed requests on the way, each retried under its idempotency key`,
        `sentinel kill: primary :${oldPort} killed with ${unacked} bytes of replication stream not yet acknowledged by the replica; replica :${newPort} promoted ${failoverMs} ms later; the first send made after the kill accepted ${b.firstAcceptedAfterFault ?? 'n/a'} ms after it`,
        `sentinel kill: ${stored} messages stored; sink: ${sink.messages.length} messages, ${atSink} accepted Message-IDs, delivered twice ${twice.length}, missing ${missing.length}`,
      ].join('\n'),
    );
    expect(stored).toBe(SENDS);
    expect({ twice, missing }).toEqual({ twice: [], missing: [] });
    // Nothing reached the sink that was not accepted, and nothing twice: one message per accepted send.
    const accepted = new Set(b.accepted.values());
    expect([...sinkCounts().keys()].filter((id) => !accepted.has(id))).toEqual([]);
    expect(sink.messages.length).toBe(SENDS);
    expect(b.refused + b.networkErrors).toBeGreaterThan(0);
    const v = await rest(t, 'GET', '/events/verify', { key: a.apiKey });
    expect(v.body.ok, JSON.stringify(v.body)).toBe(true);
  }, 300_000);
});
