/** ENVELOPE, BODYSTRUCTURE and body sections against the examples of RFC 3501 (6.4.5, 7.4.2). */
import { describe, expect, it } from 'vitest';
import type { Chunk } from './encode';
import { bodyStructure, envelope, parseAddressList, ParsedMessage, sectionBytes } from './mime';

const wire = (chunks: Chunk[]) => chunks.map((c) => c.toString('latin1')).join('');
const crlf = (s: string) => s.replace(/\r?\n/g, '\r\n');

// The header of the message of the RFC 3501 8 sample session ("IMAP4rev1 WG mtg summary and minutes").
const GRAY_HEADER = crlf(`Date: Wed, 17 Jul 1996 02:23:25 -0700 (PDT)
From: Terry Gray <gray@cac.washington.edu>
Subject: IMAP4rev1 WG mtg summary and minutes
To: imap@cac.washington.edu
cc: minutes@CNRI.Reston.VA.US, John Klensin <KLENSIN@MIT.EDU>
Message-Id: <B27397-0100000@cac.washington.edu>
MIME-Version: 1.0
Content-Type: TEXT/PLAIN; CHARSET=US-ASCII

`);

describe('ENVELOPE', () => {
  it('is the one of RFC 3501 8 for its message', () => {
    const msg = new ParsedMessage(Buffer.from(`${GRAY_HEADER}Minutes.\r\n`));
    expect(wire(envelope(msg.root.headers))).toBe(
      '("Wed, 17 Jul 1996 02:23:25 -0700 (PDT)" "IMAP4rev1 WG mtg summary and minutes" (("Terry Gray" NIL "gray" "cac.washington.edu")) (("Terry Gray" NIL "gray" "cac.washington.edu")) (("Terry Gray" NIL "gray" "cac.washington.edu")) ((NIL NIL "imap" "cac.washington.edu")) ((NIL NIL "minutes" "CNRI.Reston.VA.US")("John Klensin" NIL "KLENSIN" "MIT.EDU")) NIL NIL "<B27397-0100000@cac.washington.edu>")',
    );
  });

  it('parses groups, quoted names with commas, comments and encoded words (kept as they are)', () => {
    expect(parseAddressList('"Doe, John" <john@example.com>, =?utf-8?q?J=C3=B6rg?= <jorg@example.com>')).toEqual([
      { name: 'Doe, John', mailbox: 'john', host: 'example.com' },
      { name: '=?utf-8?q?J=C3=B6rg?=', mailbox: 'jorg', host: 'example.com' },
    ]);
    expect(parseAddressList('undisclosed-recipients:;')).toEqual([
      { name: null, mailbox: 'undisclosed-recipients', host: null },
      { name: null, mailbox: null, host: null },
    ]);
    expect(parseAddressList('A Group: ed@example.com, fred@example.com; sam@example.com (Sam S)')).toEqual([
      { name: null, mailbox: 'A Group', host: null },
      { name: null, mailbox: 'ed', host: 'example.com' },
      { name: null, mailbox: 'fred', host: 'example.com' },
      { name: null, mailbox: null, host: null },
      { name: 'Sam S', mailbox: 'sam', host: 'example.com' },
    ]);
  });

  it('Sender and Reply-To default to From; 8-bit values go out as literals', () => {
    const msg = new ParsedMessage(Buffer.from(crlf('From: a@example.com\nSubject: caf\u00e9\n\nx'), 'latin1'));
    const out = wire(envelope(msg.root.headers));
    expect(out).toBe('(NIL {4}\r\ncaf\u00e9 ((NIL NIL "a" "example.com")) ((NIL NIL "a" "example.com")) ((NIL NIL "a" "example.com")) NIL NIL NIL NIL NIL)');
  });
});

describe('BODYSTRUCTURE', () => {
  it('a plain text message: the RFC 3501 7.4.2 shape (type, parameters, encoding, octets, lines)', () => {
    const body =
      Array.from({ length: 92 }, (_, i) => `line ${String(i).padStart(2, '0')} of the minutes, padded to the right size....`.slice(0, 31)).join('\r\n') +
      '\r\n';
    const msg = new ParsedMessage(Buffer.from(GRAY_HEADER + body));
    expect(wire(bodyStructure(msg, msg.root, false))).toBe(`("TEXT" "PLAIN" ("CHARSET" "US-ASCII") NIL NIL "7BIT" ${Buffer.byteLength(body)} 92)`);
  });

  it('multipart/mixed: the RFC 3501 7.4.2 example, parts without separators, subtype last', () => {
    const diff = Buffer.alloc(3000, 0x41).toString('base64').replace(/.{76}/g, '$&\r\n');
    const raw = crlf(`From: a@example.com
MIME-Version: 1.0
Content-Type: MULTIPART/MIXED; BOUNDARY="xyz"

--xyz
Content-Type: TEXT/PLAIN; CHARSET=US-ASCII

one
two
--xyz
Content-Type: TEXT/PLAIN; CHARSET=US-ASCII; NAME=cc.diff
Content-ID: <960723163407.20117h@cac.washington.edu>
Content-Description: Compiler diff
Content-Transfer-Encoding: BASE64

${diff}
--xyz--
`);
    const msg = new ParsedMessage(Buffer.from(raw));
    const lines = diff.split('\r\n').length;
    expect(wire(bodyStructure(msg, msg.root, false))).toBe(
      `(("TEXT" "PLAIN" ("CHARSET" "US-ASCII") NIL NIL "7BIT" 8 2)("TEXT" "PLAIN" ("CHARSET" "US-ASCII" "NAME" "cc.diff") "<960723163407.20117h@cac.washington.edu>" "Compiler diff" "BASE64" ${Buffer.byteLength(diff)} ${lines}) "MIXED")`,
    );
    expect(wire(bodyStructure(msg, msg.root, true))).toMatch(/ "MIXED" \("BOUNDARY" "xyz"\) NIL NIL NIL\)$/);
  });

  it('message/rfc822: envelope, inner structure and lines', () => {
    const inner = crlf('From: b@example.com\nSubject: inner\n\nhello\n');
    const raw = crlf(
      `From: a@example.com\nContent-Type: multipart/mixed; boundary=b\n\n--b\nContent-Type: text/plain\n\nouter\n--b\nContent-Type: message/rfc822\n\n${inner}--b--\n`,
    );
    const msg = new ParsedMessage(Buffer.from(raw));
    const out = wire(bodyStructure(msg, msg.root, false));
    expect(out).toContain('("MESSAGE" "RFC822" NIL NIL NIL "7BIT" ');
    expect(out).toContain('(NIL "inner" ((NIL NIL "b" "example.com"))');
    expect(out).toContain('("TEXT" "PLAIN" ("CHARSET" "us-ascii") NIL NIL "7BIT" 5 1) 4)');
  });
});

describe('body sections (RFC 3501 6.4.5)', () => {
  const raw = crlf(`From: a@example.com
Subject: sections
Content-Type: multipart/mixed; boundary="b1"

preamble
--b1
Content-Type: text/plain

part one
--b1
Content-Type: multipart/alternative; boundary="b2"

--b2
Content-Type: text/plain

two point one
--b2
Content-Type: text/html

<p>two point two</p>
--b2--
--b1
Content-Type: message/rfc822

From: c@example.com
Subject: attached
Content-Type: multipart/mixed; boundary="b3"

--b3
Content-Type: text/plain

inner one
--b3--
--b1--
`);
  const msg = new ParsedMessage(Buffer.from(raw));
  const s = (path: number[], specifier: '' | 'HEADER' | 'TEXT' | 'MIME' | 'HEADER.FIELDS' | 'HEADER.FIELDS.NOT' = '', fields: string[] = []) =>
    sectionBytes(msg, { path, specifier, fields })?.toString() ?? null;

  it('the whole message, its header and text', () => {
    expect(s([])).toBe(raw);
    expect(s([], 'HEADER')).toBe(crlf('From: a@example.com\nSubject: sections\nContent-Type: multipart/mixed; boundary="b1"\n\n'));
    expect(s([], 'TEXT')!.startsWith('preamble\r\n--b1')).toBe(true);
    expect(s([], 'HEADER.FIELDS', ['SUBJECT'])).toBe('Subject: sections\r\n\r\n');
    expect(s([], 'HEADER.FIELDS.NOT', ['SUBJECT', 'CONTENT-TYPE'])).toBe('From: a@example.com\r\n\r\n');
  });

  it('parts by number, MIME headers, nested multiparts', () => {
    expect(s([1])).toBe('part one');
    expect(s([1], 'MIME')).toBe('Content-Type: text/plain\r\n\r\n');
    expect(s([2, 1])).toBe('two point one');
    expect(s([2, 2])).toBe('<p>two point two</p>');
    expect(s([4])).toBeNull();
  });

  it('an encapsulated message: n.HEADER, n.TEXT and its own parts', () => {
    expect(s([3], 'HEADER')).toBe(crlf('From: c@example.com\nSubject: attached\nContent-Type: multipart/mixed; boundary="b3"\n\n'));
    expect(s([3, 1])).toBe('inner one');
    expect(s([3], 'TEXT')).toBe(crlf('--b3\nContent-Type: text/plain\n\ninner one\n--b3--'));
  });

  it('a message that is not multipart has its body as part 1', () => {
    const plain = new ParsedMessage(Buffer.from(crlf('Subject: x\n\nbody text\n')));
    expect(sectionBytes(plain, { path: [1], specifier: '', fields: [] })?.toString()).toBe('body text\r\n');
  });
});
