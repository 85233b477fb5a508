/**
 * The TLS certificate of every mail listener (the MX's STARTTLS, IMAP and submission): SMTP_TLS_CERT_FILE and
 * SMTP_TLS_KEY_FILE, or a self-signed certificate for MAIL_HOST (and localhost, 127.0.0.1) made once per
 * process and host name. Production sets the files.
 */
import fs from 'node:fs';
import { generate } from 'selfsigned';
import type { Config } from '@boxes/config';

export interface TlsMaterial {
  key: string;
  cert: string;
  selfSigned: boolean;
}

const generated = new Map<string, Promise<TlsMaterial>>();

export async function tlsMaterial(config: Config): Promise<TlsMaterial> {
  if (config.smtp.tlsCertFile && config.smtp.tlsKeyFile) {
    return { cert: fs.readFileSync(config.smtp.tlsCertFile, 'utf8'), key: fs.readFileSync(config.smtp.tlsKeyFile, 'utf8'), selfSigned: false };
  }
  const known = generated.get(config.mailHost);
  if (known) return known;
  const made = generate([{ name: 'commonName', value: config.mailHost }], {
    keySize: 2048,
    algorithm: 'sha256',
    extensions: [{ name: 'subjectAltName', altNames: [{ type: 2, value: config.mailHost }, { type: 2, value: 'localhost' }, { type: 7, ip: '127.0.0.1' }] }],
  }).then((pems) => ({ key: pems.private, cert: pems.cert, selfSigned: true }));
  generated.set(config.mailHost, made);
  return made;
}
