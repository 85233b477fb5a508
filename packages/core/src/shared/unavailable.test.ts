import { describe, expect, it } from 'vitest';
import { isServiceUnavailable } from './unavailable';

describe('isServiceUnavailable', () => {
  it('recognises PostgreSQL, Prisma, pg and ioredis errors of an unreachable dependency', () => {
    const prisma = (code: string, meta?: unknown) => Object.assign(new Error('x'), { code, meta });
    expect(isServiceUnavailable(prisma('P1001'))).toBe(true);
    expect(
      isServiceUnavailable(prisma('P2010', { driverAdapterError: { name: 'DriverAdapterError', cause: { originalCode: '57P01', kind: 'postgres' } } })),
    ).toBe(true);
    expect(isServiceUnavailable(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(isServiceUnavailable(new Error('Client has encountered a connection error and is not queryable'))).toBe(true);
    expect(isServiceUnavailable(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }))).toBe(true);
    expect(
      isServiceUnavailable(Object.assign(new Error('Reached the max retries per request limit (which is 1).'), { name: 'MaxRetriesPerRequestError' })),
    ).toBe(true);
    expect(isServiceUnavailable(new Error("Stream isn't writeable and enableOfflineQueue options is false"))).toBe(true);
    expect(isServiceUnavailable({ cause: { cause: new Error('Command timed out') } })).toBe(true);
    expect(isServiceUnavailable(Object.assign(new Error('Transaction API error: Unable to start a transaction in the given time.'), { code: 'P2028' }))).toBe(
      true,
    );
  });

  it('leaves other errors alone', () => {
    expect(isServiceUnavailable(new Error('boom'))).toBe(false);
    expect(isServiceUnavailable(Object.assign(new Error('unique'), { code: 'P2002' }))).toBe(false);
    expect(
      isServiceUnavailable(
        Object.assign(new Error('Transaction API error: A query cannot be executed on an expired transaction. The timeout for this transaction was 5000 ms'), {
          code: 'P2028',
        }),
      ),
    ).toBe(false);
    expect(isServiceUnavailable(null)).toBe(false);
    expect(isServiceUnavailable('ECONNREFUSED')).toBe(false);
  });
});
