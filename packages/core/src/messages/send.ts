/**
 * POST /messages/send: validate, check the sender and the credit, reserve, store the message (body sealed)
 * and one delivery per recipient in one transaction, then enqueue the deliveries. The call returns once the
 * message is durably queued; if enqueueing fails after commit, the sweeper (apps/worker) picks it up.
 */
import canonicalize from 'canonicalize';
import type { Account, ApiKey, Box, Message, Tx } from '@boxes/db';
import { Prisma } from '@boxes/db';
import { MAX_CONTEXT_BYTES, MAX_RECIPIENTS, type NewEvent, type SendInput, type SendOutput } from '@boxes/schemas';
import type { z } from 'zod';
import { microsToCents, microsToUsd } from '../credit/prices';
import { lockAccountsCredit, messagePrice, planReservation, type LockedAccount } from '../credit/ledger';
import { eventsInsert } from '../credit/lean';
import { groupCommitOf } from '../shared/group-commit';
import { chainEvent, EVENTS_CHANNEL } from '../events/append';
import type { BoxScope } from '../boxes/boxes';
import { seal, sha256Hex } from '../shared/crypto';
import type { Services } from '../shared/context';
import { AppError, isUniqueViolation } from '../shared/errors';
import { newId } from '../shared/ids';
import { assertSendable } from '../domains/verify';
import { domainOf, formatMailbox, parseMailbox, parseMailboxes, type Mailbox } from './addresses';
import { validateHeaders } from './headers';
import { sealBody, type StoredBody } from './body';
import { checkSendLoop } from './loop';
import { passed, type PolicyCheck } from '../audit/evidence';
import { headerValue, parentIds, pickThread, splitReferences } from '../threads/parents';
import { scheduledTime } from './schedule';
import { CONFIGURATION_SET_HEADER, configurationSetName } from '../sending-ips/sending-ips';
import { assertRecipientsAllowed, candidatesOf, type ListedRow } from '../trust/lists';
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

/** The outbound trailer every sent message carries unless the account opted out (POST /account/trailer). */
export function trailerText(siteUrl: string): string {
  return `--\nSent by an AI agent with Boxes: ${siteUrl}`;
}

export function appendTrailer(body: { text?: string | undefined; html?: string | undefined }, siteUrl: string) {
  const href = siteUrl.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  return {
    text: body.text !== undefined || body.html === undefined ? `${body.text ?? ''}\n\n${trailerText(siteUrl)}` : undefined,
    html: body.html !== undefined ? `${body.html}<p style="color:#666;font-size:12px">Sent by an AI agent with <a href="${href}">Boxes</a></p>` : undefined,
  };
}

export function appendSignature(body: { text?: string | undefined; html?: string | undefined }, signature: string | null) {
  if (!signature) return body;
  const escaped = signature.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`).replace(/\r?\n/g, '<br>');
  return {
    text: body.text !== undefined || body.html === undefined ? `${body.text ?? ''}\n\n${signature}` : undefined,
    html: body.html !== undefined ? `${body.html}<br><br>${escaped}` : undefined,
  };
}

interface SendContext {
  domains: { id: string; name: string; status: string; mode: string; checks: unknown; claimExpiresAt: Date | null; dkimSelector: string; dkimPublicKey: string }[];
  box: { id: string; address: string; signature: string | null } | null;
  /** Recipients on the account's suppression list. */
  suppressed: Set<string>;
  /** Recipient domains live on this instance (local delivery). */
  hosted: Set<string>;
  /** Stored messages of the account named by In-Reply-To or References (threading). */
  parents: { rfcMessageId: string; threadId: string }[];
  /** The account has a dedicated sending IP (its sends carry its configuration set). */
  dedicated: boolean;
  /** Send-side list entries (core/trust/lists) naming a recipient or its domain. */
  listed: ListedRow[];
}

/**
 * Everything a send reads before its transaction, in one round trip (typed SQL on the hot path): the account's
 * domains, the sending box, which recipients are suppressed and which recipient domains are hosted here.
 */
async function loadSendContext(svc: Services, accountId: string, fromAddress: string, recipients: string[], parents: string[]): Promise<SendContext> {
  const domainsOfRecipients = [...new Set(recipients.map(domainOf))];
  const rows = await svc.db.$queryRaw<{ domains: SendContext['domains'] | null; box: SendContext['box']; suppressed: string[] | null; hosted: string[] | null; dedicated: boolean; listed: ListedRow[] | null; parents: SendContext['parents'] | null }[]>`
    SELECT
      (SELECT json_agg(json_build_object('id', id, 'name', name, 'status', status, 'mode', mode, 'checks', checks,
          'claimExpiresAt', claim_expires_at, 'dkimSelector', dkim_selector, 'dkimPublicKey', dkim_public_key))
        FROM domains WHERE account_id = ${accountId}) AS domains,
      (SELECT json_build_object('id', id, 'address', address, 'signature', signature)
        FROM boxes WHERE account_id = ${accountId} AND address = ${fromAddress} LIMIT 1) AS box,
      (SELECT array_agg(address) FROM suppressions WHERE account_id = ${accountId} AND address = ANY(${recipients}::text[])) AS suppressed,
      (SELECT array_agg(live_name) FROM domains WHERE live_name = ANY(${domainsOfRecipients}::text[])) AS hosted,
      EXISTS (SELECT 1 FROM sending_ips WHERE account_id = ${accountId}) AS dedicated,
      (SELECT json_agg(json_build_object('box_id', box_id, 'list', list, 'direction', direction, 'value', value, 'kind', kind))
        FROM trust_list_entries WHERE account_id = ${accountId} AND direction IN ('send', 'both')
          AND value = ANY(${[...new Set(recipients.flatMap(candidatesOf))]}::text[])) AS listed,
      (SELECT json_agg(json_build_object('rfcMessageId', rfc_message_id, 'threadId', thread_id) ORDER BY recorded_at)
        FROM messages WHERE account_id = ${accountId} AND rfc_message_id = ANY(${parents}::text[])) AS parents`;
  const r = rows[0]!;
  return {
    domains: (r.domains ?? []).map((d) => ({ ...d, claimExpiresAt: d.claimExpiresAt ? new Date(d.claimExpiresAt) : null })),
    box: r.box,
    suppressed: new Set(r.suppressed ?? []),
    hosted: new Set(r.hosted ?? []),
    dedicated: r.dedicated,
    listed: r.listed ?? [],
    parents: r.parents ?? [],
  };
}

/** The sending box: a box of the account, on a live domain of it, usable by the key. */
function resolveSender(ctx: SendContext, caller: SendCaller, mailbox: Mailbox, config: Services['config']): { id: string; address: string; signature: string | null } {
  const fromDomain = ctx.domains.find((d) => d.name === domainOf(mailbox.address));
  if (!fromDomain) {
    throw new AppError('from_domain_mismatch', 'from-address domain must match your account domain', {
      from: mailbox.address,
      account_domains: ctx.domains.map((d) => d.name),
    });
  }
  assertSendable(config, fromDomain as Parameters<typeof assertSendable>[1]);
  const box = ctx.box;
  if (!box) {
    throw new AppError('validation_error', `from: ${mailbox.address} is not a box of this account; create it with POST /boxes`, {
      fields: [{ path: 'from', message: 'no such box' }],
    });
  }
  if (caller.boxScope && !caller.boxScope.includes(box.id)) {
    throw new AppError('box_restricted_key', `This key may not send from ${box.address}`, { from: box.address });
  }
  return box;
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

  // Validation beyond the schema: addresses, headers, context size, recipients.
  const to = parseMailboxes(input.to, 'to');
  const cc = parseMailboxes(input.cc, 'cc');
  const bcc = parseMailboxes(input.bcc, 'bcc');
  const replyTo = parseMailboxes(input.reply_to, 'reply_to');
  if (to.length === 0) throw new AppError('validation_error', 'to: give at least one recipient', { fields: [{ path: 'to', message: 'required' }] });
  const headers = validateHeaders(input.headers);
  if (input.context !== undefined && Buffer.byteLength(JSON.stringify(input.context)) > MAX_CONTEXT_BYTES) {
    throw new AppError('validation_error', `context: at most ${MAX_CONTEXT_BYTES} bytes of JSON`, { fields: [{ path: 'context', message: 'too large' }] });
  }
  if (input.text === undefined && input.html === undefined && !input.attachments?.length) {
    throw new AppError('validation_error', 'give text, html or attachments', { fields: [{ path: 'text', message: 'the message has no body' }] });
  }
  // An address listed more than once across to, cc and bcc is delivered once (the first listing wins).
  const unique = new Map<string, Mailbox>();
  for (const m of [...to, ...cc, ...bcc]) if (!unique.has(m.address)) unique.set(m.address, m);
  if (unique.size > MAX_RECIPIENTS) {
    throw new AppError('validation_error', `at most ${MAX_RECIPIENTS} recipients per message (got ${unique.size}). For more, send one message per recipient in a bulk job: POST /messages/send/bulk (up to 5,000 messages a job, sent in batches; see README "Bulk send")`, {
      fields: [{ path: 'to', message: 'too many recipients' }],
      bulk: { method: 'POST', url: `${svc.config.apiBaseUrl}/messages/send/bulk`, max_messages: 5000 },
    });
  }
  const attachments = (input.attachments ?? []).map((a, i) => {
    const content = Buffer.from(a.content_b64, 'base64');
    if (content.length === 0 && a.content_b64.replace(/\s/g, '') !== '') {
      throw new AppError('validation_error', `attachments.${i}.content_b64: not valid base64`, { fields: [{ path: `attachments.${i}.content_b64`, message: 'not base64' }] });
    }
    return { filename: a.filename, content_type: a.content_type, content_id: a.content_id ?? null, content_b64: content.toString('base64') };
  });
  if (attachments.some((a) => a.content_id) && input.html === undefined) {
    throw new AppError('validation_error', 'attachments with content_id are inline images for the html body; give html', { fields: [{ path: 'html', message: 'required with content_id' }] });
  }
  const checks = caller.checks;
  if (checks) {
    if (idemKey) checks.push(passed('idempotency', 'the idempotency_key was not used before'));
    checks.push(passed('recipients', `${unique.size} distinct recipient(s), at most ${MAX_RECIPIENTS}`));
    if (input.headers) checks.push(passed('header_rules', `${Object.keys(headers).length} custom header(s): none reserved, no line breaks`));
    if (input.context !== undefined) checks.push(passed('context_size', `context within ${MAX_CONTEXT_BYTES} bytes`));
  }

  const from = input.from ? parseMailbox(input.from, 'from') : { name: undefined, address: caller.account.primaryAddress };
  const references = splitReferences(headerValue(headers, 'References'));
  const inReplyTo = headerValue(headers, 'In-Reply-To')?.trim() || null;
  const parents = parentIds({ inReplyTo, references });
  const ctx = await loadSendContext(svc, accountId, from.address, [...unique.keys()], parents);
  const threadId = pickThread(parents, ctx.parents);
  const box = resolveSender(ctx, caller, from, svc.config);
  assertRecipientsAllowed(ctx.listed, box.id, [...unique.keys()]);
  const suppressed = ctx.suppressed;
  const recipients = [...unique.keys()].filter((a) => !suppressed.has(a));
  if (checks) {
    checks.push(passed('from_domain', `${box.address} is a box on the account domain ${domainOf(box.address)}`));
    checks.push(passed('domain_verified', `${domainOf(box.address)} is live (proven) and may send`));
    if (caller.boxScope) checks.push(passed('box_restriction', `the key is restricted to ${caller.boxScope.length} box(es), ${box.address} among them`));
    checks.push(passed('suppression', `${recipients.length} recipient(s) not on the suppression list${suppressed.size ? `; ${unique.size - recipients.length} suppressed and skipped` : ''}`));
  }
  // Local delivery only to live domains; mail to a pending claim's name goes out like any other domain's.
  const hosted = ctx.hosted;
  // SPEC: while the account has a dedicated IP (provisioning, warming or active) its sends carry its own configuration set.
  if (ctx.dedicated) headers[CONFIGURATION_SET_HEADER] = configurationSetName(accountId);

  const messageId = newId('msg');
  const domain = domainOf(from.address);
  const rfcMessageId = `<${messageId}@${domain}>`;
  const date = new Date();
  // A scheduled send (send_at) is stored and reserved now; its deliveries wait (messages/schedule.ts).
  const sendAt = scheduledTime(input.send_at, date);
  // The trailer follows the account's setting when the send is accepted; a message that carries it pays no
  // opt-out surcharge.
  const withTrailer = caller.account.trailerOptedOutAt === null;
  const signedOnly = appendSignature({ text: input.text, html: input.html }, box.signature);
  const signed = withTrailer ? appendTrailer(signedOnly, svc.config.siteUrl) : signedOnly;
  const body: StoredBody = {
    text: signed.text ?? null,
    html: signed.html ?? null,
    headers,
    attachments,
    from_name: from.name ?? null,
    reply_to: replyTo.map(formatMailbox),
    to_display: to.map(formatMailbox),
    cc_display: cc.map(formatMailbox),
    date: date.toISOString(),
    in_reply_to: inReplyTo,
  };
  const attachmentBytes = attachments.reduce((n, a) => n + Buffer.byteLength(a.content_b64, 'base64'), 0);
  const sizeBytes = Buffer.byteLength(body.text ?? '') + Buffer.byteLength(body.html ?? '') + attachmentBytes;
  const warning = await checkSendLoop(svc, accountId, recipients.length === 1 ? recipients[0]! : null);
  // Sealed before the transaction: encrypting a large body must not happen under the account's row lock.
  const bodyEnc = sealBody(svc.secretKey, body);

  const plan: SendPlan = {
    accountId,
    boxId: box.id,
    recipients,
    routes: recipients.map((r) => (hosted.has(domainOf(r)) ? 'local' : 'remote')),
    suppressed: [...unique.keys()].filter((r) => suppressed.has(r)),
    attachmentBytes,
    withTrailer,
    sendAt,
    messageId,
    rfcMessageId,
    threadId,
    from: from.address,
    to: to.map((m) => m.address),
    cc: cc.map((m) => m.address),
    bcc: bcc.map((m) => m.address),
    inReplyTo: body.in_reply_to ?? null,
    references,
    subject: input.subject ?? null,
    context: input.context,
    idemKey: idemKey ?? null,
    requestHash,
    sizeBytes,
    bodyEnc,
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
    checks.push(passed('credit', `${response.billing.messages} message(s) reserved under the account lock: ${response.billing.free_messages_used} free, ${response.billing.reserved_usd} USD held`));
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
    throw new AppError('idempotency_key_reused', 'This idempotency_key was already used for a different message; nothing was sent. Use a new key for a new message.', {
      message_id: prior.id,
    });
  }
  return { ...(prior.response as unknown as Output), idempotent_replay: true };
}

/** Everything a send writes, decided before the transaction; only the credit and the chain head wait for the lock. */
interface SendPlan {
  accountId: string;
  boxId: string;
  recipients: string[];
  routes: ('local' | 'remote')[];
  suppressed: string[];
  attachmentBytes: number;
  withTrailer: boolean;
  sendAt: Date | null;
  messageId: string;
  rfcMessageId: string;
  threadId: string;
  from: string;
  to: string[];
  cc: string[];
  bcc: string[];
  inReplyTo: string | null;
  references: string[];
  subject: string | null;
  context: Input['context'];
  idemKey: string | null;
  requestHash: string;
  sizeBytes: number;
  bodyEnc: string;
  date: Date;
  warning: Output['warning'] | null;
}

interface StagedSend {
  plan: SendPlan;
  out: Output;
  deliveries: { id: string; recipient: string; route: string; held_micros: number; used_free: boolean; attachment_micros: number; surcharge_micros: number }[];
  event: ReturnType<typeof chainEvent> & { type: string };
  heldMicros: bigint;
  freeUsed: number;
}

type SendResult = { out: Output; deliveryIds: string[] } | { error: unknown };

/**
 * A send on the locked account row as it stands (credit, holds, the chain head): the reservation (402 when the
 * credit is short), the answer, the deliveries and mail.sent (or mail.scheduled). Moves the row's holds and
 * head in memory, so the next send of the same account in a batch stages on top of it.
 */
function stageSend(svc: Services, a: LockedAccount, p: SendPlan): StagedSend {
  const reservation = p.recipients.length ? planReservation(svc, a, p.recipients.length, { attachmentBytes: p.attachmentBytes, trailer: p.withTrailer }) : null;
  const status = (p.recipients.length ? (p.sendAt ? 'scheduled' : 'queued') : 'suppressed') satisfies MessageStatus;
  const deliveries = p.recipients.map((r, i) => ({
    id: newId('dlv'),
    recipient: r,
    route: p.routes[i]!,
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
    ...(p.sendAt ? { send_at: p.sendAt.toISOString() } : {}),
    from: p.from,
    recipients: p.recipients,
    suppressed: p.suppressed,
    billing: {
      messages: p.recipients.length,
      free_messages_used: freeUsed,
      paid_messages: p.recipients.length - freeUsed,
      price_per_message_usd: microsToUsd(messagePrice(svc)),
      reserved_usd: microsToUsd(heldMicros),
      free_messages_left: Math.max(0, a.free_messages_left - a.held_free_messages - freeUsed),
      credit_balance_cents: microsToCents(a.balance_micros),
    },
    ...(p.warning ? { warning: p.warning } : {}),
  };
  const facts = {
    message_id: p.messageId,
    rfc_message_id: p.rfcMessageId,
    thread_id: p.threadId,
    from: p.from,
    to: p.to,
    cc: p.cc,
    recipients: p.recipients.length,
    suppressed: p.suppressed,
    subject: p.subject ?? undefined,
    status,
    context: p.context ?? null,
  };
  const announced: NewEvent = p.sendAt ? { type: 'mail.scheduled', data: { ...facts, send_at: p.sendAt.toISOString() } } : { type: 'mail.sent', data: facts };
  const type = announced.type;
  const event = chainEvent(a, { accountId: p.accountId, ...announced });
  a.held_micros += heldMicros;
  a.held_free_messages += freeUsed;
  a.chain_seq = event.seq;
  a.chain_hash = event.hash;
  return { plan: p, out, deliveries, event: { ...event, type }, heldMicros, freeUsed };
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
    const p = s.plan;
    return {
      i: i + 1,
      id: p.messageId,
      account_id: p.accountId,
      box_id: p.boxId,
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
      idempotency_key: p.idemKey,
      request_hash: p.requestHash,
      response: s.out,
      recorded_at: p.date.toISOString(),
      thread_id: p.threadId,
      send_at: p.sendAt?.toISOString() ?? null,
    };
  });
  const deliveries = staged.flatMap((s) => s.deliveries.map((d) => ({ ...d, message_id: s.plan.messageId, account_id: s.plan.accountId, status: (s.plan.sendAt ? 'scheduled' : 'queued') satisfies DeliveryStatus })));
  const events = staged.map((s) => ({
    id: s.event.id,
    account_id: s.plan.accountId,
    seq: s.event.seq,
    type: s.event.type,
    box_id: s.plan.boxId,
    data: s.event.data,
    created_at: s.event.createdAt.toISOString(),
    prev_hash: s.event.prevHash,
    hash: s.event.hash,
  }));
  await tx.$queryRaw`
    WITH acc AS (
      UPDATE accounts a SET held_micros = a.held_micros + x.held, held_free_messages = a.held_free_messages + x.free, chain_seq = x.seq, chain_hash = x.hash
      FROM jsonb_to_recordset(${JSON.stringify([...accounts.values()])}::jsonb) AS x(id text, held bigint, free int, seq int, hash text)
      WHERE a.id = x.id
    ), msg AS (
      INSERT INTO messages (id, account_id, box_id, direction, status, rfc_message_id, provider_message_id, in_reply_to, "references",
        from_address, to_addresses, cc_addresses, bcc_addresses, subject, size_bytes, body_enc, context, idempotency_key, request_hash,
        response, recorded_at, thread_id, send_at)
      SELECT m.id, m.account_id, m.box_id, 'sent', m.status, m.rfc_message_id, m.id, m.in_reply_to, m.refs,
        m.from_address, m.to_addresses, m.cc_addresses, m.bcc_addresses, m.subject, m.size_bytes, b.body_enc, m.context, m.idempotency_key, m.request_hash,
        m.response, m.recorded_at, m.thread_id, m.send_at
      FROM jsonb_to_recordset(${JSON.stringify(messages)}::jsonb) AS m(i int, id text, account_id text, box_id text, status text, rfc_message_id text,
        in_reply_to text, refs text[], from_address text, to_addresses text[], cc_addresses text[], bcc_addresses text[], subject text, size_bytes int,
        context jsonb, idempotency_key text, request_hash text, response jsonb, recorded_at timestamptz, thread_id text, send_at timestamptz)
      JOIN unnest(${staged.map((s) => s.plan.bodyEnc)}::text[]) WITH ORDINALITY AS b(body_enc, i) ON b.i = m.i
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
  groupCommitOf<SendPlan, SendResult>(
    svc,
    'sends',
    (plans) =>
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
