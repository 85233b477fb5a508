/** apps/server: start(config) serves HTTP (tRPC, REST, OpenAPI, discovery) until stop(). */
import { serve, type ServerType } from '@hono/node-server';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Config } from '@boxes/config';
import { AppError, newId, type Services } from '@boxes/core';
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
    s.on('clientError', answerClientError);
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

/**
 * Node's HTTP parser refuses some requests before any handler runs (a request line and headers over 16 KiB, a
 * head or body that is too slow, bytes that are no HTTP) and by default answers with a bare status line. Those
 * answers get the one error body and a request id like every other error.
 */
function answerClientError(err: Error & { code?: string }, socket: Duplex): void {
  const writable = socket.writable && !(socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent;
  if (err.code === 'ECONNRESET' || !writable) {
    socket.destroy(err);
    return;
  }
  const error =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? new AppError('headers_too_large', `The request line and headers are larger than ${http.maxHeaderSize} bytes`)
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? new AppError('request_timeout', 'The request was not received in time')
        : err.code === 'HPE_CHUNK_EXTENSIONS_OVERFLOW'
          ? new AppError('payload_too_large', 'The chunk extensions are too large')
          : new AppError('bad_request', 'The request is not valid HTTP');
  const requestId = newId('req');
  const body = JSON.stringify({ error: { code: error.code, message: error.message, request_id: requestId } });
  socket.end(
    `HTTP/1.1 ${error.status} ${http.STATUS_CODES[error.status] ?? 'Error'}\r\n` +
      `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nx-request-id: ${requestId}\r\nconnection: close\r\n\r\n${body}`,
  );
}

export async function stop(): Promise<void> {
  await current?.stop();
  current = null;
}
