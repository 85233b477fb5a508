/**
 * pnpm bench:append — the PostgreSQL CPU of one event append, apart from everything else: a fresh database, one
 * connection, a loop of appendEvent over BENCH_APPEND_ACCOUNTS accounts, and the CPU of that connection's backend
 * (utime + stime of /proc/<pid>/stat, pg_backend_pid()) per append, and of two listening connections (one on
 * the appends' channel, one on another: PostgreSQL wakes every listener of the database on each NOTIFY). Then
 * the same loop with one part taken away at a time (variants by name in BENCH_APPEND_VARIANTS, interleaved over
 * the rounds): an index, the foreign key, the commit's wait for its WAL flush; select-1 is the floor of any
 * statement. (Before append_event became a function, variants that rewrote its statement's text took out the
 * NOTIFY, the head's update, the insert and the sha256: see docs/benchmarks.md, "push".)
 *
 *   BENCH_APPEND_EVENTS=2000 BENCH_APPEND_ACCOUNTS=10 BENCH_APPEND_ROUNDS=3 BENCH_APPEND_VARIANTS=as-is,statement
 */
import fs from 'node:fs';
import pg from 'pg';
import { appendEvent, canonicalBody, canonicalString, EVENTS_CHANNEL, newId } from '@boxes/core';
import { closeDb, createDb, exec, rows, sql, tbl, type DbClient } from '@boxes/db';
import { createBenchDatabase, envInt, loadNote, main } from './common';

const EVENTS = envInt('BENCH_APPEND_EVENTS', 2000, 10, 1_000_000);
const ACCOUNTS = envInt('BENCH_APPEND_ACCOUNTS', 10, 1, 1000);
const ROUNDS = envInt('BENCH_APPEND_ROUNDS', 3, 1, 20);

/** Each variant: SQL run before it (a setting of the measured connection, or DDL) and after it. */
interface Variant {
  setup?: string[];
  undo?: string[];
}
const variants: Record<string, Variant> = {
  'as-is': {},
  'no-type-index': {
    setup: ['DROP INDEX events_account_id_type_seq_idx'],
    undo: ['CREATE INDEX events_account_id_type_seq_idx ON events (account_id, type, seq)'],
  },
  'no-fk': {
    setup: ['ALTER TABLE events DROP CONSTRAINT events_account_id_fkey'],
    undo: ['ALTER TABLE events ADD CONSTRAINT events_account_id_fkey FOREIGN KEY (account_id) REFERENCES accounts(id) ON DELETE CASCADE ON UPDATE CASCADE'],
  },
  'async-commit': { setup: ['SET synchronous_commit = off'], undo: ['SET synchronous_commit = on'] },
  'select-1': {},
  // The same append sent as one CTE statement, parsed and planned by PostgreSQL every time (as before append_event).
  statement: {},
};

/** The append as one statement (appendEvent's body before append_event): the A of the function's A/B. */
async function appendByStatement(db: DbClient, accountId: string, data: Record<string, unknown>): Promise<void> {
  const type = 'mail.delivered';
  const id = newId('evt');
  const created_at = new Date().toISOString();
  const after = `,"type":${canonicalString(type)}}`;
  const whole = canonicalBody({ id, seq: 0, type, account_id: accountId, created_at, data });
  const before = `${whole.slice(0, -`,"seq":0${after}`.length)},"seq":`;
  const row = { id, account_id: accountId, type, box_id: null, data, created_at };
  const a = tbl('accounts');
  const ev = tbl('events');
  const names = ['id', 'account_id', 'seq', 'type', 'box_id', 'data', 'created_at', 'prev_hash', 'hash'];
  const cols = sql.join(names.map((c) => sql.ref(c)));
  await rows(
    db,
    sql<{ seq: number }>`
    WITH head AS (SELECT ${a.chain_seq} + 1 AS seq, ${a.chain_hash} AS prev_hash FROM ${a.$} WHERE ${a.id} = ${accountId} FOR NO KEY UPDATE),
    ch AS (SELECT seq, prev_hash, encode(sha256(convert_to(prev_hash || chr(10) || ${before} || seq::text || ${after}, 'UTF8')), 'hex') AS hash FROM head),
    ins AS (INSERT INTO ${ev.$} (${cols})
      SELECT ${sql.join(names.map((c) => sql.ref(`r.${c}`)))} FROM ch, jsonb_populate_record(NULL::${ev.$}, ${JSON.stringify(row)}::jsonb
        || jsonb_build_object('seq', ch.seq, 'prev_hash', ch.prev_hash, 'hash', ch.hash)) AS r),
    upd AS (UPDATE ${a.$} SET ${a.chain_seq} = ch.seq, ${a.chain_hash} = ch.hash FROM ch WHERE ${a.id} = ${accountId})
    SELECT seq, prev_hash, hash, pg_notify(${EVENTS_CHANNEL}, ${accountId})::text AS notified FROM ch`,
  );
}
const chosen = (process.env.BENCH_APPEND_VARIANTS ?? Object.keys(variants).join(',')).split(',');

function ticks(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(f[11]) + Number(f[12]);
}

await main('bench:append', async (onCleanup) => {
  const bench = await createBenchDatabase();
  onCleanup(() => bench.drop());
  const db = createDb(bench.url, { max: 1 });
  onCleanup(() => closeDb(db));
  const ids: string[] = [];
  for (let i = 0; i < ACCOUNTS; i++) {
    const id = `acc_append${i}`;
    await exec(
      db,
      sql`INSERT INTO accounts (id, human_email, primary_address, updated_at) VALUES (${id}, ${`h${i}@example.com`}, ${`agent@a${i}.example.com`}, now())`,
    );
    ids.push(id);
  }
  const [{ pid }] = (await rows(db, sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`)) as [{ pid: number }];
  // Two listeners, as a worker has: one on the appends' channel, one on another. PostgreSQL wakes every listening
  // backend of the database on each NOTIFY, whatever its channel; their CPU is printed apart.
  const listeners: { channel: string; pid: number; client: pg.Client; got: number }[] = [];
  for (const channel of ['boxes_events', 'boxes_other']) {
    const client = new pg.Client({ connectionString: bench.url });
    await client.connect();
    onCleanup(() => client.end());
    const l = { channel, pid: (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid, client, got: 0 };
    client.on('notification', () => (l.got += 1));
    await client.query(`LISTEN ${channel}`);
    listeners.push(l);
  }
  console.log(`bench:append: ${EVENTS} appends over ${ACCOUNTS} accounts, one connection, ${ROUNDS} rounds; ${loadNote()}`);
  let n = 0;
  const run = async (name: string) => {
    const v = variants[name]!;
    for (const s of v.setup ?? []) await exec(db, sql.raw(s));
    const t0 = ticks(pid);
    const l0 = listeners.map((l) => ticks(l.pid));
    const w0 = performance.now();
    for (let i = 0; i < EVENTS; i++) {
      if (name === 'select-1') {
        await rows(db, sql<{ x: string }>`SELECT ${ids[i % ACCOUNTS]!}::text AS x`);
        continue;
      }
      const accountId = ids[i % ACCOUNTS]!;
      const data = {
        message_id: `msg_append${n++}`,
        recipient: 'someone@example.com',
        route: 'mx',
        remote_mta: 'mx.example.com',
        response: '250 2.0.0 Ok: queued',
      };
      if (name === 'statement') await appendByStatement(db, accountId, data);
      else await appendEvent({ db, accountId, type: 'mail.delivered', data });
    }
    const ms = (ticks(pid) - t0) * 10;
    const wall = performance.now() - w0;
    await new Promise((r) => setTimeout(r, 200));
    const listenMs = listeners.map((l, i) => ((ticks(l.pid) - l0[i]!) * 10) / EVENTS);
    for (const s of v.undo ?? []) await exec(db, sql.raw(s));
    return { cpu: ms / EVENTS, wall: wall / EVENTS, listen: listenMs };
  };
  await run('as-is'); // warm the backend's caches
  const results = new Map<string, { cpu: number; wall: number; listen: number[] }[]>();
  for (let r = 0; r < ROUNDS; r++) {
    for (const name of chosen) {
      const x = await run(name);
      results.set(name, [...(results.get(name) ?? []), x]);
    }
  }
  for (const [name, xs] of results) {
    console.log(
      `  ${name.padEnd(16)} backend CPU ms per append ${xs.map((x) => x.cpu.toFixed(3)).join(' ')}   wall ${xs.map((x) => x.wall.toFixed(2)).join(' ')}   listeners (${listeners.map((l) => l.channel).join(', ')}) ${xs.map((x) => x.listen.map((y) => y.toFixed(3)).join('/')).join(' ')}`,
    );
  }
});
