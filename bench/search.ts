/**
 * pnpm bench:search — GET /messages/search on one account of BENCH_SEARCH_MESSAGES messages (default 100,000),
 * beside noise accounts (BENCH_SEARCH_NOISE_ACCOUNTS x BENCH_SEARCH_NOISE_MESSAGES, default 3 x 20,000).
 *
 * A fresh database; the HTTP server runs in this process (no worker, no MX). Accounts and boxes are made over
 * REST; the messages are inserted with multi-row INSERTs (2,000 a statement) that seal each body as the
 * service does and compute the search vector in the same statement with the same SQL function
 * (boxes_search_vector). Bodies are 20 to 200 words drawn from a Zipf vocabulary of 20,000 made-up words; one
 * message in ten has attachment text; one in five carries the keyword "billing", half are \Seen.
 *
 * Measured, one request at a time over keep-alive HTTP (BENCH_SEARCH_QUERIES each, default 300):
 *   ranked:   one or two words, drawn from three bands of document frequency (common: in 2 to 10% of the
 *             account's messages, medium: 0.2 to 1%, rare: under 0.05%), 20 results a page, highlights made.
 *   filtered: the same words with a filter (box, direction, after, label=unread, label=billing) in turn.
 * Beside them, in the same run on the same data: PostgreSQL's own plain ranked query over pg, no HTTP
 * (SELECT ... ts_rank(tsv, q) ... ORDER BY rank DESC LIMIT 20 on message_search), with the same words.
 * Then the size of the index (table, TOAST and GIN index) per message, beside the sealed bodies.
 *
 *   BENCH_SEARCH_MESSAGES=100000 BENCH_SEARCH_NOISE_ACCOUNTS=3 BENCH_SEARCH_NOISE_MESSAGES=20000
 *   BENCH_SEARCH_QUERIES=300 BENCH_SEARCH_WARMUP=50 BENCH_SEARCH_KEEP=1 (keep the database)
 */
import http from 'node:http';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { newId, seal } from '@boxes/core';
import { createBenchDatabase, envInt, loadNote, main, percentile, request, signupAccounts, startBenchRuntime } from './common';

const MESSAGES = envInt('BENCH_SEARCH_MESSAGES', 100_000);
const NOISE_ACCOUNTS = envInt('BENCH_SEARCH_NOISE_ACCOUNTS', 3, 0, 50);
const NOISE_MESSAGES = envInt('BENCH_SEARCH_NOISE_MESSAGES', 20_000, 0);
const QUERIES = envInt('BENCH_SEARCH_QUERIES', 300);
const WARMUP = envInt('BENCH_SEARCH_WARMUP', 50, 0);
const VOCABULARY = 20_000;
const BATCH = 2000;

/** A deterministic generator (mulberry32), so every run searches the same data. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const SYLLABLES = ['ka', 'lo', 'mi', 'ne', 'ru', 'ta', 'vo', 'shi', 'den', 'bar', 'qua', 'zel', 'pri', 'ton', 'gas', 'wik', 'fen', 'dor', 'lum', 'xan'];

/** Made-up words (three or four syllables: no english stop word, no two alike). */
function vocabulary(): string[] {
  const words = new Set<string>();
  const r = rng(7);
  while (words.size < VOCABULARY) {
    const n = 3 + Math.floor(r() * 2);
    let w = '';
    for (let i = 0; i < n; i++) w += SYLLABLES[Math.floor(r() * SYLLABLES.length)];
    words.add(w);
  }
  return [...words];
}

/** Zipf (s = 1) ranks by inverse transform over the cumulative weights. */
function zipf(n: number, r: () => number): () => number {
  const cum = new Float64Array(n);
  let total = 0;
  for (let i = 0; i < n; i++) cum[i] = total += 1 / (i + 1);
  return () => {
    const x = r() * total;
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cum[mid]! < x) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
}

interface Account {
  accountId: string;
  apiKey: string;
  primaryAddress: string;
  boxIds: string[];
}

const stats = (ms: number[]) => {
  const s = [...ms].sort((x, y) => x - y);
  return `p50 ${percentile(s, 50).toFixed(1)} ms, p99 ${percentile(s, 99).toFixed(1)} ms, max ${s[s.length - 1]!.toFixed(1)} ms (${s.length} queries)`;
};

await main('bench:search', async (cleanup) => {
  const db = await createBenchDatabase();
  // BENCH_SEARCH_KEEP=1 keeps the database for a look at the plans (its name is printed); drop it by hand.
  if (process.env.BENCH_SEARCH_KEEP === '1') console.log(`database kept: ${db.name}`);
  else cleanup(() => db.drop());
  const rt = await startBenchRuntime(db, { worker: false, mail: false, push: false });
  cleanup(() => rt.stop());
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
  cleanup(async () => agent.destroy());
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  cleanup(() => client.end());

  const signed = await signupAccounts(agent, rt.apiBase, 1 + NOISE_ACCOUNTS);
  const accounts: Account[] = [];
  for (const s of signed) {
    const boxIds = [(await client.query<{ id: string }>('SELECT id FROM boxes WHERE account_id = $1', [s.accountId])).rows[0]!.id];
    for (const local of ['sales', 'support']) {
      const b = await request(agent, `${rt.apiBase}/boxes`, 'POST', { address: local }, s.apiKey);
      if (b.status !== 200) throw new Error(`box: ${b.status} ${JSON.stringify(b.body)}`);
      boxIds.push(b.body.id);
    }
    accounts.push({ ...s, boxIds });
  }
  const main_ = accounts[0]!;

  // The data: the same words for every run.
  const words = vocabulary();
  const r = rng(42);
  const pick = zipf(VOCABULARY, r);
  const sentence = (n: number) => Array.from({ length: n }, () => words[pick()]!).join(' ');
  const docFreq = new Map<number, number>();
  const started = performance.now();
  const since = Date.now() - 365 * 86_400_000;
  for (const [ai, acc] of accounts.entries()) {
    const count = ai === 0 ? MESSAGES : NOISE_MESSAGES;
    for (let done = 0; done < count; done += BATCH) {
      const n = Math.min(BATCH, count - done);
      const cols = {
        id: [] as string[],
        box: [] as string[],
        direction: [] as string[],
        from: [] as string[],
        to: [] as string[],
        subject: [] as string[],
        body: [] as string[],
        text: [] as string[],
        att: [] as (string | null)[],
        at: [] as string[],
        flags: [] as number[],
        keywords: [] as string[],
      };
      for (let i = 0; i < n; i++) {
        const subjectLen = 3 + Math.floor(r() * 6);
        const bodyLen = 20 + Math.floor(r() * 181);
        const ranks: number[] = [];
        const draw = (len: number) =>
          Array.from({ length: len }, () => {
            const k = pick();
            ranks.push(k);
            return words[k]!;
          }).join(' ');
        const subject = draw(subjectLen);
        const text = draw(bodyLen);
        const att = r() < 0.1 ? draw(50 + Math.floor(r() * 300)) : null;
        if (ai === 0) for (const k of new Set(ranks)) docFreq.set(k, (docFreq.get(k) ?? 0) + 1);
        const sent = r() < 0.3;
        // As messages/body.ts sealBody seals a stored body.
        const sealed = seal(rt.secretKey, JSON.stringify({ text, html: null, headers: {}, attachments: [] }));
        cols.id.push(newId('msg'));
        cols.box.push(acc.boxIds[Math.floor(r() * acc.boxIds.length)]!);
        cols.direction.push(sent ? 'sent' : 'received');
        cols.from.push(sent ? acc.primaryAddress : `${words[pick()]}@${words[pick()]}.test`);
        cols.to.push(sent ? `${words[pick()]}@${words[pick()]}.test` : acc.primaryAddress);
        cols.subject.push(subject);
        cols.body.push(sealed);
        cols.text.push(text);
        cols.att.push(att);
        cols.at.push(new Date(since + Math.floor(r() * 365 * 86_400_000)).toISOString());
        cols.flags.push(r() < 0.5 ? 1 : 0);
        cols.keywords.push(r() < 0.2 ? 'billing' : '');
      }
      await client.query(
        `WITH x AS MATERIALIZED (
           SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::timestamptz[], $12::int[], $13::text[])
             AS x(id, box_id, direction, from_address, to_address, subject, body_enc, body_text, att, recorded_at, flags, keyword),
             LATERAL (SELECT 'thr_' || substr(md5(x.id), 1, 20) AS thread_id) t
         ), m AS (
           INSERT INTO messages (id, account_id, box_id, direction, status, rfc_message_id, provider_message_id, "references", from_address, to_addresses,
             cc_addresses, bcc_addresses, subject, size_bytes, body_enc, recorded_at, thread_id)
           SELECT x.id, $1, x.box_id, x.direction, CASE WHEN x.direction = 'sent' THEN 'delivered' ELSE 'received' END, '<' || x.id || '@bench.test>', x.id, '{}', x.from_address, ARRAY[x.to_address],
             '{}', '{}', x.subject, length(x.body_text), x.body_enc, x.recorded_at, x.thread_id FROM x
         ), s AS (
           INSERT INTO message_search (message_id, account_id, box_id, direction, recorded_at, thread_id, tsv)
           SELECT x.id, $1, x.box_id, x.direction, x.recorded_at, x.thread_id, boxes_search_vector(x.subject, x.from_address || ' ' || x.to_address, x.body_text, x.att) FROM x
         )
         INSERT INTO message_flags (message_id, account_id, flags, keywords)
         SELECT x.id, $1, x.flags, CASE WHEN x.keyword = '' THEN '{}'::text[] ELSE ARRAY[x.keyword] END FROM x WHERE x.flags <> 0 OR x.keyword <> ''`,
        [
          acc.accountId,
          cols.id,
          cols.box,
          cols.direction,
          cols.from,
          cols.to,
          cols.subject,
          cols.body,
          cols.text,
          cols.att,
          cols.at,
          cols.flags,
          cols.keywords,
        ],
      );
    }
  }
  await client.query('VACUUM ANALYZE messages');
  await client.query('VACUUM ANALYZE message_search');
  await client.query('VACUUM ANALYZE message_flags');
  const total = MESSAGES + NOISE_ACCOUNTS * NOISE_MESSAGES;
  console.log(`inserted ${total} messages (${MESSAGES} in the searched account) in ${((performance.now() - started) / 1000).toFixed(1)} s, vectors included`);

  // Query words by document frequency in the searched account.
  const band = (lo: number, hi: number) =>
    [...docFreq.entries()]
      .filter(([, n]) => n >= lo * MESSAGES && n < hi * MESSAGES)
      .map(([k]) => words[k]!)
      .sort();
  const bands = { common: band(0.02, 0.1), medium: band(0.002, 0.01), rare: band(0, 0.0005) };
  for (const [name, list] of Object.entries(bands)) if (!list.length) throw new Error(`no ${name} words in this data`);
  const qr = rng(99);
  const any = <T>(xs: T[]) => xs[Math.floor(qr() * xs.length)]!;
  const queryOf = (i: number): string => {
    const kind = i % 4;
    if (kind === 0) return any(bands.common);
    if (kind === 1) return any(bands.medium);
    if (kind === 2) return any(bands.rare);
    return `${any(bands.common)} ${any(bands.medium)}`;
  };
  const filterOf = (i: number): string => {
    switch (i % 5) {
      case 0:
        return `&box=${main_.boxIds[1]}`;
      case 1:
        return '&direction=received';
      case 2:
        return `&after=${new Date(Date.now() - 90 * 86_400_000).toISOString()}`;
      case 3:
        return '&label=unread';
      default:
        return '&label=billing';
    }
  };

  let found = 0;
  const timeRest = async (query: (i: number) => string, n: number): Promise<number[]> => {
    const ms: number[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      const res = await request(agent, `${rt.apiBase}/messages/search?${query(i)}`, 'GET', undefined, main_.apiKey);
      const dt = performance.now() - t0;
      if (res.status !== 200) throw new Error(`search: ${res.status} ${JSON.stringify(res.body)}`);
      found += res.body.results.length;
      ms.push(dt);
    }
    return ms;
  };
  const ranked = (i: number) => `q=${encodeURIComponent(queryOf(i))}&limit=20`;
  const filtered = (i: number) => `${ranked(i)}${filterOf(i)}`;
  await timeRest(ranked, WARMUP);
  const rankedMs = await timeRest(ranked, QUERIES);
  const filteredMs = await timeRest(filtered, QUERIES);
  const byBand = { common: [] as number[], medium: [] as number[], rare: [] as number[], two: [] as number[] };
  rankedMs.forEach((ms, i) => {
    byBand[(['common', 'medium', 'rare', 'two'] as const)[i % 4]!].push(ms);
  });

  // PostgreSQL's own plain ranked query, the same words, over pg (no HTTP, no highlights, no message rows).
  const plainMs: number[] = [];
  for (let i = -WARMUP; i < QUERIES; i++) {
    const t0 = performance.now();
    await client.query(
      `SELECT message_id, ts_rank(tsv, q) AS rank FROM message_search, websearch_to_tsquery('english', $2) q
       WHERE account_id = $1 AND tsv @@ q ORDER BY rank DESC LIMIT 20`,
      [main_.accountId, queryOf(Math.max(0, i))],
    );
    if (i >= 0) plainMs.push(performance.now() - t0);
  }

  const size = (
    await client.query<{ table: string; toast: string; index: string; total: string; bodies: string }>(
      `SELECT pg_relation_size('message_search') AS table,
         COALESCE(pg_total_relation_size(reltoastrelid), 0) AS toast,
         pg_relation_size('message_search_tsv_idx') AS index,
         pg_total_relation_size('message_search') AS total,
         (SELECT sum(octet_length(body_enc)) FROM messages) AS bodies
       FROM pg_class WHERE relname = 'message_search'`,
    )
  ).rows[0]!;
  const mb = (b: string | number) => `${(Number(b) / 1024 / 1024).toFixed(1)} MB`;
  const per = (b: string | number) => `${Math.round(Number(b) / total)} B/message`;

  console.log(`CPU: ${os.cpus()[0]?.model ?? 'unknown'} (${os.cpus().length} cores); ${loadNote()}`);
  console.log(`words: common ${bands.common.length} (in 2-10% of messages), medium ${bands.medium.length} (0.2-1%), rare ${bands.rare.length} (<0.05%)`);
  console.log(`GET /messages/search ranked (20 a page, highlights):  ${stats(rankedMs)}`);
  for (const [k, v] of Object.entries(byBand)) console.log(`  ${k.padEnd(6)} ${stats(v)}`);
  console.log(`GET /messages/search filtered (box, direction, after, label=unread, label=billing): ${stats(filteredMs)}`);
  console.log(`plain PostgreSQL ts_rank query (pg, LIMIT 20):       ${stats(plainMs)}`);
  console.log(`results returned: ${found}`);
  console.log(
    `index: ${mb(size.total)} for ${total} messages (${per(size.total)}): table ${mb(size.table)}, TOAST ${mb(size.toast)}, GIN ${mb(size.index)}; sealed bodies ${mb(size.bodies)}`,
  );
});
