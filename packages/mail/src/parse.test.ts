import { describe, expect, it } from 'vitest';
import { parseMessage } from './parse';

/** A message from a@example.org to b@boxes.example: these lines after From and To, CRLF line ends. */
const message = (...lines: string[]): Buffer => Buffer.from(['From: a@example.org', 'To: b@boxes.example', ...lines, ''].join('\r\n'));

describe('parseMessage: headers', () => {
  it("keeps headers named like an object's members, and joins repeated ones", async () => {
    const raw = message('Subject: names', 'Constructor: one', 'toString: two', '__proto__: three', 'X-Seen: first', 'X-Seen: second', '', 'body');
    const { headers } = await parseMessage(raw);
    expect(Object.hasOwn(headers, 'constructor') && headers.constructor).toBe('one');
    expect(Object.hasOwn(headers, 'tostring') && headers.tostring).toBe('two');
    expect(Object.hasOwn(headers, '__proto__') && headers.__proto__).toBe('three');
    expect(headers['x-seen']).toBe('first, second');
  });
});

describe('parseMessage: bodies', () => {
  it('a plain part beside an HTML part (not alternatives) is in the html too, escaped, as well as in the text', async () => {
    const raw = message(
      'Subject: mixed',
      'MIME-Version: 1.0',
      'Content-Type: multipart/mixed; boundary="b"',
      '',
      '--b',
      'Content-Type: text/plain; charset=utf-8',
      '',
      'Plain part <first>',
      '--b',
      'Content-Type: text/html; charset=utf-8',
      '',
      '<p>HTML part</p>',
      '--b--',
    );
    const parsed = await parseMessage(raw);
    expect(parsed.text).toContain('Plain part <first>');
    expect(parsed.html).toContain('Plain part &lt;first&gt;');
    expect(parsed.html).toContain('<p>HTML part</p>');
  });
});
