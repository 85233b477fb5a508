/**
 * POST /messages/send: plan the message (messages/plan.ts, shared with bulk jobs: validation, sender, lists,
 * thread, sealed body), check the credit and reserve, store the message and one delivery per recipient in one
 * transaction, then enqueue the deliveries. The call returns once the message is durably queued; if enqueueing
 * fails after commit, the sweeper (apps/worker) picks it up.
 */
import canonicalize from 'canonicalize';
import type { Account, ApiKey, Message, SqlClient } from '@boxes/db';
import { commitWithNext, poolTransaction } from '@boxes/db';
import { MAX_CONTEXT_BYTES, MAX_RECIPIENTS, type NewEvent, type SendInput, type SendOutput } from '@boxes/schemas';
import type { z } from 'zod';
import { microsToCents, microsToUsd } from '../credit/prices';
import { lockAccountsCredit, messagePrice, planReservation, type LockedAccount } from '../credit/ledger';
import { groupCommitOf } from '../shared/group-commit';
import { writeBatch, type AccountChange } from '../store/write';
import type { DeliveryRow, MessageRow } from '../store/rows';
import type { BoxScope } from '../boxes/boxes';
import { sha256Hex } from '../shared/crypto';
import type { Services } from '../shared/context';
import { AppError, isUniqueViolation } from '../shared/errors';
import { newId } from '../shared/ids';
import { domainOf } from './addresses';
import { checkSendLoop } from './loop';
import { checkMessage, planMessage, readSendState, type MessagePlan } from './plan';
import { passed, type PolicyCheck } from '../audit/evidence';
import { scheduledTime } from './schedule';
import { describeStored, enqueueAttachmentText, type AttachmentMeta } from './attachments';
import type { DeliveryStatus, MessageStatus } from '@boxes/schemas';
import { guardSend } from '../guard/pause';
import { holdForReview, reviewDecision, type ReviewView } from '../reviews/reviews';

type Input = z.infer<typeof SendInput>;
type Output = z.infer<typeof SendOutput>;

export interface SendCaller {
  account: Account;
  /** The key that sends; none for sends the service makes on the account's behalf (auto-forwarding). */
  key?: ApiKey;
  boxScope: BoxScope;
  /** Filled with the checks that ran and passed (the evidence envelope); omitted when nobody asks. */
  checks?: PolicyCheck[];
  /** The draft this send is made of (POST /drafts/{id}/send): the message names it, once (messages.draft_id is unique). */
  draftId?: string;
  /**
   * Why owner review does not apply: the owner approved this very send (reviews/reviews.ts), or it is a copy
   * auto-forwarding makes to an address that confirmed it. Absent: the box's and the key's policy decide.
   */
  bypassReview?: 'approved' | 'auto_forward';
}

/** What a send answers: the queued message, or the review it waits in (202 on REST) when owner review holds it. */
export type SendOrHeld = Output | ReviewView;

/** Whether a send was held for the owner's review (nothing stored as a message, nothing reserved). */
export const heldForReview = (r: SendOrHeld): r is ReviewView => 'expires_at' in r;

/** A send that owner review cannot hold (auto-forwarding, an approval): its message. */
export function sentMessage(r: SendOrHeld): Output {
  if (heldForReview(r)) throw new AppError('internal', `send ${r.id} was held for review where none applies`);
  return r;
}

export async function sendMessage(svc: Services, caller: SendCaller, input: Input): Promise<SendOrHeld> {
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
  const state = await readSendState(svc, accountId, [checked]);
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
  // Pauses (403) then caps (429): the guard (guard/pause.ts) counts the message and its recipients. A send the
  // owner approved was counted when it was held for review: only the pauses apply to it now.
  const approved = caller.bypassReview === 'approved';
  const taken = await guardSend(svc, {
    accountId,
    key: caller.key,
    sends: [{ boxId: box.id, messages: approved ? 0 : 1, recipients: approved ? [] : recipients }],
    // Read with the send's state (readSendState): no statement of the guard's own.
    read: [
      {
        account_paused_at: state.accountPause.pausedAt,
        account_paused_by: state.accountPause.pausedBy,
        box_id: box.id,
        address: box.address,
        paused_at: box.pausedAt,
        paused_by: box.pausedBy,
        send_caps: box.sendCaps,
      },
    ],
  });
  // Owner review (reviews/reviews.ts): a send the box's or the key's policy holds is stored for the owner, not
  // as a message; nothing is reserved until an approval sends it through here again.
  if (!caller.bypassReview) {
    const decision = await reviewDecision(svc, { box, key: caller.key, recipients: planned.recipients });
    if (decision) {
      return holdForReview(
        svc,
        {
          account: caller.account,
          keyId: caller.key?.id ?? null,
          boxId: box.id,
          from: planned.from,
          to: planned.to,
          cc: planned.cc,
          bcc: planned.bcc,
          subject: planned.subject,
          sendAt,
          input,
          requestHash,
        },
        decision,
      );
    }
  }
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
    // Hashed here, before the transaction.
    attachments: describeStored(checked.attachments),
    draftId: caller.draftId ?? null,
  };
  let response: Output;
  let deliveryIds: string[] = [];
  try {
    const result = await sendersOf(svc).add(plan);
    if ('error' in result) throw result.error;
    response = result.out;
    deliveryIds = result.deliveryIds;
    await enqueueAttachmentText(svc, result.attachmentIds);
  } catch (err) {
    // Refused after all (402, a raced idempotency_key): what the caps counted goes back.
    await taken.refund().catch(() => undefined);
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
    if (deliveryIds.length) await enqueueDeliveries(svc, deliveryIds, sendAt ? Math.max(0, sendAt.getTime() - Date.now()) : 0);
  } catch {
    // Committed but not enqueued (Redis down): the worker's sweeper enqueues queued deliveries it finds.
  }
  return response;
}

/**
 * The delivery jobs of the sends that commit together are enqueued together (group commit): one addBulk, one
 * round trip to Redis, instead of one per send. Each send still answers only once its own jobs are queued.
 */
function enqueueDeliveries(svc: Services, deliveryIds: string[], delayMs: number): Promise<void> {
  return groupCommitOf<{ deliveryIds: string[]; delayMs: number }, void>(svc, 'delivery_enqueues', async (groups) => {
    await svc.jobs.enqueueDeliveryGroups(groups);
    return groups.map(() => undefined);
  }).add({ deliveryIds, delayMs });
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
  /** What its attachment rows say (the store writer writes them with the message). */
  attachments: AttachmentMeta[];
  draftId: string | null;
}

interface StagedSend {
  plan: SendPlan;
  out: Output;
  deliveries: { id: string; recipient: string; route: string; held_micros: bigint; used_free: boolean; attachment_micros: bigint; surcharge_micros: bigint }[];
  event: NewEvent;
  heldMicros: bigint;
  freeUsed: number;
}

type SendResult = { out: Output; deliveryIds: string[]; attachmentIds: string[] } | { error: unknown };

/**
 * A send on the locked account row as it stands (credit, holds, the chain head): the reservation (402 when the
 * credit is short), the answer, the deliveries and mail.sent (or mail.scheduled). Moves the row's holds in
 * memory, so the next send of the same account in a batch stages on top of it.
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
    held_micros: reservation!.perRecipient[i]!.micros,
    used_free: reservation!.perRecipient[i]!.free,
    attachment_micros: reservation!.perRecipient[i]!.attachmentMicros,
    surcharge_micros: reservation!.perRecipient[i]!.surchargeMicros,
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
  const event: NewEvent = { boxId: sp.planned.box.id, ...announced };
  a.held_micros += heldMicros;
  a.held_free_messages += freeUsed;
  return { plan: sp, out, deliveries, event, heldMicros, freeUsed };
}

/**
 * The staged sends in one statement (store/write.ts): each account's holds and chain head, the messages, their
 * deliveries and events, and a NOTIFY per account.
 */
async function writeSends(svc: Services, tx: SqlClient, locked: Map<string, LockedAccount>, staged: StagedSend[]): Promise<Map<string, string[]>> {
  const changes: AccountChange[] = staged.map((s) => ({
    accountId: s.plan.accountId,
    hold: { micros: s.heldMicros, freeMessages: s.freeUsed },
    event: s.event,
  }));
  const messages: MessageRow[] = staged.map((s) => {
    const p = s.plan.planned;
    return {
      id: p.messageId,
      account_id: s.plan.accountId,
      box_id: p.box.id,
      direction: 'sent',
      status: s.out.status,
      rfc_message_id: p.rfcMessageId,
      in_reply_to: p.inReplyTo,
      references: p.references,
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
      body_enc: p.bodyEnc,
      attachments: s.plan.attachments,
      search_text: p.searchText,
      draft_id: s.plan.draftId,
    };
  });
  const deliveries: DeliveryRow[] = staged.flatMap((s) => {
    const status: DeliveryStatus = s.plan.sendAt ? 'scheduled' : 'queued';
    return s.deliveries.map((d) => ({ ...d, message_id: s.plan.planned.messageId, account_id: s.plan.accountId, status }));
  });
  return (await writeBatch(svc, tx, { locked, changes, messages, deliveries })).attachmentIds;
}

const SEND_TX = { maxWait: 10_000, timeout: 20_000 };

/**
 * This process's sends by group commit (docs/ARCHITECTURE.md, "Hot paths"): the sends that arrive while one batch is being
 * written share the next transaction: their accounts locked once, in id order (two batches never deadlock),
 * each staged in arrival order on its account's running state, all written in one statement. A send the
 * credit refuses (402) gets its own error and the others go on; a batch that fails as a whole (an
 * idempotency_key raced by two requests) is retried send by send.
 */
const sendersOf = (svc: Services) =>
  groupCommitOf<SendPlan, SendResult>(svc, 'sends', (plans) =>
    poolTransaction(
      svc.db,
      async (tx) => {
        const ids = [...new Set(plans.map((p) => p.accountId))].sort();
        const locked = new Map((await lockAccountsCredit(tx, ids)).map((a) => [a.id, a]));
        // Each send stages on its account's running state (holds), the writer starts from the locked rows.
        const running = new Map([...locked].map(([id, a]) => [id, { ...a }]));
        const staged: StagedSend[] = [];
        const results: SendResult[] = plans.map((p) => {
          try {
            const s = stageSend(svc, running.get(p.accountId)!, p);
            staged.push(s);
            return { out: s.out, deliveryIds: s.deliveries.map((d) => d.id), attachmentIds: [] };
          } catch (error) {
            return { error };
          }
        });
        if (staged.length) {
          // The batch's last statement: it goes out with the COMMIT.
          commitWithNext(tx);
          const attachmentIds = await writeSends(svc, tx, locked, staged);
          for (const r of results) if ('out' in r) r.attachmentIds = attachmentIds.get(r.out.message_id) ?? [];
        }
        return results;
      },
      SEND_TX,
    ),
  );
