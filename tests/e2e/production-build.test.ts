/**
 * The production start runs compiled JavaScript: `pnpm build` bundles the service (its @boxes/server task, which
 * buildBundle runs), and the bundle runs apps on their own with plain node (no tsx): here the HTTP server alone on
 * a fresh database, then the worker alone, then every app as `pnpm start` runs them, each stopped gracefully by
 * SIGTERM.
 */
import fs from 'node:fs';
import path from 'node:path';
import { expect, it } from 'vitest';
import { buildBundle, createTestDatabase, EPHEMERAL_PORTS, repoRoot as root, spawnNode, waitFor } from '@boxes/testing';

const startBundle = (args: string[], env: Record<string, string>) => spawnNode([path.join(root, 'apps/server/dist/cli.mjs'), ...args], env);

it('pnpm build, then the bundle runs the server alone and the worker alone with node', async () => {
  await buildBundle();
  expect(fs.existsSync(path.join(root, 'apps/server/dist/main.mjs'))).toBe(true);
  const bundle = fs.readFileSync(path.join(root, 'apps/server/dist/cli.mjs'), 'utf8');
  // Our code is in the bundle; no TypeScript is loaded at run time.
  expect(bundle).not.toMatch(/from ["'][^"']*\.ts["']/);
  const db = await createTestDatabase();
  const env = {
    PORT: '0',
    DATABASE_URL: db.url,
    REDIS_PREFIX: `boxes-build-${Date.now()}`,
    BOXES_SECRET_KEY: 'cd'.repeat(32),
    LOG_LEVEL: 'warn',
    NODE_ENV: 'production',
    SITE_URL: 'http://127.0.0.1',
  };
  try {
    const server = startBundle(['start', 'server'], env);
    const url = await waitFor('the server to start', () => /running server \(pid \d+\); HTTP on (\S+)/.exec(server.out())?.[1], 60_000);
    const health = await fetch(`${url}/healthz`);
    expect(health.status).toBe(200);
    // The guide is served by the bundle too, from the checkout's docs/ beside it.
    const guide = await fetch(`${url}/docs/guide/sending`);
    expect(guide.status).toBe(200);
    expect(await guide.text()).toMatch(/<h1[^>]*>Sending mail<\/h1>/);
    const signup = await fetch(`${url}/api/v1/signup/agentic`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ human_email: 'build@example.com', domain_intent: { mode: 'subdomain' } }),
    });
    expect(signup.status).toBe(200);
    server.child.kill('SIGTERM');
    expect(await server.exited).toBe(0);

    const worker = startBundle(['start', 'worker'], env);
    await waitFor('the worker to start', () => /running worker/.test(worker.out()), 60_000);
    worker.child.kill('SIGTERM');
    expect(await worker.exited).toBe(0);

    // `start` naming no app runs them all, as `pnpm start` does (two supervised processes on two cores or more).
    // METRICS_PORT: the worker (no HTTP server of its own) serves its /metrics there; the front ignores it.
    const all = startBundle(['start'], { ...env, ...EPHEMERAL_PORTS, METRICS_PORT: '0' });
    const front = await waitFor(
      'every app to start',
      () => /Boxes is running \((?:two|one) process/.test(all.out()) && /Listening on\s+(\S+)/.exec(all.out())?.[1],
      90_000,
    );
    expect((await fetch(`${front}/readyz`)).status).toBe(200);
    if (/Boxes is running \(two processes/.test(all.out())) {
      const workerMetrics = /the worker's (http:\/\/\S+\/metrics)/.exec(all.out())?.[1];
      expect(workerMetrics, all.out()).toBeTruthy();
      const text = await (await fetch(workerMetrics!)).text();
      expect(text).toMatch(/^boxes_process_nodejs_eventloop_lag_seconds \d/m);
      expect(text).not.toContain('boxes_http_requests_total');
    }
    all.child.kill('SIGTERM');
    expect(await all.exited).toBe(0);
  } finally {
    await db.drop();
  }
}, 180_000);
