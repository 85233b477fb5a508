import { afterEach, describe, expect, it, vi } from 'vitest';
import { createCommandRedis, Jobs } from './index';

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
