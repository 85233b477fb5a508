/**
 * The hash-chained event log over real HTTP: concurrent appends keep seq gapless, GET /events/verify recomputes
 * the chain and finds tampering, cursor paging never skips or repeats while appends continue, and every hash
 * can be recomputed outside the service from the documented bytes.
 */
import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintKey, rest, signupAccount, startTestServer, waitFor, type TestAccount, type TestServer, type ApiEvent } from '@boxes/testing';
import { exec, k as kysely, poolOf, sql } from '@boxes/db';
import { appendEvent, chainHash, EVENTS_CHANNEL } from '@boxes/core';

interface Page {
  events: ApiEvent[];
  next_cursor: string;
  has_more: boolean;
}

const GENESIS = '0'.repeat(64);

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(() => t?.stop());

async function page(key: string, query: Record<string, string | number | undefined>): Promise<Page> {
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined) qs.set(k, String(v));
  const r = await rest<Page>(t, 'GET', `/events?${qs}`, { key });
  if (r.status !== 200) throw new Error(`GET /events?${qs} -> ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

/** Pages from `since` until has_more is false; returns the events and the last cursor. */
async function drain(key: string, query: { since?: string; type?: string; limit?: number } = {}) {
  const events: ApiEvent[] = [];
  let cursor = query.since;
  for (;;) {
    const p = await page(key, { ...query, since: cursor, limit: query.limit ?? 500 });
    events.push(...p.events);
    cursor = p.next_cursor;
    if (!p.has_more) return { events, cursor };
  }
}

async function verify(key: string) {
  const r = await rest(t, 'GET', '/events/verify', { key });
  expect(r.status).toBe(200);
  return r.body as {
    ok: boolean;
    events_verified: number;
    last_verified_seq: number;
    hash_at_seq: string | null;
    anomalies: { at_seq: number; kind: string; message: string }[];
    reason: string | null;
    verified_at: string;
  };
}

async function createBox(a: TestAccount, address: string): Promise<{ id: string; address: string }> {
  const r = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address } });
  if (r.status !== 200) throw new Error(`POST /boxes ${address} -> ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

async function setSignature(key: string, boxId: string, signature: string | null) {
  const r = await rest(t, 'PUT', `/boxes/${boxId}/signature`, { key, body: { signature } });
  if (r.status !== 200) throw new Error(`PUT signature -> ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

/** The bytes of docs/guide/audit.md: hex(SHA-256(UTF-8(prev_hash + "\n" + JCS({id, seq, type, account_id, created_at, data})))). */
function recompute(prevHash: string, e: ApiEvent): string {
  const body = { id: e.id, seq: e.seq, type: e.type, account_id: e.account_id, created_at: e.created_at, data: e.data };
  const jcs = canonicalize(body);
  if (jcs === undefined) throw new Error('not canonicalizable');
  return createHash('sha256')
    .update(Buffer.from(`${prevHash}\n${jcs}`, 'utf8'))
    .digest('hex');
}

/** The box an event concerns, as its payload names it. */
const boxOf = (e: ApiEvent): string | undefined => e.data?.box?.id ?? e.data?.box_id;

describe('concurrent appends', () => {
  it('200 parallel requests each append one event; seq is exactly 1..N and the chain verifies', async () => {
    const a = await signupAccount(t);
    const before = await drain(a.apiKey);
    const initial = before.events.length;
    expect(before.events.map((e) => e.seq)).toEqual(Array.from({ length: initial }, (_, i) => i + 1));

    const primary = (await rest(t, 'GET', '/boxes', { key: a.apiKey })).body.boxes[0];
    expect(primary.is_primary).toBe(true);

    const addresses = Array.from({ length: 160 }, (_, i) => `c${String(i).padStart(3, '0')}`);
    const signatures = Array.from({ length: 40 }, (_, i) => `sig ${i}`);
    const results = await Promise.all([
      ...addresses.map((address) => rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address } })),
      ...signatures.map((signature) => rest(t, 'PUT', `/boxes/${primary.id}/signature`, { key: a.apiKey, body: { signature } })),
    ]);
    const failures = results.filter((r) => r.status !== 200).map((r) => `${r.status} ${JSON.stringify(r.body)}`);
    expect(failures).toEqual([]);

    const all = (await drain(a.apiKey, { limit: 500 })).events;
    const n = initial + 200;
    expect(all).toHaveLength(n);
    expect(all.map((e) => e.seq)).toEqual(Array.from({ length: n }, (_, i) => i + 1));
    expect(new Set(all.map((e) => e.id)).size).toBe(n);

    const added = all.slice(initial);
    expect(
      added
        .filter((e) => e.type === 'box.created')
        .map((e) => e.data.box.local_part)
        .sort(),
    ).toEqual(addresses);
    expect(
      added
        .filter((e) => e.type === 'box.signature_updated')
        .map((e) => e.data.signature)
        .sort(),
    ).toEqual([...signatures].sort());

    // Chain links hold in storage order.
    for (let i = 0; i < all.length; i++) {
      expect(all[i]!._chain.prev_hash).toBe(i === 0 ? GENESIS : all[i - 1]!._chain.hash);
    }

    const v = await verify(a.apiKey);
    expect(v).toMatchObject({
      ok: true,
      events_verified: n,
      last_verified_seq: n,
      hash_at_seq: all[n - 1]!._chain.hash,
      anomalies: [],
      reason: null,
    });
    expect(Number.isNaN(Date.parse(v.verified_at))).toBe(false);
  }, 60_000);

  it('GET /events/verify while appends continue: every answer is ok and covers the head it read', async () => {
    const a = await signupAccount(t);
    const primary = (await rest(t, 'GET', '/boxes', { key: a.apiKey })).body.boxes[0];
    let appending = true;
    const writer = (async () => {
      for (let i = 0; appending && i < 400; i++) {
        await Promise.all([0, 1, 2].map((k) => rest(t, 'PUT', `/boxes/${primary.id}/signature`, { key: a.apiKey, body: { signature: `s${i}.${k}` } })));
      }
    })();
    const answers: any[] = [];
    try {
      for (let i = 0; i < 40; i++) answers.push(await verify(a.apiKey));
    } finally {
      appending = false;
      await writer;
    }
    expect(answers.filter((v) => !v.ok)).toEqual([]);
    // Each check saw a later head than the one before it (appends really ran between them).
    const seqs = answers.map((v) => v.last_verified_seq);
    expect(new Set(seqs).size).toBeGreaterThan(5);
    expect([...seqs].sort((x, y) => x - y)).toEqual(seqs);
  }, 60_000);
});

describe('one-statement appends', () => {
  it('parallel appendEvent calls outside a transaction chain gaplessly, hashed by PostgreSQL over the same bytes', async () => {
    const a = await signupAccount(t);
    const initial = (await drain(a.apiKey)).events.length;
    // Data with a member named seq, non-ASCII text, escapes and nesting: the canonical body is built around the seq.
    const rows = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        appendEvent({
          db: t.db,
          accountId: a.accountId,
          type: 'webhook.delivery_failed',
          data: {
            event_id: `evt_${i}`,
            seq: i,
            event_type: 'mail.received',
            attempts: 3,
            last_status: null,
            last_error: `Zürich "quoted" \\ ✉ \u2028 ${i}`,
            url: 'https://example.com/hook?a=1&b=ü',
          },
        }),
      ),
    );
    for (const r of rows) {
      expect(r.hash).toBe(chainHash(r.prev_hash, { id: r.id, seq: r.seq, type: r.type, account_id: r.account_id, created_at: r.created_at, data: r.data }));
    }
    const all = (await drain(a.apiKey, { limit: 500 })).events;
    expect(all.map((e) => e.seq)).toEqual(Array.from({ length: initial + 40 }, (_, i) => i + 1));
    expect(new Set(rows.map((r) => r.seq)).size).toBe(40);
    expect(await verify(a.apiKey)).toMatchObject({ ok: true, events_verified: initial + 40, anomalies: [] });
  });
});

describe('announcements', () => {
  it('appends on their own are announced after they commit; an append in a transaction, at that commit and not before', async () => {
    const [a, b] = [await signupAccount(t), await signupAccount(t)];
    const listener = new pg.Client({ connectionString: poolOf(t.db)!.options.connectionString });
    await listener.connect();
    const heard: string[] = [];
    listener.on('notification', (m) => {
      if (m.channel === EVENTS_CHANNEL && m.payload) heard.push(m.payload);
    });
    await listener.query(`LISTEN ${EVENTS_CHANNEL}`);
    const append = (db: Parameters<typeof appendEvent>[0]['db'], accountId: string) =>
      appendEvent({
        db,
        accountId,
        type: 'mail.delivered',
        data: { message_id: 'msg_x', recipient: 'r@example.com', route: 'mx', remote_mta: 'mx.example.com', response: '250 2.0.0 Ok' },
      });
    try {
      await Promise.all(Array.from({ length: 5 }, () => append(t.db, a.accountId)));
      await waitFor('the appends announced', () => heard.includes(a.accountId));
      const marker = `marker-${b.accountId}`;
      await t.db.$transaction(async (tx) => {
        await append(tx, b.accountId);
        // Notifications arrive in commit order: once a later one is heard, an early announcement would have been too.
        await new Promise((r) => setImmediate(r));
        await exec(t.db, sql`SELECT pg_notify(${EVENTS_CHANNEL}, ${marker})`);
        await waitFor('the marker', () => heard.includes(marker));
        expect(heard).not.toContain(b.accountId);
      });
      await waitFor('the transaction announced at its commit', () => heard.includes(b.accountId));
    } finally {
      await listener.end();
    }
  });
});

describe('tamper evidence', () => {
  it('verifies a fresh account', async () => {
    const a = await signupAccount(t);
    const all = (await drain(a.apiKey)).events;
    const v = await verify(a.apiKey);
    expect(v).toMatchObject({
      ok: true,
      events_verified: all.length,
      last_verified_seq: all.length,
      hash_at_seq: all.at(-1)!._chain.hash,
      anomalies: [],
      reason: null,
    });
  });

  it('reports an altered row at its seq', async () => {
    const a = await signupAccount(t);
    for (const name of ['t1', 't2', 't3', 't4', 't5']) await createBox(a, name);
    const all = (await drain(a.apiKey)).events;
    const k = all.find((e) => e.type === 'box.created' && e.data.box.local_part === 't3')!.seq;
    expect(k).toBeGreaterThan(1);

    const changed = await exec(
      t.db,
      kysely
        .updateTable('events')
        .set((eb) => ({ data: sql`jsonb_set(${eb.ref('data')}, '{box,local_part}', '"evil"')` }))
        .where('account_id', '=', a.accountId)
        .where('seq', '=', k),
    );
    expect(changed).toBe(1);

    const v = await verify(a.apiKey);
    expect(v.ok).toBe(false);
    expect(v.anomalies[0]).toMatchObject({ at_seq: k, kind: 'hash_mismatch' });
    // One altered row is one anomaly; the rows after it still link to what is stored.
    expect(v.anomalies.map((x) => x.at_seq)).toEqual([k]);
    expect(typeof v.reason).toBe('string');
    expect(v.reason!.length).toBeGreaterThan(0);
    expect(v.events_verified).toBe(all.length);
    expect(v.last_verified_seq).toBe(k - 1);
    expect(v.hash_at_seq).toBe(all[k - 2]!._chain.hash);
  });

  it('reports an altered type at its seq', async () => {
    const a = await signupAccount(t);
    await createBox(a, 'u1');
    const all = (await drain(a.apiKey)).events;
    const k = all.length; // the newest event
    await exec(
      t.db,
      kysely
        .updateTable('events')
        .set({ type: sql.lit('box.deleted') })
        .where('account_id', '=', a.accountId)
        .where('seq', '=', k),
    );
    const v = await verify(a.apiKey);
    expect(v.ok).toBe(false);
    expect(v.anomalies[0]).toMatchObject({ at_seq: k, kind: 'hash_mismatch' });
    expect(v.last_verified_seq).toBe(k - 1);
  });

  it('reports a deleted row (a seq gap) at the missing seq', async () => {
    const a = await signupAccount(t);
    for (const name of ['d1', 'd2', 'd3']) await createBox(a, name);
    const all = (await drain(a.apiKey)).events;
    const k = all.find((e) => e.type === 'box.created' && e.data.box.local_part === 'd2')!.seq;
    expect(k).toBeLessThan(all.length);

    const removed = await exec(t.db, kysely.deleteFrom('events').where('account_id', '=', a.accountId).where('seq', '=', k));
    expect(removed).toBe(1);

    const v = await verify(a.apiKey);
    expect(v.ok).toBe(false);
    expect(v.anomalies[0]).toMatchObject({ at_seq: k, kind: 'seq_gap' });
    expect(v.reason).toBe(v.anomalies[0]!.message);
    expect(v.events_verified).toBe(all.length - 1);
    expect(v.last_verified_seq).toBe(k - 1);
    expect(v.hash_at_seq).toBe(all[k - 2]!._chain.hash);
  });

  it('reports a truncated tail (newest row deleted) at the head seq', async () => {
    const a = await signupAccount(t);
    await createBox(a, 'h1');
    const all = (await drain(a.apiKey)).events;
    const n = all.length;
    await exec(t.db, kysely.deleteFrom('events').where('account_id', '=', a.accountId).where('seq', '=', n));
    const v = await verify(a.apiKey);
    expect(v.ok).toBe(false);
    expect(v.anomalies[0]).toMatchObject({ at_seq: n, kind: 'head_mismatch' });
    expect(v.events_verified).toBe(n - 1);
  });

  it('lists only the calling account’s events', async () => {
    const a = await signupAccount(t);
    const b = await signupAccount(t);
    await createBox(b, 'only-b');
    const aEvents = (await drain(a.apiKey)).events;
    expect(aEvents.every((e) => e.account_id === a.accountId)).toBe(true);
    expect(aEvents.some((e) => e.data?.box?.local_part === 'only-b')).toBe(false);
  });
});

describe('cursor paging', () => {
  it('pages with limit 7 while appends continue: every event exactly once, in order', async () => {
    const a = await signupAccount(t);
    let appendersDone = false;
    const appender = async (w: number) => {
      for (let i = 0; i < 15; i++) await createBox(a, `w${w}-${i}`);
    };
    // Settles to the first append failure (or undefined) so the polling loop below always ends.
    const appenders: Promise<unknown> = Promise.all([0, 1, 2, 3].map(appender)).then(
      () => undefined,
      (err: unknown) => err,
    );
    void appenders.then(() => {
      appendersDone = true;
    });

    const seen: ApiEvent[] = [];
    let cursor: string | undefined;
    let lastCursor = 0;
    const readUntilCaughtUp = async () => {
      for (;;) {
        const p = await page(a.apiKey, { since: cursor, limit: 7 });
        expect(p.events.length).toBeLessThanOrEqual(7);
        if (p.has_more) expect(p.events).toHaveLength(7);
        seen.push(...p.events);
        expect(Number(p.next_cursor)).toBeGreaterThanOrEqual(lastCursor);
        lastCursor = Number(p.next_cursor);
        cursor = p.next_cursor;
        if (!p.has_more) return;
      }
    };
    let polls = 0;
    while (!appendersDone) {
      await readUntilCaughtUp();
      polls++;
      await new Promise((r) => setImmediate(r));
    }
    const appendFailure = await appenders;
    if (appendFailure) throw appendFailure;
    await readUntilCaughtUp();
    expect(polls).toBeGreaterThan(0);

    const full = (await drain(a.apiKey, { limit: 500 })).events;
    expect(full).toHaveLength(4 + 60);
    expect(seen.map((e) => e.id)).toEqual(full.map((e) => e.id));
    expect(seen.map((e) => e.seq)).toEqual(full.map((_, i) => i + 1));
    expect(cursor).toBe(String(full.length));
  }, 30_000);

  it('an empty poll at the head keeps the cursor and later events still arrive', async () => {
    const a = await signupAccount(t);
    const first = await drain(a.apiKey);
    const again = await page(a.apiKey, { since: first.cursor });
    expect(again).toMatchObject({ events: [], next_cursor: first.cursor, has_more: false });
    await createBox(a, 'later');
    const next = await page(a.apiKey, { since: first.cursor });
    expect(next.events.map((e) => [e.type, e.data.box.local_part])).toEqual([['box.created', 'later']]);
    expect(next.next_cursor).toBe(String(next.events[0]!.seq));
  });

  it('rejects a cursor that is not a decimal string with 400 invalid_cursor', async () => {
    const a = await signupAccount(t);
    const r = await rest(t, 'GET', '/events?since=abc', { key: a.apiKey });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('invalid_cursor');
  });
});

describe('independent recomputation', () => {
  it('every _chain.hash equals SHA-256 over prev_hash + "\\n" + RFC 8785 JSON, and prev_hash links', async () => {
    const a = await signupAccount(t);
    const box = await createBox(a, 'unicode');
    // Strings that canonical JSON must escape or keep as UTF-8; numbers in the payload come from seq.
    await setSignature(a.apiKey, box.id, 'Grüße — 🚀 "quoted" \\ back\nslash\ttab \u0001 ctl \u2028 ls');
    await setSignature(a.apiKey, box.id, null);
    await mintKey(t, a.apiKey, ['receive'], { allowed_box_ids: [box.id] });

    const all = (await drain(a.apiKey, { limit: 3 })).events;
    expect(all.length).toBeGreaterThanOrEqual(8);
    let prev = GENESIS;
    for (const e of all) {
      expect(Object.keys(e).sort()).toEqual(['_chain', 'account_id', 'created_at', 'data', 'id', 'seq', 'type']);
      expect(e._chain.prev_hash).toBe(prev);
      expect(e._chain.hash).toMatch(/^[0-9a-f]{64}$/);
      expect(recompute(prev, e)).toBe(e._chain.hash);
      prev = e._chain.hash;
    }
    // The signature event's payload survived the database round trip byte for byte.
    const sig = all.find((e) => e.type === 'box.signature_updated' && e.data.signature !== null)!;
    expect(sig.data.signature).toBe('Grüße — 🚀 "quoted" \\ back\nslash\ttab \u0001 ctl \u2028 ls');
    // A single changed byte gives a different hash.
    expect(recompute(sig._chain.prev_hash, { ...sig, data: { ...sig.data, signature: 'x' } })).not.toBe(sig._chain.hash);
  });
});

describe('filtered polling', () => {
  it('a type filter gives a next_cursor that misses no later event of that type', async () => {
    const a = await signupAccount(t);
    const x = await createBox(a, 'fx');
    const y = await createBox(a, 'fy');

    const empty = await page(a.apiKey, { type: 'box.signature_updated' });
    const head = (await drain(a.apiKey)).events.length;
    expect(empty).toMatchObject({ events: [], has_more: false, next_cursor: String(head) });

    await createBox(a, 'fz');
    await setSignature(a.apiKey, x.id, 'x1');
    await createBox(a, 'fw');
    await setSignature(a.apiKey, y.id, 'y1');

    const p1 = await page(a.apiKey, { type: 'box.signature_updated', since: empty.next_cursor });
    expect(p1.events.map((e) => [boxOf(e), e.data.signature])).toEqual([
      [x.id, 'x1'],
      [y.id, 'y1'],
    ]);
    expect(p1.has_more).toBe(false);
    expect(p1.next_cursor).toBe(String(head + 4));

    // Only other types appended: the poll is empty but moves on; the next matching event still arrives.
    await createBox(a, 'fv');
    const p2 = await page(a.apiKey, { type: 'box.signature_updated', since: p1.next_cursor });
    expect(p2.events).toEqual([]);
    expect(Number(p2.next_cursor)).toBeGreaterThanOrEqual(Number(p1.next_cursor));
    await setSignature(a.apiKey, x.id, 'x2');
    const p3 = await page(a.apiKey, { type: 'box.signature_updated', since: p2.next_cursor });
    expect(p3.events.map((e) => e.data.signature)).toEqual(['x2']);

    // Several types, comma-separated, paged with a small limit, equal the full list filtered here.
    const full = (await drain(a.apiKey)).events;
    const want = full.filter((e) => e.type === 'box.created' || e.type === 'box.signature_updated').map((e) => e.id);
    const got = (await drain(a.apiKey, { type: 'box.created,box.signature_updated', limit: 2 })).events.map((e) => e.id);
    expect(got).toEqual(want);
    expect(got.length).toBe(9);
  });

  it('a box-restricted key sees only its box’s events and its cursor never skips a later one', async () => {
    const a = await signupAccount(t);
    const x = await createBox(a, 'rx');
    const y = await createBox(a, 'ry');
    const restricted = await mintKey(t, a.apiKey, ['receive'], { allowed_boxes: [x.address] });

    const start = await drain(restricted.api_key, { limit: 1 });
    expect(start.events.map((e) => [e.type, boxOf(e)])).toEqual([['box.created', x.id]]);
    const head = (await drain(a.apiKey)).events.length;
    expect(start.cursor).toBe(String(head));

    // Events of the other box only: nothing to see, and the cursor moves on.
    await setSignature(a.apiKey, y.id, 'y1');
    await setSignature(a.apiKey, y.id, 'y2');
    const p1 = await page(restricted.api_key, { since: start.cursor, limit: 1 });
    expect(p1).toMatchObject({ events: [], has_more: false, next_cursor: String(head + 2) });

    // Interleaved: only x's events, in order, none missed across pages of one.
    await setSignature(a.apiKey, x.id, 'x1');
    await setSignature(a.apiKey, y.id, 'y3');
    await setSignature(a.apiKey, x.id, 'x2');
    const rest1 = await drain(restricted.api_key, { since: p1.next_cursor, limit: 1 });
    expect(rest1.events.map((e) => [boxOf(e), e.data.signature])).toEqual([
      [x.id, 'x1'],
      [x.id, 'x2'],
    ]);
    expect(rest1.cursor).toBe(String(head + 5));

    // The same through the type filter.
    await setSignature(a.apiKey, x.id, 'x3');
    const typed = await page(restricted.api_key, { since: rest1.cursor, type: 'box.signature_updated' });
    expect(typed.events.map((e) => e.data.signature)).toEqual(['x3']);

    // Everything the restricted key ever sees is exactly the owner's list filtered to box x.
    const full = (await drain(a.apiKey)).events;
    const seen = (await drain(restricted.api_key, { limit: 2 })).events;
    expect(seen.map((e) => e.id)).toEqual(full.filter((e) => boxOf(e) === x.id).map((e) => e.id));
    expect(seen.every((e) => boxOf(e) === x.id)).toBe(true);
  });
});
