/**
 * Fuzz: requests generated from the served OpenAPI document (fuzz-helpers.ts) against every operation, with a
 * valid key mostly (and receive-only, box-restricted, missing and unknown keys), over REST and now and then
 * tRPC and MCP. No answer may be a 5xx (an MCP tool error with code internal counts as one), every error is
 * the documented JSON shape without a stack, every REST error is a status and error.code the document lists for
 * that operation (x-error-codes), no request may hang, and afterwards the account's event chain still verifies.
 *
 * FUZZ_RUNS requests (2,000 by default; `pnpm fuzz` runs 20,000): half with a fixed seed, half with a random
 * one printed at the start and with any failure. FUZZ_SEED=<n> replays one seed for all the runs.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { mintKey, rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { encode, Generator, operationsOf, procedureInput, type FuzzRequest, type Operation } from './fuzz-helpers';

const RUNS = Number(process.env.FUZZ_RUNS ?? 2000);
const FIXED_SEED = 20261123;
const REPLAY_SEED = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : null;
const RANDOM_SEED = REPLAY_SEED ?? Math.floor(Math.random() * 2 ** 31);
const REQUEST_TIMEOUT_MS = 30_000;

let t: TestServer;
let a: TestAccount;
const keys: Record<FuzzRequest['key'], string | null> = { owner: null, receive: null, restricted: null, none: null, garbage: 'bxs_live_' + 'A'.repeat(43) };
let ops: Operation[] = [];
let doc: Record<string, any>;
let gen: Generator;

beforeAll(async () => {
  // Outside domains bounce at once (no MX): the worker runs, and mail to the account's own boxes is delivered.
  t = await startTestServer({ worker: true, resolver: { resolve: async () => [] } });
  a = await signupAccount(t);
  keys.owner = a.apiKey;
  const ids: string[] = [a.keyId, a.accountId];
  const addresses = [a.primaryAddress, `billing@${a.domain}`, 'someone@example.com', 'agent@other.example'];
  const box = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'billing' } });
  ids.push(box.body.id, (await rest(t, 'GET', '/boxes', { key: a.apiKey })).body.boxes[0].id);
  keys.receive = (await mintKey(t, a.apiKey, ['receive'])).api_key;
  const restricted = await mintKey(t, a.apiKey, ['send', 'receive'], { allowed_box_ids: [box.body.id] });
  keys.restricted = restricted.api_key;
  ids.push(restricted.id);
  const sent = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: a.primaryAddress, subject: 'seed', text: 'seed' } });
  ids.push(sent.body.message_id);
  const q = await rest(t, 'POST', '/support/questions', { key: a.apiKey, body: { subject: 'seed', body: 'seed question' } });
  ids.push(q.body.id);
  const f = await rest(t, 'POST', '/feature-requests', { key: a.apiKey, body: { title: 'Seed feature', description: 'A feature request to vote on.' } });
  ids.push(f.body.id);
  const intent = await rest(t, 'POST', '/signup/agentic', { body: { human_email: 'fuzz@example.com', domain_intent: { mode: 'subdomain' } } });
  ids.push(intent.body.intent_id);
  doc = (await (await fetch(`${t.url}/openapi.json`)).json()) as Record<string, any>;
  // Closing would end the account under test (its confirm_domain comes from the domain pool): account-close.test.ts
  // covers DELETE /account, and the security table its refusals.
  ops = operationsOf(doc).filter((o) => o.procedure !== 'account.close');
  gen = new Generator(doc, { ids, addresses, domains: [a.domain, 'example.com', 'my-agent.xyz', 'agents.example.org'] });
}, 60_000);
afterAll(() => t?.stop());

interface Outcome {
  status: number;
  text: string;
  problem: string | null;
}

function describeRequest(r: FuzzRequest): string {
  const show = (v: unknown) => {
    const s = typeof v === 'string' ? v : JSON.stringify(v);
    return s === undefined ? 'undefined' : s.length > 2000 ? `${s.slice(0, 2000)}... (${s.length} characters)` : s;
  };
  const path = r.op.path.replace(/\{([^}]+)\}/g, (_, n: string) => r.pathValues[n]?.raw ?? '');
  const query = r.query.map(([k, v]) => `${encode(k)}=${encode(v)}`).join('&');
  const lines = [
    `${r.transport.toUpperCase()} ${r.op.method} ${show(`/api/v1${path}${query ? `?${query}` : ''}`)} (procedure ${r.op.procedure}, key: ${r.key})`,
  ];
  if (r.body.kind === 'json') lines.push(`body (JSON): ${show(JSON.stringify(r.body.value))}`);
  if (r.body.kind === 'raw') lines.push(`body (${r.body.contentType ?? 'no content-type'}): ${show(JSON.stringify(r.body.text))}`);
  if (r.transport !== 'rest') lines.push(`procedure input: ${show(JSON.stringify(procedureInput(r)))}`);
  return lines.join('\n');
}

function checkErrorBody(status: number, text: string): string | null {
  if (status >= 500) return `answered ${status}`;
  if (/"stack"\s*:/.test(text)) return 'the body carries a stack trace';
  return null;
}

/** The document's path a request path reaches: of those it fits, the one literal furthest from the left. */
function templateOf(path: string): string | undefined {
  const fits = Object.keys(doc.paths).filter((p) => new RegExp(`^${p.replace(/\{[^}]+\}/g, '[^/]+')}$`).test(path));
  const rank = (p: string) =>
    p
      .split('/')
      .map((seg) => (seg.startsWith('{') ? '1' : '0'))
      .join('');
  return fits.sort((a, b) => rank(a).localeCompare(rank(b)))[0];
}

async function send(r: FuzzRequest): Promise<Outcome> {
  const headers: Record<string, string> = {};
  const key = keys[r.key];
  if (key) headers.authorization = `Bearer ${key}`;
  let url: string;
  let method = r.op.method;
  let body: string | undefined;
  if (r.transport === 'rest') {
    const path = r.op.path.replace(/\{([^}]+)\}/g, (_, n: string) => r.pathValues[n]?.raw ?? '');
    const query = r.query.map(([k, v]) => `${encode(k)}=${encode(v)}`).join('&');
    url = `${t.apiBase}${path}${query ? `?${query}` : ''}`;
    if (r.body.kind === 'json') {
      body = JSON.stringify(r.body.value);
      headers['content-type'] = 'application/json';
    } else if (r.body.kind === 'raw') {
      body = r.body.text;
      if (r.body.contentType) headers['content-type'] = r.body.contentType;
    }
    if (method === 'GET' || method === 'HEAD') body = undefined;
  } else if (r.transport === 'trpc') {
    const input = procedureInput(r);
    if (r.op.kind === 'query') {
      url = `${t.url}/trpc/${r.op.procedure}${input === undefined ? '' : `?input=${encode(JSON.stringify(input))}`}`;
      method = 'GET';
    } else {
      url = `${t.url}/trpc/${r.op.procedure}`;
      method = 'POST';
      body = input === undefined ? undefined : JSON.stringify(input);
      headers['content-type'] = 'application/json';
    }
  } else {
    url = `${t.url}/mcp`;
    method = 'POST';
    headers['content-type'] = 'application/json';
    headers.accept = 'application/json, text/event-stream';
    body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: r.op.tool, arguments: procedureInput(r) ?? {} } });
  }
  let res: Response;
  try {
    res = await fetch(url, { method, headers, body, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
  } catch (err) {
    return { status: 0, text: '', problem: `no answer: ${(err as Error).message}` };
  }
  const text = await res.text();
  let problem = checkErrorBody(res.status, text);
  if (!problem && res.status >= 400 && r.transport === 'rest') {
    let code: unknown;
    try {
      const parsed = JSON.parse(text) as { error?: { code?: unknown; request_id?: unknown } };
      if (typeof parsed.error?.code !== 'string' || typeof parsed.error.request_id !== 'string')
        problem = 'the error body is not {"error": {"code", "request_id", ...}}';
      code = parsed.error?.code;
    } catch {
      problem = 'the error body is not JSON';
    }
    // The document lists what each operation can answer: an error it does not list is a gap in it. A path
    // value such as "." or "%2e%2e" is a dot segment the URL drops, and "send" in /messages/{id} is the literal
    // route /messages/send: such a request reached another path, and is checked for its shape only.
    const documented = doc.paths[r.op.path]?.[r.op.method.toLowerCase()]?.responses?.[String(res.status)] as { 'x-error-codes'?: string[] } | undefined;
    const reached = templateOf(new URL(url).pathname.slice(new URL(t.apiBase).pathname.length)) === r.op.path;
    if (!problem && reached && !documented) problem = `answered ${res.status}, which the document does not list for ${r.op.method} ${r.op.path}`;
    else if (!problem && reached && !documented!['x-error-codes']?.includes(code as string)) {
      problem = `answered ${res.status} ${String(code)}, a code the document does not list for ${r.op.method} ${r.op.path} (${documented!['x-error-codes']?.join(', ')})`;
    }
  }
  // 431 comes from Node's HTTP parser, before tRPC: it has the REST error body, not tRPC's.
  if (!problem && r.transport === 'trpc' && res.status >= 400 && res.status !== 431) {
    const boxes = (JSON.parse(text) as { error?: { data?: { boxes?: { status?: number } } } }).error?.data?.boxes;
    if (!boxes || (boxes.status ?? 500) >= 500) problem = `tRPC error with boxes status ${boxes?.status}`;
  }
  if (!problem && r.transport === 'mcp' && res.status < 400 && res.status !== 431) {
    const rpc = JSON.parse(text) as { error?: { code: number; message: string }; result?: { isError?: boolean; content?: { text: string }[] } };
    if (rpc.error && rpc.error.code === -32603) problem = `JSON-RPC internal error: ${rpc.error.message}`;
    if (rpc.result?.isError) {
      const err = (() => {
        try {
          return JSON.parse(rpc.result.content?.[0]?.text ?? '{}').error as { code?: string } | undefined;
        } catch {
          return undefined;
        }
      })();
      if (err?.code === 'internal' || err?.code === 'service_unavailable') problem = `MCP tool error ${err.code}`;
    }
  }
  return { status: res.status, text, problem };
}

const tally = new Map<string, number>();

async function runPhase(seed: number, numRuns: number): Promise<void> {
  const failures: string[] = [];
  await fc
    .assert(
      fc.asyncProperty(gen.request(ops), async (r) => {
        const out = await send(r);
        const k = `${r.op.method} ${r.op.path} ${out.status}`;
        tally.set(k, (tally.get(k) ?? 0) + 1);
        if (out.problem) {
          const report = `${out.problem}\n${describeRequest(r)}\nresponse ${out.status}: ${out.text.slice(0, 1500)}`;
          failures.push(report);
          throw new Error(report);
        }
      }),
      { seed, numRuns, endOnFailure: !process.env.FUZZ_SHRINK, verbose: 0 },
    )
    .catch((err: Error) => {
      throw new Error(`fuzz failed with seed ${seed} (replay: FUZZ_SEED=${seed} FUZZ_RUNS=${numRuns} pnpm fuzz)\n${failures[0] ?? err.message}`);
    });
}

it(`answers ${RUNS} generated requests without a 5xx, and the event chain still verifies`, async () => {
  console.log(
    `fuzz: ${RUNS} requests over ${ops.length} operations; seeds ${REPLAY_SEED === null ? `${FIXED_SEED} (fixed) and ${RANDOM_SEED} (random)` : `${REPLAY_SEED} (FUZZ_SEED)`}`,
  );
  const started = Date.now();
  if (REPLAY_SEED !== null) await runPhase(REPLAY_SEED, RUNS);
  else {
    await runPhase(FIXED_SEED, Math.ceil(RUNS / 2));
    await runPhase(RANDOM_SEED, Math.floor(RUNS / 2));
  }
  const byStatus = new Map<number, number>();
  for (const [k, n] of tally) byStatus.set(Number(k.split(' ').pop()), (byStatus.get(Number(k.split(' ').pop())) ?? 0) + n);
  console.log(
    `fuzz: ${RUNS} requests in ${((Date.now() - started) / 1000).toFixed(1)} s; by status: ${[...byStatus]
      .sort((x, y) => x[0] - y[0])
      .map(([s, n]) => `${s}: ${n}`)
      .join(', ')}`,
  );
  const untouched = ops.filter((op) => ![...tally.keys()].some((k) => k.startsWith(`${op.method} ${op.path} `)));
  if (RUNS >= 1000) expect(untouched.map((op) => `${op.method} ${op.path}`)).toEqual([]);

  const verify = await rest(t, 'GET', '/events/verify', { key: a.apiKey });
  expect(verify.status).toBe(200);
  expect(verify.body.ok, JSON.stringify(verify.body)).toBe(true);
}, 3_600_000);
