/**
 * The instance's signing key for audit bundles and chain checkpoints: Ed25519, generated once (under an
 * advisory lock, so concurrent processes make one), its private half sealed at rest like the other secrets.
 * Rotation retires the current key and makes a new one; retired keys stay served so that what they signed
 * still verifies. Signatures are compact JWS (RFC 7515) with alg EdDSA (RFC 8037), which outside tools (jose,
 * openssl) verify unchanged.
 */
import { createPrivateKey, generateKeyPairSync, sign as edSign, type KeyObject } from 'node:crypto';
import type { AuditSigningKey, DbClient } from '@boxes/db';
import { exec, sql } from '@boxes/db';
import type { Services } from '../shared/context';
import { inTransaction } from '../shared/context';
import { open, seal } from '../shared/crypto';
import { newId } from '../shared/ids';

export const AUDIT_ALG = 'EdDSA';

export interface PublicKeyView {
  key_id: string;
  algorithm: 'EdDSA';
  curve: 'Ed25519';
  public_key_pem: string;
  created_at: string;
  retired_at: string | null;
}

const present = (k: AuditSigningKey): PublicKeyView => ({
  key_id: k.id,
  algorithm: AUDIT_ALG,
  curve: 'Ed25519',
  public_key_pem: k.publicKeyPem,
  created_at: k.createdAt.toISOString(),
  retired_at: k.retiredAt?.toISOString() ?? null,
});

function newKeyRow(secretKey: Buffer) {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  return {
    id: newId('ask'),
    publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    privateKeyEnc: seal(secretKey, privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()),
  };
}

const LOCK = 'boxes_audit_signing_key';

/** The current key, created on first use. */
export async function currentSigningKey(svc: Pick<Services, 'db' | 'secretKey'>): Promise<AuditSigningKey> {
  const found = await svc.db.auditSigningKey.findFirst({ where: { retiredAt: null }, orderBy: { createdAt: 'desc' } });
  if (found) return found;
  return inTransaction(svc.db, async (tx) => {
    await exec(tx, sql`SELECT pg_advisory_xact_lock(hashtext(${LOCK}))`);
    const again = await tx.auditSigningKey.findFirst({ where: { retiredAt: null }, orderBy: { createdAt: 'desc' } });
    return again ?? tx.auditSigningKey.create({ data: newKeyRow(svc.secretKey) });
  });
}

/** Retires the current key and makes a new one (operator CLI). Returns both ids. */
export async function rotateSigningKey(svc: Pick<Services, 'db' | 'secretKey'>, db: DbClient = svc.db): Promise<{ retired: string | null; current: string }> {
  return inTransaction(db, async (tx) => {
    await exec(tx, sql`SELECT pg_advisory_xact_lock(hashtext(${LOCK}))`);
    const old = await tx.auditSigningKey.findFirst({ where: { retiredAt: null }, orderBy: { createdAt: 'desc' } });
    if (old) await tx.auditSigningKey.update({ where: { id: old.id }, data: { retiredAt: new Date() } });
    const created = await tx.auditSigningKey.create({ data: newKeyRow(svc.secretKey) });
    return { retired: old?.id ?? null, current: created.id };
  });
}

/** The public keys: the current one (or the one named by keyId, retired or not) and every key ever used. */
export async function publicKeys(svc: Pick<Services, 'db' | 'secretKey' | 'config'>, keyId?: string) {
  const current = await currentSigningKey(svc);
  const all = await svc.db.auditSigningKey.findMany({ orderBy: { createdAt: 'asc' } });
  const chosen = keyId ? all.find((k) => k.id === keyId) : current;
  return { chosen: chosen ? present(chosen) : null, keys: all.map(present) };
}

export const publicKeyUrl = (config: Services['config'], keyId: string): string => `${config.apiBaseUrl}/audit/public-key?key_id=${encodeURIComponent(keyId)}`;

const privateKeys = new Map<string, KeyObject>();

function privateKeyOf(secretKey: Buffer, k: AuditSigningKey): KeyObject {
  let key = privateKeys.get(k.id);
  if (!key) {
    key = createPrivateKey(open(secretKey, k.privateKeyEnc).toString('utf8'));
    privateKeys.set(k.id, key);
  }
  return key;
}

const b64url = (b: Buffer | string): string => Buffer.from(b).toString('base64url');

/** Signs a JSON payload as a compact JWS with the current key. */
export async function signJws(
  svc: Pick<Services, 'db' | 'secretKey'>,
  payload: unknown,
  typ: string,
  key?: AuditSigningKey,
): Promise<{ jws: string; keyId: string }> {
  const k = key ?? (await currentSigningKey(svc));
  const header = { alg: AUDIT_ALG, kid: k.id, typ };
  const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(payload))}`;
  const signature = edSign(null, Buffer.from(input, 'ascii'), privateKeyOf(svc.secretKey, k));
  return { jws: `${input}.${b64url(signature)}`, keyId: k.id };
}
