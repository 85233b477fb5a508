import { describe, expect, it } from 'vitest';
import { AppError } from '../shared/errors';
import { diffLabels, labelsOf, LABEL_PATTERN, parseLabel } from './labels';

const codeOf = (fn: () => unknown) => {
  try {
    fn();
  } catch (err) {
    return err instanceof AppError ? err.code : String(err);
  }
  return null;
};

describe('label names', () => {
  it('takes IMAP keyword atoms and system labels in any case', () => {
    expect(parseLabel('Unread', 'add.0')).toEqual({ system: 'unread' });
    expect(parseLabel('$Forwarded', 'add.0')).toEqual({ keyword: '$Forwarded' });
    expect(parseLabel('a.b-c_d/e:f', 'add.0')).toEqual({ keyword: 'a.b-c_d/e:f' });
    expect(parseLabel('x'.repeat(100), 'add.0')).toEqual({ keyword: 'x'.repeat(100) });
  });

  it('refuses what is no keyword atom, and $Junk (spelt spam), with invalid_label', () => {
    for (const bad of ['', 'a b', 'a(b', 'a)b', 'a{b', 'a%b', 'a*b', 'a"b', 'a\\b', 'a]b', '\\Flagged', 'é', 'a\tb', 'x'.repeat(101), '$junk']) {
      expect(
        codeOf(() => parseLabel(bad, 'add.0')),
        JSON.stringify(bad),
      ).toBe('invalid_label');
      if (bad !== '$junk') expect(LABEL_PATTERN.test(bad), JSON.stringify(bad)).toBe(false);
    }
  });
});

describe('labels of a message', () => {
  it('system labels from the flag bits, spam from $Junk, sent from the direction, then keywords once each', () => {
    expect(labelsOf(0, [], 'received')).toEqual(['unread']);
    expect(labelsOf(1, [], 'sent')).toEqual(['sent']);
    expect(labelsOf(1 | 2 | 4 | 8, ['$JUNK', 'Todo', 'todo', 'flagged', 'unread'], 'received')).toEqual(['flagged', 'answered', 'draft', 'spam', 'Todo']);
  });

  it('diffs case-insensitively', () => {
    expect(diffLabels(['unread', 'Todo'], ['todo', 'flagged'])).toEqual({ added: ['flagged'], removed: ['unread'], labels: ['todo', 'flagged'] });
  });
});
