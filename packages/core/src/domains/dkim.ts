/** Per-domain DKIM keys: generated at signup, private half sealed at rest, public half published in DNS. */
import { generateKeyPair } from 'node:crypto';
import { promisify } from 'node:util';
import { seal } from '../shared/crypto';

const generate = promisify(generateKeyPair);
export const DKIM_SELECTOR = 'boxes1';

export async function createDkimKey(secretKey: Buffer) {
  const { publicKey, privateKey } = await generate('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'der' },
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
  });
  return {
    selector: DKIM_SELECTOR,
    publicKey: (publicKey as Buffer).toString('base64'),
    privateKeyEnc: seal(secretKey, privateKey as string),
  };
}
