/** The command parser against the examples of RFC 3501 (and LITERAL+, RFC 7888; ID, RFC 2971). */
import { describe, expect, it } from 'vitest';
import { CommandFramer, parseCommand, ParseError, type Frame, type Token } from './parser';

const crlf = (s: string) => Buffer.from(s.replace(/\n/g, '\r\n'), 'latin1');

/** Tokens as plain values: atoms as strings, strings as {s}, lists as arrays. */
function plain(tokens: Token[]): unknown[] {
  return tokens.map((t) => (t.type === 'atom' ? t.value : t.type === 'string' ? { s: t.value.toString('latin1') } : plain(t.items)));
}

function parse(line: string) {
  const c = parseCommand(Buffer.from(line, 'latin1'));
  return { tag: c.tag, name: c.name, args: plain(c.args) };
}

function frames(framer: CommandFramer): Frame[] {
  const out: Frame[] = [];
  for (let f = framer.next(); f; f = framer.next()) out.push(f);
  return out;
}

describe('parseCommand: RFC 3501 examples', () => {
  it('6.2.3 LOGIN and 6.3.1 SELECT', () => {
    expect(parse('a001 LOGIN SMITH SESAME')).toEqual({ tag: 'a001', name: 'LOGIN', args: ['SMITH', 'SESAME'] });
    expect(parse('A142 SELECT INBOX')).toEqual({ tag: 'A142', name: 'SELECT', args: ['INBOX'] });
  });

  it('6.3.8 LIST with empty and wildcard arguments', () => {
    expect(parse('A101 LIST "" ""')).toEqual({ tag: 'A101', name: 'LIST', args: [{ s: '' }, { s: '' }] });
    expect(parse('A202 LIST ~/Mail/ %')).toEqual({ tag: 'A202', name: 'LIST', args: ['~/Mail/', '%'] });
    expect(parse('A102 LIST #news.comp.mail.misc ""').args).toEqual(['#news.comp.mail.misc', { s: '' }]);
  });

  it('6.3.10 STATUS', () => {
    expect(parse('A042 STATUS blurdybloop (UIDNEXT MESSAGES)')).toEqual({ tag: 'A042', name: 'STATUS', args: ['blurdybloop', ['UIDNEXT', 'MESSAGES']] });
  });

  it('6.4.4 SEARCH with a quoted string, and with a literal', () => {
    expect(parse('A282 SEARCH FLAGGED SINCE 1-Feb-1994 NOT FROM "Smith"').args).toEqual(['FLAGGED', 'SINCE', '1-Feb-1994', 'NOT', 'FROM', { s: 'Smith' }]);
    const bytes = Buffer.concat([Buffer.from('A284 SEARCH CHARSET UTF-8 TEXT {6}\r\n'), Buffer.from([0xe2, 0x82, 0xac, 0xe2, 0x82, 0xac])]);
    const c = parseCommand(bytes);
    expect(c.args.slice(0, 3)).toEqual([
      { type: 'atom', value: 'CHARSET' },
      { type: 'atom', value: 'UTF-8' },
      { type: 'atom', value: 'TEXT' },
    ]);
    expect(c.args[3]).toEqual({ type: 'string', value: Buffer.from('€€'), literal: true });
  });

  it('6.4.5 FETCH with a section and a header field list, macros, body[header]', () => {
    expect(parse('A654 FETCH 2:4 (FLAGS BODY[HEADER.FIELDS (DATE FROM)])').args).toEqual(['2:4', ['FLAGS', 'BODY[HEADER.FIELDS (DATE FROM)]']]);
    expect(parse('a003 fetch 12 full')).toEqual({ tag: 'a003', name: 'FETCH', args: ['12', 'full'] });
    expect(parse('a004 fetch 12 body[header]').args).toEqual(['12', 'body[header]']);
    expect(parse('a005 fetch 12 body.peek[1.2.mime]<0.2048>').args).toEqual(['12', 'body.peek[1.2.mime]<0.2048>']);
    expect(parse('a006 FETCH 1 (BODY.PEEK[HEADER.FIELDS ("X-Odd)" From)])').args).toEqual(['1', ['BODY.PEEK[HEADER.FIELDS ("X-Odd)" From)]']]);
  });

  it('6.4.6 STORE, 6.4.7 COPY, 6.4.8 UID FETCH', () => {
    expect(parse('A003 STORE 2:4 +FLAGS (\\Deleted)').args).toEqual(['2:4', '+FLAGS', ['\\Deleted']]);
    expect(parse('A003 COPY 2:4 MEETING').args).toEqual(['2:4', 'MEETING']);
    expect(parse('A999 UID FETCH 4827313:4828442 FLAGS')).toEqual({ tag: 'A999', name: 'UID', args: ['FETCH', '4827313:4828442', 'FLAGS'] });
  });

  it('6.3.11 APPEND with flags and a literal message', () => {
    const message =
      'Date: Mon, 7 Feb 1994 21:52:25 -0800 (PST)\r\nFrom: Fred Foobar <foobar@Blurdybloop.COM>\r\nSubject: afternoon meeting\r\n\r\nHello Joe, do you think we can meet at 3:30 tomorrow?\r\n';
    const c = parseCommand(Buffer.from(`A003 APPEND saved-messages (\\Seen) {${Buffer.byteLength(message)}}\r\n${message}`));
    expect(c.name).toBe('APPEND');
    expect(plain(c.args)).toEqual(['saved-messages', ['\\Seen'], { s: message }]);
  });

  it('quoted strings keep escaped quotes and backslashes; ID takes a list of strings (RFC 2971)', () => {
    expect(parse('a LOGIN "fred \\"the\\" user" "pa\\\\ss"').args).toEqual([{ s: 'fred "the" user' }, { s: 'pa\\ss' }]);
    expect(parse('a023 ID ("name" "sodr" "version" "19.34")').args).toEqual([[{ s: 'name' }, { s: 'sodr' }, { s: 'version' }, { s: '19.34' }]]);
    expect(parse('a ID NIL').args).toEqual(['NIL']);
  });

  it('refuses malformed commands, naming the tag when there is one', () => {
    expect(() => parseCommand(Buffer.from('+ LOGIN a b'))).toThrow(ParseError);
    const noName = (() => {
      try {
        parseCommand(Buffer.from('a1'));
      } catch (e) {
        return e as ParseError;
      }
    })();
    expect(noName?.tag).toBe('a1');
    expect(() => parseCommand(Buffer.from('a2 LOGIN "unterminated'))).toThrow(/Unterminated/);
    expect(() => parseCommand(Buffer.from('a3 FETCH 1 (FLAGS'))).toThrow(/Unterminated list/);
    expect(() => parseCommand(Buffer.from('a4 FETCH 1 BODY[TEXT'))).toThrow(/Unterminated \[/);
  });
});

describe('CommandFramer', () => {
  const limits = { maxLine: 1000, maxLiteral: 100 };

  it('cuts pipelined commands and waits for the rest of a partial one', () => {
    const f = new CommandFramer(limits);
    f.push(crlf('a1 NOOP\na2 CAPABILITY\na3 SEL'));
    expect(frames(f).map((x) => (x.kind === 'command' ? x.bytes.toString() : x.kind))).toEqual(['a1 NOOP', 'a2 CAPABILITY']);
    f.push(crlf('ECT INBOX\n'));
    expect(frames(f).map((x) => (x.kind === 'command' ? x.bytes.toString() : x.kind))).toEqual(['a3 SELECT INBOX']);
  });

  it('asks for a synchronizing literal once, then takes the command with it (RFC 3501 7.5)', () => {
    const f = new CommandFramer(limits);
    f.push(crlf('A003 APPEND saved-messages (\\Seen) {11}\n'));
    expect(frames(f)).toEqual([{ kind: 'continue' }]);
    f.push(Buffer.from('Hello'));
    expect(frames(f)).toEqual([]);
    f.push(crlf(' world\n'));
    const [cmd] = frames(f);
    expect(cmd?.kind === 'command' && plain(parseCommand(cmd.bytes).args)).toEqual(['saved-messages', ['\\Seen'], { s: 'Hello world' }]);
  });

  it('LITERAL+ (RFC 7888): a non-synchronizing literal needs no continuation', () => {
    const f = new CommandFramer(limits);
    f.push(crlf('A001 LOGIN {11+}\nFRED FOOBAR {7+}\nfat man\n'));
    const out = frames(f);
    expect(out).toHaveLength(1);
    expect(out[0]!.kind === 'command' && plain(parseCommand(out[0]!.bytes).args)).toEqual([{ s: 'FRED FOOBAR' }, { s: 'fat man' }]);
  });

  it('refuses a literal above the limit with the tag, and drops a non-synchronizing one as it arrives', () => {
    const f = new CommandFramer(limits);
    f.push(crlf('a9 APPEND INBOX {1000}\n'));
    expect(frames(f)).toEqual([{ kind: 'too-big', tag: 'a9', message: 'Literal too big (at most 100 octets)' }]);
    f.push(crlf('b1 APPEND INBOX {200+}\n'));
    f.push(Buffer.alloc(150, 0x61));
    expect(frames(f)).toEqual([{ kind: 'too-big', tag: 'b1', message: 'Literal too big (at most 100 octets)' }]);
    // The rest of the literal and of its command line are dropped; the next command is taken.
    f.push(Buffer.concat([Buffer.alloc(50, 0x61), crlf(' (\\Seen)\nb2 NOOP\n')]));
    expect(frames(f)).toEqual([{ kind: 'command', bytes: Buffer.from('b2 NOOP') }]);
  });

  it('hands out bare lines (IDLE DONE, an AUTHENTICATE response)', () => {
    const f = new CommandFramer(limits);
    f.push(crlf('DONE\na2 NOOP\n'));
    expect(f.nextLine()).toEqual({ kind: 'line', text: 'DONE' });
    expect(f.next()).toEqual({ kind: 'command', bytes: Buffer.from('a2 NOOP') });
  });
});
