/**
 * The one place where older stored payloads are brought to today's shape. Stored events never change (each is
 * hashed into its chain as written), so the API, webhooks, MQTT and SSE carry them as stored, and the catalogue
 * marks fields added later as optional. Code that wants today's shape of any event, old or new, reads it through
 * upcastEvent; each step below says since when the field exists and how it is derived for older events.
 *
 * SQL readers of event payloads use the same rules in their own form (packages/core events/payload-sql.ts).
 */
import type { BoxesEvent } from './events';
import type { EventData, EventType } from './event-catalogue';

/** Today's data of each type: the optional fields that upcastEvent always fills are required here. */
export interface CurrentEventData {
  'mail.received': EventData<'mail.received'> & { message_id: string };
}

/** An event in today's shape: BoxesEvent with CurrentEventData for the types that changed. */
export type CurrentEvent = {
  [T in EventType]: Omit<Extract<BoxesEvent, { type: T }>, 'data'> & { data: T extends keyof CurrentEventData ? CurrentEventData[T] : EventData<T> };
}[EventType];

type Upcasters = { [T in keyof CurrentEventData]: (data: EventData<T>) => CurrentEventData[T] };

const UPCASTERS: Upcasters = {
  // 1.3.0: every event about one message names it as data.message_id; mail.received had it only as message.id.
  'mail.received': (data) => ({ ...data, message_id: data.message_id ?? data.message.id }),
};

export function upcastEvent(e: BoxesEvent): CurrentEvent {
  const up = (UPCASTERS as Record<string, ((data: unknown) => unknown) | undefined>)[e.type];
  return (up ? { ...e, data: up(e.data) } : e) as CurrentEvent;
}
