/**
 * Whether the service's connection to Redis is lost, for the calls that refuse at once while it is (trpc.ts).
 *
 * ioredis walks a lost connection round reconnecting -> connecting -> close -> reconnecting ... while Redis is
 * away, so 'connecting' alone does not mean "not yet connected": after the client has once been ready it means
 * "trying again", and a call let through in that moment would be served as if Redis were there (a route that
 * reads nothing of Redis answered 404 instead of 503 in one such window). Before the first 'ready' the call goes on,
 * so that a server starting beside a slow Redis is not refused for nothing.
 */
import type { EventEmitter } from 'node:events';

type RedisLike = Pick<EventEmitter, 'on'> & { status: string };

const GONE = new Set(['reconnecting', 'close', 'end']);
/** The clients seen ready at least once, and those whose 'ready' is listened to. */
const readyOnce = new WeakSet<object>();
const watched = new WeakSet<object>();

export function redisLost(redis: RedisLike): boolean {
  if (!watched.has(redis)) {
    watched.add(redis);
    redis.on('ready', () => readyOnce.add(redis));
  }
  if (redis.status === 'ready') {
    readyOnce.add(redis);
    return false;
  }
  return GONE.has(redis.status) || readyOnce.has(redis);
}
