/** Prefixed random ids (acct_, key_, box_, evt_, ...): 20 base32 characters, 100 bits from the CSPRNG. */
import { randomBytes } from 'node:crypto';

const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';

export type IdPrefix =
  | 'int'
  | 'att'
  | 'acct'
  | 'key'
  | 'box'
  | 'evt'
  | 'dom'
  | 'req'
  | 'msg'
  | 'dlv'
  | 'led'
  | 'whd'
  | 'iot'
  | 'sq'
  | 'sm'
  | 'fr'
  | 'fb'
  | 'pi'
  | 'mpp'
  | 'spr'
  | 'wal'
  | 'card'
  | 'ol'
  | 'rev'
  | 'os'
  | 'ntc'
  | 'zone'
  | 'rr'
  | 'reg'
  | 'ask'
  | 'ckp'
  | 'clr'
  | 'exp'
  | 'apw'
  | 'fld'
  | 'sip'
  | 'fwd'
  | 'fwr'
  // allow and block list entries
  | 'tle'
  // bulk send jobs
  | 'bulk'
  // conversations
  | 'thr'
  // webhook endpoints
  | 'whe'
  // drafts
  | 'drf';

export function newId(prefix: IdPrefix): string {
  const bytes = randomBytes(20);
  let out = '';
  for (const b of bytes) out += ALPHABET[b & 31];
  return `${prefix}_${out}`;
}
