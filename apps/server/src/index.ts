/** apps/server: start(config) serves HTTP (tRPC, REST, OpenAPI, discovery) until stop(). */
import { serve, type ServerType } from '@hono/node-server';
import type { AddressInfo } from 'node:net';
import type { Config } from '@boxes/config';
import type { Services } from '@boxes/core';
import { createApp } from './app';
import { createLogger, type Logger } from './logger';

export { createApp } from './app';
export { createLogger, type Logger } from './logger';
export { publicUrlFollowsPort, startRuntime, type Runtime, type RuntimeOptions } from './runtime';

export interface ServerHandle {
  url: string;
  port: number;
  stop(): Promise<void>;
}

let current: ServerHandle | null = null;

export async function start(config: Config, deps: { svc: Services; log?: Logger }): Promise<ServerHandle> {
  const log = deps.log ?? createLogger(config.logLevel);
  const app = createApp(deps.svc, log);
  const server: ServerType = await new Promise((resolve, reject) => {
    // Slow clients: the head within headersTimeout, the whole request within requestTimeout (408 otherwise),
    // and no connection silent for longer than the idle timeout. Node checks the first two every
    // connectionsCheckingInterval, so that is kept below them.
    const { headersTimeoutMs, requestTimeoutMs, idleTimeoutMs } = config.http;
    const s = serve(
      {
        fetch: app.fetch,
        port: config.port,
        hostname: config.host,
        serverOptions: {
          headersTimeout: headersTimeoutMs,
          requestTimeout: Math.max(requestTimeoutMs, headersTimeoutMs),
          connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(headersTimeoutMs / 2))),
        },
      },
      () => resolve(s),
    );
    s.setTimeout(idleTimeoutMs);
    s.once('error', reject);
  });
  const port = (server.address() as AddressInfo).port;
  const handle: ServerHandle = {
    url: `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`,
    port,
    stop: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        (server as { closeAllConnections?: () => void }).closeAllConnections?.();
      }),
  };
  current = handle;
  return handle;
}

export async function stop(): Promise<void> {
  await current?.stop();
  current = null;
}
