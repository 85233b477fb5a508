/**
 * One delivery attempt (run by apps/worker for a job): compose and DKIM-sign the message once, then hand it to
 * the recipient: locally (another box on this instance, in one transaction with the delivery's state) or over
 * SMTP through the relay or the recipient domain's MX hosts. Idempotent: a delivery in a final state is left
 * alone, so a repeated job does nothing.
 */
import { createPrivateKey, type KeyObject } from 'node:crypto';
import { beginTransaction, k as kq, parameterRows, poolRows, poolTransaction, rows as run, sql, tbl, type Message } from '@boxes/db';
import { composeMessage, dkimSign, parseMessage, type MxResolver, type SmtpDestination, type SmtpSender } from '@boxes/mail';
import type { Services } from '../shared/context';
import { open } from '../shared/crypto';
import { lockAccountsCredit } from '../credit/ledger';
import { domainOf } from './addresses';
import { openBody, type StoredBody } from './body';
import { enqueueAttachmentText } from './attachments';
import {
  markBounced,
  markDeferred,
  markDelivered,
  markDeliveredMany,
  markFailed,
  rawsUpdateFrom,
  sealRaws,
  type DeliveredOutcome,
  type SealedRaw,
} from './outcomes';
import { groupCommitOf } from '../shared/group-commit';
import { bounceAddress, receiveMessage, resolveRecipient } from './receive';
import { releaseScheduled } from './schedule';
import { sendingSource, type DeliverySendingIp } from '../sending-ips/sending-ips';
import { enqueueForwardRuns } from '../forwarding/run';
import { checkLocalDelivery, countRefused } from '../trust/inbound';

export interface DeliveryDeps {
  sender: SmtpSender;
  resolver: MxResolver;
  /** Everything that leaves the instance goes here when set. */
  relay?: SmtpDestination | undefined;
  /** Delay before the next attempt, given the attempts made so far. */
  retryDelayMs: (attemptsMade: number) => number;
  maxAttempts: number;
}

/** Parsed DKIM keys by their sealed form: parsed once, not on every signature. */
const dkimKeys = new Map<string, KeyObject>();

/** The sealed DKIM key of the sending domain, as loadDelivery reads it with the delivery. */
export interface SealedKey {
  dkimSelector: string;
  dkimPrivateKeyEnc: string;
}

async function privateKeyFor(svc: Services, domainName: string, known?: SealedKey | null): Promise<{ selector: string; key: KeyObject }> {
  // Only a live domain signs: a send from a pending claim is refused before it is queued.
  const d = known ?? (await svc.db.domain.findUniqueOrThrow({ where: { liveName: domainName }, select: { dkimSelector: true, dkimPrivateKeyEnc: true } }));
  let key = dkimKeys.get(d.dkimPrivateKeyEnc);
  if (!key) {
    key = createPrivateKey(open(svc.secretKey, d.dkimPrivateKeyEnc).toString('utf8'));
    if (dkimKeys.size > 1000) dkimKeys.clear();
    dkimKeys.set(d.dkimPrivateKeyEnc, key);
  }
  return { selector: d.dkimSelector, key };
}

/** The signed RFC 5322 bytes of a sent message, composed on first use and stored sealed. */
export type ComposableMessage = Pick<
  Message,
  'id' | 'rawEnc' | 'bodyEnc' | 'fromAddress' | 'toAddresses' | 'ccAddresses' | 'subject' | 'rfcMessageId' | 'recordedAt'
>;

export async function ensureComposed(svc: Services, message: ComposableMessage, key?: SealedKey | null): Promise<Buffer> {
  if (message.rawEnc) return open(svc.secretKey, message.rawEnc);
  const signed = await composeSigned(svc, message, key);
  return rawStoreOf(svc).add({ messageId: message.id, signed });
}

/**
 * Stores each message's signed bytes unless it has some already (rawsUpdate), one row of parameters per message
 * (parameterRows, so each connection keeps its plan); answers the messages it stored them for.
 */
export const RAW_STORES = parameterRows<SealedRaw, { id: string }>({
  types: ['text', 'text', 'int'],
  values: (r) => [r.id, r.raw_enc, r.size],
  build: (values) => sql<{ id: string }>`${rawsUpdateFrom(sql`${values} AS r(i, id, raw_enc, size)`)} RETURNING ${tbl('messages', 'm').id}`,
});

/**
 * The composed bytes of many messages stored in one statement (group commit): each only if no other attempt stored
 * its own first, since every recipient must get the same bytes (the MIME boundaries differ from one composition to
 * the next). Two attempts for the same message in one batch store the first one's bytes and both deliver them; an
 * attempt that lost the race reads the stored bytes back.
 */
const rawStoreOf = (svc: Services) =>
  groupCommitOf<{ messageId: string; signed: Buffer }, Buffer>(svc, 'raw_stores', async (items) => {
    const first = new Map<string, Buffer>();
    for (const i of items) if (!first.has(i.messageId)) first.set(i.messageId, i.signed);
    const ids = [...first.keys()];
    const m = tbl('messages', 'm');
    const stored = await RAW_STORES.run(svc.db, sealRaws(svc.secretKey, first));
    const mine = new Set(stored.map((r) => r.id));
    const lost = ids.filter((id) => !mine.has(id));
    const theirs = new Map<string, Buffer>();
    if (lost.length) {
      const again = await poolRows(
        svc.db,
        sql<{ id: string; raw_enc: Uint8Array<ArrayBuffer> }>`SELECT ${m.id}, ${m.raw_enc} FROM ${m.$} WHERE ${m.id} = ANY(${lost}::text[])`,
      );
      for (const r of again) theirs.set(r.id, open(svc.secretKey, r.raw_enc));
    }
    return items.map((i) => {
      const raw = mine.has(i.messageId) ? first.get(i.messageId) : theirs.get(i.messageId);
      if (!raw) throw new Error(`message ${i.messageId} has no stored bytes`);
      return raw;
    });
  });

/**
 * The signed RFC 5322 bytes of a sent message, composed in memory (the caller stores them: bulk batches do it in
 * bulk). body: the message's body already opened by the caller (it is opened here otherwise).
 */
export async function composeSigned(svc: Services, message: ComposableMessage, key?: SealedKey | null, body?: StoredBody): Promise<Buffer> {
  if (!message.bodyEnc || !message.fromAddress) throw new Error(`message ${message.id} has no body to compose`);
  body ??= openBody(svc.secretKey, message.bodyEnc);
  const raw = await composeMessage({
    from: { name: body.from_name ?? undefined, address: message.fromAddress },
    to: body.to_display ?? message.toAddresses,
    cc: body.cc_display ?? message.ccAddresses,
    replyTo: body.reply_to ?? [],
    subject: message.subject ?? '',
    text: body.text ?? undefined,
    html: body.html ?? undefined,
    headers: body.headers,
    attachments: body.attachments.map((a) => ({
      filename: a.filename ?? 'attachment',
      content: Buffer.from(a.content_b64, 'base64'),
      contentType: a.content_type,
      contentId: a.content_id ?? undefined,
    })),
    messageId: message.rfcMessageId,
    date: new Date(body.date ?? message.recordedAt.toISOString()),
  });
  const domain = domainOf(message.fromAddress);
  const k = await privateKeyFor(svc, domain, key);
  return dkimSign(raw, { domainName: domain, keySelector: k.selector, privateKey: k.key });
}

/**
 * Recording an outcome waits for a connection as long as the rest of the service does: with Prisma's default
 * 2 s wait, a busy pool could fail the record after the remote MX had accepted, and the retried job would
 * send the message again.
 */
const RECORD_TX = { maxWait: 10_000, timeout: 20_000 };

/**
 * The remote 250s of this process, recorded by group commit (shared/group-commit.ts): first the acceptances
 * of the whole batch in one statement committed on its own (no account lock), so the window in which a crash
 * makes a job send again is that round trip, not the wait for the accounts' chains; then the outcomes in one
 * transaction (markDeliveredMany), whose connection is taken and begun while the acceptances commit: its first
 * statement is sent once they have (it claims the same rows). A job's promise settles once its delivery is recorded.
 */
const recorderOf = (svc: Services) =>
  groupCommitOf<DeliveredOutcome, boolean>(svc, 'delivery_outcomes', async (items) => {
    const accepting = acceptAll(svc, items);
    // Awaited in the transaction; a failure before then is not an unhandled rejection.
    accepting.catch(() => undefined);
    const done = await poolTransaction(
      svc.db,
      async (tx) => {
        await Promise.all([accepting, beginTransaction(tx)]);
        return markDeliveredMany(svc, tx, items, { last: true });
      },
      RECORD_TX,
    );
    return items.map((o) => done.has(o.deliveryId));
  });

/**
 * The MX's acceptances, recorded before the outcome is (a run that stops in between sends nothing again): one
 * statement on the pg pool, outside Prisma's client, one row of parameters per delivery (parameterRows). The
 * rows tell the planner how many deliveries there are: with the recordset of one jsonb parameter it guessed 100
 * and, on a deliveries table without statistics yet (a fresh database, or one growing faster than autovacuum
 * analyzes it), read the whole table every batch; with a row per delivery it reads them through the primary key.
 */
export const ACCEPTANCES = parameterRows<DeliveredOutcome, never>({
  types: ['text', 'text', 'text'],
  values: (o) => [o.deliveryId, o.response.slice(0, 500), o.mta],
  build: (values) => {
    const [set, d] = [tbl('deliveries'), tbl('deliveries', 'd')];
    return sql<never>`UPDATE ${d.$} SET ${set.accepted_at} = now(), ${set.accepted_response} = x.response, ${set.remote_mta} = x.mta
    FROM ${values} AS x(i, id, response, mta) WHERE ${d.id} = x.id`;
  },
});

async function acceptAll(svc: Services, items: DeliveredOutcome[]): Promise<void> {
  await ACCEPTANCES.run(svc.db, items);
}

export type AttemptResult = { done: true } | { done: false; retryInMs: number; error: string };

/** A remote MX's 250 for a delivery: what recording it needs. */
export interface Acceptance {
  mta: string | null;
  response: string;
}

/**
 * What the run of a delivery knows beyond its row. A remote 250 that could not be written to the database (it went
 * away just after the 250) is kept by the caller (the worker keeps it in the queue job) through keepAcceptance and
 * comes back as accepted on the next run, which records it instead of sending the message again.
 */
export interface AttemptOptions {
  accepted?: Acceptance | null | undefined;
  keepAcceptance?: ((accepted: Acceptance) => Promise<void>) | undefined;
}

interface LoadedDelivery {
  id: string;
  status: string;
  route: string;
  recipient: string;
  message: ComposableMessage;
  key: SealedKey | null;
  /** The remote MX's 250, when it was committed but the outcome not yet recorded. */
  accepted: { mta: string | null; response: string } | null;
  /** The account's dedicated sending IP, if it has one. */
  sendingIp: DeliverySendingIp | null;
}

/**
 * A delivery's row as the senders read it (single deliveries here, bulk batches in bulk/run.ts): the recipient,
 * the message's columns composing needs, and the sending domain's sealed DKIM key (null: the domain is not live).
 */
export interface DeliveryMessageRow {
  id: string;
  recipient: string;
  message_id: string;
  raw_enc: Uint8Array | null;
  body_enc: string | null;
  from_address: string | null;
  to_addresses: string[];
  cc_addresses: string[];
  subject: string | null;
  rfc_message_id: string;
  recorded_at: Date;
  dkim_selector: string | null;
  dkim_private_key_enc: string | null;
}

/** The message to compose and the key to sign it with, from a delivery's row. */
export function composableOf(r: DeliveryMessageRow): { message: ComposableMessage; key: SealedKey | null } {
  return {
    message: {
      id: r.message_id,
      // pg answers a bytea as a Buffer of its own memory, never a shared one.
      rawEnc: r.raw_enc as Uint8Array<ArrayBuffer> | null,
      bodyEnc: r.body_enc,
      fromAddress: r.from_address,
      toAddresses: r.to_addresses,
      ccAddresses: r.cc_addresses,
      subject: r.subject,
      rfcMessageId: r.rfc_message_id,
      recordedAt: r.recorded_at,
    },
    key: r.dkim_selector && r.dkim_private_key_enc ? { dkimSelector: r.dkim_selector, dkimPrivateKeyEnc: r.dkim_private_key_enc } : null,
  };
}

/**
 * A delivery with what sending it needs (its message, the sending domain's DKIM key): the reads of the attempts
 * that start together share one statement (group commit).
 */
function loadDelivery(svc: Services, deliveryId: string): Promise<LoadedDelivery | null> {
  return groupCommitOf<string, LoadedDelivery | null>(svc, 'delivery_reads', async (ids) => {
    const found = new Map((await loadDeliveries(svc, [...new Set(ids)])).map((d) => [d.id, d]));
    return ids.map((id) => found.get(id) ?? null);
  }).add(deliveryId);
}

type LoadedDeliveryRow = DeliveryMessageRow & {
  id: string;
  status: string;
  route: string;
  recipient: string;
  accepted_at: Date | null;
  accepted_response: string | null;
  remote_mta: string | null;
  sending_ip: (Omit<DeliverySendingIp, 'warmupStartedAt'> & { warmupStartedAt: string | null }) | null;
};

/** The deliveries' read, one row of parameters per delivery id (parameterRows: each connection keeps its plan). */
export const DELIVERY_READS = parameterRows<string, LoadedDeliveryRow>({
  types: ['text'],
  values: (id) => [id],
  build: (values) => {
    const [d, m, k, s] = [tbl('deliveries', 'd'), tbl('messages', 'm'), tbl('domains', 'k'), tbl('sending_ips', 's')];
    return sql<LoadedDeliveryRow>`
    SELECT ${sql.join([d.id, d.status, d.route, d.recipient, d.accepted_at, d.accepted_response, d.remote_mta])}, ${m.id} AS message_id,
      ${sql.join([m.raw_enc, m.body_enc, m.from_address, m.to_addresses, m.cc_addresses, m.subject, m.rfc_message_id, m.recorded_at, k.dkim_selector, k.dkim_private_key_enc])},
      CASE WHEN ${s.id} IS NULL THEN NULL ELSE json_build_object('id', ${s.id}, 'mode', ${s.mode}, 'ip', ${s.ip}, 'heloName', ${s.helo_name}, 'warmupStartedAt', ${s.warmup_started_at}) END AS sending_ip
    FROM ${values} AS q(i, id) JOIN ${d.$} ON ${d.id} = q.id JOIN ${m.$} ON ${m.id} = ${d.message_id}
      LEFT JOIN ${k.$} ON ${k.live_name} = split_part(${m.from_address}, '@', 2)
      LEFT JOIN ${s.$} ON ${s.account_id} = ${d.account_id}`;
  },
});

/** Deliveries with what sending them needs, in one round trip. */
async function loadDeliveries(svc: Services, deliveryIds: string[]): Promise<LoadedDelivery[]> {
  const rows = await DELIVERY_READS.run(svc.db, deliveryIds);
  return rows.map((r) => ({
    id: r.id,
    status: r.status,
    route: r.route,
    recipient: r.recipient,
    ...composableOf(r),
    accepted: r.accepted_at ? { mta: r.remote_mta, response: r.accepted_response ?? '250 accepted' } : null,
    sendingIp: r.sending_ip ? { ...r.sending_ip, warmupStartedAt: r.sending_ip.warmupStartedAt ? new Date(r.sending_ip.warmupStartedAt) : null } : null,
  }));
}

export async function attemptDelivery(
  svc: Services,
  deps: DeliveryDeps,
  deliveryId: string,
  attemptsMade: number,
  opts: AttemptOptions = {},
): Promise<AttemptResult> {
  let delivery = await loadDelivery(svc, deliveryId);
  // A scheduled send's delayed job: release the message (unless it was cancelled first), then deliver.
  if (delivery?.status === 'scheduled') {
    await releaseScheduled(svc, delivery.message.id);
    delivery = await loadDelivery(svc, deliveryId);
  }
  if (!delivery || ['delivered', 'bounced', 'failed', 'cancelled', 'scheduled'].includes(delivery.status)) return { done: true };
  const accepted = delivery.accepted ?? opts.accepted;
  if (accepted) {
    // The remote MX took it, then the run that sent it stopped before recording that: record it, send nothing.
    const { mta, response } = accepted;
    await svc.db.$transaction((tx) => markDelivered(svc, tx, deliveryId, { mta, response, attempts: Math.max(1, attemptsMade) }), RECORD_TX);
    return { done: true };
  }
  const raw = await ensureComposed(svc, delivery.message, delivery.key);
  const attempts = attemptsMade + 1;

  if (delivery.route === 'local') {
    const target = await resolveRecipient(svc, delivery.recipient);
    if (target.kind !== 'box') {
      await svc.db.$transaction(
        (tx) =>
          markBounced(tx, deliveryId, {
            code: 550,
            response: `5.1.1 <${delivery.recipient}>: no such box on this instance`,
            source: 'local',
            attempts,
            now: svc.clock.now(),
          }),
        RECORD_TX,
      );
      return { done: true };
    }
    const mailFrom = bounceAddress(deliveryId, domainOf(delivery.message.fromAddress!));
    // The recipient's lists and policy apply as at the MX; the copy carries the verdict (core/trust).
    const checked = await checkLocalDelivery(svc, { raw, box: target.box, mailFrom });
    if (checked.refusal) {
      const refusal = checked.refusal;
      await svc.db.$transaction(async (tx) => {
        const fresh = await tx.delivery.findUniqueOrThrow({ where: { id: deliveryId }, select: { status: true } });
        if (['delivered', 'bounced', 'failed'].includes(fresh.status)) return;
        await countRefused(tx, [target.box.id]);
        await markBounced(tx, deliveryId, { code: refusal.code, response: refusal.message, source: 'local', attempts, now: svc.clock.now() });
      }, RECORD_TX);
      return { done: true };
    }
    const parsed = await parseMessage(checked.raw);
    // The copy for the recipient and the delivery's state commit together: exactly once.
    const stored = await svc.db.$transaction(
      async (tx) => {
        // Locked: a second run of the same job (a stalled lock handed on while the first still runs) waits here
        // and then sees the delivery done.
        const [fresh] = await run(tx, kq.selectFrom('deliveries').select(['status', 'account_id']).where('id', '=', deliveryId).forUpdate());
        if (!fresh || ['delivered', 'bounced', 'failed'].includes(fresh.status)) return null;
        // Both accounts (the recipient's for the copy, the sender's for the outcome) locked now, in id order, as
        // every transaction that locks several accounts does (group commits): taken one after the other, the
        // recipient's first, they could deadlock with a batch holding the sender's.
        await lockAccountsCredit(tx, [...new Set([target.box.accountId, fresh.account_id])].sort());
        const stored = await receiveMessage(svc, { raw: checked.raw, parsed, recipients: [target], mailFrom, via: 'local', tx, trust: checked.trust });
        await markDelivered(svc, tx, deliveryId, { mta: 'local', response: 'stored locally', attempts });
        return stored;
      },
      { maxWait: 10_000, timeout: 30_000 },
    );
    await enqueueForwardRuns(svc, stored?.forwardRunIds ?? []);
    await enqueueAttachmentText(svc, stored?.attachmentIds ?? []);
    return { done: true };
  }

  const domain = domainOf(delivery.recipient);
  let destinations: SmtpDestination[];
  let lastError = '';
  try {
    destinations = deps.relay ? [deps.relay] : await deps.resolver.resolve(domain);
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === 'ENOTFOUND') {
      await svc.db.$transaction(
        (tx) => markBounced(tx, deliveryId, { code: null, response: `5.1.2 domain ${domain} does not exist`, source: 'smtp', attempts, now: svc.clock.now() }),
        RECORD_TX,
      );
      return { done: true };
    }
    destinations = [];
    lastError = `DNS lookup for ${domain} failed: ${(err as Error).message}`;
  }
  if (!deps.relay && destinations.length === 0 && !lastError) {
    await svc.db.$transaction(
      (tx) =>
        markBounced(tx, deliveryId, { code: null, response: `5.1.10 ${domain} accepts no mail (null MX)`, source: 'smtp', attempts, now: svc.clock.now() }),
      RECORD_TX,
    );
    return { done: true };
  }
  const envelope = { from: bounceAddress(deliveryId, domainOf(delivery.message.fromAddress!)), to: delivery.recipient };
  // The account's dedicated sending IP, while it is provisioned and under today's warm-up cap.
  const source = destinations.length ? await sendingSource(svc, delivery.sendingIp) : null;
  for (const dest of destinations) {
    const outcome = await deps.sender.send(dest, envelope, raw, source ?? undefined);
    if (outcome.kind === 'delivered') {
      try {
        await recorderOf(svc).add({ deliveryId, mta: outcome.mta, response: outcome.response, attempts });
      } catch (err) {
        // The database went away after the 250: what the next run needs to record it instead of sending again.
        await opts.keepAcceptance?.({ mta: outcome.mta, response: outcome.response.slice(0, 500) }).catch(() => undefined);
        throw err;
      }
      return { done: true };
    }
    if (outcome.kind === 'permanent') {
      await svc.db.$transaction(
        (tx) => markBounced(tx, deliveryId, { code: outcome.code, response: outcome.response, source: 'smtp', attempts, now: svc.clock.now() }),
        RECORD_TX,
      );
      return { done: true };
    }
    lastError = `${outcome.mta}: ${outcome.response}`;
  }
  if (attempts >= deps.maxAttempts) {
    await svc.db.$transaction((tx) => markFailed(tx, deliveryId, { error: lastError, attempts }), RECORD_TX);
    return { done: true };
  }
  const retryInMs = deps.retryDelayMs(attempts);
  await svc.db.$transaction((tx) => markDeferred(tx, deliveryId, { error: lastError, attempts, nextAttemptAt: new Date(Date.now() + retryInMs) }), RECORD_TX);
  return { done: false, retryInMs, error: lastError };
}
