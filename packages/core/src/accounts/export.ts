/**
 * The data export of a closing account, built by the worker: one tar archive (POSIX ustar, tar-stream) with
 *
 *   README.txt            what is inside
 *   account.json          the account, its domains and the close details
 *   messages.json         every message's metadata, its raw SHA-256 and the path of its .eml (null if reclaimed)
 *   messages/<id>.eml     every message whose raw bytes are still stored, exactly as stored
 *   events.json           the whole event stream, with _chain
 *   ledger.json           every ledger entry (amounts in micro-dollars, as strings)
 *   boxes.json, keys.json the boxes, and the keys' metadata (never a key)
 *   checkpoints.json      the signed chain checkpoints
 *
 * The archive is kept sealed in the database and downloaded by a secret link (GET /exports/<token>) until the
 * link expires (EXPORT_LINK_TTL_DAYS, 7 days, and never past the deletion of the data).
 */
import { pack } from 'tar-stream';
import { toApiEvent } from '../events/read';
import { presentKeys } from '../keys/keys';
import { ensureComposed } from '../messages/deliver';
import { presentMessage } from '../messages/read';
import { queueNotice } from '../notices/notices';
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';
import { open, seal, sha256Hex } from '../shared/crypto';
import { AppError } from '../shared/errors';
import { retentionOf } from '../audit/retention';
import { exportUrl } from './close';
import type { AccountStatus, ExportStatus } from '@boxes/schemas';

const json = (v: unknown) => Buffer.from(`${JSON.stringify(v, (_k, x) => (typeof x === 'bigint' ? x.toString() : x), 2)}\n`);

async function tarOf(files: { name: string; body: Buffer; mtime: Date }[]): Promise<Buffer> {
  const p = pack();
  const chunks: Buffer[] = [];
  const done = new Promise<Buffer>((resolve, reject) => {
    p.on('data', (c: unknown) => {
      chunks.push(c as Buffer);
    });
    p.on('end', () => resolve(Buffer.concat(chunks)));
    p.on('error', reject);
  });
  for (const f of files) {
    await new Promise<void>((resolve, reject) =>
      p.entry({ name: f.name, size: f.body.length, mtime: f.mtime, mode: 0o644 }, f.body, (err) => (err ? reject(err) : resolve())),
    );
  }
  p.finalize();
  return done;
}

/** Builds (once) the export archive and mails its link to the owner. Idempotent: a ready export is left alone. */
export async function buildExport(svc: Services, exportId: string): Promise<{ done: boolean }> {
  const exp = await svc.db.accountExport.findUnique({ where: { id: exportId } });
  if (!exp || exp.status !== 'building') return { done: true };
  const accountId = exp.accountId;
  const a = await svc.db.account.findUniqueOrThrow({
    where: { id: accountId },
    include: { domains: { include: { registration: true } }, boxes: { orderBy: { createdAt: 'asc' } }, keys: { orderBy: { createdAt: 'asc' } } },
  });
  const now = svc.clock.now();
  const files: { name: string; body: Buffer; mtime: Date }[] = [];
  const days = retentionOf(a).audit_retention_days;

  // Messages, in pages; the raw bytes of each as stored (a sent message never composed is composed now).
  const messages: unknown[] = [];
  let cursor: string | undefined;
  for (;;) {
    const page = await svc.db.message.findMany({
      where: { accountId },
      orderBy: { id: 'asc' },
      take: 200,
      ...(cursor ? { cursor: { id: cursor }, skip: 1 } : {}),
    });
    for (const m of page) {
      let raw: Buffer | null = m.rawEnc ? open(svc.secretKey, m.rawEnc) : null;
      if (!raw && m.bodyEnc && m.direction === 'sent' && m.fromAddress) {
        const d = a.domains.find((x) => x.name === m.fromAddress!.split('@')[1]);
        raw = d ? await ensureComposed(svc, m, { dkimSelector: d.dkimSelector, dkimPrivateKeyEnc: d.dkimPrivateKeyEnc }).catch(() => null) : null;
      }
      const path = raw ? `messages/${m.id}.eml` : null;
      if (raw) files.push({ name: path!, body: raw, mtime: m.recordedAt });
      messages.push({ ...presentMessage(m, days), raw_sha256: raw ? sha256Hex(raw) : m.rawSha256, eml: path });
    }
    if (page.length < 200) break;
    cursor = page[page.length - 1]!.id;
  }

  const events: unknown[] = [];
  for (let after = 0; ; ) {
    const page = await svc.db.event.findMany({ where: { accountId, seq: { gt: after } }, orderBy: { seq: 'asc' }, take: 2000 });
    events.push(...page.map(toApiEvent));
    if (page.length < 2000) break;
    after = page[page.length - 1]!.seq;
  }
  const ledger = await svc.db.ledgerEntry.findMany({ where: { accountId }, orderBy: [{ createdAt: 'asc' }, { id: 'asc' }] });
  const checkpoints = await svc.db.auditCheckpoint.findMany({ where: { accountId }, orderBy: { signedAt: 'asc' } });
  const keys = (await presentKeys(svc.db, a.keys)).map((k, i) => ({ ...k, revoked_at: a.keys[i]!.revokedAt?.toISOString() ?? null }));
  const primary = a.domains.find((d) => d.isPrimary)?.name ?? a.domains[0]?.name ?? accountId;

  const head = [
    {
      name: 'README.txt',
      body: Buffer.from(
        [
          `Data export of the Boxes account ${accountId} (${primary}), made ${now.toISOString()}.`,
          '',
          'messages/<id>.eml   each message whose raw bytes were still stored (RFC 5322, exactly as stored)',
          'messages.json       every message: metadata, raw_sha256, and the path of its .eml (null once the body was reclaimed)',
          'events.json         the whole event stream with _chain (verify as the guide of Boxes describes: /docs/guide/audit)',
          'ledger.json         every ledger entry; amounts in micro-dollars',
          'boxes.json          the boxes',
          'keys.json           the API keys: metadata only, never a key',
          'checkpoints.json    the signed chain checkpoints (JWS, EdDSA)',
          'account.json        the account, its domains and when its data is deleted',
          '',
        ].join('\n'),
      ),
      mtime: now,
    },
    {
      name: 'account.json',
      body: json({
        id: a.id,
        status: a.status,
        owner_email: a.humanEmail,
        primary_address: a.primaryAddress,
        created_at: a.createdAt.toISOString(),
        closed_at: a.closedAt?.toISOString() ?? null,
        delete_after: a.deleteAfter?.toISOString() ?? null,
        balance_micros: a.balanceMicros,
        free_messages_left: a.freeMessagesLeft,
        audit_retention_days: days,
        chain_head: { seq: a.chainSeq, hash: a.chainHash },
        domains: a.domains.map((d) => ({
          name: d.name,
          mode: d.mode,
          status: d.status,
          primary: d.isPrimary,
          created_at: d.createdAt.toISOString(),
          registration: d.registration
            ? { registrar: d.registration.registrar, status: d.registration.status, expires_at: d.registration.expiresAt.toISOString() }
            : null,
        })),
      }),
      mtime: now,
    },
    { name: 'messages.json', body: json(messages), mtime: now },
    { name: 'events.json', body: json(events), mtime: now },
    {
      name: 'ledger.json',
      body: json(
        ledger.map((l) => ({
          id: l.id,
          type: l.type,
          amount_micros: l.amountMicros,
          balance_after_micros: l.balanceAfter,
          free_messages: l.freeMessages,
          message_id: l.messageId,
          quantity: l.quantity,
          description: l.description,
          created_at: l.createdAt.toISOString(),
        })),
      ),
      mtime: now,
    },
    {
      name: 'boxes.json',
      body: json(
        a.boxes.map((b) => ({
          id: b.id,
          address: b.address,
          local_part: b.localPart,
          signature: b.signature,
          primary: b.isPrimary,
          created_at: b.createdAt.toISOString(),
        })),
      ),
      mtime: now,
    },
    { name: 'keys.json', body: json(keys), mtime: now },
    {
      name: 'checkpoints.json',
      body: json(checkpoints.map((c) => ({ seq: c.seq, hash: c.hash, signed_at: c.signedAt.toISOString(), key_id: c.keyId, checkpoint: c.jws }))),
      mtime: now,
    },
  ];
  const archive = await tarOf([...head, ...files]);
  const sha = sha256Hex(archive);
  await svc.db.$transaction(async (tx) => {
    const r = await tx.accountExport.updateMany({
      where: { id: exportId, status: 'building' satisfies ExportStatus },
      data: {
        status: 'ready' satisfies ExportStatus,
        archiveEnc: seal(svc.secretKey, archive),
        sizeBytes: archive.length,
        sha256: sha,
        readyAt: svc.clock.now(),
      },
    });
    if (r.count !== 1) return;
    await appendEvent({
      db: tx,
      accountId,
      type: 'account.export_ready',
      data: { export_id: exportId, size_bytes: archive.length, sha256: sha, expires_at: exp.expiresAt.toISOString() },
    });
    const token = open(svc.secretKey, exp.tokenEnc).toString('utf8');
    await queueNotice(tx, {
      accountId,
      kind: 'account.export_ready',
      to: a.humanEmail,
      subject: `Your Boxes data export for ${primary} is ready`,
      text: `Download the data export of ${primary} (a tar archive of ${archive.length} bytes, SHA-256 ${sha}):\n\n${exportUrl(svc, token)}\n\nThe link works until ${exp.expiresAt.toISOString()}. All the account's data is deleted for good on ${a.deleteAfter?.toISOString() ?? 'its deletion date'}.`,
    });
  });
  return { done: true };
}

/** GET /exports/<token>: the archive, or where it stands. */
export async function exportByToken(svc: Services, token: string) {
  if (!/^[A-Za-z0-9_-]{20,100}$/.test(token)) throw new AppError('not_found', 'No such export.');
  const exp = await svc.db.accountExport.findUnique({
    where: { tokenHash: sha256Hex(token) },
    include: { account: { select: { domains: { where: { isPrimary: true }, select: { name: true } } } } },
  });
  if (!exp) throw new AppError('not_found', 'No such export.');
  if (exp.expiresAt < svc.clock.now()) throw new AppError('link_expired', 'This export link has expired.');
  if (exp.status === 'failed') throw new AppError('internal', 'Building this export failed; the operators were told.');
  if (exp.status !== 'ready' || !exp.archiveEnc) return { ready: false as const, id: exp.id };
  await svc.db.accountExport.update({ where: { id: exp.id }, data: { downloads: { increment: 1 } } });
  const name = `boxes-export-${exp.account.domains[0]?.name ?? exp.accountId}-${exp.createdAt.toISOString().slice(0, 10)}.tar`;
  return { ready: true as const, id: exp.id, filename: name, sha256: exp.sha256!, archive: open(svc.secretKey, exp.archiveEnc) };
}

/** Exports left building (their job lost): enqueued again. */
export async function pendingExports(svc: Services): Promise<string[]> {
  const rows = await svc.db.accountExport.findMany({
    where: { status: 'building' satisfies ExportStatus, createdAt: { lt: new Date(Date.now() - 30_000) } },
    select: { id: true },
    take: 100,
  });
  return rows.map((r) => r.id);
}

/**
 * Accounts closed more than ACCOUNT_DELETION_GRACE_DAYS ago: deleted for good (the account row and, by
 * cascade, its domains, boxes, keys, messages, events, ledger, payments, notices, exports, checkpoints, ...).
 */
export async function deleteClosedAccounts(svc: Services): Promise<string[]> {
  const due = await svc.db.account.findMany({
    where: { status: 'closing' satisfies AccountStatus, deleteAfter: { lte: svc.clock.now() } },
    select: { id: true },
    take: 100,
  });
  for (const { id } of due) {
    await svc.db.$transaction(
      async (tx) => {
        const domains = await tx.domain.findMany({ where: { accountId: id }, select: { id: true } });
        const domainIds = domains.map((d) => d.id);
        const requests = await tx.accountCloseRequest.findMany({ where: { accountId: id }, select: { id: true } });
        await tx.dnsRecord.deleteMany({ where: { domainId: { in: domainIds } } });
        await tx.dnsZone.deleteMany({ where: { domainId: { in: domainIds } } });
        await tx.dnsQueryCount.deleteMany({ where: { domainId: { in: domainIds } } });
        await tx.mcpFeedback.deleteMany({ where: { accountId: id } });
        await tx.mailSyncState.deleteMany({ where: { accountId: id } });
        const payments = await tx.payment.findMany({ where: { accountId: id }, select: { id: true } });
        await tx.ownerLink.deleteMany({
          where: { OR: [{ closeRequestId: { in: requests.map((r) => r.id) } }, { paymentId: { in: payments.map((p) => p.id) } }] },
        });
        await tx.account.delete({ where: { id } });
      },
      { maxWait: 10_000, timeout: 120_000 },
    );
  }
  return due.map((d) => d.id);
}
