/**
 * Inbound mail, shared by the MX (apps/mail) and local delivery between accounts of this instance: resolve
 * each recipient, store the message once per box (raw and parsed, both sealed), charge it, echo the context of
 * the message it replies to, announce it as mail.received, and apply delivery reports (DSN, ARF).
 */
import type { Box, SqlClient, Tx } from '@boxes/db';
import { commitWithNext, k, parameterRows, poolTransaction, rows, sql, type RawBuilder } from '@boxes/db';
import { parseMessage, parseReport, type ParsedMessage } from '@boxes/mail';
import { lockAccountsCredit, receivedCharge, type LockedAccount, type Posting } from '../credit/ledger';
import { writeBatch, type AccountChange } from '../store/write';
import type { MessageRow } from '../store/rows';
import { groupCommitOf } from '../shared/group-commit';
import type { Services } from '../shared/context';
import { seal, sealBytes } from '../shared/crypto';
import { newId } from '../shared/ids';
import { domainOf } from './addresses';
import { bodyText } from './body';
import { describeAttachments, enqueueAttachmentText, type AttachmentMeta } from './attachments';
import { searchBodyText } from '../search/vector';
import { applyReport } from './reports';
import { parentIds, pickThread } from '../threads/parents';
import { enqueueForwardRuns, queueForwardRuns } from '../forwarding/run';
import { storedTrust, type InboundTrust } from '../trust/inbound';
import { candidatesOf, type ListedRow } from '../trust/lists';

export type RecipientResolution =
  | { kind: 'box'; box: Box }
  | { kind: 'bounce'; deliveryId: string; accountId: string }
  | { kind: 'unknown_box' }
  | { kind: 'not_hosted' };

const BOUNCE_LOCAL = /^bounces\+(dlv_[0-9a-z]{20})$/;

/** The address that DSNs for one delivery come back to (the SMTP MAIL FROM of that delivery). */
export const bounceAddress = (deliveryId: string, domain: string): string => `bounces+${deliveryId}@${domain}`;

export async function resolveRecipient(svc: Services, rcpt: string): Promise<RecipientResolution> {
  const address = rcpt.trim().toLowerCase();
  // Only live domains are hosted: a pending claim's name is anybody's until proven, so its mail is refused.
  const domain = await svc.db.domain.findUnique({ where: { liveName: domainOf(address) }, select: { accountId: true, status: true } });
  if (!domain) return { kind: 'not_hosted' };
  const box =
    (await svc.db.box.findUnique({ where: { liveAddress: address } })) ??
    // The old domain of an account that moved (retiring, in its grace period): its boxes moved to the new
    // domain with their local parts, so name@old reaches the box that is now name@new.
    (domain.status === 'retiring'
      ? await svc.db.box.findFirst({ where: { accountId: domain.accountId, localPart: address.slice(0, address.lastIndexOf('@')) } })
      : null);
  if (box) return { kind: 'box', box };
  const m = BOUNCE_LOCAL.exec(address.slice(0, address.lastIndexOf('@')));
  if (m) {
    const d = await svc.db.delivery.findUnique({ where: { id: m[1]! }, select: { accountId: true } });
    if (d && d.accountId === domain.accountId) return { kind: 'bounce', deliveryId: m[1]!, accountId: d.accountId };
  }
  return { kind: 'unknown_box' };
}

/**
 * The MX's RCPT statement over `values`, one row of parameters per recipient (parameterRows): its address,
 * domain and envelope sender's list candidates (an array). A row per recipient found, with its number (i).
 * Written so, PostgreSQL keeps its generic plan; as one array of recipients it was planned on every RCPT batch,
 * 0.30 ms of PostgreSQL's CPU against 0.05 ms of execution (docs/benchmarks.md, mx).
 */
function mxRecipientsQuery(values: RawBuilder<unknown>) {
  return (
    k
      .selectFrom(sql<{ i: number; address: string; domain: string; candidates: string[] }>`${values}`.as<'q'>(sql.raw('q(i, address, domain, candidates)')))
      .innerJoin('boxes as b', 'b.live_address', 'q.address')
      // Named, not b.*: the statement is prepared on each connection, and a prepared statement's result may not
      // change under it when a migration adds a column.
      .select([
        'b.id',
        'b.account_id',
        'b.domain_id',
        'b.local_part',
        'b.address',
        'b.live_address',
        'b.signature',
        'b.is_primary',
        'b.created_at',
        'b.forwarding',
        'b.receive_mode',
        'b.require_verified_sender',
        'b.spam_action',
        'b.refused_count',
        'b.refused_at',
        'b.paused_at',
        'b.paused_by',
        'b.send_caps',
        'b.review',
      ])
      .select(sql<number>`q.i`.as('i'))
      .select(
        sql<
          ListedRow[] | null
        >`(SELECT json_agg(json_build_object('box_id', t.box_id, 'list', t.list, 'direction', t.direction, 'value', t.value, 'kind', t.kind))
          FROM trust_list_entries t
          WHERE t.account_id = b.account_id AND t.value = ANY(q.candidates)
            AND t.direction IN ('receive', 'both') AND (t.box_id IS NULL OR t.box_id = b.id))`.as('trust_rows'),
      )
      // Only live domains are hosted (a live address implies it; checked anyway, in the same statement).
      .where(({ exists, selectFrom }) => exists(selectFrom('domains as d').select(sql.lit(1).as('one')).whereRef('d.live_name', '=', 'q.domain')))
  );
}
type MxRecipientRow = Awaited<ReturnType<ReturnType<typeof mxRecipientsQuery>['executeTakeFirstOrThrow']>>;

/** The RCPT statement: the recipient's address (lowercased) and its envelope sender's list candidates. */
export const MX_RECIPIENTS = parameterRows<{ address: string; candidates: string[] }, MxRecipientRow>({
  types: ['text', 'text', 'text[]'],
  values: (it) => [it.address, domainOf(it.address), it.candidates],
  build: mxRecipientsQuery,
});

/**
 * The RCPTs of the sessions that arrive together share one statement (group commit): under load each RCPT was a
 * round trip of its own, whose fixed cost (the socket writes and reads on both sides, PostgreSQL's per-statement
 * work) was most of the lookup's. A batch is one statement (MX_RECIPIENTS, on the pool).
 */
const mxRecipientsOf = (svc: Services) =>
  groupCommitOf<{ address: string; candidates: string[] }, MxRecipientRow | null>(svc, 'mx_recipients', async (items) => {
    const byNumber = new Map((await MX_RECIPIENTS.run(svc.db, items)).map((r) => [r.i, r]));
    return items.map((_, j) => byNumber.get(j + 1) ?? null);
  });

/**
 * The MX's RCPT lookup: a box reached by its live address (its domain live) comes back with its account's list
 * entries for the envelope sender (what matchingEntries would read for it, 'receive' direction) in the same
 * statement, so the common recipient costs one round trip instead of three (the domain, the box, the lists),
 * shared with the other RCPTs that arrive meanwhile (mxRecipientsOf). It runs on the pool, outside Prisma's
 * client (poolRows), where the client's own CPU was about three times the statement's. Anything else (no such
 * box, a retiring domain, a bounce address, not hosted) is answered by resolveRecipient, and rows is then null
 * (the caller reads them itself if it needs them).
 */
export async function resolveMxRecipient(
  svc: Services,
  rcpt: string,
  mailFrom: string | null,
): Promise<{ resolution: RecipientResolution; rows: ListedRow[] | null }> {
  const address = rcpt.trim().toLowerCase();
  const candidates = mailFrom ? [...new Set(candidatesOf(mailFrom))] : [];
  const row = await mxRecipientsOf(svc).add({ address, candidates });
  if (!row) return { resolution: await resolveRecipient(svc, address), rows: null };
  const box: Box = {
    id: row.id,
    accountId: row.account_id,
    domainId: row.domain_id,
    localPart: row.local_part,
    address: row.address,
    liveAddress: row.live_address,
    signature: row.signature,
    isPrimary: row.is_primary,
    createdAt: row.created_at,
    forwarding: row.forwarding,
    receiveMode: row.receive_mode,
    requireVerifiedSender: row.require_verified_sender,
    spamAction: row.spam_action,
    refusedCount: row.refused_count,
    refusedAt: row.refused_at,
    pausedAt: row.paused_at,
    pausedBy: row.paused_by,
    sendCaps: row.send_caps as Box['sendCaps'],
    review: row.review,
  };
  return { resolution: { kind: 'box', box }, rows: row.trust_rows ?? [] };
}

/**
 * The messages of the account this one answers (or is another copy of), in one query: the context to echo
 * (from a sent message, In-Reply-To first, then the newest reference) and the thread to join. own: also look
 * for the message's own Message-ID (a local delivery: the sender may be this same account). No query at all
 * for a message that answers nothing: it starts a thread.
 */
async function findParents(
  tx: SqlClient,
  accountId: string,
  parsed: ParsedMessage,
  own: boolean,
): Promise<{ context: Record<string, unknown> | null; threadId: string }> {
  const ids = parentIds({ inReplyTo: parsed.inReplyTo, references: parsed.references, own: own ? parsed.messageId : null });
  const found = ids.length
    ? (
        await rows(
          tx,
          k
            .selectFrom('messages')
            .select(['rfc_message_id', 'context', 'direction', 'thread_id'])
            .where('account_id', '=', accountId)
            .where('rfc_message_id', '=', sql<string>`ANY(${ids}::text[])`)
            .orderBy('recorded_at'),
        )
      ).map((m) => ({ rfcMessageId: m.rfc_message_id, context: m.context, direction: m.direction, threadId: m.thread_id }))
    : [];
  let context: Record<string, unknown> | null = null;
  // Only what the message answers carries context, never another copy of itself.
  for (const id of parentIds({ inReplyTo: parsed.inReplyTo, references: parsed.references })) {
    const hit = found.find((m) => m.rfcMessageId === id && m.direction === 'sent' && m.context !== null);
    if (hit) {
      context = hit.context as Record<string, unknown>;
      break;
    }
  }
  return { context, threadId: pickThread(ids, found) };
}

export interface InboundInput {
  raw: Buffer;
  /** Resolved recipients (boxes and bounce addresses); unknown ones were refused at RCPT time. */
  recipients: RecipientResolution[];
  mailFrom: string | null;
  via: 'smtp' | 'local';
  /** Already parsed (local delivery parses once for all recipients). */
  parsed?: ParsedMessage;
  /** Mail from the service itself (notices) is not charged. */
  free?: boolean;
  /** Run inside this transaction (local delivery marks its delivery in the same one). */
  tx?: Tx;
  /** What the trust checks found (core/trust): stored as the message's authentication and spam. */
  trust?: InboundTrust | null;
}

export interface StoredInbound {
  messageIds: string[];
  /** Attachments written (text extraction to enqueue once the transaction commits: enqueueAttachmentText). */
  attachmentIds?: string[];
  /** Auto-forwards to send (forward runs), to enqueue once the transaction commits. */
  forwardRunIds?: string[];
}

interface Prepared {
  input: InboundInput;
  parsed: ParsedMessage;
  report: ReturnType<typeof parseReport>;
  attachmentBytes: number;
  /** What the attachment rows say (the store writer writes them with the message), made before the transaction. */
  files: AttachmentMeta[];
  /** One sealed copy per recipient (null for bounce addresses). */
  sealed: ({ bodyEnc: string; rawEnc: Uint8Array<ArrayBuffer> } | null)[];
  trust: ReturnType<typeof storedTrust>;
  /** The body text the search vector is made of (search/vector.ts searchBodyText). */
  searchText: string;
}

/** Parsing and sealing, before any transaction: encrypting a large message must not keep a connection busy in one. */
async function prepare(svc: Services, input: InboundInput): Promise<Prepared> {
  const parsed = input.parsed ?? (await parseMessage(input.raw));
  // The body's text is made once (attachments in base64 included); each copy is sealed on its own.
  let body: string | undefined;
  const sealed = input.recipients.map((r) => {
    if (r.kind !== 'box') return null;
    body ??= bodyText({
      text: parsed.text,
      html: parsed.html,
      headers: parsed.headers,
      attachments: parsed.attachments.map((a) => ({
        filename: a.filename,
        content_type: a.contentType,
        content_id: a.contentId,
        content_b64: a.content.toString('base64'),
      })),
    });
    return { bodyEnc: seal(svc.secretKey, body), rawEnc: sealBytes(svc.secretKey, input.raw) };
  });
  return {
    input,
    parsed,
    report: parseReport(parsed.mail),
    attachmentBytes: parsed.attachments.reduce((n, a) => n + a.content.length, 0),
    files: describeAttachments(parsed.attachments),
    sealed,
    trust: storedTrust(input.trust),
    searchText: searchBodyText({ text: parsed.text, html: parsed.html }),
  };
}

function receivedEventData(p: Prepared, box: Box, id: string, threadId: string, context: Record<string, unknown> | null) {
  const { parsed, input } = p;
  return {
    message_id: id,
    message: {
      id,
      box_id: box.id,
      to_box: box.address,
      from: parsed.from,
      to: parsed.to,
      cc: parsed.cc,
      subject: parsed.subject,
      rfc_message_id: parsed.messageId,
      in_reply_to: parsed.inReplyTo,
      thread_id: threadId,
      size_bytes: input.raw.length,
      attachments: parsed.attachments.length,
      via: input.via,
      ...p.trust,
    },
    context,
  };
}

export async function receiveMessage(svc: Services, input: InboundInput): Promise<StoredInbound> {
  const p = await prepare(svc, input);
  // In the caller's transaction: the caller enqueues attachmentIds once it commits.
  if (input.tx) return storeInbound(svc, input.tx, p);
  // The common case (mail for boxes: no report, no forward, charged) is stored by group commit.
  if (groupable(p)) {
    const stored = await inboundOf(svc).add(p);
    await enqueueAttachmentText(svc, stored.attachmentIds ?? []);
    return stored;
  }
  const stored = await svc.db.$transaction((tx) => storeInbound(svc, tx, p), INBOUND_TX);
  await enqueueForwardRuns(svc, stored.forwardRunIds ?? []);
  await enqueueAttachmentText(svc, stored.attachmentIds ?? []);
  return stored;
}

const INBOUND_TX = { maxWait: 10_000, timeout: 30_000 };

const groupable = (p: Prepared): boolean =>
  p.input.via === 'smtp' && !p.input.free && p.report === null && p.input.recipients.every((r) => r.kind === 'box' && !r.box.forwarding);

/**
 * This process's inbound group commit: the messages that arrive (from every SMTP connection) while one batch
 * is being stored share the next transaction (storeInboundBatch); a batch that fails is retried one by one.
 */
const inboundOf = (svc: Services) =>
  groupCommitOf<Prepared, StoredInbound>(svc, 'inbound_messages', (items) => poolTransaction(svc.db, (tx) => storeInboundBatch(svc, tx, items), INBOUND_TX));

/**
 * Many groupable messages in one transaction (docs/ARCHITECTURE.md, "Hot paths"): the accounts locked once, in id order (two
 * batches never deadlock); the messages, their charges and their mail.received events written by the store
 * writer in one statement (it takes an account whose charges have something to announce the general way). A
 * message that answers another first writes what is pending, since its parents may be among it.
 */
async function storeInboundBatch(svc: Services, tx: SqlClient, items: Prepared[]): Promise<StoredInbound[]> {
  const accountIds = [...new Set(items.flatMap((p) => p.input.recipients.flatMap((r) => (r.kind === 'box' ? [r.box.accountId] : []))))].sort();
  // The rows as written so far (the writer moves them), and as the pending messages' charges will leave them.
  const locked = new Map((await lockAccountsCredit(tx, accountIds)).map((a) => [a.id, a]));
  const running = new Map([...locked].map(([id, a]) => [id, { ...a }]));
  let pending: ReceivedWrite[] = [];
  // The attachment rows written, by message id.
  const attachmentIds = new Map<string, string[]>();
  const write = async () => {
    if (!pending.length) return;
    for (const [id, ids] of await writeReceived(svc, tx, locked, pending)) attachmentIds.set(id, ids);
    for (const [id, a] of locked) running.set(id, { ...a });
    pending = [];
  };
  const out: StoredInbound[] = [];
  for (const p of items) {
    const { parsed, input } = p;
    const messageIds: string[] = [];
    // Copies of one message for several boxes of one account share a thread.
    const threadOfAccount = new Map<string, string>();
    const answers = parentIds({ inReplyTo: parsed.inReplyTo, references: parsed.references }).length > 0;
    for (const [i, r] of input.recipients.entries()) {
      if (r.kind !== 'box') continue;
      const box = r.box;
      const id = newId('msg');
      let context: Record<string, unknown> | null = null;
      let found: string | null = null;
      if (answers) {
        // Its parents may be among the messages not yet written.
        await write();
        const parents = await findParents(tx, box.accountId, parsed, false);
        context = parents.context;
        found = parents.threadId;
      }
      const threadId: string = threadOfAccount.get(box.accountId) ?? found ?? newId('thr');
      threadOfAccount.set(box.accountId, threadId);
      const rfcMessageId = parsed.messageId ?? `<${id}@${domainOf(box.address)}>`;
      const a = running.get(box.accountId)!;
      const postings = receivedCharge(svc, a, id, p.attachmentBytes);
      pending.push({ p, i, box, m: { id, context, threadId, rfcMessageId, eventData: receivedEventData(p, box, id, threadId, context) }, postings });
      a.balance_micros += postings.reduce((n, x) => n + x.amountMicros, 0n);
      a.free_messages_left -= postings.reduce((n, x) => n + (x.freeMessages ?? 0), 0);
      messageIds.push(id);
    }
    out.push({ messageIds, forwardRunIds: [] });
  }
  // The last statement of the batch: it goes out with the COMMIT.
  commitWithNext(tx);
  await write();
  for (const stored of out) {
    const ids = stored.messageIds.flatMap((id) => attachmentIds.get(id) ?? []);
    if (ids.length) stored.attachmentIds = ids;
  }
  return out;
}

interface NewInbound {
  id: string;
  context: Record<string, unknown> | null;
  threadId: string;
  rfcMessageId: string;
  eventData: ReturnType<typeof receivedEventData>;
}

/** A received message for one box, ready to write: its recipient index in p, its row's values and its charge. */
interface ReceivedWrite {
  p: Prepared;
  i: number;
  box: Box;
  m: NewInbound;
  postings: Posting[];
}

/**
 * The hot path's one statement (store/write.ts): the messages, their charges and their mail.received events,
 * each account's charges applied in the order given on the row the caller locked.
 */
async function writeReceived(svc: Services, tx: SqlClient, locked: Map<string, LockedAccount>, list: ReceivedWrite[]): Promise<Map<string, string[]>> {
  const messages: MessageRow[] = list.map(({ p, i, box, m }) => ({
    id: m.id,
    account_id: box.accountId,
    box_id: box.id,
    direction: 'received',
    status: 'received',
    rfc_message_id: m.rfcMessageId,
    in_reply_to: p.parsed.inReplyTo,
    references: p.parsed.references,
    from_address: p.parsed.from,
    to_addresses: p.parsed.to,
    cc_addresses: p.parsed.cc,
    bcc_addresses: [],
    subject: p.parsed.subject,
    size_bytes: p.input.raw.length,
    context: m.context,
    authentication: p.trust.authentication,
    spam: p.trust.spam,
    thread_id: m.threadId,
    body_enc: p.sealed[i]!.bodyEnc,
    raw_enc: p.sealed[i]!.rawEnc,
    attachments: p.files,
    search_text: p.searchText,
  }));
  const changes: AccountChange[] = list.map(({ box, m, postings }) => ({
    accountId: box.accountId,
    charge: { postings },
    event: { type: 'mail.received', boxId: box.id, data: m.eventData },
  }));
  return (await writeBatch(svc, tx, { locked, changes, messages })).attachmentIds;
}

/** One message in the caller's transaction: every kind of recipient, reports, forwards, free notices. */
async function storeInbound(svc: Services, tx: Tx, p: Prepared): Promise<StoredInbound> {
  const { parsed, input, report } = p;
  const messageIds: string[] = [];
  // Copies of one message for several boxes of one account share a thread.
  const threadOfAccount = new Map<string, string>();
  const forwardRunIds: string[] = [];
  const attachmentIds: string[] = [];
  // Several accounts (boxes of two accounts, a report for a sender): locked now, in id order, as every
  // transaction that locks several accounts does, so none of them waits in a cycle with a batch.
  const accounts = [...new Set(input.recipients.flatMap((r) => (r.kind === 'box' ? [r.box.accountId] : r.kind === 'bounce' ? [r.accountId] : [])))].sort();
  if (accounts.length > 1) await lockAccountsCredit(tx, accounts);
  for (const [i, r] of input.recipients.entries()) {
    if (r.kind === 'bounce') {
      if (report) await applyReport(tx, { report, accountId: r.accountId, deliveryId: r.deliveryId, now: svc.clock.now() });
      continue;
    }
    if (r.kind !== 'box') continue;
    const box = r.box;
    const id = newId('msg');
    const { context, threadId: found } = await findParents(tx, box.accountId, parsed, input.via === 'local');
    const threadId = threadOfAccount.get(box.accountId) ?? found;
    threadOfAccount.set(box.accountId, threadId);
    const rfcMessageId = parsed.messageId ?? `<${id}@${domainOf(box.address)}>`;
    const eventData = receivedEventData(p, box, id, threadId, context);
    const locked = new Map((await lockAccountsCredit(tx, [box.accountId])).map((a) => [a.id, a]));
    const postings = input.free ? [] : receivedCharge(svc, locked.get(box.accountId)!, id, p.attachmentBytes);
    attachmentIds.push(
      ...((await writeReceived(svc, tx, locked, [{ p, i, box, m: { id, context, threadId, rfcMessageId, eventData }, postings }])).get(id) ?? []),
    );
    if (report) await applyReport(tx, { report, accountId: box.accountId, now: svc.clock.now() });
    messageIds.push(id);
    // Auto-forwarding: only boxes with an active forward look their forwards up (box.forwarding).
    if (box.forwarding && !report) forwardRunIds.push(...(await queueForwardRuns(tx, { box, messageId: id, parsed })));
  }
  return { messageIds, forwardRunIds, attachmentIds };
}
