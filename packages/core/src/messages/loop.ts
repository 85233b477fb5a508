/**
 * Looping single sends: many one-recipient sends to different addresses within a
 * minute are flagged with a warning, and once per ten minutes with a send.loop_detected event.
 */
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';

export const LOOP_WINDOW_SECONDS = 60;
export const LOOP_THRESHOLD = 20;

export async function checkSendLoop(svc: Services, accountId: string, singleRecipient: string | null) {
  if (!singleRecipient) return undefined;
  // Two adjacent windows counted together (PFCOUNT of both is their union), so a burst that straddles a window
  // boundary is still seen: the flag covers at least the last minute.
  const window = Math.floor(Date.now() / 1000 / LOOP_WINDOW_SECONDS);
  const key = `${svc.config.redisPrefix}:loop:${accountId}:${window}`;
  const previous = `${svc.config.redisPrefix}:loop:${accountId}:${window - 1}`;
  let distinct: number;
  try {
    // A pipeline, not MULTI/EXEC: one round trip either way, and the count needs no isolation (a send counted
    // by another request in between only makes the figure more current).
    const [[, ,], [, count]] = (await svc.redis
      .pipeline()
      .pfadd(key, singleRecipient)
      .pfcount(key, previous)
      .expire(key, LOOP_WINDOW_SECONDS * 3)
      .exec()) as [[unknown, unknown], [unknown, number], [unknown, unknown]];
    distinct = count;
  } catch {
    return undefined; // Redis trouble must not block sending.
  }
  if (distinct <= LOOP_THRESHOLD) return undefined;
  const message = `${distinct} single-recipient sends to different addresses in the last minute. Put such messages in one bulk job instead: POST /messages/send/bulk takes up to 5,000 messages and sends them in batches with a cool-off and a bounce breaker (see the guide: /docs/guide/bulk).`;
  const first = await svc.redis.set(`${svc.config.redisPrefix}:loop-event:${accountId}`, '1', 'EX', 600, 'NX').catch(() => null);
  if (first === 'OK') {
    await appendEvent({
      db: svc.db,
      accountId,
      type: 'send.loop_detected',
      data: { distinct_recipients_last_minute: distinct, advice: 'send these messages as one bulk job: POST /messages/send/bulk' },
    });
  }
  return { code: 'looping_single_sends', message };
}
