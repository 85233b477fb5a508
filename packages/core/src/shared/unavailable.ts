/**
 * Whether an error means a dependency (PostgreSQL or Redis) is unreachable or going away, as opposed to a bug
 * or a bad request. The edges answer these with 503 service_unavailable (HTTP), 451 (the MX) or a pause (the
 * workers), and everything carries on once the dependency is back.
 */
import { AppError } from './errors';

/** Seconds a client is told to wait when PostgreSQL or Redis is unreachable. */
export const UNAVAILABLE_RETRY_SECONDS = 5;

/** The error every face answers while a dependency is away (503 service_unavailable with Retry-After). */
export function serviceUnavailable(): AppError {
  return new AppError('service_unavailable', 'The service cannot reach its database or queue right now; nothing was changed. Try again shortly.', {
    retry_after_seconds: UNAVAILABLE_RETRY_SECONDS,
  });
}

/** PostgreSQL SQLSTATEs of a connection that failed or is being shut down. */
const PG_CODES = new Set([
  '57P01', // admin_shutdown
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now (starting up, shutting down, recovering)
  '53300', // too_many_connections
  '08000',
  '08001',
  '08003',
  '08004',
  '08006',
  '08007', // connection_exception and its subclasses
]);

/** Prisma's codes for an unreachable or vanished database, a pool that gave no connection, a timed-out connect. */
const PRISMA_CODES = new Set(['P1001', 'P1002', 'P1008', 'P1017', 'P2024']);

/** Node socket errors. */
const SOCKET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN']);

const MESSAGES = [
  /connection terminated/i, // pg: "Connection terminated unexpectedly", "... due to connection timeout"
  /timeout exceeded when trying to connect/i, // pg pool
  /(encountered a connection error|was closed) and is not queryable/i, // pg client whose connection broke
  /can't reach database server/i,
  /server closed the connection/i,
  /the database system is (starting up|shutting down|in recovery mode)/i,
  /terminating connection due to administrator command/i,
  /connection is closed/i, // ioredis
  /stream isn't writeable/i, // ioredis without an offline queue
  /reached the max retries per request limit/i, // ioredis MaxRetriesPerRequestError
  /command timed out/i, // ioredis commandTimeout
  // Prisma's P2028 when an interactive transaction got no connection within its maxWait (a busy pool, a server that
  // does not answer, the client closing), as pg's "timeout exceeded when trying to connect" is for a single query.
  // P2028's other cases, such as a transaction past its timeout, are not.
  /unable to start a transaction in the given time/i,
];

function kindsOf(err: unknown, depth = 0): unknown[] {
  if (!err || typeof err !== 'object' || depth > 4) return [];
  const e = err as { cause?: unknown; meta?: { driverAdapterError?: unknown }; errors?: unknown[] };
  return [
    err,
    ...kindsOf(e.cause, depth + 1),
    ...kindsOf(e.meta?.driverAdapterError, depth + 1),
    ...(Array.isArray(e.errors) ? e.errors.flatMap((x) => kindsOf(x, depth + 1)) : []),
  ];
}

export function isServiceUnavailable(err: unknown): boolean {
  for (const e of kindsOf(err)) {
    const x = e as { code?: unknown; originalCode?: unknown; kind?: unknown; name?: unknown; message?: unknown };
    const code = typeof x.code === 'string' ? x.code : typeof x.originalCode === 'string' ? x.originalCode : '';
    if (PG_CODES.has(code) || PRISMA_CODES.has(code) || SOCKET_CODES.has(code)) return true;
    if (x.kind === 'DatabaseNotReachable' || x.kind === 'ConnectionClosed' || x.kind === 'SocketTimeout') return true;
    if (x.name === 'MaxRetriesPerRequestError') return true;
    if (typeof x.message === 'string' && MESSAGES.some((m) => m.test(x.message as string))) return true;
  }
  return false;
}
