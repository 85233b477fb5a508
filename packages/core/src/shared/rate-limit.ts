/**
 * Fixed-window counters in Redis, shared by every server process: the per-client-address signup limit and the
 * per-key limit of every keyed call. A window starts with its first request and lasts windowSeconds on Redis's
 * own clock (the counter's TTL), so processes need no clock agreement; counting is one round trip.
 */
import type { Services } from './context';
import { AppError } from './errors';
import { serviceUnavailable } from './unavailable';

/** Where a counter stands after a request (what the RateLimit response fields report). */
export interface RateWindow {
  /** Requests allowed per window. */
  limit: number;
  windowSeconds: number;
  /** Requests left in the current window (0 once over). */
  remaining: number;
  /** Whole seconds until the current window ends (at least 1). */
  resetSeconds: number;
  /** Whether this request is over the limit (it must be refused). */
  limited: boolean;
}

type RateInput = { bucket: string; key: string; limit: number; windowSeconds: number };

const counterName = (svc: Pick<Services, 'config'>, input: RateInput) => `${svc.config.redisPrefix}:rl:${input.bucket}:${input.key}`;

function toWindow(input: RateInput, count: number, pttl: number, cost: number): RateWindow {
  const ms = pttl > 0 ? pttl : input.windowSeconds * 1000;
  return {
    limit: input.limit,
    windowSeconds: input.windowSeconds,
    remaining: Math.max(0, input.limit - count),
    resetSeconds: Math.max(1, Math.ceil(ms / 1000)),
    limited: cost > 0 && count > input.limit,
  };
}

/**
 * Counts cost requests (default 1) against the counter and reports where it stands; a cost of 0 only looks.
 * Requests over the limit are counted too, so a client that keeps trying stays refused until the window ends.
 */
export async function takeFromWindow(svc: Pick<Services, 'redis' | 'config'>, input: RateInput & { cost?: number }): Promise<RateWindow> {
  const name = counterName(svc, input);
  const cost = input.cost ?? 1;
  if (cost === 0) {
    const [[, raw], [, pttl]] = (await svc.redis.multi().get(name).pttl(name).exec()) as [[Error | null, string | null], [Error | null, number]];
    return toWindow(input, raw === null ? 0 : Number(raw), raw === null ? -2 : pttl, 0);
  }
  // SET NX starts a window with its TTL (works on every Redis version, unlike EXPIRE NX); INCRBY keeps the TTL.
  const [, [, count], [, pttl]] = (await svc.redis
    .multi()
    .set(name, 0, 'PX', input.windowSeconds * 1000, 'NX')
    .incrby(name, cost)
    .pttl(name)
    .exec()) as [unknown, [Error | null, number], [Error | null, number]];
  // A counter without a TTL (left by something else) would never reset: give it one.
  if (pttl < 0) await svc.redis.pexpire(name, input.windowSeconds * 1000);
  return toWindow(input, count, pttl, cost);
}

/** The signup limit: throws rate_limited (with retry_after_seconds) beyond limit calls per window; 0 is off. */
export async function rateLimit(svc: Pick<Services, 'redis' | 'config'>, input: RateInput & { what: string }): Promise<void> {
  if (input.limit <= 0) return;
  const w = await takeFromWindow(svc, input);
  if (w.limited) {
    throw new AppError(
      'rate_limited',
      `Too many ${input.what} from this address: at most ${input.limit} per ${input.windowSeconds / 60} minutes. Try again in ${w.resetSeconds} s.`,
      {
        retry_after_seconds: w.resetSeconds,
        limit: input.limit,
      },
    );
  }
}

/** How long a key's count may take before the call is refused as unavailable (Redis hung rather than gone). */
const KEY_COUNT_TIMEOUT_MS = 500;

/**
 * Counts a keyed call (cost 0: only looks) against the key's window of KEY_RATE_LIMIT_PER_MINUTE; null when the
 * limit is off. When Redis fails or does not answer in time the call is refused with 503 service_unavailable
 * (Retry-After) rather than served uncounted: the limit is what keeps one key from taking the service from
 * everyone, so it fails closed, as the signup limit does; the client retries once Redis is back.
 */
export async function takeKeyRate(svc: Pick<Services, 'redis' | 'config'>, keyId: string, cost = 1): Promise<RateWindow | null> {
  const { quota, windowSeconds } = svc.config.keyRateLimit;
  if (quota <= 0) return null;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('command timed out: the key rate count')), KEY_COUNT_TIMEOUT_MS);
  });
  try {
    return await Promise.race([takeFromWindow(svc, { bucket: 'key', key: keyId, limit: quota, windowSeconds, cost }), late]);
  } catch {
    throw serviceUnavailable();
  } finally {
    clearTimeout(timer);
  }
}

/** The error for a keyed call over its window. */
export function keyRateLimited(w: RateWindow): AppError {
  return new AppError(
    'rate_limited',
    `This API key has made more than ${w.limit} requests in ${w.windowSeconds} s; try again in ${w.resetSeconds} s. The RateLimit response header says what is left at any time.`,
    { retry_after_seconds: w.resetSeconds, limit: w.limit, window_seconds: w.windowSeconds },
  );
}
