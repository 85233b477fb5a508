/**
 * /metrics and /healthz of a process that runs no HTTP server (`boxes start worker`, `mx`, `push` or `dns`, and
 * the worker of the two-process `pnpm start`), on METRICS_HOST:METRICS_PORT when METRICS_PORT is set, so
 * Prometheus scrapes every process: the process's own metrics (event loop, heap, GC, CPU, its group commits,
 * its database pool). What only the HTTP server's /metrics shows (requests, queues, instance totals) stays there.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import type { Config } from '@boxes/config';
import type { Services } from '@boxes/core';
import { processMetrics } from './ops';

export interface MetricsEndpoint {
  port: number;
  url: string;
  stop(): Promise<void>;
}

export async function startMetricsEndpoint(config: Config, svc: Services): Promise<MetricsEndpoint> {
  const registry = new Registry();
  const collect = processMetrics(registry, svc);
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('GET /metrics or /healthz\n');
      return;
    }
    if (path === '/healthz') {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
      return;
    }
    if (path !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('This port serves GET /metrics and /healthz\n');
      return;
    }
    collect();
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      (err: Error) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`${err.message}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.metrics.port ?? 0, config.metrics.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const host = config.metrics.host.includes(':') ? `[${config.metrics.host}]` : config.metrics.host;
  return {
    port,
    url: `http://${host}:${port}/metrics`,
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
