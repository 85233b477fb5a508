import { describe, expect, it } from 'vitest';
import { checkEventTypes, checkHeaders } from './endpoints';

describe('checkHeaders', () => {
  it('lower-cases names and keeps values', () => {
    expect(checkHeaders({ Authorization: 'Bearer x', 'X-Tenant': ' t1 ' })).toEqual({ authorization: 'Bearer x', 'x-tenant': 't1' });
  });
  it.each([
    ['CR LF in a value', { 'x-a': 'a\r\nx-b: c' }],
    ['LF in a value', { 'x-a': 'a\nb' }],
    ['NUL in a value', { 'x-a': 'a\u0000b' }],
    ['a non-ASCII value', { 'x-a': 'caf\u00e9' }],
    ['a colon in a name', { 'x-a:b': '1' }],
    ['CR LF in a name', { 'x-a\r\nx-b': '1' }],
    ['an empty name', { '': '1' }],
    ['a hop-by-hop header', { 'Keep-Alive': 'timeout=5' }],
    ['a proxy header', { 'Proxy-Authorization': 'Basic x' }],
    ['content-length', { 'Content-Length': '0' }],
    ['a Standard Webhooks header', { 'webhook-timestamp': '1' }],
    ['an x-boxes header', { 'x-boxes-anything': '1' }],
    ['the same name twice', { 'X-A': '1', 'x-a': '2' }],
    ['a name too long', { [`x-${'a'.repeat(70)}`]: '1' }],
    ['a value too long', { 'x-a': 'a'.repeat(1025) }],
  ])('refuses %s', (_label, headers) => {
    expect(() => checkHeaders(headers)).toThrow(/^headers: /);
  });
});

describe('checkEventTypes', () => {
  it('takes catalogue types and prefixes, once each', () => {
    expect(checkEventTypes(['mail.received', 'box.*', 'mail.received', 'box.forward.*'])).toEqual(['mail.received', 'box.*', 'box.forward.*']);
  });
  it.each([['mail.recieved'], ['nothing.*'], ['*'], ['.*'], ['mail']])('refuses %s', (type) => {
    expect(() => checkEventTypes([type])).toThrow(/^event_types: /);
  });
});
