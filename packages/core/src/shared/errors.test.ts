import { describe, expect, it } from 'vitest';
import { isUniqueViolation } from './errors';

describe('isUniqueViolation', () => {
  const err = (message: string, fields: Record<string, unknown>) => Object.assign(new Error(message), fields);

  it("recognises Prisma's model and raw errors and pg's own, whatever the server's language", () => {
    expect(isUniqueViolation(err('Unique constraint failed on the fields: (`idempotency_key`)', { code: 'P2002' }))).toBe(true);
    expect(isUniqueViolation(err('Raw query failed.', { code: 'P2010', meta: { code: '23505' } }))).toBe(true);
    // pg's DatabaseError from a statement on the pool, with the message of a server set to German.
    expect(isUniqueViolation(err('doppelter Schlüsselwert verletzt Unique-Constraint »messages_idem«', { code: '23505', severity: 'FEHLER' }))).toBe(true);
  });

  it('answers false for other errors', () => {
    expect(isUniqueViolation(err('violates foreign key constraint', { code: '23503' }))).toBe(false);
    expect(isUniqueViolation(err('Raw query failed.', { code: 'P2010', meta: { code: '40001' } }))).toBe(false);
    expect(isUniqueViolation(null)).toBe(false);
  });
});
