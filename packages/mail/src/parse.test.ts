import { describe, expect, it } from 'vitest';
import { parseMessage } from './parse';

describe('parseMessage: headers', () => {
  it("keeps headers named like an object's members, and joins repeated ones", async () => {
    const raw = Buffer.from(
      [
        'From: a@example.org',
        'To: b@boxes.example',
        'Subject: names',
        'Constructor: one',
        'toString: two',
        '__proto__: three',
        'X-Seen: first',
        'X-Seen: second',
        '',
        'body',
        '',
      ].join('\r\n'),
    );
    const { headers } = await parseMessage(raw);
    expect(Object.hasOwn(headers, 'constructor') && headers.constructor).toBe('one');
    expect(Object.hasOwn(headers, 'tostring') && headers.tostring).toBe('two');
    expect(Object.hasOwn(headers, '__proto__') && headers.__proto__).toBe('three');
    expect(headers['x-seen']).toBe('first, second');
  });
});
