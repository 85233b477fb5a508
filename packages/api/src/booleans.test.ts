/** Input booleans: pinned against trpc-to-openapi's Boolean() coercion (no-coercion.ts); REST query words turned into booleans. */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { booleanFields, queryBooleans } from './booleans';
import { pinCoercion } from './no-coercion';

/** What trpc-to-openapi does to each boolean of an input before a REST call. */
const markCoercing = (s: z.ZodType) => ((s as unknown as { _zod: { def: { coerce?: boolean } } })._zod.def.coerce = true);

describe('pinCoercion on booleans', () => {
  it('keeps a boolean strict after the REST adapter marks it coercing, also when shared by several inputs', () => {
    const flag = z.boolean();
    const a = z.strictObject({ purge: flag.optional(), nested: z.object({ on: z.boolean() }) });
    const b = z.strictObject({ same: flag });
    pinCoercion([a, b]);
    pinCoercion([a]);
    markCoercing(flag);
    expect(a.safeParse({ purge: 'false', nested: { on: true } }).success).toBe(false);
    expect(a.safeParse({ purge: false, nested: { on: true } }).data).toEqual({ purge: false, nested: { on: true } });
    expect(b.safeParse({ same: 1 }).success).toBe(false);
  });

  it('leaves a boolean declared coercing as it is', () => {
    const s = z.object({ on: z.coerce.boolean() });
    pinCoercion([s]);
    expect(s.parse({ on: 1 })).toEqual({ on: true });
  });
});

describe('booleanFields and queryBooleans', () => {
  const input = z.strictObject({ id: z.string(), purge: z.boolean().optional(), all: z.boolean().default(false), n: z.number().optional() });

  it('finds the top-level boolean fields through optional and default', () => {
    expect(booleanFields(input)).toEqual(['purge', 'all']);
    expect(booleanFields(z.string())).toEqual([]);
  });

  it('turns only the words "true" and "false" of those fields into booleans', () => {
    const fields = booleanFields(input);
    expect(queryBooleans({ id: 'true', purge: 'true', all: 'false', n: '1' }, fields)).toEqual({ id: 'true', purge: true, all: false, n: '1' });
    expect(queryBooleans({ id: 'x', purge: 'yes' }, fields)).toEqual({ id: 'x', purge: 'yes' });
    expect(queryBooleans(undefined, fields)).toBeUndefined();
  });
});
