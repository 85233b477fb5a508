/**
 * POST /messages/send over real HTTP, delivered over real SMTP to a local server standing in for the remote
 * MX: the DKIM signature verifies (mailauth), the send rules (recipients, bcc,
 * de-duplication, reply_to, custom headers, from, context, inline attachments, the box signature) and
 * idempotency. Credit, delivery outcomes and local delivery live in mail-send-credit / mail-send-delivery.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dkimVerify } from 'mailauth';
import { simpleParser } from 'mailparser';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { events, getMessage, MailSink, send, unique, waitFor, waitSettled } from './mail-send-helpers';

let t: TestServer;
let sink: MailSink;
let a: TestAccount;

beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  t = await startTestServer({ worker: true, resolver: sink.resolver() });
  a = await signupAccount(t);
});
afterAll(async () => {
  await t?.stop();
  await sink?.close();
});

/** A fresh outside address on the stand-in MX. */
const outside = (label = 'rcpt') => `${label}-${unique()}@remote.test`;

/** Sends, expects 200, and waits until the sink holds one message for each recipient; returns both. */
async function sendAndReceive(body: Record<string, unknown>, recipients: string[], key = a.apiKey) {
  const r = await send(t, key, body);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  await waitFor(() => recipients.every((x) => sink.to(x).length > 0), `delivery to ${recipients.join(', ')}`);
  return { res: r.body, got: recipients.map((x) => sink.to(x)[0]!) };
}

async function messageRows(accountId: string): Promise<number> {
  return t.db.message.count({ where: { accountId } });
}

describe('DKIM', () => {
  it('a message to an outside address reaches the remote MX with a DKIM signature that verifies for the account domain', async () => {
    const to = outside('dkim');
    const {
      res,
      got: [got],
    } = await sendAndReceive({ to, subject: 'Signed', text: 'Verify me.' }, [to]);
    expect(res.from).toBe(a.primaryAddress);

    const domain = await t.db.domain.findFirstOrThrow({ where: { accountId: a.accountId, name: a.domain } });
    const dnsName = `${domain.dkimSelector}._domainkey.${a.domain}`;
    const queried: string[] = [];
    const resolver = async (name: string, type: string) => {
      queried.push(`${type} ${name}`);
      if (type === 'TXT' && name.toLowerCase() === dnsName.toLowerCase()) return [[`v=DKIM1; k=rsa; p=${domain.dkimPublicKey}`]];
      throw Object.assign(new Error(`no ${type} record for ${name}`), { code: 'ENOTFOUND' });
    };
    const result = await dkimVerify(got!.raw, { resolver });
    const ours = result.results.filter((r) => r.signingDomain === a.domain);
    expect(ours, JSON.stringify(result.results)).toHaveLength(1);
    expect(ours[0]!.status.result, JSON.stringify(ours[0]!.status)).toBe('pass');
    expect(ours[0]!.selector).toBe(domain.dkimSelector);
    expect(queried).toContain(`TXT ${dnsName}`);

    // The check has teeth: the same bytes with the body changed do not verify.
    const tampered = Buffer.from(got!.raw.toString().replace('Verify me.', 'Verify you.'));
    const bad = await dkimVerify(tampered, { resolver });
    expect(bad.results.find((r) => r.signingDomain === a.domain)?.status.result).not.toBe('pass');

    // The envelope sender is a per-delivery bounce address on the account domain.
    expect(got!.mailFrom).toMatch(new RegExp(`^bounces\\+dlv_[0-9a-z]+@${a.domain.replace(/\./g, '\\.')}$`));
  });
});

describe('send rules', () => {
  it('to as a string and as an array', async () => {
    const single = outside('str');
    const one = await sendAndReceive({ to: single, subject: 'string', text: 'x' }, [single]);
    expect(one.res.recipients).toEqual([single]);

    const x = outside('arr');
    const y = outside('arr');
    const two = await sendAndReceive({ to: [x, `Why Not <${y}>`], subject: 'array', text: 'x' }, [x, y]);
    expect(two.res.recipients).toEqual([x, y]);
    const parsed = await simpleParser(two.got[0]!.raw);
    expect((parsed.to as { value: { address: string }[] }).value.map((v) => v.address)).toEqual([x, y]);
  });

  it('cc and bcc are delivered; bcc is not in the headers but is kept on the sent record', async () => {
    const to = outside('to');
    const cc = outside('cc');
    const bcc = outside('bcc');
    const { res, got } = await sendAndReceive({ to, cc, bcc, subject: 'copies', text: 'x' }, [to, cc, bcc]);
    expect(res.recipients).toEqual([to, cc, bcc]);
    for (const m of got) {
      const raw = m.raw.toString();
      expect(raw).not.toMatch(/^bcc:/im);
      expect(raw).not.toContain(bcc);
      expect(raw).toMatch(new RegExp(`^Cc: ${cc.replace(/\./g, '\\.')}`, 'm'));
    }
    const m = await getMessage(t, a.apiKey, res.message_id);
    expect(m).toMatchObject({ direction: 'sent', to: [to], cc: [cc], bcc: [bcc] });
  });

  it('an address listed more than once across to, cc and bcc is delivered once', async () => {
    const x = outside('dup');
    const y = outside('dup');
    const r = await send(t, a.apiKey, {
      to: [x, `Same Person <${x}>`],
      cc: [y, x.toUpperCase()],
      bcc: [y, x],
      subject: 'dedupe',
      text: 'once each',
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.recipients).toEqual([x, y]);
    expect(r.body.billing.messages).toBe(2);
    const m = await waitSettled(t, a.apiKey, r.body.message_id);
    expect(m.deliveries.map((d: { recipient: string }) => d.recipient).sort()).toEqual([x, y].sort());
    expect(m.status).toBe('delivered');
    expect(sink.rcptFor(x)).toHaveLength(1);
    expect(sink.rcptFor(y)).toHaveLength(1);
    expect(sink.to(x)).toHaveLength(1);
    expect(sink.to(y)).toHaveLength(1);
  });

  it('reply_to produces a Reply-To header (a string, or up to 5 addresses); 6 are rejected', async () => {
    const to1 = outside('rt');
    const one = await sendAndReceive({ to: to1, reply_to: 'Help Desk <help@elsewhere.test>', subject: 'rt', text: 'x' }, [to1]);
    const p1 = await simpleParser(one.got[0]!.raw);
    expect(p1.replyTo?.value).toEqual([{ name: 'Help Desk', address: 'help@elsewhere.test' }]);

    const five = Array.from({ length: 5 }, (_, i) => `reply${i}@elsewhere.test`);
    const to5 = outside('rt');
    const ok = await sendAndReceive({ to: to5, reply_to: five, subject: 'rt5', text: 'x' }, [to5]);
    const p5 = await simpleParser(ok.got[0]!.raw);
    expect(p5.replyTo?.value.map((v) => v.address)).toEqual(five);

    const before = await messageRows(a.accountId);
    const to6 = outside('rt');
    const six = await send(t, a.apiKey, { to: to6, reply_to: [...five, 'reply5@elsewhere.test'], subject: 'rt6', text: 'x' });
    expect(six.status, JSON.stringify(six.body)).toBe(400);
    expect(six.body.error.code).toBe('validation_error');
    expect(six.body.error.message).toContain('reply_to');
    expect(await messageRows(a.accountId)).toBe(before);
  });

  it('up to 15 custom headers are delivered; 16 are rejected', async () => {
    const fifteen = Object.fromEntries(Array.from({ length: 15 }, (_, i) => [`X-Custom-${i}`, `value ${i}`]));
    const to = outside('hdr');
    const { got } = await sendAndReceive({ to, headers: fifteen, subject: 'headers', text: 'x' }, [to]);
    const parsed = await simpleParser(got[0]!.raw);
    for (let i = 0; i < 15; i++) expect(parsed.headers.get(`x-custom-${i}`)).toBe(`value ${i}`);

    const before = await messageRows(a.accountId);
    const r = await send(t, a.apiKey, { to: outside('hdr'), headers: { ...fifteen, 'X-Custom-15': 'one too many' }, subject: 'h', text: 'x' });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.error.code).toBe('validation_error');
    expect(r.body.error.message).toContain('headers');
    expect(await messageRows(a.accountId)).toBe(before);
  });

  it.each([
    'Message-ID',
    'Date',
    'From',
    'To',
    'Cc',
    'Bcc',
    'Sender',
    'Subject',
    'Return-Path',
    'DKIM-Signature',
    'X-Boxes-Configuration-Set',
    'X-Boxes-Agentic-Anything',
    'x-boxes-agentic',
    'message-id',
  ])('the reserved header %s is rejected with 400 naming it', async (name) => {
    const before = await messageRows(a.accountId);
    const r = await send(t, a.apiKey, { to: outside('reserved'), headers: { [name]: 'x' }, subject: 'reserved', text: 'x' });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.error.code).toBe('validation_error');
    expect(r.body.error.message).toContain(name);
    expect(await messageRows(a.accountId)).toBe(before);
  });

  it('custom headers named key and value are two headers, never a way to set a reserved one (Sender)', async () => {
    const to = outside('keyvalue');
    const { got } = await sendAndReceive({ to, headers: { key: 'Sender', value: 'ceo@remote.test', 'X-After': 'kept' }, subject: 'kv', text: 'x' }, [to]);
    const head = got[0]!.raw.toString('latin1').split('\r\n\r\n')[0]!;
    expect(head).toMatch(/^Key: Sender$/m);
    expect(head).toMatch(/^Value: ceo@remote\.test$/m);
    expect(head).toMatch(/^X-After: kept$/m);
    expect(head).not.toMatch(/^Sender:/im);
  });

  it.each([
    ['CRLF', 'innocent\r\nBcc: victim@remote.test'],
    ['LF', 'innocent\nBcc: victim@remote.test'],
    ['CR', 'innocent\rBcc: victim@remote.test'],
  ])('a header value with %s is rejected with 400 and nothing is sent', async (_kind, value) => {
    const before = await messageRows(a.accountId);
    const to = outside('inject');
    const r = await send(t, a.apiKey, { to, headers: { 'X-Note': value }, subject: 'inject', text: 'x' });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.error.code).toBe('validation_error');
    expect(r.body.error.message).toContain('X-Note');
    expect(await messageRows(a.accountId)).toBe(before);
    expect(await t.db.delivery.count({ where: { recipient: { in: [to, 'victim@remote.test'] } } })).toBe(0);
  });

  it('an unknown body field is rejected with 400 naming it', async () => {
    const before = await messageRows(a.accountId);
    const r = await send(t, a.apiKey, { to: outside('unknown'), subject: 's', text: 'x', colour: 'blue' });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.error.code).toBe('validation_error');
    expect(r.body.error.message).toContain('colour');
    expect(await messageRows(a.accountId)).toBe(before);
  });

  it('from on another domain is 403 with the documented message; "Name <agent@domain>" is accepted', async () => {
    const before = await messageRows(a.accountId);
    for (const from of ['agent@someone-else.test', `Agent <agent@not-${a.domain}>`]) {
      const r = await send(t, a.apiKey, { from, to: outside('from'), subject: 's', text: 'x' });
      expect(r.status, JSON.stringify(r.body)).toBe(403);
      expect(r.body.error.code).toBe('from_domain_mismatch');
      expect(r.body.error.message).toBe('from-address domain must match your account domain');
    }
    expect(await messageRows(a.accountId)).toBe(before);

    const to = outside('from');
    const { res, got } = await sendAndReceive({ from: `Agent Smith <${a.primaryAddress}>`, to, subject: 'named', text: 'x' }, [to]);
    expect(res.from).toBe(a.primaryAddress);
    const parsed = await simpleParser(got[0]!.raw);
    expect(parsed.from?.value).toEqual([{ name: 'Agent Smith', address: a.primaryAddress }]);
  });

  it('context up to 16 KB is accepted and kept; over 16 KB is rejected with 400', async () => {
    const sized = (bytes: number) => ({ pad: 'x'.repeat(bytes - '{"pad":""}'.length) });
    expect(Buffer.byteLength(JSON.stringify(sized(16 * 1024)))).toBe(16 * 1024);

    const ok = await send(t, a.apiKey, { to: outside('ctx'), subject: 'ctx', text: 'x', context: sized(16 * 1024) });
    expect(ok.status, JSON.stringify(ok.body).slice(0, 500)).toBe(200);
    expect((await getMessage(t, a.apiKey, ok.body.message_id)).context).toEqual(sized(16 * 1024));

    const before = await messageRows(a.accountId);
    const big = await send(t, a.apiKey, { to: outside('ctx'), subject: 'ctx', text: 'x', context: sized(16 * 1024 + 1) });
    expect(big.status, JSON.stringify(big.body).slice(0, 500)).toBe(400);
    expect(big.body.error.code).toBe('validation_error');
    expect(big.body.error.message).toContain('context');
    expect(await messageRows(a.accountId)).toBe(before);
  });

  it('an attachment with content_id makes the delivered message multipart/related and the cid: reference resolves', async () => {
    const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64');
    const to = outside('cid');
    const { got } = await sendAndReceive(
      {
        to,
        subject: 'inline',
        text: 'see the logo',
        html: '<p>Logo: <img src="cid:logo-1"></p>',
        attachments: [
          { filename: 'logo.png', content_type: 'image/png', content_b64: png.toString('base64'), content_id: 'logo-1' },
          { filename: 'notes.txt', content_type: 'text/plain', content_b64: Buffer.from('plain attachment').toString('base64') },
        ],
      },
      [to],
    );
    const raw = got[0]!.raw.toString();
    expect(raw).toMatch(/^Content-Type: multipart\/related/im);

    const parsed = await simpleParser(got[0]!.raw, { keepCidLinks: true });
    expect(parsed.html).toContain('cid:logo-1');
    const logo = parsed.attachments.find((x) => x.filename === 'logo.png');
    expect(logo, 'the inline image').toBeDefined();
    expect(logo!.contentId).toBe('<logo-1>');
    expect(logo!.cid).toBe('logo-1');
    expect(logo!.related).toBe(true);
    expect(logo!.contentType).toBe('image/png');
    expect(logo!.content.equals(png)).toBe(true);
    const notes = parsed.attachments.find((x) => x.filename === 'notes.txt');
    expect(notes?.content.toString()).toBe('plain attachment');
    expect(notes?.related).toBeFalsy();

    // Without the cid: link rewriting kept, mailparser resolves it to the image itself.
    const resolved = await simpleParser(got[0]!.raw);
    expect(resolved.html).toContain(`data:image/png;base64,${png.toString('base64')}`);
  });

  it('the box signature is appended to the delivered text, before the trailer', async () => {
    const box = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: `signed-${unique()}` } });
    expect(box.status, JSON.stringify(box.body)).toBe(200);
    const signature = '-- \nSigned Bot\nExample Inc.';
    const set = await rest(t, 'PUT', `/boxes/${box.body.id}/signature`, { key: a.apiKey, body: { signature } });
    expect(set.status, JSON.stringify(set.body)).toBe(200);

    const to = outside('sig');
    const { got } = await sendAndReceive({ from: box.body.address, to, subject: 'with signature', text: 'Body first.' }, [to]);
    const parsed = await simpleParser(got[0]!.raw);
    expect(parsed.from?.value[0]?.address).toBe(box.body.address);
    expect(parsed.text?.replace(/\r\n/g, '\n').trimEnd()).toBe(`Body first.\n\n${signature}\n\n--\nSent by an AI agent with Boxes: ${t.config.siteUrl}`);
  });
});

describe('idempotency', () => {
  it('the same key with the same body replays the first response and sends once', async () => {
    const to = outside('idem');
    const body = { to, subject: 'once', text: 'only once', idempotency_key: `key-${unique()}` };
    const first = await send(t, a.apiKey, body);
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(first.body.idempotent_replay).toBeUndefined();
    await waitSettled(t, a.apiKey, first.body.message_id);

    const again = await Promise.all([send(t, a.apiKey, body), send(t, a.apiKey, body)]);
    for (const r of again) {
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.message_id).toBe(first.body.message_id);
      expect(r.body.rfc_message_id).toBe(first.body.rfc_message_id);
      expect(r.body.idempotent_replay).toBe(true);
      expect(r.body.billing).toEqual(first.body.billing);
    }
    expect(await t.db.message.count({ where: { accountId: a.accountId, subject: 'once' } })).toBe(1);
    expect(await t.db.delivery.count({ where: { recipient: to } })).toBe(1);
    // A later, unrelated send has been delivered: nothing more for `to` was on its way.
    const barrier = outside('barrier');
    await sendAndReceive({ to: barrier, subject: 'barrier', text: 'x' }, [barrier]);
    expect(sink.rcptFor(to)).toHaveLength(1);
    expect(sink.to(to)).toHaveLength(1);
  });

  it('two simultaneous first sends with the same key: one message, the other call replays it', async () => {
    const to = outside('idem-race');
    const body = { to, subject: 'raced', text: 'once', idempotency_key: `key-${unique()}` };
    const [x, y] = await Promise.all([send(t, a.apiKey, body), send(t, a.apiKey, body)]);
    expect([x.status, y.status], JSON.stringify([x.body, y.body])).toEqual([200, 200]);
    expect(y.body.message_id).toBe(x.body.message_id);
    expect([x.body.idempotent_replay, y.body.idempotent_replay].filter(Boolean)).toEqual([true]);
    await waitSettled(t, a.apiKey, x.body.message_id);
    expect(await t.db.delivery.count({ where: { recipient: to } })).toBe(1);
    expect(sink.to(to)).toHaveLength(1);
    const acct = await t.db.account.findUniqueOrThrow({ where: { id: a.accountId } });
    expect({ held: acct.heldMicros, heldFree: acct.heldFreeMessages }).toEqual({ held: 0n, heldFree: 0 });
  });

  it('the same key with a different body is 409 idempotency_key_reused and nothing more is sent', async () => {
    const to = outside('idem');
    const key = `key-${unique()}`;
    const first = await send(t, a.apiKey, { to, subject: 'first', text: 'one', idempotency_key: key });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    await waitSettled(t, a.apiKey, first.body.message_id);
    const before = await messageRows(a.accountId);

    const other = outside('idem');
    for (const changed of [
      { to, subject: 'first', text: 'two', idempotency_key: key },
      { to: other, subject: 'first', text: 'one', idempotency_key: key },
    ]) {
      const r = await send(t, a.apiKey, changed);
      expect(r.status, JSON.stringify(r.body)).toBe(409);
      expect(r.body.error.code).toBe('idempotency_key_reused');
    }
    expect(await messageRows(a.accountId)).toBe(before);
    expect(await t.db.delivery.count({ where: { recipient: other } })).toBe(0);
    const barrier = outside('barrier');
    await sendAndReceive({ to: barrier, subject: 'barrier', text: 'x' }, [barrier]);
    expect(sink.to(to)).toHaveLength(1);
    expect(sink.rcptFor(other)).toHaveLength(0);
    const sent = await events(t, a.apiKey, 'mail.sent');
    expect(sent.filter((e) => e.data.subject === 'first')).toHaveLength(1);
  });
});
