/**
 * Pushing the event stream to an account's callback webhook: in order, at least once. The account row keeps a
 * cursor (the last seq delivered or given up) and the failed attempts on the next event; the caller (the
 * worker) holds a per-account lock so one drainer runs per account across all instances. A failure schedules
 * a retry and stops the drain: later events wait, so the receiver always sees seq order.
 */
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import { WEBHOOK_MAX_ATTEMPTS } from '@boxes/jobs';
import type { Event, Prisma } from '@boxes/db';
import { k, poolRows, rows, sql, tbl, type CompiledQuery } from '@boxes/db';
import { appendEvent } from '../events/append';
import { toApiEvent } from '../events/read';
import type { Services } from '../shared/context';
import { open } from '../shared/crypto';
import { newId } from '../shared/ids';
import { secretsOf, signatureHeaders, signingSecrets, type SigningSecrets } from './secret';
import { readFileSync } from 'node:fs';
import { type guardedLookup, guardedLookup as guardedLookupImpl } from './url-guard';
import type { WebhookDeliveryStatus } from '@boxes/schemas';

export interface WebhookDeps {
  lookup: ReturnType<typeof guardedLookup>;
  /**
   * Trusted CAs: the system roots plus an extra one (WEBHOOK_CA_FILE), built once into a TLS context, or undefined
   * for the system roots. A context, not a `ca` list: the https agent keys its connection pool by a string built
   * from the request's options, `ca` included (180 KB joined on every request).
   */
  secureContext?: tls.SecureContext | undefined;
  /** Keep-alive connections, reused across deliveries to the same endpoint (new ones go through lookup). */
  agent?: https.Agent | undefined;
  timeoutMs: number;
  retryDelayMs: (failedAttempts: number) => number;
  /** Give-up age of an event, in ms (3 days, scaled in tests). */
  giveUpAfterMs: number;
  /** Arranges for the account's drains to run again at the given time (`endpointId`: a webhook endpoint's retry). */
  scheduleRetry: (accountId: string, at: Date, endpointId?: string) => Promise<void>;
  /** True once the caller is shutting down: the drain stops after the event in hand. */
  stopping?: () => boolean;
}

export interface PostResult {
  ok: boolean;
  status: number | null;
  error: string | null;
  latencyMs: number;
}

/** One POST, 2xx within the timeout counts; redirects are not followed; non-public addresses are refused. */
export function postWebhook(
  url: string,
  headers: Record<string, string>,
  body: string,
  deps: Pick<WebhookDeps, 'lookup' | 'secureContext' | 'timeoutMs' | 'agent'>,
): Promise<PostResult> {
  const started = performance.now();
  return new Promise((resolve) => {
    let settled = false;
    const done = (r: Omit<PostResult, 'latencyMs'>) => {
      if (settled) return;
      settled = true;
      resolve({ ...r, latencyMs: Math.round(performance.now() - started) });
    };
    // Node skips the lookup hook for a literal IP address, so the connect-time check would never see one (a URL
    // stored under an earlier WEBHOOK_ALLOW_PRIVATE): run the same check on it before connecting.
    let host: string;
    try {
      host = new URL(url).hostname.replace(/^\[|\]$/g, '');
    } catch {
      return done({ ok: false, status: null, error: 'not a URL' });
    }
    if (net.isIP(host)) {
      deps.lookup(host, { all: true }, (err) => {
        if (err) done({ ok: false, status: null, error: err.code === 'EREFUSEDADDRESS' ? `refused: ${err.message}` : err.message });
        else send();
      });
    } else send();
    function send() {
      const req = https.request(
        url,
        {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'user-agent': 'Boxes-Webhooks/1', 'content-length': Buffer.byteLength(body), ...headers },
          lookup: deps.lookup as never,
          // Handed on to tls.connect (https.RequestOptions does not list it).
          ...({ secureContext: deps.secureContext } as object),
          timeout: deps.timeoutMs,
          agent: deps.agent ?? false,
        },
        (res) => {
          res.resume();
          res.on('end', () => {
            const status = res.statusCode ?? 0;
            done({ ok: status >= 200 && status < 300, status, error: status >= 300 && status < 400 ? 'redirects are not followed' : null });
          });
          res.on('error', (err) => done({ ok: false, status: res.statusCode ?? null, error: err.message }));
        },
      );
      req.setTimeout(deps.timeoutMs, () => req.destroy(new Error(`no response within ${deps.timeoutMs} ms`)));
      req.on('error', (err: NodeJS.ErrnoException) =>
        done({ ok: false, status: null, error: err.code === 'EREFUSEDADDRESS' ? `refused: ${err.message}` : err.message }),
      );
      req.end(body);
    }
  });
}

/** The JSON a webhook (and MQTT) receives for an event: the event as GET /events serves it. */
export function eventPayload(event: Parameters<typeof toApiEvent>[0]): string {
  return JSON.stringify(toApiEvent(event));
}

/**
 * The JSON the signup callback receives for an event. `signup.completed` carries the owner key once: to the
 * callback, unless the signup's claim took it first. The key is kept sealed only until then, and marked as on its
 * way while this POST runs, so a claim meanwhile waits. A retry carries it only when the signup has no claim: once
 * a POST carrying it failed, the key belongs to the claim.
 */
async function callbackPayload(svc: Services, event: Parameters<typeof toApiEvent>[0], retry: boolean): Promise<{ body: string; carriesKey: boolean }> {
  const api = toApiEvent(event);
  if (event.type === 'signup.completed') {
    let q = k
      .updateTable('signup_intents')
      .set({ api_key_sending_at: sql<Date>`now()` })
      .where('account_id', '=', event.accountId)
      .where('api_key_enc', 'is not', null);
    if (retry) q = q.where('claim_secret_hash', 'is', null);
    const [intent] = await rows(svc.db, q.returning('api_key_enc'));
    if (intent?.api_key_enc) {
      return { body: JSON.stringify({ ...api, api_key: open(svc.secretKey, intent.api_key_enc).toString('utf8') }), carriesKey: true };
    }
  }
  return { body: JSON.stringify(api), carriesKey: false };
}

/** Events read per round of a drain. */
const DRAIN_BATCH = 100;
/** Successful deliveries recorded together. */
const FLUSH_EVERY = 20;

type PushDueRow = {
  i: number;
  callback_webhook: string | null;
  cursor: number;
  webhook_attempts: number;
  webhook_next_attempt_at: Date | null;
  chain_seq: number;
  webhook_secret_enc: string | null;
  webhook_secret_prev_enc: string | null;
  webhook_secret_prev_until: Date | null;
  mqtt_live: boolean;
  events: {
    id: string;
    account_id: string;
    seq: number;
    type: string;
    box_id: string | null;
    data: Prisma.JsonValue;
    created_at: string;
    prev_hash: string;
    hash: string;
  }[];
};
export type PushDue = Omit<PushDueRow, 'events' | 'i'> & { events: Event[] };

type DueRequest = { accountId: string; channel: 'webhook' | 'mqtt'; after: number | null; limit: number };
type DueBatch = Map<string, { req: DueRequest; done: Promise<PushDue | null>; resolve: (r: PushDue | null) => void; reject: (e: unknown) => void }>;
const dueBatches = new WeakMap<Services, DueBatch>();

/**
 * What a drain needs of an account (the push hot path, docs/ARCHITECTURE.md, "Hot paths"): its push state and
 * chain head, the sealed webhook secrets, and the first `limit` events after `after` (the drainer's own cursor)
 * or, when it has none yet, after the channel's stored cursor; `cursor` is always the stored one. Reads asked
 * for in the same turn of the event loop (an account's webhook and MQTT drains woken by the same NOTIFY, and
 * other accounts' woken with them) go out as one statement.
 */
export function readPushDue(
  svc: Services,
  accountId: string,
  channel: 'webhook' | 'mqtt',
  limit: number,
  after: number | null = null,
): Promise<PushDue | null> {
  let batch = dueBatches.get(svc);
  if (!batch) {
    const fresh: DueBatch = new Map();
    batch = fresh;
    dueBatches.set(svc, fresh);
    setImmediate(() => {
      dueBatches.delete(svc);
      readDueBatch(svc, fresh);
    });
  }
  const key = `${accountId}\n${channel}\n${after}\n${limit}`;
  const known = batch.get(key);
  if (known) return known.done;
  let resolve!: (r: PushDue | null) => void;
  let reject!: (e: unknown) => void;
  const done = new Promise<PushDue | null>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  batch.set(key, { req: { accountId, channel, after, limit }, done, resolve, reject });
  return done;
}

/** readDueBatch's statement, compiled once: its parameters are the requests' account ids, channels, afters and limits. */
let readDueStatement: CompiledQuery<PushDueRow> | undefined;
function readDue(): CompiledQuery<PushDueRow> {
  if (readDueStatement) return readDueStatement;
  const a = tbl('accounts', 'a');
  const c = tbl('iot_credentials', 'c');
  const ev = tbl('events');
  const cursorColumn = sql<number>`CASE WHEN r.ch = 'webhook' THEN ${a.webhook_cursor} ELSE ${a.mqtt_cursor} END`;
  readDueStatement = sql<PushDueRow>`
    SELECT r.i::int AS i, ${a.callback_webhook}, ${cursorColumn} AS cursor, ${a.webhook_attempts}, ${a.webhook_next_attempt_at}, ${a.chain_seq},
      ${a.webhook_secret_enc}, ${a.webhook_secret_prev_enc}, ${a.webhook_secret_prev_until},
      EXISTS (SELECT 1 FROM ${c.$} WHERE ${c.account_id} = ${a.id} AND ${c.revoked_at} IS NULL) AS mqtt_live,
      COALESCE((SELECT json_agg(e ORDER BY e.seq) FROM (
        SELECT ${ev.id}, ${ev.account_id}, ${ev.seq}, ${ev.type}, ${ev.box_id}, ${ev.data}, ${ev.created_at}, ${ev.prev_hash}, ${ev.hash} FROM ${ev.$}
        WHERE ${ev.account_id} = ${a.id} AND ${ev.seq} > COALESCE(r.after, ${cursorColumn}) ORDER BY ${ev.seq} LIMIT r.lim) e), '[]'::json) AS events
    FROM unnest(${[]}::text[], ${[]}::text[], ${[]}::int[], ${[]}::int[]) WITH ORDINALITY AS r(id, ch, after, lim, i)
    JOIN ${a.$} ON ${a.id} = r.id`.compile(k);
  return readDueStatement;
}

function readDueBatch(svc: Services, batch: DueBatch): void {
  const reqs = [...batch.values()];
  // On the pg pool (poolRows): one of these per wake-up, where Prisma's client cost more than the statement's own client side.
  poolRows<PushDueRow>(svc.db, {
    ...readDue(),
    parameters: [reqs.map((x) => x.req.accountId), reqs.map((x) => x.req.channel), reqs.map((x) => x.req.after), reqs.map((x) => x.req.limit)],
  }).then(
    (found) => {
      const byIndex = new Map(found.map((r) => [r.i, r]));
      reqs.forEach((x, n) => {
        const r = byIndex.get(n + 1);
        x.resolve(r ? toDue(r) : null);
      });
    },
    (err) => {
      for (const x of reqs) x.reject(err);
    },
  );
}

function toDue(r: PushDueRow): PushDue {
  const { i: _i, ...rest } = r;
  const events: Event[] = r.events.map(
    (e) =>
      ({
        id: e.id,
        accountId: e.account_id,
        seq: e.seq,
        type: e.type,
        boxId: e.box_id,
        data: e.data,
        createdAt: new Date(e.created_at),
        prevHash: e.prev_hash,
        hash: e.hash,
      }) as Event,
  );
  return { ...rest, events };
}

/**
 * A drainer's view of one account's stream to a channel, kept while it holds the account's lock: the cursor in
 * memory (ahead of the stored one by the deliveries not yet recorded), so each round reads only what is new.
 */
export interface PushStream {
  /** Delivers what is due, in order, until caught up or a failure asks for a retry. */
  drain(): Promise<void>;
  /** Records what was delivered since the last flush (the cursor, and for webhooks the delivery log). */
  flush(): Promise<void>;
}

/**
 * The account's callback webhook as a stream. Successes are recorded (cursor and delivery log) once per run of
 * them, not per event: every FLUSH_EVERY deliveries, when the caller flushes (it does so when the stream has been
 * idle a moment and before it lets the lock go), and before any failure is recorded. A crash re-sends at most
 * what was not recorded, which at-least-once delivery allows. One statement per flush.
 */
export function webhookStream(svc: Services, deps: WebhookDeps, accountId: string): PushStream {
  /** Delivered up to here (memory) and recorded up to here (the stored cursor); null until the first read. */
  let cursor: number | null = null;
  let stored = 0;
  let pending: (Omit<Prisma.WebhookDeliveryCreateManyInput, 'accountId' | 'status'> & { status: WebhookDeliveryStatus })[] = [];
  let clearKey = false;
  /** The signing secrets last opened, under the sealed columns they were opened from. */
  let opened: { sealed: string | null; secrets: SigningSecrets } | null = null;
  const flush = async () => {
    if (cursor === null || (cursor === stored && !pending.length && !clearKey)) return;
    const logged = pending.map((d) => ({
      id: d.id,
      event_id: d.eventId,
      seq: d.seq,
      event_type: d.eventType,
      url: d.url,
      attempt: d.attempt,
      status: d.status,
      status_code: d.statusCode ?? null,
      error: d.error ?? null,
      latency_ms: d.latencyMs ?? null,
    }));
    const acc = tbl('accounts');
    const wd = tbl('webhook_deliveries');
    const si = tbl('signup_intents');
    await poolRows(
      svc.db,
      sql<{ done: number }>`
      WITH acc AS (
        UPDATE ${acc.$} SET ${acc.webhook_cursor} = ${cursor}, ${acc.webhook_attempts} = 0, ${acc.webhook_next_attempt_at} = NULL
        WHERE ${acc.id} = ${accountId} AND ${acc.webhook_cursor} = ${stored}
      ), log AS (
        INSERT INTO ${wd.$} (${wd.id}, ${wd.account_id}, ${wd.event_id}, ${wd.seq}, ${wd.event_type}, ${wd.url}, ${wd.attempt}, ${wd.status}, ${wd.status_code}, ${wd.error}, ${wd.latency_ms}, ${wd.created_at})
        SELECT d.id, ${accountId}, d.event_id, d.seq, d.event_type, d.url, d.attempt, d.status, d.status_code, d.error, d.latency_ms, now()
        FROM jsonb_to_recordset(${JSON.stringify(logged)}::jsonb)
          AS d(id text, event_id text, seq int, event_type text, url text, attempt int, status text, status_code int, error text, latency_ms int)
      ), intent AS (
        UPDATE ${si.$} SET ${si.api_key_enc} = NULL, ${si.api_key_sending_at} = NULL WHERE ${si.account_id} = ${accountId} AND ${clearKey}
      )
      SELECT 1 AS done`,
    );
    stored = cursor;
    pending = [];
    clearKey = false;
  };
  const drain = async () => {
    for (let guard = 0; guard < 1_000; guard++) {
      if (deps.stopping?.()) return flush();
      const a = await readPushDue(svc, accountId, 'webhook', DRAIN_BATCH, cursor);
      if (!a) return;
      if (cursor !== null && a.cursor !== stored) {
        // The stored cursor moved under this drainer (a new URL starts from the head): record what was delivered
        // (the cursor stays where it was moved to) and go on from there.
        await flush();
        cursor = null;
        continue;
      }
      if (cursor === null) cursor = stored = a.cursor;
      if (!a.callback_webhook || cursor >= a.chain_seq) return;
      if (a.webhook_next_attempt_at && a.webhook_next_attempt_at.getTime() > Date.now()) return; // a retry is scheduled
      const url = a.callback_webhook;
      // A batch of what is due, with the account state and the secrets read once for all of it.
      const events = a.events;
      if (!events.length || events[0]!.seq !== cursor + 1) return;
      // The secrets are opened once per drainer, again only when their sealed columns (or the previous one's
      // liveness) differ from what they were opened from.
      const sealed = a.webhook_secret_enc
        ? [
            a.webhook_secret_enc,
            a.webhook_secret_prev_enc,
            a.webhook_secret_prev_until?.getTime(),
            (a.webhook_secret_prev_until?.getTime() ?? 0) > Date.now(),
          ].join('\n')
        : null;
      if (sealed === null || opened?.sealed !== sealed) {
        opened = {
          sealed,
          secrets: a.webhook_secret_enc
            ? secretsOf(svc, {
                webhookSecretEnc: a.webhook_secret_enc,
                webhookSecretPrevEnc: a.webhook_secret_prev_enc,
                webhookSecretPrevUntil: a.webhook_secret_prev_until,
              })
            : await signingSecrets(svc, accountId),
        };
      }
      const secrets = opened.secrets;
      let failedBefore = a.webhook_attempts;
      for (const event of events) {
        if (deps.stopping?.()) return flush();
        const { body, carriesKey } = await callbackPayload(svc, event, failedBefore > 0);
        const result = await postWebhook(url, signatureHeaders(secrets, event.id, body), body, deps);
        const attempt = failedBefore + 1;
        const base = {
          id: newId('whd'),
          accountId,
          eventId: event.id,
          seq: event.seq,
          eventType: event.type,
          url,
          attempt,
          statusCode: result.status,
          error: result.error,
          latencyMs: result.latencyMs,
        };
        if (result.ok) {
          pending.push({ ...base, status: 'delivered' });
          if (carriesKey) clearKey = true;
          cursor = event.seq;
          failedBefore = 0;
          if (pending.length >= FLUSH_EVERY) await flush();
          continue;
        }
        await flush();
        // The POST that carried the owner key failed: the key is no longer on its way (the claim may take it).
        if (carriesKey) await svc.db.signupIntent.updateMany({ where: { accountId }, data: { apiKeySendingAt: null } });
        // Only the drainer holding the lock moves the cursor; the where clause makes a stale drainer a no-op.
        const at = { id: accountId, webhookCursor: cursor };
        const old = Date.now() - event.createdAt.getTime() > deps.giveUpAfterMs;
        if (attempt >= WEBHOOK_MAX_ATTEMPTS || old) {
          await svc.db.$transaction(async (tx) => {
            await tx.account.updateMany({ where: at, data: { webhookCursor: event.seq, webhookAttempts: 0, webhookNextAttemptAt: null } });
            await tx.webhookDelivery.create({ data: { ...base, status: 'failed' satisfies WebhookDeliveryStatus } });
            // A signup with a claim keeps the key for it: the callback gave up, the claim is the way left.
            if (event.type === 'signup.completed') await tx.signupIntent.updateMany({ where: { accountId, claimSecretHash: null }, data: { apiKeyEnc: null } });
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
          svc.db.account.updateMany({ where: at, data: { webhookAttempts: attempt, webhookNextAttemptAt: next } }),
          svc.db.webhookDelivery.create({ data: { ...base, status: 'retrying' satisfies WebhookDeliveryStatus, nextRetryAt: next } }),
        ]);
        await deps.scheduleRetry(accountId, next);
        // Read the state again on the next round: the attempts and the retry time are the stored ones now.
        cursor = null;
        return;
      }
      // Caught up with the head read in the same query: nothing to read again (a later event wakes the drainer).
      if (cursor >= a.chain_seq) return;
    }
  };
  return { drain, flush };
}

/** A manual redelivery of one event (outside the ordered stream), recorded like any attempt. */
export async function redeliver(
  svc: Services,
  deps: Pick<WebhookDeps, 'lookup' | 'secureContext' | 'timeoutMs' | 'agent'>,
  accountId: string,
  deliveryId: string,
) {
  const d = await svc.db.webhookDelivery.findFirst({ where: { id: deliveryId, accountId, endpointId: null } });
  if (!d) return null;
  const a = await svc.db.account.findUniqueOrThrow({ where: { id: accountId }, select: { callbackWebhook: true } });
  const event = await svc.db.event.findUniqueOrThrow({ where: { id: d.eventId } });
  if (!a.callbackWebhook) return { delivery: null, reason: 'no callback webhook is set' };
  const body = eventPayload(event);
  const result = await postWebhook(a.callbackWebhook, signatureHeaders(await signingSecrets(svc, accountId), event.id, body), body, deps);
  const row = await svc.db.webhookDelivery.create({
    data: {
      id: newId('whd'),
      accountId,
      eventId: event.id,
      seq: event.seq,
      eventType: event.type,
      url: a.callbackWebhook,
      attempt: 1,
      status: (result.ok ? 'delivered' : 'failed') satisfies WebhookDeliveryStatus,
      statusCode: result.status,
      error: result.error,
      latencyMs: result.latencyMs,
      redelivery: true,
    },
  });
  return { delivery: row, reason: null };
}

const httpDepsCache = new WeakMap<object, Pick<WebhookDeps, 'lookup' | 'secureContext' | 'timeoutMs' | 'agent'>>();

/** The HTTP side of webhook delivery as configured (URL guard, extra CA, timeout). */
export function webhookHttpDeps(config: Services['config']): Pick<WebhookDeps, 'lookup' | 'secureContext' | 'timeoutMs' | 'agent'> {
  let deps = httpDepsCache.get(config);
  if (!deps) {
    deps = {
      lookup: guardedLookupImpl({ allowPrivate: config.webhook.allowPrivate }),
      secureContext: config.webhook.caFile
        ? tls.createSecureContext({ ca: [...tls.rootCertificates, readFileSync(config.webhook.caFile, 'utf8')] })
        : undefined,
      timeoutMs: config.webhook.timeoutMs,
      // A TLS handshake per event would cap each account's ordered stream at a few dozen events a second.
      agent: new https.Agent({ keepAlive: true, keepAliveMsecs: 10_000, maxSockets: 256, maxFreeSockets: 64, timeout: 30_000, scheduling: 'lifo' }),
    };
    httpDepsCache.set(config, deps);
  }
  return deps;
}
