/** Publishing an account's events to its MQTT topic, in order, from the account's MQTT cursor. */
import type { Services } from '../shared/context';
import { eventPayload } from '../webhooks/dispatch';
import { mqttTopic } from './certificates';

export type PublishFn = (topic: string, payload: string) => Promise<void>;

const BATCH = 200;

/** Publishes what is due for one account; only accounts with a live credential have subscribers. */
export async function drainMqtt(svc: Services, publish: PublishFn, accountId: string): Promise<void> {
  const live = await svc.db.iotCredential.findFirst({ where: { accountId, revokedAt: null }, select: { id: true } });
  if (!live) return;
  for (;;) {
    const a = await svc.db.account.findUnique({ where: { id: accountId }, select: { mqttCursor: true, chainSeq: true } });
    if (!a || a.mqttCursor >= a.chainSeq) return;
    const events = await svc.db.event.findMany({ where: { accountId, seq: { gt: a.mqttCursor } }, orderBy: { seq: 'asc' }, take: BATCH });
    if (!events.length) return;
    let last = a.mqttCursor;
    try {
      for (const e of events) {
        await publish(mqttTopic(accountId), await eventPayload(svc, e, false));
        last = e.seq;
      }
    } finally {
      if (last > a.mqttCursor) await svc.db.account.updateMany({ where: { id: accountId, mqttCursor: a.mqttCursor }, data: { mqttCursor: last } });
    }
  }
}
