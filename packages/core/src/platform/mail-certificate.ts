/**
 * The TLS certificate of every mail listener (the MX's STARTTLS, IMAP and submission). Production names its
 * own (SMTP_TLS_CERT_FILE and SMTP_TLS_KEY_FILE). Without them the instance makes a self-signed one once and
 * keeps it in platform_settings, its key sealed like the other instance keys (the MQTT CA, DKIM and audit
 * signing keys): every process and every restart serves the same certificate, so a mail client that pinned it
 * (mbsync's CertificateFile, Thunderbird's exception) keeps connecting. It is made again only when the names it
 * must carry change (another MAIL_HOST or listener address) or it nears its end. GET /mail-clients/certificate
 * and the start banner give it and its SHA-256 fingerprint.
 */
import fs from 'node:fs';
import { X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';
import type { Config } from '@boxes/config';
import { exec, sql } from '@boxes/db';
import type { Services } from '../shared/context';
import { inTransaction } from '../shared/context';
import { open, seal } from '../shared/crypto';

const SETTING = 'mail_tls';
const LOCK = 'boxes_mail_tls_certificate';
const DAY_MS = 86_400_000;
/** Long-lived: a pinned certificate that expires breaks every client that pinned it. */
const VALID_DAYS = 3650;
/** Made again this long before its end, so that clients can pin the new one in time. */
const RENEW_BEFORE_DAYS = 30;

export interface MailTls {
  key: string;
  cert: string;
  selfSigned: boolean;
  /** SHA-256 of the certificate's DER as `openssl x509 -fingerprint -sha256` prints it (AB:CD:...). */
  sha256: string;
  notAfter: Date;
  /** The host names and addresses it is valid for. */
  names: string[];
}

interface Stored {
  names: string[];
  certPem: string;
  keyEnc: string;
}

const WILDCARD_ADDRESSES = new Set(['0.0.0.0', '::', '']);

/** What the self-signed certificate names: MAIL_HOST, this machine's loopback names, and each listener's address. */
export function mailCertificateNames(config: Config): string[] {
  const hosts = [config.mailHost, 'localhost', '127.0.0.1', config.smtp.host, config.mailClients.imapHost, config.mailClients.submissionHost];
  return [
    ...new Set(
      hosts
        .map((h) =>
          h
            .trim()
            .toLowerCase()
            .replace(/^\[|\]$/g, ''),
        )
        .filter((h) => !WILDCARD_ADDRESSES.has(h)),
    ),
  ];
}

/** What a mail client may see of the certificate (no key). */
export type MailCertificate = Omit<MailTls, 'key'>;

function certificateOf(cert: string, selfSigned: boolean): MailCertificate {
  const x = new X509Certificate(cert);
  const names = (x.subjectAltName ?? '')
    .split(/,\s*/)
    .map((n) => n.replace(/^(DNS|IP Address):/, '').toLowerCase())
    .filter(Boolean);
  return { cert, selfSigned, sha256: x.fingerprint256, notAfter: new Date(x.validTo), names };
}

const materialOf = (cert: string, key: string, selfSigned: boolean): MailTls => ({ ...certificateOf(cert, selfSigned), key });

async function makeSelfSigned(names: string[]): Promise<{ cert: string; key: string }> {
  // selfsigned (and the X.509 and ASN.1 libraries under it) is loaded only when a certificate is made: most
  // starts find one stored, and the mail process need not hold that code.
  const { generate } = await import('selfsigned');
  const pems = await generate([{ name: 'commonName', value: names[0] ?? 'localhost' }], {
    keySize: 2048,
    algorithm: 'sha256',
    notAfterDate: new Date(Date.now() + VALID_DAYS * DAY_MS),
    extensions: [
      { name: 'basicConstraints', cA: false },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      { name: 'subjectAltName', altNames: names.map((n) => (isIP(n) ? { type: 7 as const, ip: n } : { type: 2 as const, value: n })) },
    ],
  });
  return { cert: pems.cert, key: pems.private };
}

function usable(stored: Stored, names: string[]): boolean {
  if (!names.every((n) => stored.names.includes(n))) return false;
  return new X509Certificate(stored.certPem).validToDate.getTime() - Date.now() > RENEW_BEFORE_DAYS * DAY_MS;
}

const parse = (row: { value: string } | null): Stored | null => (row ? (JSON.parse(row.value) as Stored) : null);

/** The certificate and key the mail listeners serve: the configured files, or the instance's kept self-signed one. */
export async function mailTlsMaterial(svc: Pick<Services, 'db' | 'secretKey' | 'config'>): Promise<MailTls> {
  const { tlsCertFile, tlsKeyFile } = svc.config.smtp;
  if (tlsCertFile && tlsKeyFile) return materialOf(fs.readFileSync(tlsCertFile, 'utf8'), fs.readFileSync(tlsKeyFile, 'utf8'), false);
  const names = mailCertificateNames(svc.config);
  let stored = parse(await svc.db.platformSetting.findUnique({ where: { key: SETTING } }));
  if (!stored || !usable(stored, names)) {
    stored = await inTransaction(svc.db, async (tx) => {
      // Processes starting at once make one certificate: the first under the lock, the others read it.
      await exec(tx, sql`SELECT pg_advisory_xact_lock(hashtext(${LOCK}))`);
      const again = parse(await tx.platformSetting.findUnique({ where: { key: SETTING } }));
      if (again && usable(again, names)) return again;
      // Names it carried before stay, so processes listening on different addresses do not take turns remaking it.
      const all = [...new Set([...names, ...(again?.names ?? [])])];
      const made = await makeSelfSigned(all);
      const value: Stored = { names: all, certPem: made.cert, keyEnc: seal(svc.secretKey, made.key) };
      await tx.platformSetting.upsert({
        where: { key: SETTING },
        create: { key: SETTING, value: JSON.stringify(value) },
        update: { value: JSON.stringify(value) },
      });
      return value;
    });
  }
  let key: string;
  try {
    key = open(svc.secretKey, stored.keyEnc).toString('utf8');
  } catch {
    throw new Error(
      'the kept mail certificate (platform_settings mail_tls) does not open with this BOXES_SECRET_KEY: every process of an instance needs the same key',
    );
  }
  return materialOf(stored.certPem, key, true);
}

/**
 * The certificate the mail listeners serve, for clients to pin (GET /mail-clients/certificate): read only, so a
 * process that serves no mail neither opens the key nor makes a certificate. Null while no mail listener has
 * started on this instance (nothing kept yet).
 */
export async function mailCertificate(svc: Pick<Services, 'db' | 'config'>): Promise<MailCertificate | null> {
  const { tlsCertFile, tlsKeyFile } = svc.config.smtp;
  if (tlsCertFile && tlsKeyFile) return certificateOf(fs.readFileSync(tlsCertFile, 'utf8'), false);
  const stored = parse(await svc.db.platformSetting.findUnique({ where: { key: SETTING } }));
  return stored ? certificateOf(stored.certPem, true) : null;
}
