/** Structured logs (pino). 5xx are logged at error level; client mistakes are not errors of ours. */
import { pino } from 'pino';

export type Logger = pino.Logger;

export function createLogger(level: string): Logger {
  return pino({ level, base: { service: 'boxes' } });
}

/**
 * Logs a failed request: a 5xx at error level with the error, except an unreachable dependency (503
 * service_unavailable), which is one warning line per request without a stack: an outage should not bury the
 * log in identical traces.
 */
export function logFailure(log: Logger, app: { status: number; code: string }, err: unknown, fields: Record<string, unknown>, what = 'request failed'): void {
  if (app.status < 500) return;
  if (app.code === 'service_unavailable')
    log.warn({ ...fields, reason: (err as Error | undefined)?.message?.split('\n').filter(Boolean).pop()?.slice(0, 300) }, `${what}: service unavailable`);
  else log.error({ ...fields, err }, what);
}
