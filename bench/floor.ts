/**
 * pnpm bench:floor — the CPU floor of the send and the receive design on this machine: what each step that a sent
 * or a received message cannot avoid costs alone, done with the real library against the real service, and the
 * ceiling those costs leave on two cores.
 *
 * Each step runs BENCH_FLOOR_N times (default 3000; the pure computations ten times as often), after one
 * warm-up pass, in BENCH_FLOOR_RUNS rounds (default 3), and is measured in CPU, not wall time, so the figures
 * hold on a shared machine: this process's main thread (where the step's Boxes side runs), its other threads
 * (the outside world in a worker thread, bench/load.ts: the HTTP client, the SMTP client, the remote SMTP sink;
 * GC; and libuv's threadpool, where the DKIM step's RSA signature runs, as in Boxes), PostgreSQL (the backends
 * of this run's fresh database and the server's shared processes, from /proc/<pid>/stat) and Redis (a private
 * redis-server this bench starts, without persistence, as the shared one runs, so other jobs' Redis traffic is
 * not counted).
 *
 * send, per message:
 *   http     a bare node:http server answering a JSON POST with 200 (JSON parsed, JSON answered); the client
 *            (bench/load.ts, the one bench:send uses, 64 in flight over keep-alive) is measured apart
 *   accept   the accept transaction's SQL alone over pg: the anchor's hash-chained append (the account's chain
 *            head locked, the event, the head moved, the NOTIFY) plus the message row with its sealed body, its
 *            search vector and its delivery row, one statement per send, 64 in flight on 20 connections
 *   job      one BullMQ job (the options Boxes enqueues deliveries with) added, fetched and completed by a BullMQ
 *            Worker with the delivery worker's settings; Node and Redis
 *   compose  the bench's message composed (composeMessage: nodemailer's MailComposer)
 *   dkim     its DKIM signature (dkimSign, RSA-2048, the key parsed once as Boxes keeps it)
 *   seal     the signed bytes sealed for storage (sealBytes, AES-256-GCM)
 *   smtp     one SMTP transaction with Boxes' SmtpSender (nodemailer's pooled transport, 5 connections, 50 in
 *            flight as the delivery worker runs) to the SMTP sink bench:send delivers to; the sink measured apart
 *   record   the delivery's SQL: the read of the delivery with its message, then one statement marking it
 *            delivered, storing the signed bytes, settling the hold and appending the chained mail.delivered event
 * mx, per message:
 *   smtp-in  a bare smtp-server with STARTTLS that accepts and discards (bench:mx's anchor), 8 connections; its
 *            client (bench/load.ts, nodemailer's pooled transport) measured apart
 *   rcpt     the recipient lookup at RCPT: the box by its live address with its account, one statement
 *   parse    the received message parsed (parseMessage: mailparser)
 *   verify   SPF, DKIM, DMARC and ARC with mailauth; DNS answers "no such name" at once (lookups cost nothing here)
 *   seal     the raw message and the parsed body sealed (AES-256-GCM), as the MX stores both
 *   store    the store transaction's SQL alone: the message row (sealed body and raw bytes), its search vector, the
 *            charge on the free allowance and the chained mail.received event, one statement, 8 in flight
 * Beside the floor, measured as changes of design: the accept's writes as group commits of 16 sends (4 in flight),
 * and the store's as group commits of 8 messages (BEGIN, the chain heads locked, one statement, COMMIT).
 *
 * Left out, everywhere: logging, validation of requests (zod), authentication of the API key, Prisma, the loop and
 * rate checks, retries, DNS lookups (MX, SPF, DKIM keys), TLS of outgoing SMTP, MQTT and webhooks, and the events'
 * readers. The anchors are measured in the same run: bench:send's (the plain-SQL hash-chained append, 64 in
 * flight) and bench:mx's (the bare smtp-server above, whose rate is its wall rate).
 *
 * bulk, from the send steps above (nothing more is run): compose, dkim, seal and smtp, which each message of a bulk
 * batch takes one by one on the worker's main thread, summed as the bulk floor (a batch's SQL, a few statements
 * for hundreds of messages, is measured by bench:bulk), and the highest ratio of bulk to single sends on two cores
 * they leave.
 *
 * BENCH_FLOOR_TODAY=1 also runs `pnpm bench:send` and `pnpm bench:mx` once (BENCH_SENDS and BENCH_MX 2000, no
 * Haraka) and prints the CPU they spend per message beside the floor.
 *
 *   BENCH_FLOOR_N=3000 BENCH_FLOOR_RUNS=3 BENCH_FLOOR_TODAY=0
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createHash, generateKeyPairSync, randomBytes } from 'node:crypto';
import http from 'node:http';
import { promisify } from 'node:util';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { Queue, Worker, type ConnectionOptions } from 'bullmq';
import { authenticate } from 'mailauth';
import { canonicalData, canonicalString, EVENTS_CHANNEL, newId, seal, sealBytes } from '@boxes/core';
import { composeMessage, dkimSign, parseMessage, SmtpSender, type OutgoingMail } from '@boxes/mail';
import { DELIVERY_ATTEMPTS } from '@boxes/jobs';
import {
  CpuMeter,
  createBenchDatabase,
  envInt,
  freePort,
  loadNote,
  main,
  median,
  rate,
  signupAccounts,
  startBareSmtp,
  startBenchRuntime,
  waitForPort,
  type BenchAccount,
} from './common';
import { LoadClient, now } from './load';

const N = envInt('BENCH_FLOOR_N', 3000, 100);
const RUNS = envInt('BENCH_FLOOR_RUNS', 3, 1, 20);
const TODAY = process.env.BENCH_FLOOR_TODAY === '1';
const ACCOUNTS = 20;
const SEND_CONCURRENCY = 64;
const MX_CONNECTIONS = 8;
/** The delivery worker's default (DELIVERY_CONCURRENCY) and SmtpSender's pool. */
const DELIVERY_CONCURRENCY = 50;
/** Sends a group commit writes together in the design change measured beside the floor. */
const SEND_GROUP = 16;
const SINK_DOMAIN = 'sink.test';

/** CPU milliseconds per message of one step, by where it was spent. */
interface Cost {
  main: number;
  other: number;
  pg: number;
  redis: number;
}

interface Step {
  key: string;
  path: 'send' | 'mx';
  label: string;
  /** A change of design measured beside the floor (not part of its sum). */
  alt?: boolean;
  /** What the other threads' CPU is: the outside world (not Boxes' cost), or null when it is Boxes' own (GC). */
  outside: string | null;
  /** Times per measured pass, as a multiple of N (cheap computations run more often for a steadier figure). */
  times?: number;
  /** Does the step `n` times; returns how many were done. */
  run(n: number, pass: number): Promise<number>;
}

/** Runs `total` tasks with `concurrency` in flight. */
async function pool(total: number, concurrency: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(total, concurrency) }, async () => {
      while (next < total) await task(next++);
    }),
  );
}

/** The canonical bytes of an event body around its seq (as bench:send's anchor hashes them in the statement). */
function canonicalAround(body: { id: string; type: string; account_id: string; created_at: string; data: unknown }): { prefix: string; suffix: string } {
  return {
    prefix: `{"account_id":${canonicalString(body.account_id)},"created_at":${canonicalString(body.created_at)},"data":${canonicalData(body.data)},"id":${canonicalString(body.id)},"seq":`,
    suffix: `,"type":${canonicalString(body.type)}}`,
  };
}

/**
 * The hash-chained append of bench:send's anchor with more writes in the same statement: `accountSet` moves more
 * columns of the account row, `ctes` are more `name AS (...)` writes. Parameters $1-$8 are the chain's; the
 * caller's start at $9.
 */
function chainedStatement(accountSet: string, ctes: string[]): string {
  return `WITH head AS (SELECT chain_seq + 1 AS seq, chain_hash AS prev FROM accounts WHERE id = $1 FOR NO KEY UPDATE),
     h AS (SELECT seq, prev, encode(sha256(convert_to(prev || E'\\n' || $2 || seq::text || $3, 'UTF8')), 'hex') AS hash FROM head),
     ins AS (INSERT INTO events (id, account_id, seq, type, data, created_at, prev_hash, hash)
             SELECT $4, $1, seq, $8, $5::jsonb, $6, prev, hash FROM h),
     upd AS (UPDATE accounts SET chain_seq = h.seq, chain_hash = h.hash${accountSet} FROM h WHERE accounts.id = $1)${ctes.map((c) => `,\n     ${c}`).join('')}
   SELECT pg_notify($7, $1)::text FROM h`;
}

function chainParams(accountId: string, type: string, data: Record<string, unknown>): unknown[] {
  const body = { id: newId('evt'), type, account_id: accountId, created_at: new Date().toISOString(), data };
  const { prefix, suffix } = canonicalAround(body);
  return [accountId, prefix, suffix, body.id, JSON.stringify(data), body.created_at, `${EVENTS_CHANNEL}_floor`, type];
}

const ANCHOR_SQL = chainedStatement('', []);

const ACCEPT_SQL = chainedStatement(', free_messages_left = accounts.free_messages_left - 1, held_free_messages = accounts.held_free_messages + 1', [
  `msg AS (INSERT INTO messages (id, account_id, box_id, direction, status, rfc_message_id, provider_message_id, from_address, to_addresses,
            subject, size_bytes, body_enc, thread_id, recorded_at)
          VALUES ($9, $1, $10, 'sent', 'queued', $11, $9, $12, ARRAY[$13::text], $14, $15, $16, $17, now()))`,
  `fts AS (INSERT INTO message_search (message_id, account_id, box_id, direction, recorded_at, thread_id, tsv)
          SELECT $9, $1, $10, 'sent', now(), $17, boxes_search_vector($14, $12 || ' ' || $13, $18, NULL)
          WHERE EXISTS (SELECT 1 FROM accounts WHERE id = $1 AND search_indexing))`,
  `dlv AS (INSERT INTO deliveries (id, message_id, account_id, recipient, status, route, held_micros, used_free, created_at, updated_at)
          VALUES ($19, $9, $1, $13, 'queued', 'smtp', 0, true, now(), now()))`,
]);

const DELIVERY_READ_SQL = `SELECT d.id, d.status, d.attempts, d.recipient, d.route, m.id AS message_id, m.rfc_message_id, m.from_address,
    m.to_addresses, m.subject, m.body_enc, m.raw_enc IS NOT NULL AS composed, m.recorded_at, b.address, b.signature
  FROM deliveries d JOIN messages m ON m.id = d.message_id LEFT JOIN boxes b ON b.id = m.box_id WHERE d.id = $1`;

const DELIVERED_SQL = chainedStatement(', held_free_messages = accounts.held_free_messages - 1', [
  `dlv AS (UPDATE deliveries SET status = 'delivered', delivered_at = now(), remote_mta = $10, attempts = 1, settled_at = now(), updated_at = now()
          WHERE id = $9 AND status NOT IN ('delivered', 'bounced', 'failed', 'cancelled'))`,
  `msg AS (UPDATE messages SET raw_enc = $12, status = 'delivered' WHERE id = $11)`,
]);

const RCPT_SQL = `SELECT b.id, b.account_id, b.receive_mode, b.paused_at, b.spam_action, b.require_verified_sender, a.status, a.search_indexing
  FROM boxes b JOIN accounts a ON a.id = b.account_id WHERE b.live_address = $1`;

const STORE_SQL = chainedStatement(', free_messages_left = accounts.free_messages_left - 1', [
  `msg AS (INSERT INTO messages (id, account_id, box_id, direction, status, rfc_message_id, provider_message_id, from_address, to_addresses,
            subject, size_bytes, body_enc, raw_enc, thread_id, recorded_at)
          VALUES ($9, $1, $10, 'received', 'received', $11, $9, $12, ARRAY[$13::text], $14, $15, $16, $17, $18, now()))`,
  `fts AS (INSERT INTO message_search (message_id, account_id, box_id, direction, recorded_at, thread_id, tsv)
          SELECT $9, $1, $10, 'received', now(), $18, boxes_search_vector($14, $12 || ' ' || $13, $19, NULL)
          WHERE EXISTS (SELECT 1 FROM accounts WHERE id = $1 AND search_indexing))`,
]);

/** A message written, with its delivery (sent mail). */
interface Written {
  accountId: string;
  messageId: string;
  deliveryId: string;
}

/** What one message of a group commit writes (batchWrite). */
interface BatchItem {
  account: BenchAccount;
  boxId: string;
  direction: 'sent' | 'received';
  eventType: string;
  eventData: Record<string, unknown>;
  rfcId: string;
  from: string;
  to: string;
  subject: string;
  size: number;
  bodyEnc: string;
  rawEnc: Buffer | null;
  text: string;
}

/**
 * Several messages in one transaction, as a group commit writes them: BEGIN, the accounts' chain heads locked in
 * id order (one statement), the events chained here (the same hashes the one-message statement computes in SQL),
 * then one statement writing every event, message, search vector, delivery (sent mail) and account row, COMMIT.
 */
async function batchWrite(pool: pg.Pool, items: BatchItem[]): Promise<Written[]> {
  const msg = { id: [] as string[], thread: [] as string[], dlv: [] as (string | null)[] };
  for (const it of items) {
    msg.id.push(newId('msg'));
    msg.thread.push(newId('thr'));
    msg.dlv.push(it.direction === 'sent' ? newId('dlv') : null);
  }
  await inTransaction(pool, async (client) => {
    const chain = await chainEvents(
      client,
      items.map((it, i) => ({ accountId: it.account.accountId, type: it.eventType, data: { message_id: msg.id[i], ...it.eventData } })),
    );
    const col = <T>(f: (i: BatchItem) => T) => items.map(f);
    const sent = items[0]!.direction === 'sent';
    await client.query(
      `WITH ${chainCtes(`, free_messages_left = accounts.free_messages_left - x.n${sent ? ', held_free_messages = accounts.held_free_messages + x.n' : ''}`)},
        r AS MATERIALIZED (SELECT * FROM unnest($13::text[], $14::text[], $15::text[], $16::text[], $17::text[], $18::text[], $19::text[], $20::int[], $21::text[], $22::bytea[], $23::text[], $24::text[], $25::text[])
          AS x(id, account_id, box_id, rfc, from_address, to_address, subject, size, body_enc, raw_enc, thread_id, body_text, delivery_id)),
        m AS (INSERT INTO messages (id, account_id, box_id, direction, status, rfc_message_id, provider_message_id, from_address, to_addresses,
            subject, size_bytes, body_enc, raw_enc, thread_id, recorded_at)
          SELECT id, account_id, box_id, $26, $27, rfc, id, from_address, ARRAY[to_address], subject, size, body_enc, raw_enc, thread_id, now() FROM r),
        fts AS (INSERT INTO message_search (message_id, account_id, box_id, direction, recorded_at, thread_id, tsv)
          SELECT r.id, r.account_id, r.box_id, $26, now(), r.thread_id, boxes_search_vector(r.subject, r.from_address || ' ' || r.to_address, r.body_text, NULL)
          FROM r JOIN accounts ac ON ac.id = r.account_id AND ac.search_indexing),
        d AS (INSERT INTO deliveries (id, message_id, account_id, recipient, status, route, held_micros, used_free, created_at, updated_at)
          SELECT delivery_id, id, account_id, to_address, 'queued', 'smtp', 0, true, now(), now() FROM r WHERE delivery_id IS NOT NULL)
      SELECT pg_notify($28, '')`,
      [
        ...chainArrays(chain),
        msg.id,
        col((i) => i.account.accountId),
        col((i) => i.boxId),
        col((i) => i.rfcId),
        col((i) => i.from),
        col((i) => i.to),
        col((i) => i.subject),
        col((i) => i.size),
        col((i) => i.bodyEnc),
        col((i) => i.rawEnc),
        msg.thread,
        col((i) => i.text),
        msg.dlv,
        sent ? 'sent' : 'received',
        sent ? 'queued' : 'received',
        `${EVENTS_CHANNEL}_floor`,
      ],
    );
  });
  return items.map((it, i) => ({ accountId: it.account.accountId, messageId: msg.id[i]!, deliveryId: msg.dlv[i] ?? '' }));
}

/** BEGIN, the work, COMMIT (ROLLBACK when it throws) on one connection of the pool. */
async function inTransaction(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<void>): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await work(client);
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

/**
 * The accounts' chain heads locked in id order (one statement), and the events chained onto them here: the same
 * hashes the one-message statement computes in SQL. Returns the events' columns and the accounts' new heads.
 */
async function chainEvents(client: pg.PoolClient, events: { accountId: string; type: string; data: Record<string, unknown> }[]) {
  const ids = [...new Set(events.map((e) => e.accountId))].sort();
  const heads = new Map(
    (
      await client.query<{ id: string; chain_seq: number; chain_hash: string }>(
        'SELECT id, chain_seq, chain_hash FROM accounts WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE',
        [ids],
      )
    ).rows.map((r) => [r.id, { seq: r.chain_seq, hash: r.chain_hash, n: 0 }]),
  );
  const ev = {
    id: [] as string[],
    account: [] as string[],
    seq: [] as number[],
    type: [] as string[],
    data: [] as string[],
    at: [] as string[],
    prev: [] as string[],
    hash: [] as string[],
  };
  for (const e of events) {
    const head = heads.get(e.accountId)!;
    const body = { id: newId('evt'), type: e.type, account_id: e.accountId, created_at: new Date().toISOString(), data: e.data };
    const { prefix, suffix } = canonicalAround(body);
    const seq = head.seq + 1;
    const hash = createHash('sha256').update(`${head.hash}\n${prefix}${seq}${suffix}`, 'utf8').digest('hex');
    ev.id.push(body.id);
    ev.account.push(body.account_id);
    ev.seq.push(seq);
    ev.type.push(body.type);
    ev.data.push(JSON.stringify(body.data));
    ev.at.push(body.created_at);
    ev.prev.push(head.hash);
    ev.hash.push(hash);
    Object.assign(head, { seq, hash, n: head.n + 1 });
  }
  return { ev, heads };
}

/** The events' and the account heads' parameters ($1-$12) of a group commit's statement. */
const chainArrays = (c: Awaited<ReturnType<typeof chainEvents>>): unknown[] => [
  c.ev.id,
  c.ev.account,
  c.ev.seq,
  c.ev.type,
  c.ev.data,
  c.ev.at,
  c.ev.prev,
  c.ev.hash,
  [...c.heads.keys()],
  [...c.heads.values()].map((h) => h.seq),
  [...c.heads.values()].map((h) => h.hash),
  [...c.heads.values()].map((h) => h.n),
];

/** The CTEs writing the events and moving the account heads ($1-$12), `accountSet` more columns of the account (x.n: its messages). */
const chainCtes = (accountSet: string) => `e AS (INSERT INTO events (id, account_id, seq, type, data, created_at, prev_hash, hash)
          SELECT id, account_id, seq, type, data::jsonb, created_at, prev, hash
          FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::timestamptz[], $7::text[], $8::text[]) AS x(id, account_id, seq, type, data, created_at, prev, hash)),
        a AS (UPDATE accounts SET chain_seq = x.seq, chain_hash = x.hash${accountSet}
          FROM unnest($9::text[], $10::int[], $11::text[], $12::int[]) AS x(id, seq, hash, n) WHERE accounts.id = x.id)`;

/**
 * The delivery records of several deliveries as a group commit: their reads in one statement, then BEGIN, the
 * heads locked, one statement marking them delivered, storing the signed bytes, settling the holds and writing
 * the chained mail.delivered events, COMMIT.
 */
async function batchDelivered(pool: pg.Pool, items: Written[], raw: Buffer): Promise<void> {
  const read = await pool.query(DELIVERY_READ_SQL.replace('WHERE d.id = $1', 'WHERE d.id = ANY($1::text[])'), [items.map((i) => i.deliveryId)]);
  if (read.rowCount !== items.length) throw new Error('a delivery was not found');
  const recipients = new Map(read.rows.map((r: { id: string; recipient: string }) => [r.id, r.recipient]));
  await inTransaction(pool, async (client) => {
    const chain = await chainEvents(
      client,
      items.map((it) => ({
        accountId: it.accountId,
        type: 'mail.delivered',
        data: { message_id: it.messageId, recipient: recipients.get(it.deliveryId), remote_mta: '127.0.0.1' },
      })),
    );
    await client.query(
      `WITH ${chainCtes(', held_free_messages = accounts.held_free_messages - x.n')},
        dl AS (UPDATE deliveries SET status = 'delivered', delivered_at = now(), remote_mta = '127.0.0.1', attempts = 1, settled_at = now(), updated_at = now()
          FROM unnest($13::text[]) AS x(id) WHERE deliveries.id = x.id AND deliveries.status NOT IN ('delivered', 'bounced', 'failed', 'cancelled')),
        m AS (UPDATE messages SET raw_enc = x.raw, status = 'delivered' FROM unnest($14::text[], $15::bytea[]) AS x(id, raw) WHERE messages.id = x.id)
      SELECT pg_notify($16, '')`,
      [
        ...chainArrays(chain),
        items.map((i) => i.deliveryId),
        items.map((i) => i.messageId),
        items.map(() => sealBytes(DELIVERED_KEY, raw)),
        `${EVENTS_CHANNEL}_floor`,
      ],
    );
  });
}

/** The key the grouped delivery records seal with (the cost is the same for any key). */
const DELIVERED_KEY = randomBytes(32);

/** `total` items written in group commits of `size`, `inFlight` commits at a time. */
async function batched(pool: pg.Pool, total: number, size: number, inFlight: number, item: (i: number) => BatchItem): Promise<Written[]> {
  const batches = Math.ceil(total / size);
  const written: Written[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(inFlight, batches) }, async () => {
      while (next < batches) {
        const b = next++;
        const items = Array.from({ length: Math.min(size, total - b * size) }, (_, j) => item(b * size + j));
        written.push(...(await batchWrite(pool, items)));
      }
    }),
  );
  return written;
}

/** A redis-server of this bench's own (no persistence, as the shared one runs), so its CPU is this bench's alone. */
async function startRedis(): Promise<{ pid: number; port: number; stop(): Promise<void> }> {
  const port = await freePort();
  const child: ChildProcess = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: 'ignore',
  });
  const failed = new Promise<never>((_, reject) => child.once('error', reject));
  failed.catch(() => undefined);
  await Promise.race([waitForPort(port, 10_000), failed]);
  return {
    pid: child.pid!,
    port,
    stop: async () => {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    },
  };
}

/** A bare HTTP server: parses the JSON body of a POST and answers 200 with a JSON body of a send's size. */
async function startBareHttp(): Promise<{ base: string; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { to: string; subject: string };
      const out = JSON.stringify({
        message_id: newId('msg'),
        status: 'queued',
        to: [body.to],
        subject: body.subject,
        deliveries: [{ id: newId('dlv'), recipient: body.to, status: 'queued' }],
      });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
      res.end(out);
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const { port } = server.address() as { port: number };
  return {
    base: `http://127.0.0.1:${port}/api/v1`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** The message of send n as bench:send's client asks for it (bench/load.ts httpSends), as Boxes composes it. */
function outgoing(n: number, from: string): OutgoingMail {
  return {
    from: { address: from },
    to: [`Recipient ${n} <r${n}@${SINK_DOMAIN}>`],
    cc: [],
    replyTo: [],
    subject: `Benchmark message ${n}`,
    text: `Hello,\n\nthis is benchmark message ${n}, sent by ${from}.\n\nRegards,\nthe benchmark\n`,
    headers: {},
    attachments: [],
    messageId: `<${newId('msg')}@${from.split('@')[1]}>`,
    date: new Date(),
  };
}

/** Message n as bench:mx's client sends it (bench/load.ts smtpSends), composed the same way. */
function inbound(n: number, to: string): OutgoingMail {
  return {
    from: { name: `Sender ${n % 50}`, address: `sender${n % 50}@outside.test` },
    to: [to],
    cc: [],
    replyTo: [],
    subject: `Inbound benchmark message ${n}`,
    text: `Hello,\n\nthis is inbound benchmark message ${n}.\n\n${'Some words to give the body a usual size. '.repeat(10)}\n\nRegards,\nthe benchmark\n`,
    headers: {},
    attachments: [],
    messageId: `<bench-${n}@outside.test>`,
    date: new Date(),
  };
}

const noSuchName = async (name: string): Promise<never> => {
  throw Object.assign(new Error(`queryTxt ENOTFOUND ${name}`), { code: 'ENOTFOUND' });
};

const f2 = (x: number): string => x.toFixed(2);
const f3 = (x: number): string => (x < 0.1 ? x.toFixed(3) : x.toFixed(2));

/** A bench (`pnpm bench:send` or `bench:mx`) run once as a child; returns what it printed. */
async function runBench(script: string, env: Record<string, string>): Promise<string> {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', path.join(root, 'bench', script)], {
    cwd: root,
    env: { ...process.env, ...env },
    timeout: 900_000,
    maxBuffer: 16 * 1024 * 1024,
  });
  return stdout;
}

/** The CPU ms per message a bench printed on the line starting with `after`, by part. */
function cpuPerMessage(out: string, after: RegExp): Record<string, number> | null {
  const lines = out.split('\n');
  const i = lines.findIndex((l) => after.test(l));
  const line = i >= 0 ? lines.slice(i, i + 3).find((l) => /CPU ms per message:/.test(l)) : undefined;
  if (!line) return null;
  const parts: Record<string, number> = {};
  for (const m of line
    .split(':')
    .slice(1)
    .join(':')
    .matchAll(/([A-Za-z][A-Za-z ]*?) (\d+\.\d+)/g))
    parts[m[1]!.trim()] = Number(m[2]);
  return parts;
}

await main('bench:floor', async (onCleanup) => {
  const load = new LoadClient();
  onCleanup(() => load.close());
  const { port: sinkPort } = await load.call({ op: 'startSink' });
  const db = await createBenchDatabase();
  onCleanup(() => db.drop());
  const redis = await startRedis();
  onCleanup(() => redis.stop());

  // Real accounts, domains and boxes, signed up over REST; then the runtime stops, so only the steps run.
  const rt = await startBenchRuntime(db, { worker: false, mail: false, push: false });
  let accounts: BenchAccount[];
  try {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
    accounts = await signupAccounts(agent, rt.apiBase, ACCOUNTS);
    agent.destroy();
  } finally {
    await rt.stop();
  }
  const pgPool = new pg.Pool({ connectionString: db.url, max: 20 });
  onCleanup(() => pgPool.end());
  await pgPool.query('UPDATE accounts SET free_messages_left = 100000000');
  const boxIds = new Map(
    (
      await pgPool.query<{ address: string; id: string }>('SELECT address, id FROM boxes WHERE address = ANY($1)', [accounts.map((a) => a.primaryAddress)])
    ).rows.map((r) => [r.address, r.id]),
  );
  const secretKey = randomBytes(32);
  const dkimKey = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
  const sealedBody = (text: string) => seal(secretKey, JSON.stringify({ text, html: null }));

  const bareHttp = await startBareHttp();
  onCleanup(() => bareHttp.close());
  const bareSmtp = await startBareSmtp();
  onCleanup(() => bareSmtp.close());
  const sender = new SmtpSender({ heloName: 'floor.bench.test', maxConnections: 5 });
  onCleanup(async () => sender.close());
  const sinkDest = { host: '127.0.0.1', port: sinkPort };

  // BullMQ on the private Redis: a queue as Boxes enqueues deliveries, a worker as the delivery worker runs.
  const prefix = `floor-${randomBytes(4).toString('hex')}`;
  const connection: ConnectionOptions = { host: '127.0.0.1', port: redis.port, maxRetriesPerRequest: null };
  const queue = new Queue('deliveries', { connection, prefix });
  let completed = 0;
  let completedWaiter: { target: number; resolve: () => void } | null = null;
  const worker = new Worker(
    'deliveries',
    async () => {
      // The job's work is measured by the other steps; here only the queue's own cost.
    },
    {
      connection,
      prefix,
      concurrency: DELIVERY_CONCURRENCY,
      lockDuration: 4_000,
      lockRenewTime: 1_000,
      stalledInterval: 1_000,
      maxStalledCount: 10,
    },
  );
  worker.on('completed', () => {
    completed++;
    if (completedWaiter && completed >= completedWaiter.target) completedWaiter.resolve();
  });
  onCleanup(async () => {
    await worker.close();
    await queue.close();
  });

  // What the send steps hand on: the messages accepted (for the delivery records), a signed message per send.
  let accepted: Written[] = [];
  let acceptedInGroups: Written[] = [];
  const signedSample = await dkimSign(await composeMessage(outgoing(0, accounts[0]!.primaryAddress)), {
    domainName: accounts[0]!.domain,
    keySelector: 'boxes',
    privateKey: dkimKey,
  });
  const inboundRaw = await composeMessage(inbound(0, accounts[0]!.primaryAddress));
  const inboundParsed = await parseMessage(inboundRaw);
  let seq = 1_000_000;
  /** The first message number of a load run: each run's messages (and recipients) are new. */
  const nextSeq = (n: number) => {
    seq += n;
    return seq;
  };

  const steps: Step[] = [
    {
      key: 'http',
      path: 'send',
      label: 'HTTP: JSON POST answered 200 (bare node:http)',
      outside: 'the HTTP client',
      async run(n) {
        const r = await load.call({
          op: 'httpSends',
          apiBase: bareHttp.base,
          accounts,
          concurrency: SEND_CONCURRENCY,
          count: n,
          startSeq: nextSeq(n),
          deadline: Date.now() + 600_000,
          sinkDomain: SINK_DOMAIN,
        });
        if (r.ok !== n) throw new Error(`bare HTTP: ${r.ok}/${n} answered 200: ${r.firstError}`);
        return n;
      },
    },
    {
      key: 'accept',
      path: 'send',
      label: 'accept SQL: chained event + message row, search vector, delivery row (1 statement)',
      outside: null,
      async run(n) {
        const done: typeof accepted = [];
        await pool(n, SEND_CONCURRENCY, async (i) => {
          const a = accounts[i % accounts.length]!;
          const messageId = newId('msg');
          const deliveryId = newId('dlv');
          const m = outgoing(i, a.primaryAddress);
          const to = `r${i}@${SINK_DOMAIN}`;
          await pgPool.query(ACCEPT_SQL, [
            ...chainParams(a.accountId, 'mail.sent', { message_id: messageId, to: [to], subject: m.subject }),
            messageId,
            boxIds.get(a.primaryAddress),
            m.messageId,
            a.primaryAddress,
            to,
            m.subject,
            400,
            sealedBody(m.text!),
            newId('thr'),
            m.text,
            deliveryId,
          ]);
          done.push({ accountId: a.accountId, messageId, deliveryId });
        });
        accepted = done;
        return n;
      },
    },
    {
      key: 'accept-group',
      path: 'send',
      alt: true,
      label: `the same writes as a group commit of ${SEND_GROUP} sends (BEGIN, lock, 1 statement, COMMIT; ${SEND_CONCURRENCY / SEND_GROUP} in flight)`,
      outside: null,
      async run(n) {
        acceptedInGroups = await batched(pgPool, n, SEND_GROUP, SEND_CONCURRENCY / SEND_GROUP, (i) => {
          const a = accounts[i % accounts.length]!;
          const m = outgoing(i, a.primaryAddress);
          const to = `r${i}@${SINK_DOMAIN}`;
          return {
            account: a,
            boxId: boxIds.get(a.primaryAddress)!,
            direction: 'sent',
            eventType: 'mail.sent',
            eventData: { to: [to], subject: m.subject },
            rfcId: m.messageId,
            from: a.primaryAddress,
            to,
            subject: m.subject,
            size: 400,
            bodyEnc: sealedBody(m.text!),
            rawEnc: null,
            text: m.text!,
          };
        });
        return n;
      },
    },
    {
      key: 'job',
      path: 'send',
      label: 'BullMQ job: added, fetched, completed (Node + Redis)',
      outside: null,
      async run(n) {
        const target = completed + n;
        const all = new Promise<void>((resolve) => (completedWaiter = { target, resolve }));
        await pool(n, SEND_CONCURRENCY, async () => {
          const id = newId('dlv');
          await queue.addBulk([
            {
              name: 'deliver',
              data: { deliveryId: id },
              opts: {
                jobId: id,
                delay: 0,
                attempts: DELIVERY_ATTEMPTS,
                backoff: { type: 'fixed', delay: 60_000 },
                removeOnComplete: { age: 3600, count: 10_000 },
                removeOnFail: { age: 7 * 86_400 },
              },
            },
          ]);
        });
        await all;
        return n;
      },
    },
    {
      key: 'compose',
      path: 'send',
      label: 'compose (MailComposer)',
      outside: null,
      times: 10,
      async run(n) {
        for (let i = 0; i < n; i++) await composeMessage(outgoing(i, accounts[i % accounts.length]!.primaryAddress));
        return n;
      },
    },
    {
      key: 'dkim',
      path: 'send',
      label: 'DKIM signature (dkimSign, RSA-2048)',
      outside: null,
      times: 3,
      async run(n) {
        const raw = await composeMessage(outgoing(1, accounts[0]!.primaryAddress));
        for (let i = 0; i < n; i++) await dkimSign(raw, { domainName: accounts[0]!.domain, keySelector: 'boxes', privateKey: dkimKey });
        return n;
      },
    },
    {
      key: 'seal-out',
      path: 'send',
      label: 'seal the signed bytes (AES-256-GCM)',
      outside: null,
      times: 10,
      async run(n) {
        for (let i = 0; i < n; i++) sealBytes(secretKey, signedSample);
        return n;
      },
    },
    {
      key: 'smtp-out',
      path: 'send',
      label: 'SMTP transaction (SmtpSender, pooled) to the sink',
      outside: 'the SMTP sink',
      async run(n) {
        const before = await load.call({ op: 'waitSink', target: 0, deadline: Date.now() });
        await pool(n, DELIVERY_CONCURRENCY, async (i) => {
          const r = await sender.send(sinkDest, { from: accounts[0]!.primaryAddress, to: `r${i}@${SINK_DOMAIN}` }, signedSample);
          if (!r.ok) throw new Error(`SMTP to the sink: ${r.code} ${r.response}`);
        });
        const after = await load.call({ op: 'waitSink', target: before.count + n, deadline: Date.now() + 60_000 });
        if (after.at === null) throw new Error('the sink did not receive every message');
        return n;
      },
    },
    {
      key: 'record',
      path: 'send',
      label: 'delivery records SQL: read the delivery, mark delivered + chained event (2 statements)',
      outside: null,
      async run(n) {
        if (accepted.length < n) throw new Error('the accept step must run first');
        const items = accepted.slice(0, n);
        await pool(n, DELIVERY_CONCURRENCY, async (i) => {
          const it = items[i]!;
          const read = await pgPool.query(DELIVERY_READ_SQL, [it.deliveryId]);
          if (read.rowCount !== 1) throw new Error('the delivery was not found');
          const r = await pgPool.query(DELIVERED_SQL, [
            ...chainParams(it.accountId, 'mail.delivered', { message_id: it.messageId, recipient: read.rows[0].recipient, remote_mta: '127.0.0.1' }),
            it.deliveryId,
            '127.0.0.1',
            it.messageId,
            sealBytes(secretKey, signedSample),
          ]);
          if (r.rowCount !== 1) throw new Error('the delivery was not recorded');
        });
        return n;
      },
    },
    {
      key: 'record-group',
      path: 'send',
      alt: true,
      label: `the same records as group commits of ${SEND_GROUP} deliveries (1 read, then BEGIN, lock, 1 statement, COMMIT; ${DELIVERY_CONCURRENCY / 10} in flight)`,
      outside: null,
      async run(n) {
        if (acceptedInGroups.length < n) throw new Error('the grouped accept step must run first');
        const items = acceptedInGroups.slice(0, n);
        let next = 0;
        await pool(Math.ceil(n / SEND_GROUP), DELIVERY_CONCURRENCY / 10, async () => {
          const b = next++;
          await batchDelivered(pgPool, items.slice(b * SEND_GROUP, (b + 1) * SEND_GROUP), signedSample);
        });
        return n;
      },
    },
    {
      key: 'smtp-in',
      path: 'mx',
      label: 'SMTP in: bare smtp-server, STARTTLS, accept and discard',
      outside: 'the SMTP client',
      async run(n) {
        const boxes = accounts.map((a) => a.primaryAddress);
        const r = await load.call({
          op: 'smtpSends',
          port: bareSmtp.port,
          boxes,
          connections: MX_CONNECTIONS,
          tls: true,
          count: n,
          startSeq: nextSeq(n),
          deadline: Date.now() + 600_000,
        });
        if (r.ok !== n) throw new Error(`bare smtp-server: ${r.ok}/${n} accepted: ${r.firstError}`);
        return n;
      },
    },
    {
      key: 'rcpt',
      path: 'mx',
      label: 'RCPT lookup SQL: box by live address with its account (1 statement)',
      outside: null,
      async run(n) {
        await pool(n, MX_CONNECTIONS, async (i) => {
          const r = await pgPool.query(RCPT_SQL, [accounts[i % accounts.length]!.primaryAddress]);
          if (r.rowCount !== 1) throw new Error('the box was not found by its live address');
        });
        return n;
      },
    },
    {
      key: 'parse',
      path: 'mx',
      label: 'parse (mailparser)',
      outside: null,
      times: 3,
      async run(n) {
        for (let i = 0; i < n; i++) await parseMessage(inboundRaw);
        return n;
      },
    },
    {
      key: 'verify',
      path: 'mx',
      label: 'verify SPF/DKIM/DMARC/ARC (mailauth, DNS answered at once)',
      outside: null,
      async run(n) {
        for (let i = 0; i < n; i++) {
          await authenticate(inboundRaw, {
            resolver: noSuchName,
            mta: 'mx.floor.test',
            ip: '127.0.0.1',
            helo: 'sender.bench.test',
            sender: 'sender0@outside.test',
            disableBimi: true,
          });
        }
        return n;
      },
    },
    {
      key: 'seal-in',
      path: 'mx',
      label: 'seal the raw message and the parsed body (AES-256-GCM, 2 seals)',
      outside: null,
      times: 10,
      async run(n) {
        for (let i = 0; i < n; i++) {
          sealBytes(secretKey, inboundRaw);
          sealedBody(inboundParsed.text!);
        }
        return n;
      },
    },
    {
      key: 'store',
      path: 'mx',
      label: 'store SQL: message row, search vector, charge, chained event (1 statement)',
      outside: null,
      async run(n) {
        const raw = sealBytes(secretKey, inboundRaw);
        const body = sealedBody(inboundParsed.text!);
        await pool(n, MX_CONNECTIONS, async (i) => {
          const a = accounts[i % accounts.length]!;
          const messageId = newId('msg');
          await pgPool.query(STORE_SQL, [
            ...chainParams(a.accountId, 'mail.received', { message_id: messageId, from: inboundParsed.from, subject: inboundParsed.subject }),
            messageId,
            boxIds.get(a.primaryAddress),
            `<bench-${i}-${messageId}@outside.test>`,
            inboundParsed.from,
            a.primaryAddress,
            inboundParsed.subject,
            inboundRaw.length,
            body,
            raw,
            newId('thr'),
            inboundParsed.text,
          ]);
        });
        return n;
      },
    },
    {
      key: 'store-group',
      path: 'mx',
      alt: true,
      label: `the same writes as a group commit of ${MX_CONNECTIONS} messages (BEGIN, lock, 1 statement, COMMIT; one in flight)`,
      outside: null,
      async run(n) {
        const raw = sealBytes(secretKey, inboundRaw);
        const body = sealedBody(inboundParsed.text!);
        await batched(pgPool, n, MX_CONNECTIONS, 1, (i) => {
          const a = accounts[i % accounts.length]!;
          return {
            account: a,
            boxId: boxIds.get(a.primaryAddress)!,
            direction: 'received',
            eventType: 'mail.received',
            eventData: { from: inboundParsed.from, subject: inboundParsed.subject },
            rfcId: `<bench-${i}-${newId('msg')}@outside.test>`,
            from: inboundParsed.from!,
            to: a.primaryAddress,
            subject: inboundParsed.subject!,
            size: inboundRaw.length,
            bodyEnc: body,
            rawEnc: raw,
            text: inboundParsed.text!,
          };
        });
        return n;
      },
    },
  ];

  const measure = async (fn: () => Promise<number>): Promise<Cost & { wallMs: number; n: number }> => {
    const meter = new CpuMeter(db.name, { redis: redis.pid });
    const t0 = now();
    const n = await fn();
    const wallMs = now() - t0;
    const t = meter.totals();
    meter.stop();
    return { main: t.mainMs / n, other: t.otherMs / n, pg: t.postgresMs / n, redis: (t.children.redis ?? 0) / n, wallMs, n };
  };

  const anchorRun = async (n: number): Promise<number> => {
    await pool(n, SEND_CONCURRENCY, async (i) => {
      const a = accounts[i % accounts.length]!;
      await pgPool.query(ANCHOR_SQL, chainParams(a.accountId, 'mail.sent', { message_id: `msg_${i}`, subject: 'anchor', recipients: 1 }));
    });
    return n;
  };

  console.log(`bench:floor: ${N} messages a step (pure computations more), ${RUNS} runs; ${loadNote()}`);
  // Warm-up: every step once, smaller.
  for (const s of steps) await s.run(Math.max(100, Math.round(N / 10)), 0);
  await anchorRun(200);

  const results = new Map<string, Cost[]>(steps.map((s) => [s.key, []]));
  const anchors: { rate: number; cpu: Cost }[] = [];
  const mxAnchorRates: number[] = [];
  for (let run = 1; run <= RUNS; run++) {
    for (const s of steps) {
      const c = await measure(() => s.run(N * (s.times ?? 1), run));
      results.get(s.key)!.push(c);
      if (s.key === 'smtp-in') mxAnchorRates.push(rate(c.n, c.wallMs));
    }
    const a = await measure(() => anchorRun(N));
    anchors.push({ rate: rate(a.n, a.wallMs), cpu: a });
    console.log(`  run ${run} done; ${loadNote()}`);
  }

  const med = (key: string, part: keyof Cost) => median(results.get(key)!.map((c) => c[part]));
  const spread = (key: string, part: keyof Cost) => {
    const xs = results.get(key)!.map((c) => c[part]);
    return `${f3(Math.min(...xs))}-${f3(Math.max(...xs))}`;
  };
  const boxesSide = (s: Step, c: Cost) => c.main + c.pg + c.redis + (s.outside ? 0 : c.other);
  const allIn = (c: Cost) => c.main + c.other + c.pg + c.redis;

  console.log(`\nCPU ms per message of each step: median of ${RUNS} runs [min-max]`);
  for (const s of steps) {
    const parts = [
      `thread ${f3(med(s.key, 'main'))} [${spread(s.key, 'main')}]`,
      `${s.outside ? `outside (${s.outside}, other threads)` : 'other threads'} ${f3(med(s.key, 'other'))} [${spread(s.key, 'other')}]`,
      `PostgreSQL ${f3(med(s.key, 'pg'))} [${spread(s.key, 'pg')}]`,
      `Redis ${f3(med(s.key, 'redis'))} [${spread(s.key, 'redis')}]`,
    ];
    console.log(`  ${s.path} ${s.key}: ${s.label}${s.alt ? ' [a change of design: not in the floor]' : ''}\n      ${parts.join(', ')}`);
  }

  const medCost = (key: string): Cost => ({ main: med(key, 'main'), other: med(key, 'other'), pg: med(key, 'pg'), redis: med(key, 'redis') });
  const floorOf = (which: 'send' | 'mx') => {
    const own = steps.filter((s) => s.path === which && !s.alt);
    const rows = own.map((s) => {
      const c = medCost(s.key);
      return { s, c, boxes: boxesSide(s, c), all: allIn(c) };
    });
    return {
      rows,
      boxes: rows.reduce((a, r) => a + r.boxes, 0),
      all: rows.reduce((a, r) => a + r.all, 0),
      node: rows.reduce((a, r) => a + r.c.main + (r.s.outside ? 0 : r.c.other), 0),
      pg: rows.reduce((a, r) => a + r.c.pg, 0),
      redis: rows.reduce((a, r) => a + r.c.redis, 0),
      outside: rows.reduce((a, r) => a + (r.s.outside ? r.c.other : 0), 0),
    };
  };
  const anchorRate = median(anchors.map((a) => a.rate));
  const anchorCpu = median(anchors.map((a) => allIn(a.cpu)));

  let today: { send: Record<string, number> | null; mx: Record<string, number> | null; sendLine: string; mxLine: string } | null = null;
  if (TODAY) {
    console.log(`\nrunning bench:send and bench:mx once for today's figures; ${loadNote()}`);
    const sendOut = await runBench('send.ts', { BENCH_SENDS: '2000' });
    const mxOut = await runBench('mx.ts', { BENCH_MX: '2000', BENCH_HARAKA: '0' });
    today = {
      send: cpuPerMessage(sendOut, /until delivered:/),
      mx: cpuPerMessage(mxOut, /server event loop/),
      sendLine: sendOut.split('\n').find((l) => l.startsWith('send anchor:')) ?? '',
      mxLine: mxOut.split('\n').find((l) => l.startsWith('mx anchor: bare')) ?? '',
    };
  }

  const report = (which: 'send' | 'mx') => {
    const f = floorOf(which);
    const ceiling = 2000 / f.all;
    const ceilingBoxes = 2000 / f.boxes;
    const thread = 1000 / f.node;
    console.log(`\n${which} floor: the sum of its steps, CPU ms per message (medians)`);
    console.log(
      `  Boxes' side ${f2(f.boxes)} (Node ${f2(f.node)}, PostgreSQL ${f2(f.pg)}, Redis ${f2(f.redis)}); the outside world on the same machine ${f2(f.outside)}; in all ${f2(f.all)}`,
    );
    const sorted = [...f.rows].sort((a, b) => b.all - a.all);
    console.log(`  largest steps: ${sorted.map((r) => `${r.s.key} ${f2(r.all)} (${((100 * r.all) / f.all).toFixed(0)}%)`).join(', ')}`);
    const anchorNote =
      which === 'send'
        ? `bench:send's anchor in this run (plain-SQL chained appends, ${SEND_CONCURRENCY} in flight) ${anchorRate}/s wall, ${f2(anchorCpu)} ms of CPU an append (a CPU ceiling of ${Math.round(2000 / anchorCpu)}/s)`
        : `bench:mx's anchor in this run (the bare smtp-server step, ${MX_CONNECTIONS} connections) ${median(mxAnchorRates)}/s wall`;
    const anchorWall = which === 'send' ? anchorRate : median(mxAnchorRates);
    console.log(
      `  ceiling on 2 cores: ${Math.round(ceiling)}/s with the outside world on the same cores (as bench:${which} runs), ${Math.round(ceilingBoxes)}/s for Boxes alone; ` +
        `one Node thread doing all of Boxes' Node work caps at ${Math.round(thread)}/s`,
    );
    console.log(
      `  ${anchorNote}: the ceiling is ${((100 * ceiling) / anchorWall).toFixed(0)}% of it${which === 'send' ? `, ${((100 * ceiling) / (2000 / anchorCpu)).toFixed(0)}% of its CPU ceiling` : ''}`,
    );
    const t = today?.[which];
    if (t) {
      const spent = Object.values(t).reduce((a, b) => a + b, 0);
      console.log(
        `  today (bench:${which} run once above): ${Object.entries(t)
          .map(([k, v]) => `${k} ${f2(v)}`)
          .join(', ')}; ${f2(spent)} ms in all = ${(spent / f.all).toFixed(1)} times the floor`,
      );
      console.log(`    ${which === 'send' ? today!.sendLine : today!.mxLine}`);
    }
    return f;
  };

  const send = report('send');
  const mx = report('mx');
  const c = (key: string) => allIn(medCost(key));
  const groupSaved = c('accept') - c('accept-group') + c('record') - c('record-group');

  // bulk: the steps every message of a bulk batch goes through one by one on the worker's main thread (a batch's
  // SQL is a few statements for hundreds of messages: bench:bulk measures it), against the single send's floor.
  // Both phases of bench:bulk run on the same two cores, so their rates' ratio is at most the ratio of the CPU
  // each message takes, and the bulk side is also capped by its one thread (a job's batches run one at a time).
  const bulkSteps = ['compose', 'dkim', 'seal-out', 'smtp-out'];
  const bulkThread = bulkSteps.reduce((a, key) => a + medCost(key).main, 0);
  const bulkAll = bulkSteps.reduce((a, key) => a + c(key), 0);
  const bulkCap = Math.min(1000 / bulkThread, 2000 / bulkAll);
  const sendGrouped = send.all - groupSaved;
  console.log(`\nbulk floor: ${bulkSteps.join(', ')} per message (medians), the batch's SQL left out (bench:bulk measures it)`);
  console.log(
    `  worker thread ${f2(bulkThread)} ms (one thread caps at ${Math.round(1000 / bulkThread)}/s); in all with the sink ${f2(bulkAll)} ms (two cores: ${Math.round(2000 / bulkAll)}/s)`,
  );
  console.log(
    `  against the send floor (${f2(send.all)} ms, ${Math.round(2000 / send.all)}/s on two cores): at most ${(bulkCap / (2000 / send.all)).toFixed(1)}x; ` +
      `against the send floor with its group commits (${f2(sendGrouped)} ms, ${Math.round(2000 / sendGrouped)}/s): at most ${(bulkCap / (2000 / sendGrouped)).toFixed(1)}x`,
  );
  const sentToday = today?.send ? Object.values(today.send).reduce((a, b) => a + b, 0) : null;
  if (sentToday) {
    console.log(
      `  against today's single send (bench:send above, ${f2(sentToday)} ms, ${Math.round(2000 / sentToday)}/s on two cores if nothing waited): at most ${(bulkCap / (2000 / sentToday)).toFixed(1)}x`,
    );
  }

  // What changes of design would lift the ceilings: the group commits measured above, the rest from the parts.
  const K = SEND_GROUP;
  const mxAnchor = median(mxAnchorRates);
  const est = (f: { all: number }, saved: number) =>
    `saves ${f2(saved)} ms: ${f2(f.all - saved)} ms in all, a ceiling of ${Math.round(2000 / (f.all - saved))}/s ` +
    `(${Math.round((100 * 2000) / (f.all - saved) / (f === mx ? mxAnchor : anchorRate))}% of the anchor's wall rate in this run)`;
  const mxGroupSaved = c('store') - c('store-group');
  console.log(`\nwhat would lift the ceiling (K = ${K} messages a batch; the group commits measured above, the rest estimated from the parts):`);
  console.log(
    `  send: group commits of the accepts (${f2(c('accept'))} -> ${f2(c('accept-group'))} ms) and of the delivery records (${f2(c('record'))} -> ${f2(c('record-group'))} ms), measured: ${est(send, groupSaved)}`,
  );
  console.log(`  send: ${K} deliveries per BullMQ job (one job per batch, not per delivery): ${est(send, c('job') * (1 - 1 / K))}`);
  console.log(`  send: ${K} sends per HTTP request (a batch endpoint, as bulk sends do): ${est(send, c('http') * (1 - 1 / K))}`);
  const allThree = groupSaved + (c('job') + c('http')) * (1 - 1 / K);
  console.log(
    `  send: all three: ${est(send, allThree)}; what stays per message: the rows themselves, compose, DKIM and the SMTP transaction (${f2(c('compose') + c('dkim') + c('smtp-out'))} ms)`,
  );
  console.log(`  mx: group commits of ${MX_CONNECTIONS} stores (${f2(c('store'))} -> ${f2(c('store-group'))} ms), measured: ${est(mx, mxGroupSaved)}`);
  console.log(`  mx: the raw message sealed once (the parsed body derived when read): ${est(mx, c('seal-in') / 2)}`);
  console.log(
    `  mx: parse and verify moved off the SMTP path to a worker (headers only at SMTP time): the same CPU on 2 cores, but the MX thread's own cap goes from ` +
      `${Math.round(1000 / mx.node)}/s to ${Math.round(1000 / (mx.node - c('parse') - c('verify')))}/s`,
  );
});
