/**
 * Appending to an account's event stream. Always inside the transaction of the change it reports: the
 * account row (the chain head) is locked FOR NO KEY UPDATE, so appends of one account are serialised, seq has
 * no gaps, and an event becomes visible only after every event before it. Not FOR UPDATE: rows inserted in the
 * same transaction (a box, a key) hold KEY SHARE on the account through their foreign key, and FOR UPDATE
 * conflicts with that, so two such transactions would deadlock.
 */
import type { DbClient } from '@boxes/db';
import { inTransaction } from '../shared/context';
import { newId } from '../shared/ids';
import { chainHash, type ChainBody } from './chain';

/** The LISTEN/NOTIFY channel on which each committed append names its account. */
export const EVENTS_CHANNEL = 'boxes_events';

export interface AppendInput {
  db: DbClient;
  accountId: string;
  type: string;
  data: Record<string, unknown>;
  /** The box the event concerns, if any; box-restricted keys see only events of their boxes. */
  boxId?: string | null;
}

export interface StoredEvent extends ChainBody {
  prev_hash: string;
  hash: string;
}

export async function appendEvent(input: AppendInput): Promise<StoredEvent> {
  return inTransaction(input.db, async (tx) => {
    const heads = await tx.$queryRaw<{ chain_seq: number; chain_hash: string }[]>`
      SELECT chain_seq, chain_hash FROM accounts WHERE id = ${input.accountId} FOR NO KEY UPDATE`;
    const head = heads[0];
    if (!head) throw new Error(`appendEvent: account ${input.accountId} does not exist`);
    // A JSON round trip drops undefined members so the hashed body equals what the database returns.
    const data = JSON.parse(JSON.stringify(input.data)) as Record<string, unknown>;
    const createdAt = new Date();
    const body: ChainBody = {
      id: newId('evt'),
      seq: head.chain_seq + 1,
      type: input.type,
      account_id: input.accountId,
      created_at: createdAt.toISOString(),
      data,
    };
    const hash = chainHash(head.chain_hash, body);
    await tx.event.create({
      data: {
        id: body.id,
        accountId: input.accountId,
        seq: body.seq,
        type: body.type,
        boxId: input.boxId ?? null,
        data: data as object,
        createdAt,
        prevHash: head.chain_hash,
        hash,
      },
    });
    await tx.account.update({ where: { id: input.accountId }, data: { chainSeq: body.seq, chainHash: hash } });
    // Delivered by PostgreSQL only if this transaction commits: wakes the push workers (webhook, MQTT).
    await tx.$executeRaw`SELECT pg_notify(${EVENTS_CHANNEL}, ${input.accountId})`;
    return { ...body, prev_hash: head.chain_hash, hash };
  });
}
