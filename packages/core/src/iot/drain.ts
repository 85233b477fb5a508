/** Publishing an account's events to its MQTT topic, in order, from the account's MQTT cursor. */
import { k, poolRows } from '@boxes/db';
import type { Services } from '../shared/context';
import { eventPayload, readPushDue, type PushStream } from '../webhooks/dispatch';
import { mqttTopic } from './certificates';

export type PublishFn = (topic: string, payload: string) => Promise<void>;

const BATCH = 200;
/** Publishes recorded together at most; the caller also flushes when the stream idles and before it lets go. */
const FLUSH_EVERY = 200;

/**
 * The account's MQTT topic as a stream. The cursor is recorded per run of publishes, not per event (see
 * FLUSH_EVERY and the caller's flushes): a crash re-publishes at most what was not recorded, which
 * at-least-once delivery allows.
 */
export function mqttStream(svc: Services, publish: PublishFn, accountId: string): PushStream {
  /** Published up to here (memory) and recorded up to here (the stored cursor); null until the first read. */
  let cursor: number | null = null;
  let stored = 0;
  const flush = async () => {
    if (cursor === null || cursor === stored) return;
    await poolRows(svc.db, k.updateTable('accounts').set({ mqtt_cursor: cursor }).where('id', '=', accountId).where('mqtt_cursor', '=', stored));
    stored = cursor;
  };
  const drain = async () => {
    for (let guard = 0; guard < 1_000; guard++) {
      // The credential check, the cursor, the head and the events in one query (readPushDue).
      const a = await readPushDue(svc, accountId, 'mqtt', BATCH, cursor);
      if (!a) return;
      if (cursor !== null && a.cursor !== stored) {
        // The stored cursor moved under this drainer (a new credential starts from the head): go on from there.
        cursor = null;
        continue;
      }
      if (cursor === null) cursor = stored = a.cursor;
      if (!a.mqtt_live || cursor >= a.chain_seq || !a.events.length) return;
      for (const e of a.events) {
        await publish(mqttTopic(accountId), eventPayload(e));
        cursor = e.seq;
        if (cursor - stored >= FLUSH_EVERY) await flush();
      }
      // Caught up with the head read in the same query: a later event wakes the drainer again.
      if (cursor >= a.chain_seq) return;
    }
  };
  return { drain, flush };
}
