/**
 * Appending to an account's event stream. Always inside the transaction of the change it reports: the
 * account row (the chain head) is locked FOR NO KEY UPDATE, so appends of one account are serialised, seq has
 * no gaps, and an event becomes visible only after every event before it. Not FOR UPDATE: rows inserted in the
 * same transaction (a box, a key) hold KEY SHARE on the account through their foreign key, and FOR UPDATE
 * conflicts with that, so two such transactions would deadlock.
 */
import type { DbClient } from '@boxes/db';
import type { NewEvent } from '@boxes/schemas';
import { newId } from '../shared/ids';
import { canonicalData, canonicalString, chainHash, type ChainBody } from './chain';

/** The LISTEN/NOTIFY channel on which each committed append names its account. */
export const EVENTS_CHANNEL = 'boxes_events';

/**
 * An event to append: a type of the event catalogue (packages/schemas) with its data, checked against each
 * other by the compiler, and the box it concerns if any (box-restricted keys see only events of their boxes).
 */
export type AppendInput = NewEvent & { db: DbClient; accountId: string };

export interface StoredEvent extends ChainBody {
  prev_hash: string;
  hash: string;
}

/**
 * An event chained onto a head the caller has locked (the account row, FOR NO KEY UPDATE, in its transaction):
 * its id, seq, hash and JSON, for a caller that inserts it in its own statement (sendMessage) and moves the
 * head to (seq, hash) in the same transaction.
 */
export function chainEvent(head: { chain_seq: number; chain_hash: string }, input: NewEvent & { accountId: string }) {
  const data = JSON.parse(JSON.stringify(input.data)) as Record<string, unknown>;
  const createdAt = new Date();
  const body: ChainBody = { id: newId('evt'), seq: head.chain_seq + 1, type: input.type, account_id: input.accountId, created_at: createdAt.toISOString(), data };
  return { id: body.id, seq: body.seq, createdAt, prevHash: head.chain_hash, hash: chainHash(head.chain_hash, body), data, json: JSON.stringify(data) };
}

/**
 * The canonical bytes of an event body around its seq: JCS orders the members account_id, created_at, data, id,
 * seq, type, so JCS(body) = prefix + seq + suffix. The hash can then be taken where the seq is known.
 */
export function canonicalAround(body: Omit<ChainBody, 'seq'>): { prefix: string; suffix: string } {
  const str = canonicalString;
  return {
    prefix: `{"account_id":${str(body.account_id)},"created_at":${str(body.created_at)},"data":${canonicalData(body.data)},"id":${str(body.id)},"seq":`,
    suffix: `,"type":${str(body.type)}}`,
  };
}

/**
 * Appends one event in one round trip: a single statement locks the chain head (FOR NO KEY UPDATE), computes
 * the hash in PostgreSQL (sha256 of prev_hash, a newline and the canonical body, whose bytes around the seq come
 * from here), inserts the event, moves the head and notifies the push workers at commit. Outside a
 * transaction the statement is atomic by itself.
 */
export async function appendEvent(input: AppendInput): Promise<StoredEvent> {
  // A JSON round trip drops undefined members so the hashed body equals what the database returns.
  const data = JSON.parse(JSON.stringify(input.data)) as Record<string, unknown>;
  const createdAt = new Date();
  const partial = { id: newId('evt'), type: input.type, account_id: input.accountId, created_at: createdAt.toISOString(), data };
  const { prefix, suffix } = canonicalAround(partial);
  const rows = await input.db.$queryRaw<{ seq: number; prev_hash: string; hash: string }[]>`
    WITH head AS (
      SELECT chain_seq + 1 AS seq, chain_hash AS prev FROM accounts WHERE id = ${input.accountId} FOR NO KEY UPDATE
    ), h AS (
      SELECT seq, prev, encode(sha256(convert_to(prev || E'\n' || ${prefix} || seq::text || ${suffix}, 'UTF8')), 'hex') AS hash FROM head
    ), ins AS (
      INSERT INTO events (id, account_id, seq, type, box_id, data, created_at, prev_hash, hash)
      SELECT ${partial.id}, ${input.accountId}, seq, ${input.type}, ${input.boxId ?? null}, ${JSON.stringify(data)}::jsonb, ${createdAt}, prev, hash FROM h
    ), upd AS (
      UPDATE accounts SET chain_seq = h.seq, chain_hash = h.hash FROM h WHERE accounts.id = ${input.accountId}
    )
    SELECT h.seq, h.prev AS prev_hash, h.hash, pg_notify(${EVENTS_CHANNEL}, ${input.accountId})::text AS notified FROM h`;
  const row = rows[0];
  if (!row) throw new Error(`appendEvent: account ${input.accountId} does not exist`);
  return { ...partial, seq: row.seq, prev_hash: row.prev_hash, hash: row.hash };
}
