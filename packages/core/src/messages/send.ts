/**
 * POST /messages/send: plan the message (messages/plan.ts, shared with bulk jobs: validation, sender, lists,
 * thread, sealed body), check the credit and reserve, store the message and one delivery per recipient in one
 * transaction, then enqueue the deliveries. The call returns once the message is durably queued; if enqueueing
 * fails after commit, the sweeper (apps/worker) picks it up.
 */
import canonicalize from 'canonicalize';
import type { Account, ApiKey, Message, Tx } from '@boxes/db';
import { MAX_CONTEXT_BYTES, MAX_RECIPIENTS, type NewEvent, type SendInput, type SendOutput } from '@boxes/schemas';
import type { z } from 'zod';
import { microsToCents, microsToUsd } from '../credit/prices';
import { lockAccountsCredit, messagePrice, planReservation, type LockedAccount } from '../credit/ledger';
import { groupCommitOf } from '../shared/group-commit';
import { chainEvent, eventsInsert, EVENTS_CHANNEL, type EventRow } from '../events/append';
import type { BoxScope } from '../boxes/boxes';
import { sha256Hex } from '../shared/crypto';
import type { Services } from '../shared/context';
import { AppError, isUniqueViolation } from '../shared/errors';
import { newId } from '../shared/ids';
import { domainOf } from './addresses';
import { checkSendLoop } from './loop';
import { checkMessage, loadSendState, planMessage, type MessagePlan } from './plan';
import { passed, type PolicyCheck } from '../audit/evidence';
import { scheduledTime } from './schedule';
import type { DeliveryStatus, MessageStatus } from '@boxes/schemas';

type Input = z.infer<typeof SendInput>;
type Output = z.infer<typeof SendOutput>;

export interface SendCaller {
  account: Account;
  /** The key that sends; none for sends the service makes on the account's behalf (auto-forwarding). */
  key?: ApiKey;
  boxScope: BoxScope;
  /** Filled with the checks that ran and passed (the evidence envelope); omitted when nobody asks. */
  checks?: PolicyCheck[];
}

export async function sendMessage(svc: Services, caller: SendCaller, input: Input): Promise<Output> {
  const accountId = caller.account.id;
  const { idempotency_key: idemKey, ...request } = input;
  const requestHash = sha256Hex(canonicalize(request) ?? '');

  if (idemKey) {
    const prior = await svc.db.message.findUnique({ where: { accountId_idempotencyKey: { accountId, idempotencyKey: idemKey } } });
    if (prior) {
      const out = replay(prior, requestHash);
      caller.checks?.push(passed('idempotency', `the same message was sent before under this idempotency_key: its first response is replayed (${prior.id})`));
      return out;
    }
  }

  // The plan (messages/plan.ts, shared with bulk jobs): validation, sender, lists, suppression, thread, body.
  const checked = checkMessage(svc.config, input, { name: undefined, address: caller.account.primaryAddress });
  const checks = caller.checks;
  if (checks) {
    if (idemKey) checks.push(passed('idempotency', 'the idempotency_key was not used before'));
    checks.push(passed('recipients', `${checked.recipients.length} distinct recipient(s), at most ${MAX_RECIPIENTS}`));
    if (input.headers) checks.push(passed('header_rules', `${Object.keys(checked.headers).length} custom header(s): none reserved, no line breaks`));
    if (input.context !== undefined) checks.push(passed('context_size', `context within ${MAX_CONTEXT_BYTES} bytes`));
  }
  const state = await loadSendState(svc, accountId, [checked]);
  const date = new Date();
  const planned = planMessage(svc, caller, checked, state, date);
  const { box, deliverTo: recipients } = planned;
  if (checks) {
    checks.push(passed('from_domain', `${box.address} is a box on the account domain ${domainOf(box.address)}`));
    checks.push(passed('domain_verified', `${domainOf(box.address)} is live (proven) and may send`));
    if (caller.boxScope) checks.push(passed('box_restriction', `the key is restricted to ${caller.boxScope.length} box(es), ${box.address} among them`));
    checks.push(
      passed(
        'suppression',
        `${recipients.length} recipient(s) not on the suppression list${planned.suppressed.length ? `; ${planned.suppressed.length} suppressed and skipped` : ''}`,
      ),
    );
  }
  // A scheduled send (send_at) is stored and reserved now; its deliveries wait (messages/schedule.ts).
  const sendAt = scheduledTime(input.send_at, date);
  const warning = await checkSendLoop(svc, accountId, recipients.length === 1 ? recipients[0]! : null);

  const plan: SendPlan = {
    accountId,
    planned,
    // Local delivery only to live domains; mail to a pending claim's name goes out like any other domain's.
    routes: recipients.map((r) => (state.hosted.has(domainOf(r)) ? 'local' : 'remote')),
    sendAt,
    idemKey: idemKey ?? null,
    requestHash,
    date,
    warning,
  };
  let response: Output;
  let deliveryIds: string[] = [];
  try {
    const result = await sendersOf(svc).add(plan);
    if ('error' in result) throw result.error;
    response = result.out;
    deliveryIds = result.deliveryIds;
  } catch (err) {
    // Two sends with the same idempotency_key at once: the loser replays (or is rejected) like a later repeat.
    if (idemKey && isUniqueViolation(err)) {
      const prior = await svc.db.message.findUnique({ where: { accountId_idempotencyKey: { accountId, idempotencyKey: idemKey } } });
      if (prior) return replay(prior, requestHash);
    }
    throw err;
  }
  if (checks && response.recipients.length) {
    checks.push(
      passed(
        'credit',
        `${response.billing.messages} message(s) reserved under the account lock: ${response.billing.free_messages_used} free, ${response.billing.reserved_usd} USD held`,
      ),
    );
  }
  try {
    await svc.jobs.enqueueDeliveries(deliveryIds, sendAt ? Math.max(0, sendAt.getTime() - Date.now()) : 0);
  } catch {
    // Committed but not enqueued (Redis down): the worker's sweeper enqueues queued deliveries it finds.
  }
  return response;
}

function replay(prior: Message, requestHash: string): Output {
  if (prior.requestHash !== requestHash) {
    throw new AppError(
      'idempotency_key_reused',
      'This idempotency_key was already used for a different message; nothing was sent. Use a new key for a new message.',
      {
        message_id: prior.id,
      },
    );
  }
  return { ...(prior.response as unknown as Output), idempotent_replay: true };
}

/** Everything a send writes, decided before the transaction; only the credit and the chain head wait for the lock. */
interface SendPlan {
  accountId: string;
  planned: MessagePlan;
  routes: ('local' | 'remote')[];
  sendAt: Date | null;
  idemKey: string | null;
  requestHash: string;
  date: Date;
  warning: Output['warning'] | null;
}

interface StagedSend {
  plan: SendPlan;
  out: Output;
  deliveries: { id: string; recipient: string; route: string; held_micros: number; used_free: boolean; attachment_micros: number; surcharge_micros: number }[];
  event: EventRow;
  heldMicros: bigint;
  freeUsed: number;
}

type SendResult = { out: Output; deliveryIds: string[] } | { error: unknown };

/**
 * A send on the locked account row as it stands (credit, holds, the chain head): the reservation (402 when the
 * credit is short), the answer, the deliveries and mail.sent (or mail.scheduled). Moves the row's holds and
 * head in memory, so the next send of the same account in a batch stages on top of it.
 */
function stageSend(svc: Services, a: LockedAccount, sp: SendPlan): StagedSend {
  const p = sp.planned;
  const recipients = p.deliverTo;
  const reservation = recipients.length ? planReservation(svc, a, recipients.length, { attachmentBytes: p.attachmentBytes, trailer: p.withTrailer }) : null;
  const status = (recipients.length ? (sp.sendAt ? 'scheduled' : 'queued') : 'suppressed') satisfies MessageStatus;
  const deliveries = recipients.map((r, i) => ({
    id: newId('dlv'),
    recipient: r,
    route: sp.routes[i]!,
    held_micros: Number(reservation!.perRecipient[i]!.micros),
    used_free: reservation!.perRecipient[i]!.free,
    attachment_micros: Number(reservation!.perRecipient[i]!.attachmentMicros),
    surcharge_micros: Number(reservation!.perRecipient[i]!.surchargeMicros),
  }));
  const freeUsed = reservation?.freeUsed ?? 0;
  const heldMicros = reservation?.heldMicros ?? 0n;
  const out: Output = {
    message_id: p.messageId,
    rfc_message_id: p.rfcMessageId,
    thread_id: p.threadId,
    status,
    ...(sp.sendAt ? { send_at: sp.sendAt.toISOString() } : {}),
    from: p.from,
    recipients: recipients,
    suppressed: p.suppressed,
    billing: {
      messages: recipients.length,
      free_messages_used: freeUsed,
      paid_messages: recipients.length - freeUsed,
      price_per_message_usd: microsToUsd(messagePrice(svc)),
      reserved_usd: microsToUsd(heldMicros),
      free_messages_left: Math.max(0, a.free_messages_left - a.held_free_messages - freeUsed),
      credit_balance_cents: microsToCents(a.balance_micros),
    },
    ...(sp.warning ? { warning: sp.warning } : {}),
  };
  const facts = {
    message_id: p.messageId,
    rfc_message_id: p.rfcMessageId,
    thread_id: p.threadId,
    from: p.from,
    to: p.to,
    cc: p.cc,
    recipients: recipients.length,
    suppressed: p.suppressed,
    subject: p.subject ?? undefined,
    status,
    context: p.context ?? null,
  };
  const announced: NewEvent = sp.sendAt ? { type: 'mail.scheduled', data: { ...facts, send_at: sp.sendAt.toISOString() } } : { type: 'mail.sent', data: facts };
  const event = chainEvent(a, { accountId: sp.accountId, boxId: sp.planned.box.id, ...announced });
  a.held_micros += heldMicros;
  a.held_free_messages += freeUsed;
  a.chain_seq = event.seq;
  a.chain_hash = event.hash;
  return { plan: sp, out, deliveries, event, heldMicros, freeUsed };
}

/**
 * The staged sends in one statement: each account's holds and chain head, the messages (sealed bodies passed
 * as an array, not inside JSON), their deliveries and events, and a NOTIFY per account.
 */
async function writeSends(tx: Tx, staged: StagedSend[]): Promise<void> {
  const accounts = new Map<string, { id: string; held: string; free: number; seq: number; hash: string }>();
  for (const s of staged) {
    const prev = accounts.get(s.plan.accountId);
    accounts.set(s.plan.accountId, {
      id: s.plan.accountId,
      held: String((prev ? BigInt(prev.held) : 0n) + s.heldMicros),
      free: (prev?.free ?? 0) + s.freeUsed,
      seq: s.event.seq,
      hash: s.event.hash,
    });
  }
  const messages = staged.map((s, i) => {
    const p = s.plan.planned;
    return {
      i: i + 1,
      id: p.messageId,
      account_id: s.plan.accountId,
      box_id: p.box.id,
      status: s.out.status,
      rfc_message_id: p.rfcMessageId,
      in_reply_to: p.inReplyTo,
      refs: p.references,
      from_address: p.from,
      to_addresses: p.to,
      cc_addresses: p.cc,
      bcc_addresses: p.bcc,
      subject: p.subject,
      size_bytes: p.sizeBytes,
      context: p.context === undefined ? null : p.context,
      idempotency_key: s.plan.idemKey,
      request_hash: s.plan.requestHash,
      response: s.out,
      recorded_at: s.plan.date.toISOString(),
      thread_id: p.threadId,
      send_at: s.plan.sendAt?.toISOString() ?? null,
    };
  });
  const deliveries = staged.flatMap((s) =>
    s.deliveries.map((d) => ({
      ...d,
      message_id: s.plan.planned.messageId,
      account_id: s.plan.accountId,
      status: (s.plan.sendAt ? 'scheduled' : 'queued') satisfies DeliveryStatus,
    })),
  );
  const events = staged.map((s) => s.event);
  await tx.$queryRaw`
    WITH acc AS (
      UPDATE accounts a SET held_micros = a.held_micros + x.held, held_free_messages = a.held_free_messages + x.free, chain_seq = x.seq, chain_hash = x.hash
      FROM jsonb_to_recordset(${JSON.stringify([...accounts.values()])}::jsonb) AS x(id text, held bigint, free int, seq int, hash text)
      WHERE a.id = x.id
    ), m AS MATERIALIZED (
      SELECT m.*, b.body_enc, b.body_text
      FROM jsonb_to_recordset(${JSON.stringify(messages)}::jsonb) AS m(i int, id text, account_id text, box_id text, status text, rfc_message_id text,
        in_reply_to text, refs text[], from_address text, to_addresses text[], cc_addresses text[], bcc_addresses text[], subject text, size_bytes int,
        context jsonb, idempotency_key text, request_hash text, response jsonb, recorded_at timestamptz, thread_id text, send_at timestamptz)
      JOIN unnest(${staged.map((s) => s.plan.planned.bodyEnc)}::text[], ${staged.map((s) => s.plan.planned.searchText)}::text[])
        WITH ORDINALITY AS b(body_enc, body_text, i) ON b.i = m.i
    ), msg AS (
      INSERT INTO messages (id, account_id, box_id, direction, status, rfc_message_id, provider_message_id, in_reply_to, "references",
        from_address, to_addresses, cc_addresses, bcc_addresses, subject, size_bytes, body_enc, context, idempotency_key, request_hash,
        response, recorded_at, thread_id, send_at)
      SELECT m.id, m.account_id, m.box_id, 'sent', m.status, m.rfc_message_id, m.id, m.in_reply_to, m.refs,
        m.from_address, m.to_addresses, m.cc_addresses, m.bcc_addresses, m.subject, m.size_bytes, m.body_enc, m.context, m.idempotency_key, m.request_hash,
        m.response, m.recorded_at, m.thread_id, m.send_at
      FROM m
    ), fts AS (
      -- The search vector (search/vector.ts): the body text is a parameter of this statement, never stored.
      INSERT INTO message_search (message_id, account_id, box_id, direction, recorded_at, thread_id, tsv)
      SELECT m.id, m.account_id, m.box_id, 'sent', m.recorded_at, m.thread_id,
        boxes_search_vector(m.subject, array_to_string(array_prepend(m.from_address, m.to_addresses || m.cc_addresses || m.bcc_addresses), ' '), m.body_text, NULL)
      FROM m WHERE EXISTS (SELECT 1 FROM accounts a WHERE a.id = m.account_id AND a.search_indexing)
    ), dlv AS (
      INSERT INTO deliveries (id, message_id, account_id, recipient, status, route, held_micros, used_free, attachment_micros, surcharge_micros, created_at, updated_at)
      SELECT d.id, d.message_id, d.account_id, d.recipient, d.status, d.route, d.held_micros, d.used_free, d.attachment_micros, d.surcharge_micros, now(), now()
      FROM jsonb_to_recordset(${JSON.stringify(deliveries)}::jsonb)
        AS d(id text, message_id text, account_id text, recipient text, status text, route text, held_micros bigint, used_free boolean, attachment_micros bigint, surcharge_micros bigint)
    ), ev AS (
      ${eventsInsert(events)}
    )
    SELECT pg_notify(${EVENTS_CHANNEL}, n.id)::text AS notified FROM unnest(${[...accounts.keys()]}::text[]) AS n(id)`;
}

const SEND_TX = { maxWait: 10_000, timeout: 20_000 };

/**
 * This process's sends by group commit (README "Hot paths"): the sends that arrive while one batch is being
 * written share the next transaction: their accounts locked once, in id order (two batches never deadlock),
 * each staged in arrival order on its account's running state, all written in one statement. A send the
 * credit refuses (402) gets its own error and the others go on; a batch that fails as a whole (an
 * idempotency_key raced by two requests) is retried send by send.
 */
const sendersOf = (svc: Services) =>
  groupCommitOf<SendPlan, SendResult>(svc, 'sends', (plans) =>
    svc.db.$transaction(async (tx) => {
      const ids = [...new Set(plans.map((p) => p.accountId))].sort();
      const rows = new Map((await lockAccountsCredit(tx, ids)).map((a) => [a.id, a]));
      const staged: StagedSend[] = [];
      const results: SendResult[] = plans.map((p) => {
        try {
          const s = stageSend(svc, rows.get(p.accountId)!, p);
          staged.push(s);
          return { out: s.out, deliveryIds: s.deliveries.map((d) => d.id) };
        } catch (error) {
          return { error };
        }
      });
      if (staged.length) await writeSends(tx, staged);
      return results;
    }, SEND_TX),
  );
