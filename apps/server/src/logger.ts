/** Structured logs (pino). 5xx are logged at error level; client mistakes are not errors of ours. */
import { pino } from 'pino';

export type Logger = pino.Logger;

export function createLogger(level: string): Logger {
  return pino({ level, base: { service: 'boxes' } });
}
