/** Reading the stream with a cursor, and recomputing the chain (GET /events, GET /events/verify). */
import type { Db, Event } from '@boxes/db';
import { AppError } from '../shared/errors';
import { chainHash, GENESIS_HASH, type ChainBody } from './chain';

export interface ApiEvent extends ChainBody {
  _chain: { prev_hash: string; hash: string };
}

export function toApiEvent(e: Event): ApiEvent {
  return {
    id: e.id,
    seq: e.seq,
    type: e.type,
    account_id: e.accountId,
    created_at: e.createdAt.toISOString(),
    data: e.data,
    _chain: { prev_hash: e.prevHash, hash: e.hash },
  };
}

export interface ListEventsInput {
  db: Db;
  accountId: string;
  /** Cursor: the seq of the last event already seen, as a decimal string. */
  since?: string | undefined;
  types?: string[] | undefined;
  limit: number;
  /** Box restriction of the calling key: only events of these boxes. */
  boxIds?: string[] | null | undefined;
}

/** seq is a PostgreSQL integer. */
const MAX_SEQ = 2_147_483_647;

export function parseCursor(since: string | undefined): number {
  if (since === undefined || since === '') return 0;
  if (!/^\d{1,10}$/.test(since) || Number(since) > MAX_SEQ) {
    throw new AppError('invalid_cursor', 'since must be a cursor returned as next_cursor (a decimal string)', {
      field: 'since',
    });
  }
  return Number(since);
}

export async function listEvents(input: ListEventsInput) {
  const after = parseCursor(input.since);
  // Read the head first: every event up to it is committed, so a short page may safely move the cursor to the
  // head (a filtered poll then skips what it cannot see instead of scanning it again next time).
  const account = await input.db.account.findUnique({ where: { id: input.accountId }, select: { chainSeq: true } });
  const head = account?.chainSeq ?? 0;
  if (after > head) {
    // Never issued by us; moving on from it would skip every event up to it once the stream grows.
    throw new AppError('invalid_cursor', `since ${after} is ahead of the stream (its newest event is ${head}); use a next_cursor you were given`, {
      field: 'since',
    });
  }
  const rows = await input.db.event.findMany({
    where: {
      accountId: input.accountId,
      seq: { gt: after, lte: head },
      ...(input.types?.length ? { type: { in: input.types } } : {}),
      ...(input.boxIds ? { boxId: { in: input.boxIds } } : {}),
    },
    orderBy: { seq: 'asc' },
    take: input.limit + 1,
  });
  const hasMore = rows.length > input.limit;
  const page = rows.slice(0, input.limit);
  const last = page[page.length - 1];
  const nextSeq = hasMore && last ? last.seq : Math.max(after, head);
  return { events: page.map(toApiEvent), next_cursor: String(nextSeq), has_more: hasMore };
}

export interface Anomaly {
  at_seq: number;
  kind: 'hash_mismatch' | 'prev_hash_mismatch' | 'seq_gap' | 'head_mismatch';
  message: string;
  expected?: string;
  found?: string;
}

export async function verifyChain(input: { db: Db; accountId: string; batchSize?: number }) {
  const batchSize = input.batchSize ?? 2000;
  const account = await input.db.account.findUniqueOrThrow({
    where: { id: input.accountId },
    select: { chainSeq: true, chainHash: true },
  });
  const anomalies: Anomaly[] = [];
  let expectedPrev = GENESIS_HASH;
  let expectedSeq = 1;
  let verified = 0;
  let lastGood = 0;
  let hashAtLastGood: string | null = null;
  let broken = false;
  let after = 0;
  for (;;) {
    const rows = await input.db.event.findMany({
      // Up to the head as read above: appends move the head in the transaction that inserts the event, so
      // everything up to it is committed, and an event appended while this runs is left for the next check.
      where: { accountId: input.accountId, seq: { gt: after, lte: account.chainSeq } },
      orderBy: { seq: 'asc' },
      take: batchSize,
    });
    for (const row of rows) {
      if (row.seq !== expectedSeq) {
        anomalies.push({ at_seq: expectedSeq, kind: 'seq_gap', message: `event seq ${expectedSeq} is missing (next stored is ${row.seq})` });
        broken = true;
      }
      if (row.prevHash !== expectedPrev) {
        anomalies.push({
          at_seq: row.seq,
          kind: 'prev_hash_mismatch',
          message: `event ${row.seq} does not link to the event before it`,
          expected: expectedPrev,
          found: row.prevHash,
        });
        broken = true;
      }
      const { _chain, ...body } = toApiEvent(row);
      const recomputed = chainHash(row.prevHash, body);
      if (recomputed !== row.hash) {
        anomalies.push({
          at_seq: row.seq,
          kind: 'hash_mismatch',
          message: `event ${row.seq} was altered after it was written`,
          expected: recomputed,
          found: row.hash,
        });
        broken = true;
      }
      verified += 1;
      if (!broken) {
        lastGood = row.seq;
        hashAtLastGood = row.hash;
      }
      // Continue from what the stored row claims, so one altered row is reported once, not at every later seq.
      expectedPrev = row.hash;
      expectedSeq = row.seq + 1;
      after = row.seq;
    }
    if (rows.length < batchSize) break;
  }
  if (account.chainSeq !== after || account.chainHash !== expectedPrev) {
    anomalies.push({
      at_seq: Math.max(after, account.chainSeq),
      kind: 'head_mismatch',
      message: `the chain head records seq ${account.chainSeq} but the stored events end at seq ${after}`,
      expected: account.chainHash,
      found: expectedPrev,
    });
  }
  const ok = anomalies.length === 0;
  return {
    ok,
    events_verified: verified,
    last_verified_seq: lastGood,
    hash_at_seq: hashAtLastGood,
    anomalies,
    reason: ok ? null : anomalies[0]!.message,
    verified_at: new Date().toISOString(),
  };
}
