/** Prefixed random ids (acct_, key_, box_, evt_, ...): 20 base32 characters, 100 bits from the CSPRNG. */
import { randomBlocks } from './random';

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

// The CSPRNG is read in blocks of 204 ids rather than once per id: a send makes several ids (randomBlocks).
const ID_BYTES = 20;
const random = randomBlocks(ID_BYTES, 204);

export function newId(prefix: IdPrefix): string {
  const at = random.take();
  let out = '';
  for (let i = at, end = at + ID_BYTES; i < end; i++) out += ALPHABET[random.bytes[i]! & 31];
  return `${prefix}_${out}`;
}
