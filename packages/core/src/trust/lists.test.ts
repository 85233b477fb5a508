import { describe, expect, it } from 'vitest';
import { AppError } from '../shared/errors';
import { candidatesOf, isAllowed, isBlocked, parseListValue, type ListedRow } from './lists';
import { stampRaw, type InboundTrust } from './inbound';

describe('list values', () => {
  it('normalizes addresses and domains', () => {
    expect(parseListValue(' Boss <Boss@Example.COM> ')).toEqual({ value: 'boss@example.com', kind: 'address' });
    expect(parseListValue('*.Spam.example.')).toEqual({ value: 'spam.example', kind: 'domain' });
    expect(parseListValue('@spam.example')).toEqual({ value: 'spam.example', kind: 'domain' });
    for (const bad of ['localhost', 'a b@c.example', '@', 'x@', 'a@-bad.example', 'foo..example']) expect(() => parseListValue(bad), bad).toThrow(AppError);
  });

  it('an address matches itself and each parent domain', () => {
    expect(candidatesOf('A@x.Example.com')).toEqual(['a@x.example.com', 'x.example.com', 'example.com', 'com']);
  });

  const row = (list: string, value: string, box_id: string | null = null): ListedRow => ({
    box_id,
    list,
    direction: 'both',
    value,
    kind: value.includes('@') ? 'address' : 'domain',
  });

  it('block by domain covers subdomains, not lookalikes; an exact allow beats a domain block; other boxes do not count', () => {
    const rows = [row('block', 'corp.example'), row('allow', 'ceo@corp.example'), row('block', 'x@other.example', 'box_b')];
    expect(isBlocked(rows, 'box_a', 'cfo@mail.corp.example')).toBe(true);
    expect(isBlocked(rows, 'box_a', 'someone@notcorp.example')).toBe(false);
    expect(isBlocked(rows, 'box_a', 'CEO@corp.example')).toBe(false);
    expect(isBlocked(rows, 'box_a', 'x@other.example')).toBe(false);
    expect(isBlocked(rows, 'box_b', 'x@other.example')).toBe(true);
    expect(isAllowed(rows, 'box_a', 'ceo@corp.example')).toBe(true);
    expect(isAllowed(rows, 'box_a', 'cfo@corp.example')).toBe(false);
  });
});

describe('stampRaw', () => {
  const trust = { headers: 'Received-SPF: none\r\nAuthentication-Results: mx.test;\r\n dkim=none\r\n' } as InboundTrust;
  it('puts our results on top and drops one forged in our name (folded lines included), keeping others', () => {
    const raw = Buffer.from(
      'Authentication-Results: mx.test;\r\n dkim=pass\r\nAuthentication-Results: other.example; spf=pass\r\nFrom: a@b.example\r\n\r\nAuthentication-Results: mx.test; in the body\r\n',
    );
    const out = stampRaw(raw, trust, 'mx.test').toString();
    expect(out).toBe(
      'Received-SPF: none\r\nAuthentication-Results: mx.test;\r\n dkim=none\r\nAuthentication-Results: other.example; spf=pass\r\nFrom: a@b.example\r\n\r\nAuthentication-Results: mx.test; in the body\r\n',
    );
  });
  it('keeps the message byte for byte under the stamp when nothing is dropped (8-bit header bytes included)', () => {
    const raw = Buffer.concat([Buffer.from('Subject: caf'), Buffer.from([0xc3, 0xa9, 0xff]), Buffer.from('\r\nFrom: a@b.example\r\n\r\nbody\r\n')]);
    const out = stampRaw(raw, trust, 'mx.test');
    expect(out.equals(Buffer.concat([Buffer.from(trust.headers), raw]))).toBe(true);
  });
  it('keeps bare LF messages in LF', () => {
    expect(stampRaw(Buffer.from('From: a@b.example\n\nhi\n'), trust, 'mx.test').toString()).toBe(
      'Received-SPF: none\nAuthentication-Results: mx.test;\n dkim=none\nFrom: a@b.example\n\nhi\n',
    );
  });
});
