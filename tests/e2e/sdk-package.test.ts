/**
 * The SDK outside this repo: packed from a clean folder (pnpm pack builds it first, through prepack, and honours
 * publishConfig: dist/), installed from the tarball with npm into a scratch project in the system's temp folder,
 * where it pulls no workspace or server package; an agent script typechecks with tsc --strict under the plain
 * Node tsconfig the SDK guide gives (docs/guide/sdk.md: no DOM lib), and under one with the DOM lib, while one with a wrong field fails
 * to; then it runs with node against a live instance.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '@boxes/testing';

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '../..');
/** The compiler options the SDK guide gives a plain Node project (no DOM lib), as written there. */
const NODE_TSCONFIG: Record<string, unknown> = {
  ...JSON.parse(/## Outside this repo[\s\S]*?```json\n([\s\S]*?)```/.exec(fs.readFileSync(path.join(root, 'docs/guide/sdk.md'), 'utf8'))![1]!),
  noEmit: true,
};
const tsc = path.join(root, 'node_modules/.bin/tsc');
let t: TestServer;
let scratch: string;

beforeAll(async () => {
  // The worker reads attachments' text (the attachment script below).
  t = await startTestServer({ worker: true });
  scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-agent-'));
  // No build beforehand: packing must build (a pack of a clean checkout once held only package.json).
  fs.rmSync(path.join(root, 'packages/sdk/dist'), { recursive: true, force: true });
  await run('pnpm', ['--filter', '@boxes/sdk', 'pack', '--pack-destination', scratch], { cwd: root, timeout: 180_000 });
  const tarball = fs.readdirSync(scratch).find((f) => f.endsWith('.tgz'))!;
  fs.writeFileSync(path.join(scratch, 'package.json'), JSON.stringify({ name: 'an-agent', private: true, type: 'module' }));
  fs.writeFileSync(path.join(scratch, 'tsconfig.json'), JSON.stringify({ compilerOptions: NODE_TSCONFIG }));
  // The agent's project: the SDK from the tarball, and Node's types (an agent script uses process).
  await run('npm', ['install', `./${tarball}`, '@types/node@24', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: scratch, timeout: 180_000 });
}, 300_000);
afterAll(async () => {
  await t?.stop();
  if (scratch) fs.rmSync(scratch, { recursive: true, force: true });
});

const AGENT = `import { BoxesError, confirmSignup, createBoxesClient, signup, streamEvents, verifyWebhook } from '@boxes/sdk';

const base = process.argv[2]!;
const intent = await signup(base, { human_email: 'agent-owner@example.com', domain_intent: { mode: 'subdomain' } });
const account = await confirmSignup(base, { intent_id: intent.intent_id });
const boxes = createBoxesClient({ baseUrl: base, apiKey: account.api_key });
const box = await boxes.boxes.create.mutate({ address: 'billing' });
const { events } = await boxes.events.list.query({ limit: 50 });
// Query numbers are numbers to the SDK (REST reads them from the query string; tRPC sends JSON).
const page: Parameters<typeof boxes.threads.list.query>[0] = { limit: 5 };
// Labels: counts of the system labels and of the account's own.
const { labels } = await boxes.labels.list.query({});
const sent: number | undefined = labels.find((l) => l.kind === 'system' && l.name === 'sent')?.messages;
let code = '';
try {
  await boxes.boxes.create.mutate({ address: 'billing' });
} catch (err) {
  if (err instanceof BoxesError) code = err.code + ' ' + err.status;
}
const types: string[] = events.map((e) => e.type);
// Narrowing on type types the payload (the event catalogue).
const created: string[] = [];
for (const e of events) if (e.type === 'box.created') created.push(e.data.box.address);
const streamed: string[] = [];
for await (const e of streamEvents({ baseUrl: base, apiKey: account.api_key })) {
  streamed.push(e.type);
  if (e.type === 'box.created' && e.data.box.local_part === 'billing') break;
}
// A webhook receiver: verifyWebhook returns the same union.
function onWebhook(raw: string, signature: string, secret: string): string | null {
  const e = verifyWebhook(raw, signature, secret);
  if (e.type === 'mail.received') return e.data.message.subject;
  return null;
}
console.log(JSON.stringify({ page: page.limit, sent, address: box.address, primary: account.primary_address, types, created, streamed, code, verify: typeof onWebhook }));
`;

it('installs from the tarball without workspace or server packages', () => {
  const modules = path.join(scratch, 'node_modules');
  const scoped = fs.readdirSync(path.join(modules, '@boxes'));
  expect(scoped).toEqual(['sdk']);
  for (const server of ['@prisma', 'prisma', 'bullmq', 'pg', 'ioredis', 'nodemailer', 'zod', 'hono']) {
    expect(fs.existsSync(path.join(modules, server)), server).toBe(false);
  }
  const pkg = JSON.parse(fs.readFileSync(path.join(modules, '@boxes/sdk/package.json'), 'utf8'));
  expect(pkg.exports['.'].types).toBe('./dist/index.d.ts');
  for (const f of fs.readdirSync(path.join(modules, '@boxes/sdk/dist')).filter((x) => x.endsWith('.d.ts'))) {
    expect(fs.readFileSync(path.join(modules, '@boxes/sdk/dist', f), 'utf8')).not.toMatch(/from ['"]@boxes\/(?!sdk)|import\(['"]@boxes\//);
  }
});

it('an agent script typechecks with tsc --strict; a wrong field or a wrong output property does not', async () => {
  fs.writeFileSync(path.join(scratch, 'agent.ts'), AGENT);
  await run(tsc, ['-p', 'tsconfig.json'], { cwd: scratch, timeout: 120_000 });
  for (const [name, wrong] of [
    ['wrong-input.ts', AGENT.replace("{ address: 'billing' }", "{ adress: 'billing' }")],
    ['wrong-output.ts', AGENT.replace('box.address', 'box.addres')],
    ['wrong-type.ts', AGENT.replace("{ address: 'billing' }", '{ address: 42 }')],
    ['wrong-enum.ts', AGENT.replace("mode: 'subdomain'", "mode: 'subdomian'")],
    ['wrong-event-field.ts', AGENT.replace('e.data.box.address', 'e.data.box.adress')],
    ['wrong-event-narrowing.ts', AGENT.replace("if (e.type === 'box.created') created.push", "if (e.type === 'box.deleted') created.push")],
    ['wrong-webhook-field.ts', AGENT.replace('e.data.message.subject', 'e.data.message.subjet')],
    ['wrong-event-type.ts', AGENT.replace("e.type === 'mail.received'", "e.type === 'mail.recieved'")],
    ['wrong-limit.ts', AGENT.replace('{ limit: 5 }', "{ limit: '5' }")],
    ['wrong-label-kind.ts', AGENT.replace("l.kind === 'system'", "l.kind === 'sytem'")],
  ] as const) {
    fs.rmSync(path.join(scratch, 'agent.ts'));
    fs.writeFileSync(path.join(scratch, name), wrong);
    const failed = await run(tsc, ['-p', 'tsconfig.json'], { cwd: scratch, timeout: 120_000 }).then(
      () => null,
      (err: { stdout?: string }) => err.stdout ?? 'failed',
    );
    expect(failed, `${name} should not compile`).not.toBeNull();
    expect(failed).toMatch(/error TS\d+/);
    fs.rmSync(path.join(scratch, name));
    fs.writeFileSync(path.join(scratch, 'agent.ts'), AGENT);
  }
}, 300_000);

it('the SDK needs no DOM: its own declarations check without skipLibCheck, and a project with the DOM lib checks too', async () => {
  fs.writeFileSync(path.join(scratch, 'agent.ts'), AGENT);
  const check = (options: Record<string, unknown>) => {
    fs.writeFileSync(path.join(scratch, 'tsconfig.check.json'), JSON.stringify({ compilerOptions: options, files: ['agent.ts'] }));
    return run(tsc, ['-p', 'tsconfig.check.json'], { cwd: scratch, timeout: 120_000 }).then(
      () => '',
      (err: { stdout?: string }) => err.stdout ?? 'failed',
    );
  };
  // Every declaration checked: the one name a Node project lacks is DOM's RequestInfo, in @trpc/client's own.
  const strict = await check({ ...NODE_TSCONFIG, skipLibCheck: false });
  const errors = strict.split('\n').filter((l) => /error TS/.test(l));
  expect(
    errors.filter((l) => !l.startsWith('node_modules/@trpc/client/')),
    strict,
  ).toEqual([]);
  // A project with the DOM lib (TypeScript's default) needs no skipLibCheck at all.
  const { lib: _lib, skipLibCheck: _skip, ...withDefaultLib } = NODE_TSCONFIG;
  expect(await check(withDefaultLib)).toBe('');
  fs.rmSync(path.join(scratch, 'tsconfig.check.json'));
}, 300_000);

it('the agent script runs with node against a live instance', async () => {
  fs.writeFileSync(path.join(scratch, 'agent.ts'), AGENT);
  const { stdout } = await run(process.execPath, ['agent.ts', t.url], { cwd: scratch, timeout: 60_000 });
  const out = JSON.parse(stdout.trim().split('\n').at(-1)!);
  expect(out.address).toMatch(/^billing@/);
  expect(out.primary).toMatch(/^agent@/);
  expect(out.types).toEqual(expect.arrayContaining(['signup.completed', 'box.created']));
  expect(out.code).toBe('box_exists 409');
  expect(out.sent).toBe(0);
  // The SSE stream through the SDK's async iterator: the same events, in order.
  expect(out.streamed).toEqual(out.types.slice(0, out.streamed.length));
  expect(out.streamed.at(-1)).toBe('box.created');
  expect(out.created).toEqual([out.address.replace(/^billing@/, 'agent@'), out.address]);
  expect(out.verify).toBe('function');
}, 120_000);

/** An agent with a file: sends it to itself, waits for its text, downloads it over the signed URL (no key). */
const ATTACHMENT_AGENT = `import { confirmSignup, createBoxesClient, downloadAttachment, sentMessage, signup, waitForAttachmentText } from '@boxes/sdk';

const base = process.argv[2]!;
const intent = await signup(base, { human_email: 'files-owner@example.com', domain_intent: { mode: 'subdomain' } });
const account = await confirmSignup(base, { intent_id: intent.intent_id });
const client = createBoxesClient({ baseUrl: base, apiKey: account.api_key });
const csv = 'sku,qty\\nwidget-7,3\\n';
const sent = sentMessage(await client.messages.send.mutate({
  to: account.primary_address,
  text: 'stock attached',
  attachments: [{ filename: 'stock.csv', content_type: 'text/csv', content_b64: Buffer.from(csv).toString('base64') }],
}));
const message = await client.messages.get.query({ id: sent.message_id });
const attachment = message.body!.attachments[0]!;
const text = await waitForAttachmentText(client, sent.message_id, attachment.id, { timeoutMs: 60_000 });
const file = await downloadAttachment(client, sent.message_id, attachment.id);
console.log(JSON.stringify({ id: attachment.id, status: text.text_status, text: text.text, bytes: Buffer.from(file.bytes).toString(), type: file.contentType }));
`;

it('attachments through the packed SDK: the text once the worker read it, the bytes over the signed URL', async () => {
  fs.writeFileSync(path.join(scratch, 'files.ts'), ATTACHMENT_AGENT);
  await run(tsc, ['-p', 'tsconfig.json'], { cwd: scratch, timeout: 120_000 });
  const { stdout } = await run(process.execPath, ['files.ts', t.url], { cwd: scratch, timeout: 90_000 });
  const out = JSON.parse(stdout.trim().split('\n').at(-1)!);
  expect(out).toEqual({ id: expect.stringMatching(/^att_/), status: 'ready', text: 'sku,qty\nwidget-7,3\n', bytes: 'sku,qty\nwidget-7,3\n', type: 'text/csv' });
  fs.rmSync(path.join(scratch, 'files.ts'));
}, 180_000);

/**
 * An owner lets an agent loose: review on new recipients and a daily cap on its box, its events sent to three
 * receivers with their own filters; the agent's first mail to someone new waits for the owner; the account
 * paused, a send is refused with a code that says so; resumed, it sends again.
 */
const GUARDED_AGENT = `import { BoxesError, confirmSignup, createBoxesClient, isHeldForReview, signup, type Review } from '@boxes/sdk';

const base = process.argv[2]!;
const intent = await signup(base, { human_email: 'guarded-owner@example.com', domain_intent: { mode: 'subdomain' } });
const account = await confirmSignup(base, { intent_id: intent.intent_id });
const client = createBoxesClient({ baseUrl: base, apiKey: account.api_key });
const box = await client.boxes.create.mutate({ address: 'outreach', review: 'new_recipients', caps: { per_day: 20 } });
const caps = await client.guard.boxCaps.query({ id: box.id });
const endpoints = [
  await client.webhookEndpoints.create.mutate({ url: 'https://crm.example.com/hooks', event_types: ['mail.received'], enabled: false }),
  await client.webhookEndpoints.create.mutate({ url: 'https://audit.example.com/hooks', event_types: ['review.*'], enabled: false }),
  await client.webhookEndpoints.create.mutate({ url: 'https://ops.example.com/hooks', box_ids: [box.id], enabled: false }),
];
const draft = await client.drafts.create.mutate({ from: box.address, to: 'prospect@remote.invalid', subject: 'hello', text: 'first contact' });
const result = await client.drafts.send.mutate({ id: draft.id });
const review: Review | null = isHeldForReview(result) ? result : null;
const pending = (await client.reviews.list.query({ status: 'pending' })).reviews.map((r) => r.id);
const withdrawn = review ? (await client.reviews.withdraw.mutate({ id: review.id })).status : null;
await client.guard.pauseAccount.mutate();
let paused = '';
try {
  await client.messages.send.mutate({ to: account.primary_address, text: 'while paused' });
} catch (err) {
  if (err instanceof BoxesError) paused = err.code + ' ' + err.status;
}
await client.guard.resumeAccount.mutate();
const after = await client.messages.send.mutate({ to: account.primary_address, text: 'resumed' });
console.log(JSON.stringify({
  cap: caps.caps.per_day,
  filters: endpoints.map((e) => [e.event_types, e.box_ids]),
  review: review?.status,
  pending: review ? pending.includes(review.id) : false,
  withdrawn,
  paused,
  after: isHeldForReview(after) ? 'held' : after.status,
}));
`;

it('guardrails through the packed SDK: review, a cap, three filtered endpoints, pause and resume', async () => {
  fs.writeFileSync(path.join(scratch, 'guarded.ts'), GUARDED_AGENT);
  await run(tsc, ['-p', 'tsconfig.json'], { cwd: scratch, timeout: 120_000 }).catch((err: { stdout?: string }) => {
    throw new Error(`tsc: ${err.stdout}`);
  });
  const { stdout } = await run(process.execPath, ['guarded.ts', t.url], { cwd: scratch, timeout: 90_000 });
  const out = JSON.parse(stdout.trim().split('\n').at(-1)!);
  expect(out).toEqual({
    cap: 20,
    filters: [
      [['mail.received'], []],
      [['review.*'], []],
      [[], [expect.stringMatching(/^box_/)]],
    ],
    review: 'pending',
    pending: true,
    withdrawn: 'withdrawn',
    paused: 'account_paused 403',
    after: 'queued',
  });
  fs.rmSync(path.join(scratch, 'guarded.ts'));
}, 180_000);
