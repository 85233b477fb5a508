/**
 * Fixed-window counters in Redis for calls that need no key (signup): enough to keep one client from
 * creating accounts without end, shared by every server process.
 */
import type { Services } from './context';
import { AppError } from './errors';

export async function rateLimit(svc: Pick<Services, 'redis' | 'config'>, input: { bucket: string; key: string; limit: number; windowSeconds: number; what: string }): Promise<void> {
  if (input.limit <= 0) return;
  const window = Math.floor(Date.now() / 1000 / input.windowSeconds);
  const name = `${svc.config.redisPrefix}:rl:${input.bucket}:${input.key}:${window}`;
  const [[, count]] = (await svc.redis.multi().incr(name).expire(name, input.windowSeconds).exec()) as [[Error | null, number]];
  if (count > input.limit) {
    const retryAfter = (window + 1) * input.windowSeconds - Math.floor(Date.now() / 1000);
    throw new AppError('rate_limited', `Too many ${input.what} from this address: at most ${input.limit} per ${input.windowSeconds / 60} minutes. Try again in ${retryAfter} s.`, {
      retry_after_seconds: retryAfter,
      limit: input.limit,
    });
  }
}
