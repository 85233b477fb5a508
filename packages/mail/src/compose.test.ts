import { createPrivateKey, generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import DKIM from 'nodemailer/lib/dkim';
import MailComposer from 'nodemailer/lib/mail-composer';
import { composeMessage, dkimSign, treeBytes } from './compose';

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();

/** nodemailer's DKIM signer, which dkimSign must match byte for byte. */
async function nodemailerSigned(raw: Buffer, domainName: string, keySelector: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of new DKIM({ domainName, keySelector, privateKey: pem }).sign(raw)) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

const composed = (extra: Partial<Parameters<typeof composeMessage>[0]> = {}) =>
  composeMessage({
    from: { name: 'Agent Smith', address: 'agent@boxes.example' },
    to: ['Nobody@Example.net', 'Ünïcode <u@example.org>'],
    cc: ['cc@example.org'],
    replyTo: ['reply@boxes.example'],
    subject: 'hello   there, a subject long enough to be folded over more than one header line by the composer, surely',
    text: 'hi there  \n\n\ttabbed   line\t \n\n\n',
    html: '<p>hi</p>',
    headers: { 'X-Custom': 'a  b', 'List-Unsubscribe': '<mailto:u@boxes.example>' },
    attachments: [{ filename: 'a.bin', content: Buffer.alloc(3000, 7), contentType: 'application/octet-stream' }],
    messageId: '<m-1@boxes.example>',
    date: new Date('2026-11-21T07:59:50Z'),
    ...extra,
  });

describe('dkimSign', () => {
  const cases: [string, () => Promise<Buffer>][] = [
    ['a composed message with folded headers, alternatives and an attachment', () => composed()],
    ['a plain text message', () => composed({ html: undefined, attachments: [], cc: [], replyTo: [], headers: {} })],
    ['a body of trailing whitespace and empty lines', () => Promise.resolve(Buffer.from('From: a@b.example\r\nSubject:  x \r\n\r\n  \r\n\r\n'))],
    ['bare LFs, a lone CR and no final line break', () => Promise.resolve(Buffer.from('From: a@b.example\nTo: c@d.example\n\nline one \t\nli\rne two  ends'))],
    ['headers only', () => Promise.resolve(Buffer.from('From: a@b.example\r\nSubject: only headers\r\n'))],
    ['an empty body', () => Promise.resolve(Buffer.from('From: a@b.example\r\n\r\n'))],
    [
      'repeated and folded fields (the last one signed)',
      () => Promise.resolve(Buffer.from('Subject: one\r\nFrom: a@b.example\r\nSubject:\r\n  two\r\n\tlines\r\n\r\nbody\r\n')),
    ],
  ];
  for (const [name, make] of cases) {
    it(`writes what nodemailer's signer writes: ${name}`, async () => {
      const raw = await make();
      const ours = await dkimSign(raw, { domainName: 'Boxes.Example', keySelector: 'sel1', privateKey: createPrivateKey(pem) });
      expect(ours.toString('latin1')).toBe((await nodemailerSigned(raw, 'Boxes.Example', 'sel1')).toString('latin1'));
    });
  }

  it('signs messages that share a body, and one whose body differs by a byte after them, as nodemailer does', async () => {
    const key = { domainName: 'boxes.example', keySelector: 's', privateKey: createPrivateKey(pem) };
    const body = 'the same body for everyone \r\n\r\nsecond  line\r\n';
    const raws = [
      Buffer.from(`From: a@boxes.example\r\nTo: one@example.org\r\nSubject: a\r\n\r\n${body}`),
      Buffer.from(`From: a@boxes.example\r\nTo: two@example.org\r\nSubject: b\r\n\r\n${body}`),
      Buffer.from(`From: a@boxes.example\r\nTo: three@example.org\r\nSubject: c\r\n\r\n${body.replace('everyone', 'everyonf')}`),
      Buffer.from(`From: a@boxes.example\r\nTo: four@example.org\r\nSubject: d\r\n\r\n${body}x`),
    ];
    const hashes = new Set<string>();
    for (const raw of raws) {
      const ours = await dkimSign(raw, key);
      expect(ours.toString('latin1')).toBe((await nodemailerSigned(raw, 'boxes.example', 's')).toString('latin1'));
      hashes.add(/bh=([^;]+);/.exec(ours.toString('latin1'))![1]!);
    }
    expect(hashes.size).toBe(3);
  });

  it('signs many messages at once (more than the threadpool runs together), each as nodemailer does', async () => {
    const key = { domainName: 'boxes.example', keySelector: 's', privateKey: createPrivateKey(pem) };
    const raws = Array.from({ length: 24 }, (_, i) => Buffer.from(`From: a@boxes.example\r\nTo: r${i}@example.org\r\nSubject: ${i}\r\n\r\nbody ${i % 3}\r\n`));
    const ours = await Promise.all(raws.map((raw) => dkimSign(raw, key)));
    for (const [i, raw] of raws.entries()) {
      expect(ours[i]!.toString('latin1')).toBe((await nodemailerSigned(raw, 'boxes.example', 's')).toString('latin1'));
    }
  });

  it('takes a PEM string as well as a parsed key', async () => {
    const raw = await composed();
    expect(
      (await dkimSign(raw, { domainName: 'boxes.example', keySelector: 's', privateKey: pem })).equals(await nodemailerSigned(raw, 'boxes.example', 's')),
    ).toBe(true);
  });

  it('fails on a key that cannot sign instead of sending the message unsigned', async () => {
    await expect(
      dkimSign(Buffer.from('From: a@b.example\r\n\r\nx\r\n'), { domainName: 'b.example', keySelector: 's', privateKey: 'not a key' }),
    ).rejects.toThrow();
  });
});

describe('treeBytes', () => {
  const long = `${'a line longer than seventy-six characters, with trailing space and ünïcode '.repeat(3)} \r\n.dot\r\n`;
  const cases: [string, ConstructorParameters<typeof MailComposer>[0]][] = [
    ['plain 7bit text', { from: 'a@boxes.example', to: 'b@example.org', subject: 's', text: 'hello\r\n' }],
    ['quoted-printable text and html', { from: 'a@boxes.example', to: 'b@example.org', subject: 'ü', text: long, html: `<p>${long}</p>` }],
    ['base64 text (mostly non-ASCII)', { from: 'a@boxes.example', to: 'b@example.org', subject: 's', text: 'ÄÖÜßäöü€'.repeat(40) }],
    [
      'alternatives, an inline image and attachments',
      {
        from: { name: 'Agent', address: 'a@boxes.example' },
        to: ['b@example.org'],
        bcc: ['c@example.org'],
        subject: 's',
        text: long,
        html: '<img src="cid:i1">',
        attachments: [
          { filename: 'i.png', content: Buffer.alloc(5000, 9), contentType: 'image/png', cid: 'i1', contentDisposition: 'inline' },
          { filename: 'a.txt', content: 'text\nwith bare LF\rand CR  \n', contentType: 'text/plain', contentDisposition: 'attachment' },
          {
            filename: 'b.bin',
            content: Buffer.from([0x0d, 0x20, 0x0a, 0x2e, 0xff]),
            contentType: 'application/octet-stream',
            contentDisposition: 'attachment',
          },
          {
            filename: 'q.bin',
            content: Buffer.from('x\ry\nz \r\n'),
            contentType: 'application/octet-stream',
            contentTransferEncoding: 'quoted-printable',
            contentDisposition: 'attachment',
          },
          { filename: 'm.eml', content: 'Subject: x\r\n\r\nforwarded\r\n', contentType: 'message/rfc822', contentDisposition: 'attachment' },
        ],
      },
    ],
    ['no body at all', { from: 'a@boxes.example', to: 'b@example.org', subject: 's' }],
    ['an empty text', { from: 'a@boxes.example', to: 'b@example.org', subject: 's', text: '' }],
  ];
  for (const [name, options] of cases) {
    it(`writes what build() streams: ${name}`, async () => {
      for (const keepBcc of [false, true]) {
        const node = new MailComposer({ ...options, date: new Date('2026-11-21T07:59:50Z'), messageId: '<m@boxes.example>' }).compile();
        node.keepBcc = keepBcc;
        const ours = treeBytes(node);
        expect(ours).not.toBeNull();
        expect(ours!.toString('latin1')).toBe((await node.build()).toString('latin1'));
      }
    });
  }

  it('leaves a tree with streamed content to build()', () => {
    const node = new MailComposer({ from: 'a@boxes.example', to: 'b@example.org', raw: 'Subject: raw\r\n\r\nraw\r\n' }).compile();
    expect(treeBytes(node)).toBeNull();
  });
});

describe('composeMessage: custom headers', () => {
  it('writes each as given, even an object whose members are named key and value (nodemailer would take it for one header)', async () => {
    const raw = (await composed({ headers: { key: 'Sender', value: 'ceo@boxes.example', 'X-After': 'kept' } })).toString('latin1');
    const head = raw.slice(0, raw.indexOf('\r\n\r\n'));
    expect(head).toMatch(/^Key: Sender$/m);
    expect(head).toMatch(/^Value: ceo@boxes\.example$/m);
    expect(head).toMatch(/^X-After: kept$/m);
    expect(head).not.toMatch(/^Sender:/im);
  });
});
