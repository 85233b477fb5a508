import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { redisLost } from './dependencies';

/** A stand-in with ioredis's status and events: the states are ioredis's own, driven by hand. */
function client(status: string) {
  return Object.assign(new EventEmitter(), { status });
}

describe('redisLost', () => {
  it('lets calls go on before the first connection, and refuses while the connection is away', () => {
    const r = client('connecting');
    expect(redisLost(r)).toBe(false);
    r.status = 'connect';
    expect(redisLost(r)).toBe(false);
    r.status = 'ready';
    r.emit('ready');
    expect(redisLost(r)).toBe(false);
    for (const status of ['close', 'reconnecting', 'end']) {
      r.status = status;
      expect(redisLost(r), status).toBe(true);
    }
  });

  it("counts 'connecting' and 'connect' after the client was once ready as lost (ioredis trying again)", () => {
    const r = client('wait');
    expect(redisLost(r)).toBe(false);
    // Ready while no call came: the event alone is remembered.
    r.status = 'ready';
    r.emit('ready');
    r.status = 'close';
    expect(redisLost(r)).toBe(true);
    r.status = 'connecting';
    expect(redisLost(r)).toBe(true);
    r.status = 'connect';
    expect(redisLost(r)).toBe(true);
    r.status = 'ready';
    expect(redisLost(r)).toBe(false);
  });
});
