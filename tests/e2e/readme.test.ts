// The README's first curl block must work as pasted: run it with bash and curl against a real server.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '@boxes/testing';

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(() => t?.stop());

it('the README signup -> confirm -> GET /events block works as pasted', async () => {
  const readme = fs.readFileSync(path.resolve(import.meta.dirname, '../../README.md'), 'utf8');
  const blocks = [...readme.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!);
  const block = blocks.find((b) => b.includes('/signup/agentic/confirm'));
  expect(block, 'README has a curl block that confirms a signup').toBeDefined();
  expect(block).toContain('BASE=http://localhost:3000/api/v1');
  const script = block!.replace('BASE=http://localhost:3000/api/v1', `BASE=${t.apiBase}`);
  // Asynchronously: the server answering the script runs in this process.
  const { stdout: out } = await promisify(execFile)('bash', ['-euo', 'pipefail', '-c', script], { encoding: 'utf8', timeout: 20_000 });
  const body = JSON.parse(out);
  expect(body.events.map((e: { type: string }) => e.type)).toEqual(['signup.completed', 'domain.ready', 'box.created', 'api_key.created']);
  expect(body.events[0].data.primary_address).toMatch(/^agent@[a-z]+-[a-z]+\.boxes\.localhost$/);
});
