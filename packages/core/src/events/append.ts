/**
 * The event writer: every event of every path is chained here and inserted by one statement shape. Always inside
 * the transaction of the change it reports: the account row (the chain head) is locked FOR NO KEY UPDATE, so
 * appends of one account are serialised, seq has no gaps, and an event becomes visible only after every event
 * before it. Not FOR UPDATE: rows inserted in the same transaction (a box, a key) hold KEY SHARE on the account
 * through their foreign key, and FOR UPDATE conflicts with that, so two such transactions would deadlock.
 *
 * The hash is computed here, in TypeScript, and only here (chain.ts has the formula): the batch writer
 * (store/write.ts: sends, inbound, delivery outcomes, bulk) chains several events onto heads its callers locked
 * and puts eventsInsert in its one statement; appendEvent does the same for one.
 */
import {
  k,
  poolOf,
  poolRows,
  prepared,
  rows as run,
  sql,
  tbl,
  type Column,
  type Db,
  type DbClient,
  type DB,
  type Insertable,
  type RawBuilder,
} from '@boxes/db';
import type { NewEvent } from '@boxes/schemas';
import { inTransaction } from '../shared/context';
import { newId } from '../shared/ids';
import { spacedBatches } from '../shared/spaced';
import { fixed } from '../store/rows';
import { canonicalBody, canonicalString, chainHash, type ChainBody } from './chain';

/** The LISTEN/NOTIFY channel on which each committed append names its account. */
export const EVENTS_CHANNEL = 'boxes_events';

/**
 * An event to append: a type of the event catalogue (packages/schemas) with its data, checked against each
 * other by the compiler, and the box it concerns if any (box-restricted keys see only events of their boxes).
 */
export type AppendInput = NewEvent & { db: DbClient; accountId: string };

/** A chain head: the seq and hash of an account's last event (columns chain_seq and chain_hash). */
export interface ChainHead {
  chain_seq: number;
  chain_hash: string;
}

/** A chained event as the events table stores it. */
export interface EventRow {
  id: string;
  account_id: string;
  seq: number;
  type: NewEvent['type'];
  box_id: string | null;
  data: Record<string, unknown>;
  /** ISO 8601, as hashed. */
  created_at: string;
  prev_hash: string;
  hash: string;
}

/**
 * An event chained onto a head the caller has locked (the account row, FOR NO KEY UPDATE, in its transaction):
 * the row to insert (eventsInsert) in the same transaction that moves the head to (row.seq, row.hash).
 */
export function chainEvent(head: ChainHead, input: NewEvent & { accountId: string }): EventRow {
  // A JSON round trip drops undefined members so the hashed body equals what the database returns.
  const data = JSON.parse(JSON.stringify(input.data)) as Record<string, unknown>;
  const body: ChainBody = {
    id: newId('evt'),
    seq: head.chain_seq + 1,
    type: input.type,
    account_id: input.accountId,
    created_at: new Date().toISOString(),
    data,
  };
  return {
    id: body.id,
    account_id: input.accountId,
    seq: body.seq,
    type: input.type,
    box_id: input.boxId ?? null,
    data,
    created_at: body.created_at,
    prev_hash: head.chain_hash,
    hash: chainHash(head.chain_hash, body),
  };
}

const EVENT_COLUMNS = ['id', 'account_id', 'seq', 'type', 'box_id', 'data', 'created_at', 'prev_hash', 'hash'] as const satisfies readonly (keyof EventRow &
  Column<'events'>)[];

/** The INSERT of chained rows, for a CTE of the caller's statement (typed: the rows are the table's, read with its row type). */
export function eventsInsert(rows: EventRow[]): RawBuilder<unknown> {
  const typed: Insertable<DB['events']>[] = rows;
  const cols = fixed('events:columns', () => sql.join(EVENT_COLUMNS.map((c) => sql.ref(c))));
  return sql`INSERT INTO ${sql.table('events')} (${cols})
      SELECT ${cols} FROM jsonb_populate_recordset(NULL::${sql.table('events')}, ${JSON.stringify(typed)}::jsonb)`;
}

/** appendEvent's statement, compiled once; its parameters in this order (the values here only give their places). */
const APPEND_EVENT = sql<{ seq: number; prev_hash: string; hash: string }>`SELECT seq, prev_hash, hash FROM append_event(${''}, ${''}, ${''}, ${null}::text,
      ${''}::jsonb, ${''}::timestamptz, ${''}, ${''}, ${EVENTS_CHANNEL})`.compile(k);

/**
 * The NOTIFY of appends made on their own: one statement for the accounts appended since the last one, whose
 * commit does not wait for its WAL flush (set_config(..., true) holds for this statement's transaction only),
 * named where the pool names statements (prepared). PostgreSQL lets one notifying transaction commit at a time,
 * server-wide, and holds that lock until the commit is flushed: with the NOTIFY inside each append, the appends
 * queued one behind the other's flush, and a slow flush (a checkpoint writing, another database's commits) held
 * every append of every account behind it.
 * A notification lost to a crash is only a wake-up: the push sweeper finds what it would have announced.
 */
const NOTIFY_EVENTS = prepared(sql<{ n: number }>`SELECT count(pg_notify(${EVENTS_CHANNEL}, a.id))::int AS n
  FROM set_config('synchronous_commit', 'off', true), unnest(${[] as string[]}::text[]) AS a(id)`);
/**
 * Announcements of one pool are at least this far apart (spacedBatches): the first append after a quiet spell is
 * announced in the next turn of the event loop, and the appends that follow within the spacing share the next
 * announcement. The push worker gathers its wake-ups for as long (WAKE_GATHER_MS) before it reads, so a steady
 * stream waits about as long as before and each read carries more events. In bench:push (200 events a second,
 * five interleaved pairs) statements fell from 2.48 to 1.93 per event and the server's and PostgreSQL's CPU from
 * 2.23-2.61 to 2.01-2.43 ms per event, for about 5 ms more at the median (webhook p99 26-29 ms against 19-25).
 */
const ANNOUNCE_SPACING_MS = 10;
const announcers = new WeakMap<object, (accountId: string) => void>();
/*
 * Never skipped, not even when the push engine of this very process already drains the account: every LISTEN on
 * the channel needs the NOTIFY (the push engines, the server's SSE streams, the mail app's IMAP sessions), in any
 * process of any instance, and a process cannot tell that no other one listens.
 */

function announce(db: DbClient, accountId: string): void {
  let add = announcers.get(db);
  if (!add) {
    add = spacedBatches<string>(ANNOUNCE_SPACING_MS, (ids) => {
      poolRows(db, { ...NOTIFY_EVENTS, parameters: [EVENTS_CHANNEL, ids] }).catch(() => undefined);
    });
    announcers.set(db, add);
  }
  add(accountId);
}

/**
 * Appends one event in one statement, in the caller's transaction or as one of its own: the append_event
 * function (a migration defines it) locks the chain head, chains the event onto it (the hash taken by PostgreSQL
 * over the same bytes chainHash hashes: the body's canonical JSON is built here around its seq, which only the
 * locked head gives), inserts it, moves the head and notifies the push workers (at commit; an append on its own right after it). One round trip where
 * a transaction of its own took four (BEGIN, the head, the insert, COMMIT), and a function rather than the
 * statement itself because PL/pgSQL plans its statements once per connection: parsing and planning the
 * statement on every append cost about a third of its PostgreSQL CPU, and appends are the most frequent write
 * there is.
 */
export async function appendEvent(input: AppendInput): Promise<EventRow> {
  const { db, accountId, ...event } = input as AppendInput & NewEvent;
  // A JSON round trip drops undefined members so the hashed body equals what the database returns.
  const data = JSON.parse(JSON.stringify(event.data)) as Record<string, unknown>;
  const id = newId('evt');
  const created_at = new Date().toISOString();
  // RFC 8785 sorts members by name, so seq and type come last: the canonical body is `before`, the seq, `after`.
  const after = `,"type":${canonicalString(event.type)}}`;
  const whole = canonicalBody({ id, seq: 0, type: event.type, account_id: accountId, created_at, data });
  const tail = `,"seq":0${after}`;
  if (!whole.endsWith(tail)) throw new Error('appendEvent: unexpected canonical body');
  const before = `${whole.slice(0, -tail.length)},"seq":`;
  const boxId = event.boxId ?? null;
  // Outside a transaction, straight on the pg pool (poolRows): Prisma's client cost more CPU than the rest of the
  // append's client side. The statement's text is compiled once (APPEND_EVENT).
  // On its own (db is the client, not a transaction), the append is announced after its commit (announce); in
  // the caller's transaction, by its own NOTIFY at that transaction's commit.
  const alone = poolOf(db as Db) !== undefined;
  const [head] = await poolRows<{ seq: number; prev_hash: string; hash: string }>(db, {
    ...APPEND_EVENT,
    parameters: [accountId, id, event.type, boxId, JSON.stringify(data), created_at, before, after, alone ? null : EVENTS_CHANNEL],
  });
  if (!head) throw new Error(`appendEvent: account ${accountId} does not exist`);
  if (alone) announce(db, accountId);
  return { id, account_id: accountId, type: event.type, box_id: boxId, data, created_at, seq: head.seq, prev_hash: head.prev_hash, hash: head.hash };
}

/**
 * Appends several events of one account, in order, the same way: two round trips whatever their number (a
 * client's STORE over many messages, say). Writes with ledger entries or messages go through store/write.ts.
 */
export async function appendEvents(dbOrTx: DbClient, accountId: string, events: NewEvent[]): Promise<EventRow[]> {
  if (!events.length) return [];
  return inTransaction(dbOrTx, async (db) => {
    const a = tbl('accounts');
    const [head] = await run(db, sql<ChainHead>`SELECT ${a.chain_seq}, ${a.chain_hash} FROM ${a.$} WHERE ${a.id} = ${accountId} FOR NO KEY UPDATE`);
    if (!head) throw new Error(`appendEvents: account ${accountId} does not exist`);
    const rows: EventRow[] = [];
    let at: ChainHead = head;
    for (const event of events) {
      const row = chainEvent(at, { accountId, ...event });
      rows.push(row);
      at = { chain_seq: row.seq, chain_hash: row.hash };
    }
    await run(
      db,
      sql`WITH ev AS (${eventsInsert(rows)}), upd AS (UPDATE ${a.$} SET ${a.chain_seq} = ${at.chain_seq}, ${a.chain_hash} = ${at.chain_hash} WHERE ${a.id} = ${accountId})
        SELECT pg_notify(${EVENTS_CHANNEL}, ${accountId})::text AS notified`,
    );
    return rows;
  });
}
