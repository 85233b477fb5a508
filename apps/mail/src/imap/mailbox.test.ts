import { flagNames, type FolderEntry } from '@boxes/core';
import { describe, expect, it } from 'vitest';
import { paren } from './encode';
import { flagList } from './mailbox';

const entry = (flags: number, deleted: boolean, keywords: string[]): FolderEntry => ({
  uid: 1,
  messageId: 'msg_x',
  flags,
  keywords,
  deleted,
  modseq: 1n,
  size: 1,
  internalDate: new Date(0),
});

const text = (chunks: unknown[]) => chunks.join('');

describe('flagList', () => {
  it('answers every combination of flag bits and \\Deleted as the flag names say, with and without keywords', () => {
    for (let bits = 0; bits < 16; bits++) {
      for (const deleted of [false, true]) {
        for (const keywords of [[], ['$Forwarded'], ['billing', 'later']]) {
          const expected = text(paren(flagNames(bits, deleted, keywords).map((f) => [f])));
          expect(text(flagList(entry(bits, deleted, keywords)))).toBe(expected);
        }
      }
    }
    expect(text(flagList(entry(1 | 4, true, [])))).toBe('(\\Seen \\Flagged \\Deleted)');
    expect(text(flagList(entry(0, false, [])))).toBe('()');
  });
});
