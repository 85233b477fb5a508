/**
 * Looping single sends: many one-recipient sends to different addresses within a
 * minute are flagged with a warning, and once per ten minutes with a send.loop_detected event.
 */
import type { Redis } from 'ioredis';
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';

export const LOOP_WINDOW_SECONDS = 60;
export const LOOP_THRESHOLD = 20;
/** At most one send.loop_detected event an account in this many seconds. */
const LOOP_EVENT_SECONDS = 600;

/**
 * One round trip per send: the recipient counted into this minute's set, the count of the two windows, the
 * set's expiry and, once the count is over the threshold, the ten-minute event flag (SET NX) all run in Redis as
 * one script. As a pipeline and a separate SET the check was two round trips per send once tripped, and four
 * commands' worth of client objects.
 * KEYS: this window, the previous one, the event flag. ARGV: the recipient, the set's expiry (s), the threshold,
 * the flag's expiry (s). Answers [distinct recipients, 1 if this call set the flag else 0].
 */
const LOOP_SCRIPT = `
redis.call('PFADD', KEYS[1], ARGV[1])
local n = redis.call('PFCOUNT', KEYS[1], KEYS[2])
redis.call('EXPIRE', KEYS[1], ARGV[2])
if n > tonumber(ARGV[3]) and redis.call('SET', KEYS[3], '1', 'EX', ARGV[4], 'NX') then return {n, 1} end
return {n, 0}
`;
const LOOP_COMMAND = 'boxesSendLoop';
/** The Redis clients the script is defined on (ioredis runs it by EVALSHA, sending its text when Redis lacks it). */
const defined = new WeakSet<Redis>();

function countLoop(redis: Redis, keys: [string, string, string], args: (string | number)[]): Promise<[number, number]> {
  if (!defined.has(redis)) {
    redis.defineCommand(LOOP_COMMAND, { numberOfKeys: 3, lua: LOOP_SCRIPT });
    defined.add(redis);
  }
  const command = (redis as unknown as Record<string, (...a: (string | number)[]) => Promise<[number, number]>>)[LOOP_COMMAND]!;
  return command.call(redis, ...keys, ...args);
}

export async function checkSendLoop(svc: Services, accountId: string, singleRecipient: string | null) {
  if (!singleRecipient) return undefined;
  // Two adjacent windows counted together (PFCOUNT of both is their union), so a burst that straddles a window
  // boundary is still seen: the flag covers at least the last minute. The count needs no isolation (a send
  // counted by another request in between only makes the figure more current).
  const window = Math.floor(Date.now() / 1000 / LOOP_WINDOW_SECONDS);
  const prefix = `${svc.config.redisPrefix}:loop`;
  let distinct: number;
  let first: boolean;
  try {
    const [count, flagged] = await countLoop(
      svc.redis,
      [`${prefix}:${accountId}:${window}`, `${prefix}:${accountId}:${window - 1}`, `${svc.config.redisPrefix}:loop-event:${accountId}`],
      [singleRecipient, LOOP_WINDOW_SECONDS * 3, LOOP_THRESHOLD, LOOP_EVENT_SECONDS],
    );
    distinct = count;
    first = flagged === 1;
  } catch {
    return undefined; // Redis trouble must not block sending.
  }
  if (distinct <= LOOP_THRESHOLD) return undefined;
  const message = `${distinct} single-recipient sends to different addresses in the last minute. Put such messages in one bulk job instead: POST /messages/send/bulk takes up to 5,000 messages and sends them in batches with a cool-off and a bounce breaker (see the guide: /docs/guide/bulk).`;
  if (first) {
    await appendEvent({
      db: svc.db,
      accountId,
      type: 'send.loop_detected',
      data: { distinct_recipients_last_minute: distinct, advice: 'send these messages as one bulk job: POST /messages/send/bulk' },
    });
  }
  return { code: 'looping_single_sends', message };
}
