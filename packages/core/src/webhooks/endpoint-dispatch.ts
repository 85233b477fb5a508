/**
 * Pushing to webhook endpoints: each endpoint is its own ordered stream over the account's events (its cursor,
 * attempts and next attempt live on its row), filtered by its event types and boxes, signed with its own secret
 * and sent with its custom headers. The caller (the worker) drains each endpoint under its own lock and
 * concurrently with the others, so an endpoint that hangs or is down delays only itself: a request gets the
 * webhook timeout, a failure schedules that endpoint's retry and stops only its drain.
 *
 * Hot path (README "Hot paths"): a drain reads its endpoint, the chain head and the next matching events in one
 * typed statement, and records a run of successes (cursor and delivery log) in one more.
 */
import { WEBHOOK_MAX_ATTEMPTS } from '@boxes/jobs';
import type { Event, Prisma } from '@boxes/db';
import { rows, sql, tbl } from '@boxes/db';
import type { WebhookDeliveryStatus } from '@boxes/schemas';
import type { BoxScope } from '../boxes/boxes';
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';
import { newId } from '../shared/ids';
import { eventPayload, postWebhook, type WebhookDeps } from './dispatch';
import { endpointHeaders, endpointSecrets, findEndpoint } from './endpoints';
import { signatureHeaders } from './secret';

/** Matching events read per round of a drain. */
const DRAIN_BATCH = 100;
/** Successful deliveries recorded together. */
const FLUSH_EVERY = 20;

type EventRow = {
  id: string;
  account_id: string;
  seq: number;
  type: string;
  box_id: string | null;
  data: Prisma.JsonValue;
  created_at: string;
  prev_hash: string;
  hash: string;
};

/**
 * An endpoint's push state, its sealed secrets and headers, the account's chain head, and the first `limit`
 * events after its cursor that pass its filters (types: exact or a "prefix.*"; boxes: the event's box), in one
 * statement.
 */
export async function readEndpointDue(svc: Services, endpointId: string, limit: number) {
  const e = tbl('webhook_endpoints', 'e');
  const a = tbl('accounts', 'a');
  const ev = tbl('events', 'ev');
  const found = await rows(
    svc.db,
    sql<{
      account_id: string;
      url: string;
      enabled: boolean;
      cursor: number;
      attempts: number;
      next_attempt_at: Date | null;
      secret_enc: string;
      secret_prev_enc: string | null;
      secret_prev_until: Date | null;
      headers_enc: string | null;
      chain_seq: number;
      events: EventRow[];
    }>`
    SELECT ${e.account_id}, ${e.url}, ${e.enabled}, ${e.cursor}, ${e.attempts}, ${e.next_attempt_at}, ${e.secret_enc}, ${e.secret_prev_enc},
      ${e.secret_prev_until}, ${e.headers_enc}, ${a.chain_seq},
      COALESCE((SELECT json_agg(x ORDER BY x.seq) FROM (
        SELECT ${ev.id}, ${ev.account_id}, ${ev.seq}, ${ev.type}, ${ev.box_id}, ${ev.data}, ${ev.created_at}, ${ev.prev_hash}, ${ev.hash} FROM ${ev.$}
        WHERE ${ev.account_id} = ${e.account_id} AND ${ev.seq} > ${e.cursor} AND ${ev.seq} <= ${a.chain_seq}
          AND (COALESCE(cardinality(${e.event_types}), 0) = 0
            OR EXISTS (SELECT 1 FROM unnest(${e.event_types}) p WHERE p = ${ev.type} OR (right(p, 2) = '.*' AND starts_with(${ev.type}, left(p, -1)))))
          AND (COALESCE(cardinality(${e.box_ids}), 0) = 0 OR ${ev.box_id} = ANY(${e.box_ids}))
        ORDER BY ${ev.seq} LIMIT ${limit}) x), '[]'::json) AS events
    FROM ${e.$} JOIN ${a.$} ON ${a.id} = ${e.account_id} WHERE ${e.id} = ${endpointId}`,
  );
  const r = found[0];
  if (!r) return null;
  const events: Event[] = r.events.map(
    (x) =>
      ({
        id: x.id,
        accountId: x.account_id,
        seq: x.seq,
        type: x.type,
        boxId: x.box_id,
        data: x.data,
        createdAt: new Date(x.created_at),
        prevHash: x.prev_hash,
        hash: x.hash,
      }) as Event,
  );
  return { ...r, events };
}

type Pending = {
  id: string;
  event_id: string;
  seq: number;
  event_type: string;
  url: string;
  attempt: number;
  status: WebhookDeliveryStatus;
  status_code: number | null;
  error: string | null;
  latency_ms: number | null;
};

/** Delivers what is due to one endpoint, in order, until caught up or a failure asks for a retry. */
export async function drainEndpoint(svc: Services, deps: WebhookDeps, endpointId: string): Promise<void> {
  for (let guard = 0; guard < 1_000; guard++) {
    if (deps.stopping?.()) return;
    const d = await readEndpointDue(svc, endpointId, DRAIN_BATCH);
    if (!d?.enabled || d.cursor >= d.chain_seq) return;
    if (d.next_attempt_at && d.next_attempt_at.getTime() > Date.now()) return; // a retry is scheduled
    const accountId = d.account_id;
    const url = d.url;
    const secrets = endpointSecrets(svc, { secretEnc: d.secret_enc, secretPrevEnc: d.secret_prev_enc, secretPrevUntil: d.secret_prev_until });
    const custom = endpointHeaders(svc, d.headers_enc);
    let cursor = d.cursor;
    let stored = d.cursor;
    let failedBefore = d.attempts;
    let pending: Pending[] = [];
    // The cursor and the log of a run of successes, in one statement; a stale drainer (the cursor moved under
    // it: the endpoint was re-enabled or moved) leaves the cursor alone.
    const flush = async () => {
      if (cursor === stored && !pending.length) return;
      const we = tbl('webhook_endpoints');
      const wd = tbl('webhook_deliveries');
      await rows(
        svc.db,
        sql<{ done: number }>`
        WITH ep AS (
          UPDATE ${we.$} SET ${we.cursor} = ${cursor}, ${we.attempts} = 0, ${we.next_attempt_at} = NULL
          WHERE ${we.id} = ${endpointId} AND ${we.cursor} = ${stored}
        ), log AS (
          INSERT INTO ${wd.$} (${wd.id}, ${wd.account_id}, ${wd.endpoint_id}, ${wd.event_id}, ${wd.seq}, ${wd.event_type}, ${wd.url}, ${wd.attempt}, ${wd.status}, ${wd.status_code}, ${wd.error}, ${wd.latency_ms}, ${wd.created_at})
          SELECT x.id, ${accountId}, ${endpointId}, x.event_id, x.seq, x.event_type, x.url, x.attempt, x.status, x.status_code, x.error, x.latency_ms, now()
          FROM jsonb_to_recordset(${JSON.stringify(pending)}::jsonb)
            AS x(id text, event_id text, seq int, event_type text, url text, attempt int, status text, status_code int, error text, latency_ms int)
          -- An endpoint deleted meanwhile takes its log with it: nothing to record.
          WHERE EXISTS (SELECT 1 FROM ${we.$} WHERE ${we.id} = ${endpointId})
        )
        SELECT 1 AS done`,
      );
      stored = cursor;
      pending = [];
    };
    for (const event of d.events) {
      if (deps.stopping?.()) return flush();
      const body = eventPayload(event);
      const result = await postWebhook(url, { ...custom, ...signatureHeaders(secrets, event.id, body) }, body, deps);
      const attempt = failedBefore + 1;
      const base = {
        id: newId('whd'),
        event_id: event.id,
        seq: event.seq,
        event_type: event.type,
        url,
        attempt,
        status_code: result.status,
        error: result.error,
        latency_ms: result.latencyMs,
      };
      if (result.ok) {
        pending.push({ ...base, status: 'delivered' });
        cursor = event.seq;
        failedBefore = 0;
        if (pending.length >= FLUSH_EVERY) await flush();
        continue;
      }
      await flush();
      const row = {
        id: base.id,
        accountId,
        endpointId,
        eventId: event.id,
        seq: event.seq,
        eventType: event.type,
        url,
        attempt,
        statusCode: result.status,
        error: result.error,
        latencyMs: result.latencyMs,
      };
      const at = { id: endpointId, cursor };
      const old = Date.now() - event.createdAt.getTime() > deps.giveUpAfterMs;
      if (attempt >= WEBHOOK_MAX_ATTEMPTS || old) {
        await svc.db.$transaction(async (tx) => {
          await tx.webhookEndpoint.updateMany({ where: at, data: { cursor: event.seq, attempts: 0, nextAttemptAt: null } });
          await tx.webhookDelivery.create({ data: { ...row, status: 'failed' satisfies WebhookDeliveryStatus } });
          // No failure event for a failure event: a dead endpoint must not grow the log without end.
          if (event.type !== 'webhook.delivery_failed') {
            await appendEvent({
              db: tx,
              accountId,
              type: 'webhook.delivery_failed',
              data: {
                event_id: event.id,
                seq: event.seq,
                event_type: event.type,
                attempts: attempt,
                last_status: result.status,
                last_error: result.error,
                url,
                endpoint_id: endpointId,
              },
            });
          }
        });
        cursor = event.seq;
        stored = cursor;
        failedBefore = 0;
        continue;
      }
      const next = new Date(Date.now() + deps.retryDelayMs(attempt));
      await svc.db.$transaction([
        svc.db.webhookEndpoint.updateMany({ where: at, data: { attempts: attempt, nextAttemptAt: next } }),
        svc.db.webhookDelivery.create({ data: { ...row, status: 'retrying' satisfies WebhookDeliveryStatus, nextRetryAt: next } }),
      ]);
      await deps.scheduleRetry(accountId, next, endpointId);
      return;
    }
    // Fewer matches than asked for: nothing else up to the head read with them is for this endpoint.
    if (d.events.length < DRAIN_BATCH) cursor = d.chain_seq;
    await flush();
    if (cursor >= d.chain_seq) return;
  }
}

/** A manual redelivery of one event of an endpoint's log (outside its ordered stream), recorded like any attempt. */
export async function redeliverToEndpoint(
  svc: Services,
  deps: Pick<WebhookDeps, 'lookup' | 'secureContext' | 'timeoutMs' | 'agent'>,
  input: { accountId: string; scope: BoxScope; id: string; deliveryId: string },
) {
  const e = await findEndpoint(svc, input);
  const d = await svc.db.webhookDelivery.findFirst({ where: { id: input.deliveryId, accountId: input.accountId, endpointId: e.id } });
  if (!d) return null;
  const event = await svc.db.event.findUniqueOrThrow({ where: { id: d.eventId } });
  const body = eventPayload(event);
  const headers = { ...endpointHeaders(svc, e.headersEnc), ...signatureHeaders(endpointSecrets(svc, e), event.id, body) };
  const result = await postWebhook(e.url, headers, body, deps);
  return svc.db.webhookDelivery.create({
    data: {
      id: newId('whd'),
      accountId: input.accountId,
      endpointId: e.id,
      eventId: event.id,
      seq: event.seq,
      eventType: event.type,
      url: e.url,
      attempt: 1,
      status: (result.ok ? 'delivered' : 'failed') satisfies WebhookDeliveryStatus,
      statusCode: result.status,
      error: result.error,
      latencyMs: result.latencyMs,
      redelivery: true,
    },
  });
}

/** An endpoint's delivery log, newest first. */
export async function endpointDeliveries(
  svc: Services,
  input: { accountId: string; scope: BoxScope; id: string; status?: WebhookDeliveryStatus | undefined; limit: number },
) {
  const e = await findEndpoint(svc, input);
  return svc.db.webhookDelivery.findMany({
    where: { endpointId: e.id, ...(input.status ? { status: input.status } : {}) },
    orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
    take: input.limit,
  });
}
