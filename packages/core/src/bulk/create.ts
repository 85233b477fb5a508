/**
 * POST /messages/send/bulk: every message is validated (the rules of a single send) and sealed before anything is
 * stored; one bad message rejects the job naming messages.<index>.<field>. The credit for the whole job is checked
 * now (SPEC "Send rules" 1, per message) and reserved batch by batch when each batch starts (run.ts). The job,
 * its messages (bulk_job_items) and bulk.queued are written in one transaction; then the first batch is enqueued.
 */
import canonicalize from 'canonicalize';
import type { z } from 'zod';
import type { ApiKey, Account } from '@boxes/db';
import { MAX_CONTEXT_BYTES, MAX_RECIPIENTS, type BulkMessage, type BulkSendInput } from '@boxes/schemas';
import type { BoxScope } from '../boxes/boxes';
import { lockAccountCredit, paymentRequired, planReservation, type LockedAccount } from '../credit/ledger';
import { microsToUsd } from '../credit/prices';
import { assertSendable } from '../domains/verify';
import { appendEvent } from '../events/append';
import { domainOf, formatMailbox, parseMailbox, parseMailboxes, type Mailbox } from '../messages/addresses';
import { sealBody, type StoredBody } from '../messages/body';
import { validateHeaders } from '../messages/headers';
import { appendSignature, appendTrailer } from '../messages/send';
import type { Services } from '../shared/context';
import { sha256Hex } from '../shared/crypto';
import { AppError, isUniqueViolation } from '../shared/errors';
import { newId } from '../shared/ids';
import { bulkJobView, type BulkJobView } from './view';

type Input = z.infer<typeof BulkSendInput>;
type MessageInput = z.infer<typeof BulkMessage>;

export interface BulkCaller {
  account: Account;
  key: ApiKey;
  boxScope: BoxScope;
}

/** An AppError about one message, its paths moved under messages.<index>. */
function atIndex(err: unknown, index: number): unknown {
  if (!(err instanceof AppError)) return err;
  const prefix = `messages.${index}`;
  const fields = Array.isArray(err.details.fields) ? (err.details.fields as { path: string; message: string }[]) : [];
  return new AppError(err.code, `${prefix}.${err.message}`, {
    ...err.details,
    index,
    ...(fields.length ? { fields: fields.map((f) => ({ ...f, path: `${prefix}.${f.path}` })) } : {}),
  });
}

function invalid(path: string, message: string): AppError {
  return new AppError('validation_error', `${path}: ${message}`, { fields: [{ path, message }] });
}

interface Prepared {
  from: Mailbox;
  to: Mailbox[];
  cc: Mailbox[];
  bcc: Mailbox[];
  replyTo: Mailbox[];
  recipients: string[];
  headers: Record<string, string>;
  attachments: { filename: string; content_type: string; content_id: string | null; content_b64: string }[];
  attachmentBytes: number;
}

/** The checks of a single send that need no database (sendMessage runs the same ones, in the same order). */
function prepare(input: MessageInput, defaultFrom: Mailbox): Prepared {
  const to = parseMailboxes(input.to, 'to');
  const cc = parseMailboxes(input.cc, 'cc');
  const bcc = parseMailboxes(input.bcc, 'bcc');
  const replyTo = parseMailboxes(input.reply_to, 'reply_to');
  if (to.length === 0) throw invalid('to', 'give at least one recipient');
  const headers = validateHeaders(input.headers);
  if (input.context !== undefined && Buffer.byteLength(JSON.stringify(input.context)) > MAX_CONTEXT_BYTES) {
    throw invalid('context', `at most ${MAX_CONTEXT_BYTES} bytes of JSON`);
  }
  if (input.text === undefined && input.html === undefined && !input.attachments?.length) throw invalid('text', 'the message has no body: give text, html or attachments');
  const unique = new Map<string, Mailbox>();
  for (const m of [...to, ...cc, ...bcc]) if (!unique.has(m.address)) unique.set(m.address, m);
  if (unique.size > MAX_RECIPIENTS) throw invalid('to', `at most ${MAX_RECIPIENTS} recipients per message (got ${unique.size})`);
  const attachments = (input.attachments ?? []).map((a, i) => {
    const content = Buffer.from(a.content_b64, 'base64');
    if (content.length === 0 && a.content_b64.replace(/\s/g, '') !== '') throw invalid(`attachments.${i}.content_b64`, 'not valid base64');
    return { filename: a.filename, content_type: a.content_type, content_id: a.content_id ?? null, content_b64: content.toString('base64') };
  });
  if (attachments.some((a) => a.content_id) && input.html === undefined) throw invalid('html', 'attachments with content_id are inline images for the html body; give html');
  const from = input.from ? parseMailbox(input.from, 'from') : defaultFrom;
  return {
    from,
    to,
    cc,
    bcc,
    replyTo,
    recipients: [...unique.keys()],
    headers,
    attachments,
    attachmentBytes: attachments.reduce((n, a) => n + Buffer.byteLength(a.content_b64, 'base64'), 0),
  };
}

interface AccountContext {
  domains: { id: string; name: string; status: string; mode: string; checks: unknown; claimExpiresAt: Date | null; dkimSelector: string; dkimPublicKey: string }[];
  boxes: Map<string, { id: string; address: string; signature: string | null }>;
  suppressed: Set<string>;
}

/** The account's domains, the sending boxes and the suppressed recipients, in one round trip. */
async function loadContext(svc: Services, accountId: string, fromAddresses: string[], recipients: string[]): Promise<AccountContext> {
  const rows = await svc.db.$queryRaw<{ domains: AccountContext['domains'] | null; boxes: { id: string; address: string; signature: string | null }[] | null; suppressed: string[] | null }[]>`
    SELECT
      (SELECT json_agg(json_build_object('id', id, 'name', name, 'status', status, 'mode', mode, 'checks', checks,
          'claimExpiresAt', claim_expires_at, 'dkimSelector', dkim_selector, 'dkimPublicKey', dkim_public_key))
        FROM domains WHERE account_id = ${accountId}) AS domains,
      (SELECT json_agg(json_build_object('id', id, 'address', address, 'signature', signature))
        FROM boxes WHERE account_id = ${accountId} AND address = ANY(${fromAddresses}::text[])) AS boxes,
      (SELECT array_agg(address) FROM suppressions WHERE account_id = ${accountId} AND address = ANY(${recipients}::text[])) AS suppressed`;
  const r = rows[0]!;
  return {
    domains: (r.domains ?? []).map((d) => ({ ...d, claimExpiresAt: d.claimExpiresAt ? new Date(d.claimExpiresAt) : null })),
    boxes: new Map((r.boxes ?? []).map((b) => [b.address, b])),
    suppressed: new Set(r.suppressed ?? []),
  };
}

/**
 * What reserving every message of the job would hold, message by message as the batches will reserve them (free
 * allowance first); 402 with the top-up guidance when the credit does not cover the whole job.
 */
export function planJobCredit(svc: Services, a: LockedAccount, messages: { recipients: number; attachmentBytes: number }[], trailer: boolean) {
  let sim: LockedAccount = { ...a };
  let need = 0n;
  let free = 0;
  let count = 0;
  for (const m of messages) {
    if (m.recipients === 0) continue;
    count += m.recipients;
    try {
      const r = planReservation(svc, sim, m.recipients, { attachmentBytes: m.attachmentBytes, trailer });
      sim = { ...sim, held_micros: sim.held_micros + r.heldMicros, held_free_messages: sim.held_free_messages + r.freeUsed };
      need += r.heldMicros;
      free += r.freeUsed;
    } catch (err) {
      if (!(err instanceof AppError) || err.code !== 'payment_required') throw err;
      const spendable = a.balance_micros - a.held_micros;
      throw paymentRequired(
        svc,
        `Not enough credit for this bulk job: its ${messages.length} message(s) go to ${messages.reduce((n, x) => n + x.recipients, 0)} recipient(s), more than the free allowance and the credit cover (${microsToUsd(spendable > 0n ? spendable : 0n)} USD available). Nothing was queued; top up and send the job again.`,
        { ...err.details, scope: 'bulk_job', messages: messages.length },
      );
    }
  }
  return { recipients: count, freeMessages: free, heldMicros: need };
}

export async function createBulkJob(svc: Services, caller: BulkCaller, input: Input): Promise<BulkJobView> {
  const accountId = caller.account.id;
  const { idempotency_key: idemKey, ...request } = input;
  const requestHash = sha256Hex(canonicalize(request) ?? '');
  if (idemKey) {
    const prior = await svc.db.bulkJob.findUnique({ where: { accountId_idempotencyKey: { accountId, idempotencyKey: idemKey } } });
    if (prior) return replay(svc, prior.id, prior.requestHash, requestHash, accountId);
  }

  const cfg = svc.config.bulk;
  const coolOff = input.cool_off_seconds ?? cfg.coolOffSeconds;
  if (coolOff < cfg.minCoolOffSeconds) {
    throw invalid('cool_off_seconds', `at least ${cfg.minCoolOffSeconds} seconds on this instance (the floor; default ${cfg.coolOffSeconds})`);
  }
  if (input.batch_size > cfg.maxBatchSize) {
    throw invalid('batch_size', `at most ${cfg.maxBatchSize} on this instance: the cool-off between batches applies to every job`);
  }
  const maxBounce = input.max_bounce_rate ?? cfg.maxBounceRate;
  const maxComplaint = input.max_complaint_rate ?? cfg.maxComplaintRate;
  if (maxBounce > cfg.maxBounceRate) throw invalid('max_bounce_rate', `at most ${cfg.maxBounceRate} on this instance`);
  if (maxComplaint > cfg.maxComplaintRate) throw invalid('max_complaint_rate', `at most ${cfg.maxComplaintRate} on this instance`);

  const defaultFrom = input.from ? parseMailbox(input.from, 'from') : { name: undefined, address: caller.account.primaryAddress };
  const prepared = input.messages.map((m, i) => {
    try {
      return prepare(m, defaultFrom);
    } catch (err) {
      throw atIndex(err, i);
    }
  });
  const fromAddresses = [...new Set(prepared.map((p) => p.from.address))];
  const ctx = await loadContext(svc, accountId, fromAddresses, [...new Set(prepared.flatMap((p) => p.recipients))]);
  // The sender of each message: a box of the account, on a live domain of it, usable by the key.
  const senders = prepared.map((p, i) => {
    try {
      const fromDomain = ctx.domains.find((d) => d.name === domainOf(p.from.address));
      if (!fromDomain) {
        throw new AppError('from_domain_mismatch', 'from: from-address domain must match your account domain', { from: p.from.address, account_domains: ctx.domains.map((d) => d.name) });
      }
      assertSendable(svc.config, fromDomain as Parameters<typeof assertSendable>[1]);
      const box = ctx.boxes.get(p.from.address);
      if (!box) throw invalid('from', `${p.from.address} is not a box of this account; create it with POST /boxes`);
      if (caller.boxScope && !caller.boxScope.includes(box.id)) throw new AppError('box_restricted_key', `from: this key may not send from ${box.address}`, { from: box.address });
      return box;
    } catch (err) {
      throw atIndex(err, i);
    }
  });

  const trailer = caller.account.trailerOptedOutAt === null;
  const jobId = newId('bulk');
  const batchSize = input.batch_size;
  const batchCount = Math.ceil(input.messages.length / batchSize);
  const date = new Date();
  const items = input.messages.map((m, i) => {
    const p = prepared[i]!;
    const box = senders[i]!;
    const signedOnly = appendSignature({ text: m.text, html: m.html }, box.signature);
    const signed = trailer ? appendTrailer(signedOnly, svc.config.siteUrl) : signedOnly;
    const body: StoredBody = {
      text: signed.text ?? null,
      html: signed.html ?? null,
      headers: p.headers,
      attachments: p.attachments,
      from_name: p.from.name ?? null,
      reply_to: p.replyTo.map(formatMailbox),
      to_display: p.to.map(formatMailbox),
      cc_display: p.cc.map(formatMailbox),
      date: date.toISOString(),
      in_reply_to: p.headers['In-Reply-To'] ?? null,
    };
    return {
      index: i,
      batch: Math.floor(i / batchSize),
      message_id: newId('msg'),
      box_id: box.id,
      from_address: p.from.address,
      to_addresses: p.to.map((x) => x.address),
      cc_addresses: p.cc.map((x) => x.address),
      bcc_addresses: p.bcc.map((x) => x.address),
      recipients: p.recipients,
      subject: m.subject ?? null,
      size_bytes: Buffer.byteLength(body.text ?? '') + Buffer.byteLength(body.html ?? '') + p.attachmentBytes,
      attachment_bytes: p.attachmentBytes,
      body_enc: sealBody(svc.secretKey, body),
      context: m.context ?? null,
      in_reply_to: body.in_reply_to,
      references: p.headers.References ? p.headers.References.split(/\s+/).filter(Boolean) : [],
    };
  });
  const boxIds = [...new Set(senders.map((b) => b.id))];

  try {
    await svc.db.$transaction(
      async (tx) => {
        const a = await lockAccountCredit(tx, accountId);
        // Counted under the account's lock, so two jobs created at once cannot both take the last place.
        const [active] = await tx.$queryRaw<{ n: number }[]>`
          SELECT count(*)::int AS n FROM bulk_jobs WHERE account_id = ${accountId} AND status IN ('queued', 'sending', 'cooling_off')`;
        if ((active?.n ?? 0) >= cfg.maxActiveJobs) {
          throw new AppError(
            'too_many_bulk_jobs',
            `This account already has ${active?.n} bulk job(s) queued or sending, the most this instance runs at once; nothing was queued. Send this job when one of them completes (or cancel one).`,
            { active_jobs: active?.n, limit: cfg.maxActiveJobs },
          );
        }
        const plan = planJobCredit(
          svc,
          a,
          prepared.map((p) => ({ recipients: p.recipients.filter((r) => !ctx.suppressed.has(r)).length, attachmentBytes: p.attachmentBytes })),
          trailer,
        );
        await tx.$executeRaw`
          INSERT INTO bulk_jobs (id, account_id, status, batch_size, message_count, batch_count, cool_off_seconds, max_bounce_rate, max_complaint_rate,
            trailer, box_ids, next_batch_at, idempotency_key, request_hash, created_at, updated_at)
          VALUES (${jobId}, ${accountId}, 'queued', ${batchSize}, ${items.length}, ${batchCount}, ${coolOff}, ${maxBounce}, ${maxComplaint},
            ${trailer}, ${boxIds}::text[], ${date}, ${idemKey ?? null}, ${requestHash}, ${date}, ${date})`;
        await tx.$executeRaw`
          INSERT INTO bulk_job_items (job_id, index, batch, message_id, box_id, from_address, to_addresses, cc_addresses, bcc_addresses, recipients,
            subject, size_bytes, attachment_bytes, body_enc, context, in_reply_to, "references")
          SELECT ${jobId}, i.index, i.batch, i.message_id, i.box_id, i.from_address, i.to_addresses, i.cc_addresses, i.bcc_addresses, i.recipients,
            i.subject, i.size_bytes, i.attachment_bytes, i.body_enc, i.context, i.in_reply_to, i."references"
          FROM jsonb_to_recordset(${JSON.stringify(items)}::jsonb)
            AS i(index int, batch int, message_id text, box_id text, from_address text, to_addresses text[], cc_addresses text[], bcc_addresses text[],
              recipients text[], subject text, size_bytes int, attachment_bytes int, body_enc text, context jsonb, in_reply_to text, "references" text[])`;
        await appendEvent({
          db: tx,
          accountId,
          type: 'bulk.queued',
          data: {
            bulk_job_id: jobId,
            messages: items.length,
            recipients: plan.recipients,
            batch_size: batchSize,
            batches: batchCount,
            cool_off_seconds: coolOff,
            free_messages: plan.freeMessages,
            estimated_usd: microsToUsd(plan.heldMicros),
          },
        });
      },
      { maxWait: 10_000, timeout: 60_000 },
    );
  } catch (err) {
    if (idemKey && isUniqueViolation(err)) {
      const prior = await svc.db.bulkJob.findUnique({ where: { accountId_idempotencyKey: { accountId, idempotencyKey: idemKey } } });
      if (prior) return replay(svc, prior.id, prior.requestHash, requestHash, accountId);
    }
    throw err;
  }
  try {
    await svc.jobs.enqueueBulkBatch(jobId, 0);
  } catch {
    // Committed but not enqueued (Redis away): the worker's bulk sweep enqueues due batches it finds.
  }
  return bulkJobView(svc, { accountId, id: jobId, scope: null });
}

async function replay(svc: Services, id: string, priorHash: string, requestHash: string, accountId: string): Promise<BulkJobView> {
  if (priorHash !== requestHash) {
    throw new AppError('idempotency_key_reused', 'This idempotency_key was already used for a different bulk job; nothing was queued. Use a new key for a new job.', { bulk_job_id: id });
  }
  return { ...(await bulkJobView(svc, { accountId, id, scope: null })), idempotent_replay: true };
}
