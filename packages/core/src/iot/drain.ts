/** Publishing an account's events to its MQTT topic, in order, from the account's MQTT cursor. */
import { exec, k } from '@boxes/db';
import type { Services } from '../shared/context';
import { eventPayload, readPushDue } from '../webhooks/dispatch';
import { mqttTopic } from './certificates';

export type PublishFn = (topic: string, payload: string) => Promise<void>;

const BATCH = 200;

/** Publishes what is due for one account; only accounts with a live credential have subscribers. */
export async function drainMqtt(svc: Services, publish: PublishFn, accountId: string): Promise<void> {
  for (;;) {
    // The credential check, the cursor, the head and the events in one query (readPushDue).
    const a = await readPushDue(svc, accountId, 'mqtt', BATCH);
    if (!a?.mqtt_live || a.cursor >= a.chain_seq || !a.events.length) return;
    let last = a.cursor;
    try {
      for (const e of a.events) {
        await publish(mqttTopic(accountId), await eventPayload(svc, e, false));
        last = e.seq;
      }
    } finally {
      if (last > a.cursor)
        await exec(svc.db, k.updateTable('accounts').set({ mqtt_cursor: last }).where('id', '=', accountId).where('mqtt_cursor', '=', a.cursor));
    }
    // Caught up with the head read in the same query: a later event wakes the drainer again.
    if (last >= a.chain_seq) return;
  }
}
