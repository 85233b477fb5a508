import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SmtpSender } from './deliver';

interface Received {
  from: string;
  to: string[];
  data: Buffer;
}

/** A minimal SMTP peer: records each transaction's envelope and the message as it reads it (dots unstuffed). */
function smtpPeer(): Promise<{ port: number; received: Received[]; close(): void }> {
  const received: Received[] = [];
  const server = net.createServer((socket) => {
    let buf = Buffer.alloc(0);
    let inData = false;
    let tx: Received = { from: '', to: [], data: Buffer.alloc(0) };
    socket.write('220 peer.test ESMTP\r\n');
    socket.on('data', (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      for (;;) {
        if (inData) {
          const end = buf.indexOf('\r\n.\r\n');
          if (end === -1) return;
          const lines = buf
            .subarray(0, end + 2)
            .toString('latin1')
            .split('\r\n');
          tx.data = Buffer.from(lines.map((l) => (l.startsWith('.') ? l.slice(1) : l)).join('\r\n'), 'latin1');
          received.push(tx);
          tx = { from: '', to: [], data: Buffer.alloc(0) };
          buf = buf.subarray(end + 5);
          inData = false;
          socket.write('250 2.0.0 queued\r\n');
          continue;
        }
        const eol = buf.indexOf('\r\n');
        if (eol === -1) return;
        const line = buf.subarray(0, eol).toString('utf8');
        buf = buf.subarray(eol + 2);
        const verb = line.slice(0, 4).toUpperCase();
        if (verb === 'EHLO') socket.write('250 peer.test\r\n');
        else if (verb === 'MAIL') {
          tx.from = /<(.*)>/.exec(line)![1]!;
          socket.write('250 2.1.0 ok\r\n');
        } else if (verb === 'RCPT') {
          const to = /<(.*)>/.exec(line)![1]!;
          if (to.startsWith('refused@')) socket.write('550 5.1.1 no such user\r\n');
          else {
            tx.to.push(to);
            socket.write('250 2.1.5 ok\r\n');
          }
        } else if (verb === 'DATA') {
          inData = true;
          socket.write('354 go ahead\r\n');
        } else if (verb === 'RSET') {
          tx = { from: '', to: [], data: Buffer.alloc(0) };
          socket.write('250 ok\r\n');
        } else if (verb === 'QUIT') socket.end('221 bye\r\n');
        else socket.write('250 ok\r\n');
      }
    });
    socket.on('error', () => undefined);
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as net.AddressInfo).port;
      resolve({ port, received, close: () => server.close() });
    }),
  );
}

describe('SmtpSender', () => {
  let peer: Awaited<ReturnType<typeof smtpPeer>>;
  let sender: SmtpSender;
  const dest = () => ({ host: '127.0.0.1', port: peer.port });
  beforeAll(async () => {
    peer = await smtpPeer();
    sender = new SmtpSender({ heloName: 'boxes.test', maxConnections: 2 });
  });
  afterAll(() => {
    sender.close();
    peer.close();
  });

  it('hands over the signed bytes as they are, over a reused connection', async () => {
    const raw = Buffer.from('From: a@boxes.test\r\nTo: b@peer.test\r\nSubject: hi\r\n\r\nline one\r\n.a line that starts with a dot\r\n.\r\nend\r\n');
    for (let n = 0; n < 3; n++) {
      const out = await sender.send(dest(), { from: `bounce+${n}@boxes.test`, to: `b${n}@peer.test` }, raw);
      expect(out).toMatchObject({ ok: true, kind: 'delivered', code: 250 });
      expect(out.response).toContain('queued');
    }
    const last = peer.received.slice(-3);
    expect(last.map((r) => [r.from, r.to])).toEqual([0, 1, 2].map((n) => [`bounce+${n}@boxes.test`, [`b${n}@peer.test`]]));
    for (const r of last) expect(r.data.equals(raw)).toBe(true);
  });

  it('ends a message without a final line break with CRLF', async () => {
    const out = await sender.send(dest(), { from: 'bounce@boxes.test', to: 'c@peer.test' }, Buffer.from('Subject: x\r\n\r\nno final break'));
    expect(out.kind).toBe('delivered');
    expect(peer.received.at(-1)!.data.toString()).toBe('Subject: x\r\n\r\nno final break\r\n');
  });

  it('writes an internationalized domain of the envelope as punycode', async () => {
    const out = await sender.send(dest(), { from: 'bounce@boxes.test', to: 'u@jõgeva.test' }, Buffer.from('Subject: x\r\n\r\nhi\r\n'));
    expect(out.kind).toBe('delivered');
    expect(peer.received.at(-1)!.to).toEqual(['u@xn--jgeva-dua.test']);
  });

  it('reports a refused recipient as permanent', async () => {
    const out = await sender.send(dest(), { from: 'bounce@boxes.test', to: 'refused@peer.test' }, Buffer.from('Subject: x\r\n\r\nhi\r\n'));
    expect(out).toMatchObject({ ok: false, kind: 'permanent' });
    expect(out.code).toBe(550);
  });

  it('reports an unreachable destination as temporary', async () => {
    const closed = await new Promise<number>((resolve) => {
      const s = net.createServer();
      s.listen(0, '127.0.0.1', () => {
        const port = (s.address() as net.AddressInfo).port;
        s.close(() => resolve(port));
      });
    });
    const out = await sender.send(
      { host: '127.0.0.1', port: closed },
      { from: 'bounce@boxes.test', to: 'd@peer.test' },
      Buffer.from('Subject: x\r\n\r\nhi\r\n'),
    );
    expect(out).toMatchObject({ ok: false, kind: 'temporary' });
  });
});
