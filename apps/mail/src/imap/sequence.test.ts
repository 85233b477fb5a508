/** Sequence sets (RFC 3501 9) and SEARCH keys (RFC 3501 6.4.4 examples). */
import { describe, expect, it } from 'vitest';
import { parseCommand } from './parser';
import { parseSearch } from './search';
import { formatSet, parseSequenceSet, resolveSequence, resolveUids } from './sequence';

describe('sequence sets', () => {
  it('resolves ranges, "*" and reversed ranges against a mailbox of 10', () => {
    expect(resolveSequence(parseSequenceSet('2:4'), 10)).toEqual([1, 2, 3]);
    expect(resolveSequence(parseSequenceSet('1:3,5,7:*'), 10)).toEqual([0, 1, 2, 4, 6, 7, 8, 9]);
    expect(resolveSequence(parseSequenceSet('*:8'), 10)).toEqual([7, 8, 9]);
    expect(resolveSequence(parseSequenceSet('1:*'), 0)).toEqual([]);
  });

  it('a UID range names the UIDs that exist in it (RFC 3501 6.4.8: 4827313:4828442)', () => {
    const uids = [3, 4827313, 4827500, 4828442, 4828443];
    expect(resolveUids(parseSequenceSet('4827313:4828442'), uids)).toEqual([1, 2, 3]);
    expect(resolveUids(parseSequenceSet('*'), uids)).toEqual([4]);
    // "n:*" with n above every UID still names the highest (RFC 3501 6.4.8).
    expect(resolveUids(parseSequenceSet('9999999:*'), uids)).toEqual([4]);
  });

  it('refuses what is not a sequence set, and formats UID sets compactly', () => {
    expect(() => parseSequenceSet('0')).toThrow();
    expect(() => parseSequenceSet('1:a')).toThrow();
    expect(formatSet([1, 2, 3, 5, 7, 8])).toBe('1:3,5,7:8');
  });
});

describe('SEARCH keys', () => {
  const keys = (line: string) => parseSearch(parseCommand(Buffer.from(line)).args).key;

  it('A282 SEARCH FLAGGED SINCE 1-Feb-1994 NOT FROM "Smith"', () => {
    expect(keys('A282 SEARCH FLAGGED SINCE 1-Feb-1994 NOT FROM "Smith"')).toEqual({
      op: 'and',
      keys: [
        { op: 'flag', bit: 4 },
        { op: 'date', field: 'internal', cmp: 'since', day: new Date(Date.UTC(1994, 1, 1)) },
        { op: 'not', key: { op: 'header', field: 'from', value: 'Smith' } },
      ],
    });
  });

  it('OR, parenthesized groups, UID sets, UNSEEN, HEADER and CHARSET', () => {
    expect(keys('a SEARCH CHARSET UTF-8 OR (UNSEEN DELETED) UID 1:5 HEADER X-Test yes')).toEqual({
      op: 'and',
      keys: [
        { op: 'or', a: { op: 'and', keys: [{ op: 'not', key: { op: 'flag', bit: 1 } }, { op: 'deleted' }] }, b: { op: 'uid', set: [[1, 5]] } },
        { op: 'header', field: 'x-test', value: 'yes' },
      ],
    });
  });

  it('a bare sequence set is a key; an unknown key is refused', () => {
    expect(keys('a SEARCH 1:3')).toEqual({ op: 'seq', set: [[1, 3]] });
    expect(() => keys('a SEARCH BOGUS')).toThrow(/Unknown search key/);
    expect(() => keys('a SEARCH CHARSET KOI8-R TEXT x')).toThrow(/BADCHARSET/);
  });
});
