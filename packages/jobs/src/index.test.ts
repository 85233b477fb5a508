import { afterEach, describe, expect, it, vi } from 'vitest';
import { connectRedis, createCommandRedis, describeRedisTarget, Jobs } from './index';

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

/** Keeps the event loop busy, as a process does while it loads and starts its apps. */
function busy(ms: number): void {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    /* spin */
  }
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('Redis connections at a busy start', () => {
  it('a command connection to a healthy Redis raises no connect timeout while the process is busy for 2 s', async () => {
    const redis = createCommandRedis(url);
    const errors: string[] = [];
    redis.on('error', (err: Error) => errors.push(err.message));
    try {
      // The socket is opened a few ticks after the constructor; the rest of the start then holds the loop.
      for (let i = 0; i < 20; i++) await Promise.resolve();
      await new Promise((r) => process.nextTick(r));
      busy(2000);
      expect(await redis.ping()).toBe('PONG');
      expect(errors).toEqual([]);
    } finally {
      redis.disconnect();
    }
  });

  it("the queues' connection errors (Redis unreachable) print no stack trace: they go to the connection's listeners", async () => {
    const printed = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    const redis = createCommandRedis('redis://127.0.0.1:1');
    const seen: string[] = [];
    redis.on('error', (err: Error) => seen.push(err.message));
    const jobs = new Jobs(redis, `boxes-test-jobs-${Date.now()}`);
    try {
      await new Promise((r) => setTimeout(r, 1500));
      expect(seen.length).toBeGreaterThan(0);
      expect(printed).not.toHaveBeenCalled();
    } finally {
      redis.disconnect();
      await jobs.close().catch(() => undefined);
    }
  });
});

describe('the connection factory', () => {
  it('a URL or a configuration without sentinels connects to that server', () => {
    const direct = connectRedis({ redisUrl: 'redis://:pw@cache.internal:6380/2', redisSentinel: null }, { lazyConnect: true, maxRetriesPerRequest: null });
    try {
      expect(direct.options).toMatchObject({ host: 'cache.internal', port: 6380, password: 'pw', db: 2, maxRetriesPerRequest: null });
      expect(direct.options.sentinels).toBeFalsy();
    } finally {
      direct.disconnect();
    }
    expect(describeRedisTarget('redis://127.0.0.1:6390')).toBe('127.0.0.1:6390');
  });

  it('with sentinels: asks them for the primary, with the URL giving credentials, database and TLS only', () => {
    const target = {
      redisUrl: 'rediss://queues:pw%40x@ignored.example:1/3',
      redisSentinel: {
        sentinels: [
          { host: '10.0.0.5', port: 26379 },
          { host: '::1', port: 26380 },
        ],
        name: 'mail-queues',
        password: 'sp',
      },
    };
    const r = connectRedis(target, { lazyConnect: true, maxRetriesPerRequest: 1 });
    try {
      expect(r.options).toMatchObject({
        sentinels: target.redisSentinel.sentinels,
        name: 'mail-queues',
        role: 'master',
        username: 'queues',
        password: 'pw@x',
        sentinelPassword: 'sp',
        db: 3,
        tls: {},
        enableTLSForSentinelMode: true,
        maxRetriesPerRequest: 1,
      });
      // Reconnects quickly while the sentinels still name a dead primary; READONLY (a demoted primary) reconnects.
      expect([1, 5, 50].map((n) => r.options.retryStrategy!(n))).toEqual([100, 500, 1000]);
      expect(r.options.reconnectOnError!(new Error("READONLY You can't write against a read only replica."))).toBe(2);
      expect(r.options.reconnectOnError!(new Error('ERR something else'))).toBe(false);
    } finally {
      r.disconnect();
    }
    expect(describeRedisTarget(target)).toBe('the primary "mail-queues" of the sentinels 10.0.0.5:26379, [::1]:26380');
  });
});
