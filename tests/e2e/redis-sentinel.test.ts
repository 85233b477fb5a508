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

describe('Redis Sentinel failover under sends', () => {
  it('the primary killed mid-burst: the replica is promoted, the service follows without a restart, every accepted send is delivered exactly once', async () => {
    const accepted = new Map<number, string>();
    const unexpected: string[] = [];
    let refused = 0;
    let networkErrors = 0;
    let running = true;
    let next = 0;
    let firstAcceptedAfterKill: number | null = null;
    let killedAt = 0;
    const sender = async () => {
      while (running) {
        const i = next++;
        if (i >= SENDS) return;
        for (;;) {
          let res: { status: number; body: any } | null = null;
          const startedAt = Date.now();
          try {
            res = await rest(t, 'POST', '/messages/send', {
              key: a.apiKey,
              body: { to: `burst-${i}@outside.test`, subject: `burst ${i}`, text: `message ${i}`, idempotency_key: `burst-${i}` },
            });
          } catch {
            networkErrors++;
          }
          if (res?.status === 200) {
            accepted.set(i, res.body.rfc_message_id);
            // The first request made after the kill that was accepted (one already in flight may finish before).
            if (killedAt && startedAt > killedAt && firstAcceptedAfterKill === null) firstAcceptedAfterKill = Date.now() - killedAt;
            break;
          }
          if (res?.status === 503 && res.body?.error?.code === 'service_unavailable') refused++;
          else if (res) unexpected.push(`send ${i}: ${res.status} ${JSON.stringify(res.body).slice(0, 300)}`);
          // The sender's retry: the same message under the same idempotency key, a moment later.
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    };
    const load = Promise.all(Array.from({ length: SENDERS }, sender));
    try {
      await waitFor('sends accepted before the kill', () => accepted.size >= KILL_AFTER, 60_000);
      const oldPort = await rs.primaryPort();
      const primary = rs.nodes.find((n) => n.port === oldPort)!;
      const replica = rs.nodes.find((n) => n.port !== oldPort)!;
      // What the primary had written that its replica had not yet acknowledged, at the kill (bytes of the stream).
      const info = String(await redisCommand(oldPort, 'INFO', 'replication'));
      const masterOffset = Number(/master_repl_offset:(\d+)/.exec(info)?.[1]);
      const replicaOffset = Number(/slave0:.*offset=(\d+)/.exec(info)?.[1]);
      await primary.kill();
      killedAt = Date.now();
      const acceptedAtKill = accepted.size;
      const newPort = await waitFor(
        'the sentinels to promote the replica',
        async () => {
          const p = await rs.primaryPort().catch(() => oldPort);
          return p !== oldPort ? p : null;
        },
        60_000,
      );
      const failoverMs = Date.now() - killedAt;
      expect(newPort).toBe(replica.port);
      await load;
      running = false;

      expect(unexpected).toEqual([]);
      expect(accepted.size).toBe(SENDS);

      // The service followed: its connections answer from the new primary.
      expect(await t.svc.redis.ping()).toBe('PONG');
      const role = (await t.svc.jobs.connection.call('ROLE')) as [string];
      expect(role[0]).toBe('master');
      expect((await fetch(`${t.url}/readyz`)).status).toBe(200);

      // Every delivery recorded, then every accepted Message-ID at the sink exactly once.
      await waitFor(
        'every delivery to be delivered',
        async () => (await t.db.delivery.count({ where: { accountId: a.accountId, status: { not: 'delivered' } } })) === 0,
        120_000,
      );
      const ids = [...accepted.values()];
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
      const twice = ids.filter((id) => (counts.get(id) ?? 0) > 1);
      const missing = ids.filter((id) => !counts.has(id));
      const strangers = [...counts.keys()].filter((id) => !ids.includes(id));
      const stored = await t.db.message.count({ where: { accountId: a.accountId, direction: 'sent' } });
      console.log(
        [
          `sentinel: ${accepted.size} sends accepted (${acceptedAtKill} before the kill); ${refused} answers 503 and ${networkErrors} failed requests on the way, each retried under its idempotency key`,
          `sentinel: primary :${oldPort} killed (SIGKILL) with ${masterOffset - replicaOffset} bytes of replication stream not yet acknowledged by the replica; replica :${newPort} promoted ${failoverMs} ms later; the first send made after the kill accepted ${firstAcceptedAfterKill ?? 'n/a'} ms after it`,
          `sentinel: ${stored} messages stored; sink: ${sink.messages.length} messages, ${counts.size} distinct Message-IDs; delivered twice ${twice.length}, missing ${missing.length}, not accepted ${strangers.length}`,
        ].join('\n'),
      );
      expect(stored).toBe(SENDS);
      expect({ twice, missing, strangers }).toEqual({ twice: [], missing: [], strangers: [] });
      expect(sink.messages.length).toBe(SENDS);
      expect(refused + networkErrors).toBeGreaterThan(0);

      const v = await rest(t, 'GET', '/events/verify', { key: a.apiKey });
      expect(v.body.ok, JSON.stringify(v.body)).toBe(true);
    } finally {
      running = false;
      await load.catch(() => undefined);
    }
  }, 300_000);
});
