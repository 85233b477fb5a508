/** Prefixed random ids (acct_, key_, box_, evt_, ...): 20 base32 characters, 100 bits from the CSPRNG. */
import { randomFillSync } from 'node:crypto';

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

// The CSPRNG is read in blocks of 204 ids rather than once per id: each read is a call into native code that
// cost more than building the id, and a send makes several ids. Each block's bytes are used once, in order.
const ID_BYTES = 20;
const pool = Buffer.alloc(ID_BYTES * 204);
let offset = pool.length;

export function newId(prefix: IdPrefix): string {
  if (offset === pool.length) {
    randomFillSync(pool);
    offset = 0;
  }
  let out = '';
  for (let i = offset, end = offset + ID_BYTES; i < end; i++) out += ALPHABET[pool[i]! & 31];
  offset += ID_BYTES;
  return `${prefix}_${out}`;
}
