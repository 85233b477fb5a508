// Discovery and versioning: /.well-known/agentic.json and every URL in it,
// /skill.md with this instance's addresses and its shell examples run as pasted, every route family of the router
// in both, MCP_URL, and platform.updated when the API version changes.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { API_VERSION, routeFamilies } from '@boxes/api';
import { announcePlatformVersion } from '@boxes/core';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { boxesSignatureMatches, verifyStripe, waitFor } from './push-helpers';
import { exec, k, sql } from '@boxes/db';

let t: TestServer;
let a: TestAccount;
beforeAll(async () => {
  t = await startTestServer({ worker: true, mail: true });
  a = await signupAccount(t);
});
afterAll(() => t?.stop());

const SKILL_TEMPLATE = fs.readFileSync(path.resolve(import.meta.dirname, '../../SKILL.md'), 'utf8');

async function manifest(server: TestServer): Promise<any> {
  const r = await fetch(`${server.url}/.well-known/agentic.json`);
  expect(r.status).toBe(200);
  expect(r.headers.get('content-type')).toMatch(/^application\/json/);
  return r.json();
}

/** Every http(s) URL anywhere in a JSON value, with its JSON path. */
function urlsIn(value: unknown, at = ''): { at: string; url: string }[] {
  if (typeof value === 'string') return /^https?:\/\//.test(value) ? [{ at, url: value }] : [];
  if (Array.isArray(value)) return value.flatMap((v, i) => urlsIn(v, `${at}[${i}]`));
  if (value && typeof value === 'object') return Object.entries(value).flatMap(([k, v]) => urlsIn(v, at ? `${at}.${k}` : k));
  return [];
}

describe('GET /.well-known/agentic.json', () => {
  it('has skills, openapi_url, mcp.url, signup, pricing, version and skill_url, all on this server', async () => {
    const m = await manifest(t);
    expect(m.version).toBe(API_VERSION);
    expect(m.api_base_url).toBe(t.apiBase);
    expect(m.openapi_url).toBe(`${t.url}/openapi.json`);
    expect(m.skill_url).toBe(`${t.url}/skill.md`);
    expect(m.mcp).toMatchObject({ url: `${t.url}/mcp`, transport: 'streamable-http' });
    expect(m.signup).toMatchObject({
      url: `${t.apiBase}/signup/agentic`,
      confirm_url: `${t.apiBase}/signup/agentic/confirm`,
      claim_url: `${t.apiBase}/signup/agentic/claim`,
    });
    expect(m.signup.modes).toEqual(['subdomain', 'register', 'byo_manual', 'byo_delegated']);
    // What a registration costs, and who registers it.
    expect(m.signup.register.registrar).toBe(t.svc.registrar.label);
    expect(m.signup.register.price_cents_per_year_by_tld).toMatchObject({ xyz: 600, com: 1200 });
    expect(m.signup.register.name_service_per_month_usd).toBe(m.pricing.registered_domain_name_service_per_month_usd);
    expect(m.signup.funded.min_initial_credit_cents).toBe(100);
    // Mail clients: this instance's host and ports.
    expect(m.mail_clients).toMatchObject({
      imap: { host: t.config.mailHost, port: t.imapPort, security: 'implicit TLS' },
      smtp_submission: { host: t.config.mailHost, port: t.submissionPort, security: 'implicit TLS' },
    });
    expect(m.pricing).toMatchObject({ currency: 'USD', free_messages: 250 });
    expect(m.support.email).toBeNull();
    expect(m.skills.map((s: { name: string }) => s.name)).toEqual(expect.arrayContaining(['signup', 'send', 'receive', 'support']));
    for (const s of m.skills) {
      expect(s.description.length, s.name).toBeGreaterThan(0);
      expect(s.operations.length, s.name).toBeGreaterThan(0);
    }
  });

  it('every URL in it resolves with 200 on the server', async () => {
    const m = await manifest(t);
    const checked = new Set<string>();
    const ok = async (url: string, init: RequestInit = {}, what = url) => {
      const r = await fetch(url, init);
      expect(r.status, `${what}: ${await r.clone().text()}`).toBe(200);
      checked.add(url);
      return r;
    };
    const auth = { authorization: `Bearer ${a.apiKey}` };

    // Documents: no key needed.
    const docs = [
      m.openapi_url,
      m.openapi_yaml_url,
      m.docs_url,
      m.guide_url,
      m.skill_url,
      ...m.skills.map((s: { skill_url?: string }) => s.skill_url).filter(Boolean),
    ];
    for (const url of docs) await ok(url);
    // Calls a key reads.
    for (const url of [m.events.poll, m.support.questions, m.support.feature_requests, m.mcp.management]) await ok(url, { headers: auth });
    // The event stream answers 200 with text/event-stream and stays open: read its first bytes, then let go.
    const stream = await fetch(m.events.stream, { headers: auth });
    expect(stream.status).toBe(200);
    expect(stream.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const reader = stream.body!.getReader();
    expect((await reader.read()).done).toBe(false);
    await reader.cancel();
    checked.add(m.events.stream);
    // The API base is the prefix of them all; tRPC answers a procedure under its URL.
    expect(m.events.poll.startsWith(`${m.api_base_url}/`)).toBe(true);
    checked.add(m.api_base_url);
    await ok(`${m.trpc_url}/mcp.status`, { headers: auth });
    checked.add(m.trpc_url);
    // Signup: the example body, then confirm.
    const intent = (await (
      await ok(m.signup.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(m.signup.example) })
    ).json()) as { intent_id: string };
    const done = (await (
      await ok(m.signup.confirm_url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ intent_id: intent.intent_id }) })
    ).json()) as { api_key: string };
    // The claim is for funded and register signups: this one has none, so it is not found (and says so in JSON).
    const claim = await fetch(m.signup.claim_url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ intent_id: intent.intent_id, claim_secret: 'bxs_claim_x' }),
    });
    expect(claim.status).toBe(404);
    expect(((await claim.json()) as { error: { code: string } }).error.code).toBe('not_found');
    checked.add(m.signup.claim_url);
    // MCP: an MCP client with the new key connects and lists tools.
    const client = new Client({ name: 'discovery', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(m.mcp.url), { requestInit: { headers: { authorization: `Bearer ${done.api_key}` } } }));
    expect((await client.listTools()).tools.map((x) => x.name)).toContain('messages_send');
    await client.close();
    checked.add(m.mcp.url);

    const all = urlsIn(m);
    expect(all.length).toBeGreaterThan(10);
    expect(
      all.filter((u) => !checked.has(u.url)),
      'every URL in the manifest was exercised',
    ).toEqual([]);
    for (const u of all) expect(u.url.startsWith(t.url), `${u.at} is on this server`).toBe(true);
  });

  it('MCP_URL moves mcp.url (the endpoint is <MCP_URL>/mcp)', async () => {
    const other = await startTestServer({ env: { MCP_URL: 'https://mcp.boxes.example/' } });
    try {
      const m = await manifest(other);
      expect(m.mcp.url).toBe('https://mcp.boxes.example/mcp');
      // The rest still points at the site.
      expect(m.openapi_url).toBe(`${other.url}/openapi.json`);
      expect(m.skill_url).toBe(`${other.url}/skill.md`);
      expect(await (await fetch(m.skill_url)).text()).toContain('`https://mcp.boxes.example/mcp`');
    } finally {
      await other.stop();
    }
    // Without it, mcp.url is on the site.
    expect((await manifest(t)).mcp.url).toBe(`${t.url}/mcp`);
  });
});

describe('every route family', () => {
  it('appears in the manifest (all its operations) and in a curated skill; every curated operation exists', async () => {
    const m = await manifest(t);
    const doc = (await (await fetch(m.openapi_url)).json()) as { paths: Record<string, Record<string, unknown>> };
    const documented = Object.entries(doc.paths)
      .flatMap(([p, ops]) => Object.keys(ops).map((method) => `${method.toUpperCase()} ${p}`))
      .sort();
    const families = routeFamilies().map((f) => f.name);
    expect(families.length).toBeGreaterThanOrEqual(15);
    expect(m.route_families.map((f: { name: string }) => f.name)).toEqual(families);
    expect(m.route_families.flatMap((f: { operations: string[] }) => f.operations).sort()).toEqual(documented);
    const curated = new Set<string>(m.skills.flatMap((s: { operations: string[] }) => s.operations));
    for (const op of curated) expect(documented, `skill operation ${op}`).toContain(op);
    for (const f of m.route_families as { name: string; operations: string[] }[]) {
      expect(
        f.operations.some((op) => curated.has(op)),
        `family ${f.name} has a skill`,
      ).toBe(true);
    }
  });

  it('appears in the served skill, each operation of it listed', async () => {
    const served = await (await fetch(`${t.url}/skill.md`)).text();
    const listed = served.slice(served.indexOf('## Every endpoint'));
    for (const f of routeFamilies()) {
      expect(listed, f.name).toContain(`### ${f.name}\n`);
      for (const o of f.operations) expect(listed, `${f.name}: ${o.method} ${o.path}`).toContain(`\`${o.method} ${o.path}\``);
    }
  });
});

describe('GET /skill.md', () => {
  it("serves SKILL.md as markdown, with this instance's URLs and mail-client ports filled in", async () => {
    const r = await fetch(`${t.url}/skill.md`);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/markdown/);
    const served = await r.text();
    // The repository file is the template; nothing of it is served unfilled.
    expect(SKILL_TEMPLATE).toContain('{{api_base_url}}');
    expect(served).not.toMatch(/\{\{\s*[a-z_]+\s*\}\}|<site>|localhost:3000/);
    expect(served).toContain(`BASE=${t.apiBase}\n`);
    expect(served).toContain(`\`${t.url}/mcp\``);
    // The mail-client listeners of this instance (on ephemeral ports here), not the production defaults.
    expect(t.imapPort).toBeGreaterThan(0);
    expect(t.config.mailClients.imapPort).toBe(t.imapPort);
    expect(served).toContain(`${t.config.mailHost}:${t.imapPort}`);
    expect(served).toContain(`${t.config.mailHost}:${t.submissionPort}`);
    expect(served).toContain(`${t.url}/.well-known/agentic.json`);
    // What an agent needs to find on its own: registering a domain, claiming a paid signup, moving, the zone.
    expect(served).toContain('"mode":"register"');
    expect(served).toContain('POST $BASE/signup/agentic/claim');
    expect(served).toContain('POST $BASE/account/domain\n');
    expect(served).toContain('$BASE/domain/dns');
  });

  it('its sh examples, run in order with bash, sign up, send, receive, sign and verify', async () => {
    const served = await (await fetch(`${t.url}/skill.md`)).text();
    const blocks = [...served.matchAll(/```sh\n([\s\S]*?)```/g)].map((x) => x[1]!);
    expect(blocks.length).toBe(7);
    // Run as served: the base is this instance's.
    expect(blocks[0]).toContain(`BASE=${t.apiBase}\n`);
    const kinds = [
      '/signup/agentic/confirm',
      '/messages/send',
      '/events?type=mail.received',
      '/labels',
      '/account/webhook',
      '/account/credit/balance',
      '/events/verify',
    ];
    kinds.forEach((k, i) => {
      expect(blocks[i], `block ${i} is the ${k} example`).toContain(k);
    });

    const marker = (i: number) => `@@BOXES-BLOCK-${i}@@`;
    const script = [
      ...blocks.map((b, i) => `${b}\nprintf '\\n${marker(i)}\\n'`),
      // For polling the receive block again below, and for checking the signature.
      'printf "%s\\n" "KEY=$KEY"',
    ].join('\n');
    // Asynchronously: the server answering the script runs in this process.
    const { stdout } = await promisify(execFile)('bash', ['-euo', 'pipefail', '-c', script], { encoding: 'utf8', timeout: 25_000 });
    const outputs: string[] = [];
    let rest_ = stdout;
    for (let i = 0; i < blocks.length; i++) {
      const at = rest_.indexOf(`\n${marker(i)}\n`);
      expect(at, `output of block ${i}`).toBeGreaterThanOrEqual(0);
      outputs.push(rest_.slice(0, at).trim());
      rest_ = rest_.slice(at + marker(i).length + 2);
    }
    const key = /^KEY=(\S+)$/m.exec(rest_)?.[1];
    expect(key).toMatch(/^bxs_live_/);

    // Sign up: prints the new address.
    const me = outputs[0]!;
    expect(me).toMatch(new RegExp(`^agent@[a-z0-9-]+\\.${t.config.baseDomain.replace(/\./g, '\\.')}$`));
    const account = await t.db.account.findFirst({ where: { primaryAddress: me } });
    expect(account?.status).toBe('active');

    // Send: queued, with the context kept.
    const sent = JSON.parse(outputs[1]!);
    expect(sent, outputs[1]).toMatchObject({ status: 'queued', from: me, recipients: [me] });

    // Receive: the events and the messages include the mail just sent. The skill says to poll; if the worker had
    // not delivered it by the block's `sleep 1`, poll again with the same block (bounded).
    const parseReceive = (out: string) => {
      const at = out.indexOf('}{"messages"') + 1;
      expect(at, out).toBeGreaterThan(0);
      return { events: JSON.parse(out.slice(0, at)).events as any[], messages: JSON.parse(out.slice(at)).messages as any[] };
    };
    let received = parseReceive(outputs[2]!);
    if (!received.messages.length) {
      received = await waitFor('the receive block to show the message', async () => {
        const { stdout: again } = await promisify(execFile)('bash', ['-euo', 'pipefail', '-c', `BASE=${t.apiBase}\nKEY=${key}\n${blocks[2]}`], {
          encoding: 'utf8',
          timeout: 10_000,
        });
        const r = parseReceive(again.trim());
        return r.messages.length && r.events.length ? r : null;
      });
    }
    expect(received.events.map((e) => e.type)).toEqual(['mail.received']);
    expect(received.messages).toHaveLength(1);
    expect(received.messages[0]).toMatchObject({ direction: 'received', subject: 'hello', from: me });
    expect(received.messages[0].body.text).toContain('sent by an agent');
    expect(received.events[0].data.message_id ?? received.events[0].data.message?.id).toBe(received.messages[0].id);

    // Labels: the newest message is labelled, and the label filter finds it.
    const [labelled, listed] = outputs[3]!.split('\n').map((l) => JSON.parse(l));
    expect(labelled.labels, outputs[3]).toEqual(expect.arrayContaining(['flagged', 'invoices']));
    expect(labelled.labels).not.toContain('unread');
    expect(listed.messages.map((m: { id: string }) => m.id)).toEqual([labelled.id]);

    // Webhook signature: the header the recipe prints verifies with the account's signing secret, by hand and
    // with stripe's verifier.
    const header = /^X-Boxes-Signature: (t=\d+,v1=[0-9a-f]{64})$/.exec(outputs[4]!)?.[1];
    expect(header, outputs[4]).toBeDefined();
    const secret = (await rest(t, 'GET', '/account/webhook', { key })).body.signing_secret;
    const delivery = { body: '{"id":"evt_example"}', headers: { 'x-boxes-signature': header! } };
    expect(boxesSignatureMatches(delivery, secret)).toBe(true);
    expect(verifyStripe(delivery, secret).id).toBe('evt_example');

    // Credit: the balance of a new account, with the free messages less the one just sent (and received).
    expect(JSON.parse(outputs[5]!)).toMatchObject({ credit_balance_cents: 0, balance_state: 'ok', low_balance: false, trailer: { status: 'on' } });

    // Verify the event log: ok true.
    expect(JSON.parse(outputs[6]!)).toMatchObject({ ok: true });
  });
});

describe('platform.updated', () => {
  it('a new API version is announced once to every account, with the OpenAPI and skill URLs; announcing again appends nothing', async () => {
    const b = await signupAccount(t);
    const c = await signupAccount(t);
    // The start recorded the running version.
    expect((await t.db.platformSetting.findUnique({ where: { key: 'api_version' } }))?.value).toBe(API_VERSION);
    const counts = async () => {
      const rows = await t.db.event.groupBy({ by: ['accountId'], where: { type: 'platform.updated' }, _count: { _all: true } });
      return new Map(rows.map((r) => [r.accountId, r._count._all]));
    };
    expect((await counts()).size).toBe(0);

    // As if the last start had run an older version: this start (announcePlatformVersion is what a start calls)
    // tells every account.
    await exec(
      t.db,
      k
        .updateTable('platform_settings')
        .set({ value: sql.lit('0.0.0') })
        .where('key', '=', sql.lit('api_version')),
    );
    const accountIds = (await t.db.account.findMany({ select: { id: true } })).map((x) => x.id).sort();
    expect(accountIds.length).toBeGreaterThanOrEqual(3);
    const first = await announcePlatformVersion(t.svc, API_VERSION);
    expect(first).toEqual({ announced: true, accounts: accountIds.length });
    const after = await counts();
    expect([...after.keys()].sort()).toEqual(accountIds);
    for (const id of accountIds) expect(after.get(id), id).toBe(1);
    expect((await t.db.platformSetting.findUnique({ where: { key: 'api_version' } }))?.value).toBe(API_VERSION);

    for (const acct of [a, b, c]) {
      const r = await rest(t, 'GET', '/events?type=platform.updated', { key: acct.apiKey });
      expect(r.status).toBe(200);
      expect(r.body.events).toHaveLength(1);
      expect(r.body.events[0].data).toMatchObject({
        version: API_VERSION,
        previous_version: '0.0.0',
        openapi_url: `${t.url}/openapi.json`,
        skill_url: `${t.url}/skill.md`,
      });
    }
    // The URLs it carries resolve, and the OpenAPI document it points to is the announced version.
    const data = (await rest(t, 'GET', '/events?type=platform.updated', { key: a.apiKey })).body.events[0].data;
    const spec = await fetch(data.openapi_url);
    expect(spec.status).toBe(200);
    expect(((await spec.json()) as { info: { version: string } }).info.version).toBe(API_VERSION);
    expect((await fetch(data.skill_url)).status).toBe(200);

    // Again (another start, or a second instance starting at once): nothing more.
    expect(await announcePlatformVersion(t.svc, API_VERSION)).toEqual({ announced: false, accounts: 0 });
    expect(await counts()).toEqual(after);
    // The chain stays intact.
    expect((await rest(t, 'GET', '/events/verify', { key: a.apiKey })).body).toMatchObject({ ok: true });
  });
});
