/**
 * The instance's own MQTT certificate authority and the certificates it signs (selfsigned, which wraps
 * node-forge): the broker's server certificate, each account's client certificate (POST /account/iot/provision),
 * and the internal publisher's. The CA key is kept sealed in platform_settings; client private keys are
 * returned once and never stored.
 */
import { createHash, X509Certificate } from 'node:crypto';
import type { Services } from '../shared/context';
import { open, seal } from '../shared/crypto';
import { appendEvent } from '../events/append';
import { newId } from '../shared/ids';
import { AppError } from '../shared/errors';

const CA_SETTING = 'mqtt_ca';
const YEAR_MS = 365 * 86_400_000;
/** The identity the worker uses to publish to the broker; accounts can never get it. */
export const INTERNAL_PUBLISHER_CN = 'boxes-internal-publisher';

export interface CertificateAuthority {
  certPem: string;
  keyPem: string;
}

export const mqttTopic = (accountId: string): string => `boxes/accounts/${accountId}/events`;

/** SHA-256 of the certificate's DER, lower-case hex without colons: the form stored and compared. */
export function certFingerprint(certPemOrDer: string | Buffer): string {
  const der = typeof certPemOrDer === 'string' ? new X509Certificate(certPemOrDer).raw : certPemOrDer;
  return createHash('sha256').update(der).digest('hex');
}

export async function getOrCreateCa(svc: Pick<Services, 'db' | 'secretKey'>): Promise<CertificateAuthority> {
  const existing = await svc.db.platformSetting.findUnique({ where: { key: CA_SETTING } });
  if (!existing) {
    const { generate } = await import('selfsigned');
    const pems = await generate([{ name: 'commonName', value: 'Boxes MQTT CA' }], {
      keyType: 'ec',
      algorithm: 'sha256',
      notAfterDate: new Date(Date.now() + 10 * YEAR_MS),
      extensions: [
        { name: 'basicConstraints', cA: true, critical: true },
        { name: 'keyUsage', keyCertSign: true, cRLSign: true, digitalSignature: true, critical: true },
      ],
    });
    const value = JSON.stringify({ certPem: pems.cert, keyEnc: seal(svc.secretKey, pems.private) });
    // Two instances starting at once: the first insert wins, the other reads it back.
    await svc.db.platformSetting.createMany({ data: [{ key: CA_SETTING, value }], skipDuplicates: true });
  }
  const row = await svc.db.platformSetting.findUniqueOrThrow({ where: { key: CA_SETTING } });
  const { certPem, keyEnc } = JSON.parse(row.value) as { certPem: string; keyEnc: string };
  return { certPem, keyPem: open(svc.secretKey, keyEnc).toString('utf8') };
}

type AltName = { type: 2; value: string } | { type: 7; ip: string };

async function issue(ca: CertificateAuthority, cn: string, usage: 'server' | 'client', altNames: AltName[], days: number) {
  const { generate } = await import('selfsigned');
  const pems = await generate([{ name: 'commonName', value: cn }], {
    keyType: 'ec',
    algorithm: 'sha256',
    notAfterDate: new Date(Date.now() + days * 86_400_000),
    ca: { key: ca.keyPem, cert: ca.certPem },
    extensions: [
      { name: 'basicConstraints', cA: false },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
      { name: 'extKeyUsage', serverAuth: usage === 'server', clientAuth: usage === 'client' },
      ...(altNames.length ? [{ name: 'subjectAltName' as const, altNames }] : []),
    ],
  });
  return { certPem: pems.cert, keyPem: pems.private };
}

export function issueServerCertificate(ca: CertificateAuthority, hosts: string[]) {
  const altNames = hosts.map((h): AltName => (/^[\d.]+$|:/.test(h) ? { type: 7, ip: h } : { type: 2, value: h }));
  return issue(ca, hosts[0] ?? 'localhost', 'server', altNames, 825);
}

export function issueInternalPublisherCertificate(ca: CertificateAuthority) {
  return issue(ca, INTERNAL_PUBLISHER_CN, 'client', [], 365);
}

/**
 * Issues the account's client certificate (CN = client_id) and revokes any earlier one. The private key is
 * in the answer only.
 */
export async function provisionIot(svc: Services, accountId: string, actorKeyId: string) {
  const ca = await getOrCreateCa(svc);
  const clientId = `${accountId}-${newId('iot').slice(4, 12)}`;
  const cert = await issue(ca, clientId, 'client', [], 365);
  const x509 = new X509Certificate(cert.certPem);
  const notAfter = new Date(x509.validTo);
  const credential = await svc.db.$transaction(async (tx) => {
    const account = await tx.account.findUniqueOrThrow({ where: { id: accountId }, select: { chainSeq: true } });
    const revoked = await tx.iotCredential.updateMany({ where: { accountId, revokedAt: null }, data: { revokedAt: new Date() } });
    const row = await tx.iotCredential.create({
      data: { id: newId('iot'), accountId, clientId, fingerprint: certFingerprint(cert.certPem), serial: x509.serialNumber, notAfter },
    });
    // MQTT delivers events from now on (QoS 1 to connected subscribers); history is on GET /events.
    await tx.account.update({ where: { id: accountId }, data: { mqttCursor: account.chainSeq } });
    await appendEvent({
      db: tx,
      accountId,
      type: 'account.iot.provisioned',
      data: { client_id: clientId, serial: x509.serialNumber, not_after: notAfter.toISOString(), revoked_previous: revoked.count, by_key_id: actorKeyId },
    });
    return row;
  });
  if (!credential) throw new AppError('internal', 'provisioning failed');
  return {
    client_id: clientId,
    certificate: cert.certPem,
    private_key: cert.keyPem,
    ca_certificate: ca.certPem,
    mqtt_endpoint: svc.config.mqtt.publicUrl,
    topic: mqttTopic(accountId),
    not_after: notAfter.toISOString(),
    qos: 1 as const,
  };
}
