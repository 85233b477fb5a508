import { createPrivateKey, generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import DKIM from 'nodemailer/lib/dkim';
import { composeMessage, dkimSign } from './compose';

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
