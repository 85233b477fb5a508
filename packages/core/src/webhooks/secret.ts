/**
 * Webhook signing. One secret per account (whsec_ + base64 of 32 random bytes, sealed at rest). Every delivery
 * carries two signature schemes over the same body:
 *   X-Boxes-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>" keyed by the secret string>
 *   webhook-id / webhook-timestamp / webhook-signature: Standard Webhooks ("v1,<base64 HMAC-SHA256 of
 *   "<id>.<t>.<body>" keyed by the base64-decoded part after whsec_>")
 * After a rotation the previous secret stays valid for 24 hours: each header then carries a signature under both.
 */
import { createHmac, createSecretKey, type KeyObject, randomBytes } from 'node:crypto';
import type { Db } from '@boxes/db';
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';
import { open, seal } from '../shared/crypto';

export const ROTATION_OVERLAP_MS = 24 * 60 * 60 * 1000;
export const SIGNATURE_TOLERANCE_SECONDS = 300;

export const generateWebhookSecret = (): string => `whsec_${randomBytes(32).toString('base64')}`;

export interface SigningSecrets {
  current: string;
  previous: string | null;
  previousUntil: Date | null;
}

/** The account's secrets, creating the first one on first use. */
export async function signingSecrets(svc: Services, accountId: string): Promise<SigningSecrets> {
  let a = await svc.db.account.findUniqueOrThrow({
    where: { id: accountId },
    select: { webhookSecretEnc: true, webhookSecretPrevEnc: true, webhookSecretPrevUntil: true },
  });
  if (!a.webhookSecretEnc) {
    await svc.db.account.updateMany({
      where: { id: accountId, webhookSecretEnc: null },
      data: { webhookSecretEnc: seal(svc.secretKey, generateWebhookSecret()) },
    });
    a = await svc.db.account.findUniqueOrThrow({
      where: { id: accountId },
      select: { webhookSecretEnc: true, webhookSecretPrevEnc: true, webhookSecretPrevUntil: true },
    });
  }
  return secretsOf(svc, a);
}

/** The secrets from an account row's sealed columns (the current one set). */
export function secretsOf(
  svc: Services,
  a: { webhookSecretEnc: string | null; webhookSecretPrevEnc: string | null; webhookSecretPrevUntil: Date | null },
): SigningSecrets {
  const live = a.webhookSecretPrevUntil && a.webhookSecretPrevUntil.getTime() > Date.now();
  return {
    current: open(svc.secretKey, a.webhookSecretEnc!).toString('utf8'),
    previous: live && a.webhookSecretPrevEnc ? open(svc.secretKey, a.webhookSecretPrevEnc).toString('utf8') : null,
    previousUntil: live ? a.webhookSecretPrevUntil : null,
  };
}

export const SCHEME_DESCRIPTION = {
  header: 'X-Boxes-Signature',
  format: 't=<unix seconds>,v1=<hex>',
  signed_payload: '<t>.<raw request body>',
  algorithm: 'HMAC-SHA256, keyed by signing_secret (the whole string, whsec_ included)',
  tolerance_seconds: SIGNATURE_TOLERANCE_SECONDS,
  rotation:
    'After POST /account/webhook/secret/rotate the previous secret stays valid for 24 hours; during that time each header carries one v1 signature per secret.',
  standard_webhooks: {
    headers: ['webhook-id', 'webhook-timestamp', 'webhook-signature'],
    note: 'Also signed per the Standard Webhooks specification with the same secret, so the standardwebhooks library verifies deliveries unchanged.',
  },
  dedupe: 'The body is the event; its id is also in webhook-id. Deliveries are at least once: skip ids you have seen.',
} as const;

export async function webhookConfig(svc: Services, accountId: string) {
  const s = await signingSecrets(svc, accountId);
  const account = await svc.db.account.findUniqueOrThrow({ where: { id: accountId }, select: { callbackWebhook: true } });
  return {
    agent_callback_webhook: account.callbackWebhook,
    signing_secret: s.current,
    previous_secret_valid_until: s.previousUntil?.toISOString() ?? null,
    scheme: SCHEME_DESCRIPTION,
  };
}

export async function rotateWebhookSecret(svc: Services, accountId: string, actorKeyId: string) {
  const current = await signingSecrets(svc, accountId);
  const next = generateWebhookSecret();
  const until = new Date(Date.now() + ROTATION_OVERLAP_MS);
  await svc.db.$transaction(async (tx) => {
    await tx.account.update({
      where: { id: accountId },
      data: { webhookSecretEnc: seal(svc.secretKey, next), webhookSecretPrevEnc: seal(svc.secretKey, current.current), webhookSecretPrevUntil: until },
    });
    await appendEvent({ db: tx, accountId, type: 'webhook.secret_rotated', data: { previous_valid_until: until.toISOString(), by_key_id: actorKeyId } });
  });
  return { signing_secret: next, previous_secret_valid_until: until.toISOString(), scheme: SCHEME_DESCRIPTION };
}

/** The HMAC keys of a set of secrets (both schemes), made once per set: a drain signs many events with one. */
const signingKeys = new WeakMap<SigningSecrets, { boxes: KeyObject[]; standard: KeyObject[] }>();

function keysOf(secrets: SigningSecrets): { boxes: KeyObject[]; standard: KeyObject[] } {
  let keys = signingKeys.get(secrets);
  if (!keys) {
    const all = [secrets.current, ...(secrets.previous ? [secrets.previous] : [])];
    keys = {
      boxes: all.map((s) => createSecretKey(Buffer.from(s, 'utf8'))),
      standard: all.map((s) => createSecretKey(Buffer.from(s.replace(/^whsec_/, ''), 'base64'))),
    };
    signingKeys.set(secrets, keys);
  }
  return keys;
}

/** The headers of one delivery of `body` (the event JSON) signed with every live secret. */
export function signatureHeaders(secrets: SigningSecrets, eventId: string, body: string, now = new Date()): Record<string, string> {
  const t = Math.floor(now.getTime() / 1000);
  const keys = keysOf(secrets);
  const boxes = keys.boxes.map((key) => `v1=${createHmac('sha256', key).update(`${t}.${body}`).digest('hex')}`);
  const standard = keys.standard.map((key) => `v1,${createHmac('sha256', key).update(`${eventId}.${t}.${body}`).digest('base64')}`);
  return {
    'x-boxes-signature': [`t=${t}`, ...boxes].join(','),
    'webhook-id': eventId,
    'webhook-timestamp': String(t),
    'webhook-signature': standard.join(' '),
  };
}

export type { Db };
