// The README's first curl blocks must work as pasted: run them with bash and curl against a real server; and the
// guide pages that build on them (MCP, mail clients) as the README points to them.
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { procedureTools } from '@boxes/api';
import { createTestDatabase, startTestServer, waitFor, type TestServer } from '@boxes/testing';

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer({ worker: true });
});
afterAll(() => t?.stop());

const root = path.resolve(import.meta.dirname, '../..');
const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');
const shBlocks = (md: string) => [...md.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!);
const blocks = shBlocks(readme);
const signupBlock = blocks.find((b) => b.includes('/signup/agentic/confirm'));
const sendBlock = blocks.find((b) => b.includes('/messages/send'));
/** A guide page the README links to (the link must be there), and its text. */
const linkedGuide = (file: string): string => {
  expect(readme, `the README links ${file}`).toContain(`](${file})`);
  return fs.readFileSync(path.join(root, file), 'utf8');
};

// Asynchronously: the server answering the script runs in this process.
const bash = async (script: string) => (await promisify(execFile)('bash', ['-euo', 'pipefail', '-c', script], { encoding: 'utf8', timeout: 30_000 })).stdout;

it('the signup -> confirm -> GET /events block works as pasted', async () => {
  expect(signupBlock, 'README has a curl block that confirms a signup').toBeDefined();
  expect(signupBlock).toContain('BASE=http://localhost:3000/api/v1');
  const out = await bash(signupBlock!.replace('BASE=http://localhost:3000/api/v1', `BASE=${t.apiBase}`));
  const body = JSON.parse(out);
  expect(body.events.map((e: { type: string }) => e.type)).toEqual(['signup.completed', 'domain.ready', 'box.created', 'api_key.created']);
  expect(body.events[0].data.primary_address).toMatch(/^agent@[a-z]+-[a-z]+\.boxes\.localhost$/);
});

it('the first send block, run after it, delivers the message to the new account itself', async () => {
  expect(sendBlock, 'README has a curl block that sends a message').toBeDefined();
  const script = `${signupBlock!.trimEnd().replace('BASE=http://localhost:3000/api/v1', `BASE=${t.apiBase}`)} >/dev/null\n${sendBlock}`;
  const out = await bash(script);
  // The send's response, then the list of received messages (curl prints no newline between them).
  const at = out.indexOf('}{"messages"') + 1;
  expect(at, out).toBeGreaterThan(0);
  const sent = JSON.parse(out.slice(0, at));
  const list = JSON.parse(out.slice(at));
  expect(sent.status).toBe('queued');
  expect(list.messages).toHaveLength(1);
  expect(list.messages[0]).toMatchObject({ direction: 'received', subject: 'hello' });
  expect(list.messages[0].body.text).toContain('first mail');
});

it('the install block is the two commands, and `pnpm start` on a fresh database serves the README blocks', async () => {
  // The first block: the install script, then pnpm start (the script itself runs in CI: .ci/run uses it).
  expect(blocks[0]).toBe('bash scripts/install.sh\npnpm start\n');
  const pkg = JSON.parse(fs.readFileSync(path.resolve(import.meta.dirname, '../../package.json'), 'utf8'));
  expect(pkg.engines.node).toMatch(/^>=24/);
  const db = await createTestDatabase();
  const repoRoot = path.resolve(import.meta.dirname, '../..');
  // Ephemeral ports for every listener, this run's own database (created and migrated by the start) and Redis prefix.
  const child = spawn('pnpm', ['start'], {
    cwd: repoRoot,
    env: {
      ...process.env,
      PORT: '0',
      SMTP_PORT: '0',
      MQTT_PORT: '0',
      DNS_PORT: '0',
      DATABASE_URL: db.url,
      REDIS_PREFIX: `boxes-readme-${Date.now()}`,
      BOXES_SECRET_KEY: 'ab'.repeat(32),
      SIGNUP_RATE_LIMIT_PER_HOUR: '0',
      LOG_LEVEL: 'error',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  try {
    const url = await waitFor('pnpm start to print its address', () => /Listening on\s+(http:\/\/\S+)/.exec(out)?.[1], 60_000);
    expect(out).toContain('Boxes is running (one process, supervised');
    // Where an agent learns the service and where MCP clients connect, printed with the real address.
    expect(out).toContain(`Agent skill:  ${url}/skill.md\n`);
    expect(out).toContain(`MCP:          ${url}/mcp (Streamable HTTP; Authorization: Bearer <api_key>)\n`);
    expect((await fetch(`${url}/skill.md`)).status).toBe(200);
    const mcp = await fetch(`${url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: '{}',
    });
    expect(mcp.status).toBe(401);
    expect(((await mcp.json()) as { error: { getting_started?: unknown } }).error.getting_started).toBeDefined();
    const script = `${signupBlock!.trimEnd().replace('BASE=http://localhost:3000/api/v1', `BASE=${url}/api/v1`)} >/dev/null\n${sendBlock}`;
    const result = await bash(script);
    expect(result).toContain('"subject":"hello"');
  } finally {
    // pnpm runs the service as its child: stop the whole group the way Ctrl-C would.
    try {
      process.kill(-child.pid!, 'SIGINT');
    } catch {
      /* already gone */
    }
    await new Promise((r) => child.once('exit', r));
    await db.drop();
  }
}, 120_000);

it('the MCP guide the README links: the endpoint, the Bearer key, how to connect, and tool names that exist', () => {
  const section = linkedGuide('docs/guide/mcp.md');
  expect(section).toMatch(/^# MCP$/m);
  expect(section).toContain('/mcp');
  expect(section).toContain('Authorization: Bearer');
  expect(section).toContain('StreamableHTTPClientTransport');
  const tools = new Set(procedureTools().map((x) => x.name));
  const named = [...section.matchAll(/`([a-z]+(?:_[a-z]+)+)`/g)].map((m) => m[1]!).filter((n) => !n.startsWith('mcp_') && !n.startsWith('account_'));
  expect(named.length).toBeGreaterThan(0);
  for (const n of named) expect(tools.has(n), `tool ${n}`).toBe(true);
});

it('the mail-client block pins the certificate, makes an app-password and syncs the mail with mbsync, as pasted', async () => {
  const mbsyncBlock = shBlocks(linkedGuide('docs/guide/mail-clients.md')).find((b) => b.includes('mbsync -c'));
  expect(mbsyncBlock, 'the mail-client guide has a block that syncs with mbsync').toBeDefined();
  const mail = await startTestServer({ worker: true, mail: true });
  const cwd = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-readme-mbsync-'));
  try {
    const script = `${signupBlock!.trimEnd().replace('BASE=http://localhost:3000/api/v1', `BASE=${mail.apiBase}`)} >/dev/null\n${sendBlock!.trimEnd()} >/dev/null\n${mbsyncBlock}`;
    const { stdout } = await promisify(execFile)('bash', ['-euo', 'pipefail', '-c', script], { cwd, encoding: 'utf8', timeout: 60_000 });
    // The message the send block mailed to the account itself is now a file of the local INBOX.
    const inbox = ['cur', 'new'].flatMap((d) => fs.readdirSync(path.join(cwd, 'boxes-mail/INBOX', d)).map((f) => path.join(cwd, 'boxes-mail/INBOX', d, f)));
    expect(inbox.length, stdout).toBe(1);
    expect(fs.readFileSync(inbox[0]!, 'utf8')).toMatch(/^Subject: hello\r?$/m);
    expect(fs.readFileSync(path.join(cwd, 'boxes-mail.pem'), 'utf8')).toMatch(/^-----BEGIN CERTIFICATE-----/);
  } finally {
    fs.rmSync(cwd, { recursive: true, force: true });
    await mail.stop();
  }
}, 120_000);
