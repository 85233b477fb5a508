/**
 * The send planner: what one message becomes before anything is stored, for POST /messages/send and for every
 * message of a bulk job (POST /messages/send/bulk) alike, so the two cannot drift apart. Three steps:
 *
 * 1. checkMessage: the rules that need no database (addresses, headers, context size, body, recipients after
 *    dedupe, attachments and content_id, the threading headers).
 * 2. loadSendState: what the rules need from the account, for one message or a whole job, in one round trip
 *    (typed SQL: this is the send hot path): domains, sending boxes, suppressed recipients, send-side list
 *    entries, the messages replied to, the dedicated IP, the hosted recipient domains.
 * 3. planMessage: the sender and its box, the block lists, the suppression list, the thread, the configuration
 *    set, the composed and sealed body, and what reserving the message will count.
 *
 * What happens after the plan differs by path and stays there: a single send reserves and writes at once (group
 * commit, messages/send.ts); a bulk job stores its plans and each batch reserves and writes its own messages
 * when it starts (bulk/run.ts), looking at the suppression list again then.
 */
import { MAX_CONTEXT_BYTES, MAX_RECIPIENTS, type SendInput } from '@boxes/schemas';
import { poolRows, prepared, sql, tbl, type Account } from '@boxes/db';
import type { z } from 'zod';
import type { BoxScope } from '../boxes/boxes';
import { assertSendable } from '../domains/verify';
import { CONFIGURATION_SET_HEADER, configurationSetName } from '../sending-ips/sending-ips';
import type { Services } from '../shared/context';
import { groupCommitOf } from '../shared/group-commit';
import { AppError, invalidField } from '../shared/errors';
import { escapeHtml } from '../shared/html';
import { searchBodyText } from '../search/vector';
import { newId } from '../shared/ids';
import { headerValue, parentIds, pickThread, splitReferences } from '../threads/parents';
import { assertRecipientsAllowed, candidatesOf, type ListedRow } from '../trust/lists';
import { domainOf, formatMailbox, parseMailbox, parseMailboxes, type Mailbox } from './addresses';
import { sealBody, type StoredAttachment, type StoredBody } from './body';
import { validateHeaders } from './headers';

/** One message as a send or a bulk job's messages[i] gives it (the job-level fields are not the planner's). */
export type MessageInput = Omit<z.infer<typeof SendInput>, 'idempotency_key' | 'send_at'>;

/** The outbound trailer every sent message carries unless the account opted out (POST /account/trailer). */
export function trailerText(siteUrl: string): string {
  return `--\nSent by an AI agent with Boxes: ${siteUrl}`;
}

export function appendTrailer(body: { text?: string | undefined; html?: string | undefined }, siteUrl: string) {
  const href = escapeHtml(siteUrl);
  return {
    text: body.text !== undefined || body.html === undefined ? `${body.text ?? ''}\n\n${trailerText(siteUrl)}` : undefined,
    html: body.html !== undefined ? `${body.html}<p style="color:#666;font-size:12px">Sent by an AI agent with <a href="${href}">Boxes</a></p>` : undefined,
  };
}

export function appendSignature(body: { text?: string | undefined; html?: string | undefined }, signature: string | null) {
  if (!signature) return body;
  const escaped = escapeHtml(signature).replace(/\r?\n/g, '<br>');
  return {
    text: body.text !== undefined || body.html === undefined ? `${body.text ?? ''}\n\n${signature}` : undefined,
    html: body.html !== undefined ? `${body.html}<br><br>${escaped}` : undefined,
  };
}

const invalid = invalidField;

/** A message that passed the rules needing no database. */
export interface CheckedMessage {
  input: MessageInput;
  from: Mailbox;
  to: Mailbox[];
  cc: Mailbox[];
  bcc: Mailbox[];
  replyTo: Mailbox[];
  /** Every distinct recipient across to, cc and bcc, in that order (the first listing wins). */
  recipients: string[];
  headers: Record<string, string>;
  attachments: StoredAttachment[];
  attachmentBytes: number;
  inReplyTo: string | null;
  references: string[];
  /** The Message-IDs whose thread a reply joins, most specific first. */
  parents: string[];
}

/** The rules of a send that need no database. defaultFrom: the sender when the message names none. */
export function checkMessage(config: Services['config'], input: MessageInput, defaultFrom: Mailbox): CheckedMessage {
  const to = parseMailboxes(input.to, 'to');
  const cc = parseMailboxes(input.cc, 'cc');
  const bcc = parseMailboxes(input.bcc, 'bcc');
  const replyTo = parseMailboxes(input.reply_to, 'reply_to');
  if (to.length === 0) throw invalid('to', 'give at least one recipient');
  const headers = validateHeaders(input.headers);
  if (input.context !== undefined && Buffer.byteLength(JSON.stringify(input.context)) > MAX_CONTEXT_BYTES) {
    throw invalid('context', `at most ${MAX_CONTEXT_BYTES} bytes of JSON`);
  }
  if (input.text === undefined && input.html === undefined && !input.attachments?.length) {
    throw invalid('text', 'the message has no body: give text, html or attachments');
  }
  // An address listed more than once across to, cc and bcc is delivered once (the first listing wins).
  const unique = new Set<string>();
  for (const m of [...to, ...cc, ...bcc]) unique.add(m.address);
  if (unique.size > MAX_RECIPIENTS) {
    throw invalid(
      'to',
      `at most ${MAX_RECIPIENTS} recipients per message (got ${unique.size}). For more, send one message per recipient in a bulk job: POST /messages/send/bulk (up to 5,000 messages a job, sent in batches; see the guide: /docs/guide/bulk)`,
      { bulk: { method: 'POST', url: `${config.apiBaseUrl}/messages/send/bulk`, max_messages: 5000 } },
    );
  }
  const attachments = (input.attachments ?? []).map((a, i) => {
    const content = Buffer.from(a.content_b64, 'base64');
    if (content.length === 0 && a.content_b64.replace(/\s/g, '') !== '') throw invalid(`attachments.${i}.content_b64`, 'not valid base64');
    return { filename: a.filename, content_type: a.content_type, content_id: a.content_id ?? null, content_b64: content.toString('base64') };
  });
  if (attachments.some((a) => a.content_id) && input.html === undefined) {
    throw invalid('html', 'attachments with content_id are inline images for the html body; give html');
  }
  const from = input.from ? parseMailbox(input.from, 'from') : defaultFrom;
  // Mail clients spell In-Reply-To and References in any case: the thread must not depend on it.
  const references = splitReferences(headerValue(headers, 'References'));
  const inReplyTo = headerValue(headers, 'In-Reply-To')?.trim() || null;
  return {
    input,
    from,
    to,
    cc,
    bcc,
    replyTo,
    recipients: [...unique],
    headers,
    attachments,
    attachmentBytes: attachments.reduce((n, a) => n + Buffer.byteLength(a.content_b64, 'base64'), 0),
    inReplyTo,
    references,
    parents: parentIds({ inReplyTo, references }),
  };
}

export interface SenderBox {
  id: string;
  address: string;
  signature: string | null;
  /** Its owner review policy (reviews/reviews.ts). */
  review: string;
  /** Its pause and send caps, as the guard reads them (guard/pause.ts). */
  pausedAt: Date | null;
  pausedBy: string | null;
  sendCaps: unknown;
}

type StateDomain = {
  id: string;
  name: string;
  status: string;
  mode: string;
  checks: unknown;
  claimExpiresAt: Date | null;
  dkimSelector: string;
  dkimPublicKey: string;
};

/** What planning reads from the account. */
export interface SendState {
  domains: StateDomain[];
  /** Sending boxes by address. */
  boxes: Map<string, SenderBox>;
  /** Recipients on the account's suppression list. */
  suppressed: Set<string>;
  /** Recipient domains live on this instance (local delivery). */
  hosted: Set<string>;
  /** Stored messages of the account named by In-Reply-To or References (threading). */
  parents: { rfcMessageId: string; threadId: string }[];
  /** The account has a dedicated sending IP (its sends carry its configuration set). */
  dedicated: boolean;
  /** Send-side list entries naming a recipient or one of its domains, by value. */
  listed: Map<string, ListedRow[]>;
  /** The account's pause, as the guard reads it (guard/pause.ts). */
  accountPause: { pausedAt: Date | null; pausedBy: string | null };
}

/** Everything the messages' plans read, in one round trip however many messages there are. */
export async function loadSendState(svc: Services, accountId: string, messages: readonly CheckedMessage[]): Promise<SendState> {
  return (await loadSendStates(svc, [{ accountId, messages }]))[0]!;
}

export interface SendStateRequest {
  accountId: string;
  messages: readonly CheckedMessage[];
}

/**
 * The state of a single send, read with those of the sends that arrive meanwhile in one statement (group commit):
 * under load each send's read was a statement of its own, and a statement's fixed cost in PostgreSQL (its round
 * trip, parse, plan and snapshot) was most of what the read cost.
 */
export function readSendState(svc: Services, accountId: string, messages: readonly CheckedMessage[]): Promise<SendState> {
  return groupCommitOf<SendStateRequest, SendState>(svc, 'send_states', (requests) => loadSendStates(svc, requests)).add({ accountId, messages });
}

type SendStateRow = {
  i: number;
  domains: StateDomain[] | null;
  boxes: SenderBox[] | null;
  suppressed: string[] | null;
  hosted: string[] | null;
  dedicated: boolean;
  listed: ListedRow[] | null;
  parents: SendState['parents'] | null;
  account_paused_at: Date | null;
  account_paused_by: string | null;
};

/**
 * The send-state read: a row per request of one jsonb parameter (the requests), each answered by subqueries
 * through the indexes. Compiled once and prepared (its one parameter is the same for the custom and the generic
 * plan, so each connection keeps the generic plan after its first runs): run unnamed it was parsed and planned on
 * every send, 0.59 ms of PostgreSQL's CPU a plan on the bench machine.
 */
export const SEND_STATES = (() => {
  const [dom, box, sup, ip, tl, msg, acc] = [
    tbl('domains'),
    tbl('boxes'),
    tbl('suppressions'),
    tbl('sending_ips'),
    tbl('trust_list_entries'),
    tbl('messages'),
    tbl('accounts'),
  ];
  const accountId = sql.ref('x.account_id');
  return prepared(
    sql<SendStateRow>`
    SELECT x.i,
      (SELECT ${acc.paused_at} FROM ${acc.$} WHERE ${acc.id} = ${accountId}) AS account_paused_at,
      (SELECT ${acc.paused_by} FROM ${acc.$} WHERE ${acc.id} = ${accountId}) AS account_paused_by,
      (SELECT json_agg(json_build_object('id', ${dom.id}, 'name', ${dom.name}, 'status', ${dom.status}, 'mode', ${dom.mode}, 'checks', ${dom.checks},
          'claimExpiresAt', ${dom.claim_expires_at}, 'dkimSelector', ${dom.dkim_selector}, 'dkimPublicKey', ${dom.dkim_public_key}))
        FROM ${dom.$} WHERE ${dom.account_id} = ${accountId}) AS domains,
      (SELECT json_agg(json_build_object('id', ${box.id}, 'address', ${box.address}, 'signature', ${box.signature}, 'review', ${box.review},
          'pausedAt', ${box.paused_at}, 'pausedBy', ${box.paused_by}, 'sendCaps', ${box.send_caps}))
        FROM ${box.$} WHERE ${box.account_id} = ${accountId} AND ${box.address} = ANY(x.froms)) AS boxes,
      (SELECT array_agg(${sup.address}) FROM ${sup.$} WHERE ${sup.account_id} = ${accountId} AND ${sup.address} = ANY(x.recipients)) AS suppressed,
      (SELECT array_agg(${dom.live_name}) FROM ${dom.$} WHERE ${dom.live_name} = ANY(x.domains)) AS hosted,
      EXISTS (SELECT 1 FROM ${ip.$} WHERE ${ip.account_id} = ${accountId}) AS dedicated,
      (SELECT json_agg(json_build_object('box_id', ${tl.box_id}, 'list', ${tl.list}, 'direction', ${tl.direction}, 'value', ${tl.value}, 'kind', ${tl.kind}))
        FROM ${tl.$} WHERE ${tl.account_id} = ${accountId} AND ${tl.direction} IN ('send', 'both') AND ${tl.value} = ANY(x.candidates)) AS listed,
      (SELECT json_agg(json_build_object('rfcMessageId', ${msg.rfc_message_id}, 'threadId', ${msg.thread_id}) ORDER BY ${msg.recorded_at})
        FROM ${msg.$} WHERE ${msg.account_id} = ${accountId} AND ${msg.rfc_message_id} = ANY(x.parents)) AS parents
    FROM jsonb_to_recordset(${''}::jsonb)
      AS x(i int, account_id text, froms text[], recipients text[], domains text[], candidates text[], parents text[])`,
  );
})();

/** The states of many requests (each one account and its messages), in one statement: a row per request, in order. */
export async function loadSendStates(svc: Services, requests: readonly SendStateRequest[]): Promise<SendState[]> {
  const args = requests.map(({ accountId, messages }, i) => {
    const recipients = [...new Set(messages.flatMap((m) => m.recipients))];
    return {
      i,
      account_id: accountId,
      froms: [...new Set(messages.map((m) => m.from.address))],
      recipients,
      domains: [...new Set(recipients.map(domainOf))],
      candidates: [...new Set(recipients.flatMap(candidatesOf))],
      parents: [...new Set(messages.flatMap((m) => m.parents))],
    };
  });
  const rows = await poolRows<SendStateRow>(svc.db, { ...SEND_STATES, parameters: [JSON.stringify(args)] });
  const byIndex = new Map(rows.map((r) => [r.i, r]));
  return requests.map((_, i) => sendStateOf(byIndex.get(i)!));
}

function sendStateOf(r: SendStateRow): SendState {
  const listed = new Map<string, ListedRow[]>();
  for (const row of r.listed ?? []) listed.set(row.value, [...(listed.get(row.value) ?? []), row]);
  return {
    domains: (r.domains ?? []).map((d) => ({ ...d, claimExpiresAt: d.claimExpiresAt ? new Date(d.claimExpiresAt) : null })),
    // JSON carries the pause time as text.
    boxes: new Map((r.boxes ?? []).map((b) => [b.address, { ...b, pausedAt: b.pausedAt ? new Date(b.pausedAt) : null }])),
    suppressed: new Set(r.suppressed ?? []),
    hosted: new Set(r.hosted ?? []),
    dedicated: r.dedicated,
    listed,
    parents: r.parents ?? [],
    accountPause: { pausedAt: r.account_paused_at, pausedBy: r.account_paused_by },
  };
}

export interface PlanCaller {
  account: Pick<Account, 'id' | 'trailerOptedOutAt'>;
  boxScope: BoxScope;
}

/** One message, decided: everything its send writes except what waits for the account's lock (the credit). */
export interface MessagePlan {
  messageId: string;
  rfcMessageId: string;
  box: SenderBox;
  from: string;
  to: string[];
  cc: string[];
  bcc: string[];
  /** Every distinct recipient, suppressed ones included. */
  recipients: string[];
  /** The recipients to deliver to: those not on the suppression list. */
  deliverTo: string[];
  suppressed: string[];
  threadId: string;
  inReplyTo: string | null;
  references: string[];
  subject: string | null;
  context: MessageInput['context'];
  /** The sealed body as composing reads it (messages/deliver.ts). */
  bodyEnc: string;
  /** Its attachments (recordAttachments names them once the message is written). */
  attachments: StoredAttachment[];
  /** The body text the search vector is made of (search/vector.ts); never stored. */
  searchText: string;
  sizeBytes: number;
  /** What reserving the message counts, per recipient delivered to (credit/ledger planReservation). */
  attachmentBytes: number;
  withTrailer: boolean;
}

/** The sending box: a box of the account, on a live domain of it, usable by the key. */
function resolveSender(config: Services['config'], state: SendState, caller: PlanCaller, from: Mailbox): SenderBox {
  const fromDomain = state.domains.find((d) => d.name === domainOf(from.address));
  if (!fromDomain) {
    throw new AppError('from_domain_mismatch', 'from-address domain must match your account domain', {
      from: from.address,
      account_domains: state.domains.map((d) => d.name),
      fields: [{ path: 'from', message: 'not a domain of this account' }],
    });
  }
  assertSendable(config, fromDomain as Parameters<typeof assertSendable>[1]);
  const box = state.boxes.get(from.address);
  if (!box) throw invalid('from', `${from.address} is not a box of this account; create it with POST /boxes`);
  if (caller.boxScope && !caller.boxScope.includes(box.id)) {
    throw new AppError('box_restricted_key', `This key may not send from ${box.address}`, {
      from: box.address,
      fields: [{ path: 'from', message: "outside the key's boxes" }],
    });
  }
  return box;
}

/**
 * The plan of one checked message against the state loaded for it. date: when the send is accepted (the Date
 * header; a bulk job's messages are all accepted with the job).
 */
export function planMessage(svc: Services, caller: PlanCaller, m: CheckedMessage, state: SendState, date: Date): MessagePlan {
  const box = resolveSender(svc.config, state, caller, m.from);
  const listed = m.recipients.flatMap((r) => candidatesOf(r).flatMap((c) => state.listed.get(c) ?? []));
  if (listed.length) assertRecipientsAllowed(listed, box.id, m.recipients);
  const deliverTo = m.recipients.filter((r) => !state.suppressed.has(r));
  const headers = { ...m.headers };
  // While the account has a dedicated IP (provisioning, warming or active) its sends carry its own configuration set.
  if (state.dedicated) headers[CONFIGURATION_SET_HEADER] = configurationSetName(caller.account.id);
  const messageId = newId('msg');
  // The trailer follows the account's setting when the send is accepted; a message that carries it pays no
  // opt-out surcharge.
  const withTrailer = caller.account.trailerOptedOutAt === null;
  const signedOnly = appendSignature({ text: m.input.text, html: m.input.html }, box.signature);
  const signed = withTrailer ? appendTrailer(signedOnly, svc.config.siteUrl) : signedOnly;
  const body: StoredBody = {
    text: signed.text ?? null,
    html: signed.html ?? null,
    headers,
    attachments: m.attachments,
    from_name: m.from.name ?? null,
    reply_to: m.replyTo.map(formatMailbox),
    to_display: m.to.map(formatMailbox),
    cc_display: m.cc.map(formatMailbox),
    date: date.toISOString(),
    in_reply_to: m.inReplyTo,
  };
  return {
    messageId,
    rfcMessageId: `<${messageId}@${domainOf(m.from.address)}>`,
    box,
    from: m.from.address,
    to: m.to.map((x) => x.address),
    cc: m.cc.map((x) => x.address),
    bcc: m.bcc.map((x) => x.address),
    recipients: m.recipients,
    deliverTo,
    suppressed: m.recipients.filter((r) => state.suppressed.has(r)),
    threadId: pickThread(m.parents, state.parents),
    inReplyTo: m.inReplyTo,
    references: m.references,
    subject: m.input.subject ?? null,
    context: m.input.context,
    // Sealed here, before any transaction: encrypting a large body must not happen under the account's row lock.
    bodyEnc: sealBody(svc.secretKey, body),
    attachments: m.attachments,
    searchText: searchBodyText(body),
    sizeBytes: Buffer.byteLength(body.text ?? '') + Buffer.byteLength(body.html ?? '') + m.attachmentBytes,
    attachmentBytes: m.attachmentBytes,
    withTrailer,
  };
}
