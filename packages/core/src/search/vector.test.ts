/** The text a message is indexed by: the text part, else the words of the html; the cuts. */
import { describe, expect, it } from 'vitest';
import { attachmentText, htmlText, MAX_INDEXED_CHARS, searchBodyText } from './vector';

describe('searchBodyText', () => {
  it('takes the text part when it has any', () => {
    expect(searchBodyText({ text: 'Plain words', html: '<p>Other words</p>' })).toBe('Plain words');
  });

  it('falls back to the words of the html: tags, scripts, styles and comments out, entities decoded', () => {
    const html =
      '<html><head><title>T</title><style>p { color: red }</style></head><body><p>Invoice&nbsp;&amp;&#32;receipt</p><script>var secret = 1;</script><!-- hidden --><b>caf&#xe9;</b></body></html>';
    const text = searchBodyText({ text: '   ', html });
    expect(text).toContain('Invoice');
    expect(text).toContain('& receipt');
    expect(text).toContain('café');
    for (const gone of ['color', 'secret', 'hidden', '<', 'T ']) expect(text).not.toContain(gone);
  });

  it('is empty without a body, and cut at MAX_INDEXED_CHARS', () => {
    expect(searchBodyText({ text: null, html: null })).toBe('');
    expect(searchBodyText({ text: 'x'.repeat(MAX_INDEXED_CHARS + 10), html: null })).toHaveLength(MAX_INDEXED_CHARS);
  });

  it('leaves unknown entities and out-of-range code points harmless', () => {
    expect(htmlText('a &bogus; b &#0; c &#x110000; d')).toBe('a &bogus; b   c   d');
  });
});

describe('attachmentText', () => {
  it('joins the texts, null when there is none, cut at MAX_INDEXED_CHARS', () => {
    expect(attachmentText(undefined)).toBeNull();
    expect(attachmentText([])).toBeNull();
    expect(attachmentText(['one', 'two'])).toBe('one\ntwo');
    expect(attachmentText(['y'.repeat(MAX_INDEXED_CHARS), 'more'])).toHaveLength(MAX_INDEXED_CHARS);
  });
});
