// Attachments as files with their text: real PDF, DOCX and XLSX files made here with their libraries, received
// over real SMTP by the MX and sent through the API; the worker reads their text in a thread (a corrupt PDF
// fails, an oversized input and zip bombs are refused by a limit, a lying extension is read by content);
// downloads checked with curl (headers, signed URL without a key, expired and tampered refused); box-restricted
// keys; reclaimed with the body; through the SDK and MCP.
import { randomBytes } from 'node:crypto';
import { deflateRawSync } from 'node:zlib';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Document, Packer, Paragraph } from 'docx';
import ExcelJS from 'exceljs';
import { PDFDocument, StandardFonts } from 'pdf-lib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exec, k, sql } from '@boxes/db';
import { attachmentPlainText, reclaimExpiredBodies } from '@boxes/core';
import { createBoxesClient, downloadAttachment, waitForAttachmentText } from '@boxes/sdk';
import { mintKey, rest, signupAccount, startTestServer, waitFor, type TestAccount, type TestServer } from '@boxes/testing';
import { execFileAsync, smtpClient, waitForEvent, waitForReceived } from './mail-receive-helpers';

let t: TestServer;
let a: TestAccount;

beforeAll(async () => {
  t = await startTestServer({ mail: true, worker: true });
  a = await signupAccount(t);
}, 60_000);
afterAll(async () => {
  await t?.stop();
});

const tag = () => randomBytes(5).toString('hex');

async function makePdf(line: string): Promise<Buffer> {
  const doc = await PDFDocument.create();
  const font = await doc.embedFont(StandardFonts.Helvetica);
  doc.addPage().drawText(line, { x: 50, y: 700, size: 14, font });
  return Buffer.from(await doc.save());
}

async function makeDocx(line: string): Promise<Buffer> {
  const doc = new Document({ sections: [{ children: [new Paragraph(line)] }] });
  return Packer.toBuffer(doc);
}

async function makeXlsx(cell: string): Promise<Buffer> {
  const wb = new ExcelJS.Workbook();
  const sheet = wb.addWorksheet('Totals');
  sheet.addRow(['item', 'amount']);
  sheet.addRow([cell, 42]);
  return Buffer.from(await wb.xlsx.writeBuffer());
}

/** A zip of the given entries (deflated), each declaring its inflated size as given (by default the true one). */
function zipOf(entries: { name: string; content: Buffer; declared?: number }[]): Buffer {
  const parts: Buffer[] = [];
  const central: Buffer[] = [];
  let offset = 0;
  for (const e of entries) {
    const data = deflateRawSync(e.content, { level: 9 });
    const name = Buffer.from(e.name);
    const size = e.declared ?? e.content.length;
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(8, 8);
    local.writeUInt32LE(data.length, 18);
    local.writeUInt32LE(size, 22);
    local.writeUInt16LE(name.length, 26);
    const c = Buffer.alloc(46);
    c.writeUInt32LE(0x02014b50, 0);
    c.writeUInt16LE(20, 4);
    c.writeUInt16LE(20, 6);
    c.writeUInt16LE(8, 10);
    c.writeUInt32LE(data.length, 20);
    c.writeUInt32LE(size, 24);
    c.writeUInt16LE(name.length, 28);
    c.writeUInt32LE(offset, 42);
    parts.push(local, name, data);
    central.push(c, name);
    offset += 30 + name.length + data.length;
  }
  const cd = Buffer.concat(central);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(cd.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...parts, cd, end]);
}

/**
 * A DOCX of a few hundred KB whose document inflates to 100 MiB: declared honestly in its zip directory, or
 * (liar) declared as 1 KB.
 */
function zipBomb(liar = false): Buffer {
  const types = Buffer.from(
    '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>',
  );
  const body = Buffer.concat([
    Buffer.from('<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>'),
    Buffer.alloc(100 * 1024 * 1024, 0x61),
    Buffer.from('</w:t></w:r></w:p></w:body></w:document>'),
  ]);
  return zipOf([
    { name: '[Content_Types].xml', content: types },
    { name: 'word/document.xml', content: body, ...(liar ? { declared: 1024 } : {}) },
  ]);
}

/** A 1x1 PNG. */
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==', 'base64');

type Attachment = { id: string; filename: string; text_status: string; size_bytes: number; sha256: string; content_b64?: string };

async function attachmentsOf(key: string, messageId: string): Promise<Attachment[]> {
  const m = await rest(t, 'GET', `/messages/${messageId}`, { key });
  // On a failure, the answer's body: its request_id and message say what went wrong.
  if (m.status !== 200) expect.fail(`GET /messages/${messageId}: ${m.status} ${JSON.stringify(m.body)}`);
  return m.body.body.attachments;
}

/** Waits for the worker to finish every attachment of a message (attachment.text_ready for each). */
async function settled(key: string, messageId: string): Promise<Attachment[]> {
  return waitFor(
    'attachment text',
    async () => {
      const list = await attachmentsOf(key, messageId);
      return list.every((x) => x.text_status !== 'pending') ? list : null;
    },
    60_000,
  );
}

const textOf = (key: string, messageId: string, id: string) => rest(t, 'GET', `/messages/${messageId}/attachments/${id}/text`, { key });

async function curl(url: string, headers: string[] = []): Promise<{ status: number; headers: Record<string, string>; body: Buffer }> {
  const args = ['-s', '-D', '-', '-o', '-', ...headers.flatMap((h) => ['-H', h]), url];
  const { stdout } = (await execFileAsync('curl', args, { encoding: 'buffer', maxBuffer: 64 * 1024 * 1024 })) as unknown as { stdout: Buffer };
  const split = stdout.indexOf('\r\n\r\n');
  const head = stdout.subarray(0, split).toString('latin1').split('\r\n');
  const status = Number(head[0]!.split(' ')[1]);
  const out: Record<string, string> = {};
  for (const line of head.slice(1)) {
    const i = line.indexOf(':');
    out[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
  }
  return { status, headers: out, body: stdout.subarray(split + 4) };
}

describe('attachments received over SMTP', () => {
  let messageId: string;
  const marker = tag();
  const files: Record<string, Buffer> = {};

  beforeAll(async () => {
    files.pdf = await makePdf(`Invoice total ${marker} pdf`);
    files.docx = await makeDocx(`Contract clause ${marker} docx`);
    files.xlsx = await makeXlsx(`widget-${marker}`);
    const subject = `files ${marker}`;
    const client = smtpClient(t.smtpPort!);
    await client.sendMail({
      envelope: { from: 'alice@outside.test', to: [a.primaryAddress] },
      from: 'alice@outside.test',
      to: a.primaryAddress,
      subject,
      text: 'see attached',
      attachments: [
        { filename: 'invoice.pdf', content: files.pdf, contentType: 'application/pdf' },
        { filename: 'contract.docx', content: files.docx, contentType: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document' },
        { filename: 'totals.xlsx', content: files.xlsx, contentType: 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet' },
        { filename: 'notes.csv', content: `name,value\nrow-${marker},7\n`, contentType: 'text/csv' },
        { filename: 'page.html', content: `<html><body><h1>Heading ${marker}</h1><script>x()</script></body></html>`, contentType: 'text/html' },
        { filename: 'broken.pdf', content: Buffer.from('%PDF-1.7\n1 0 obj << /Type /Catalog >>\ngarbage garbage'), contentType: 'application/pdf' },
        { filename: 'photo.pdf', content: PNG, contentType: 'application/pdf' },
        { filename: 'bomb.docx', content: zipBomb(), contentType: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document' },
        { filename: 'liar.docx', content: zipBomb(true), contentType: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document' },
      ],
    });
    client.close();
    messageId = (await waitForReceived(t, a.apiKey, subject)).id;
  }, 120_000);

  it('lists each attachment with an id, type, size and SHA-256, without bytes unless asked', async () => {
    const list = await attachmentsOf(a.apiKey, messageId);
    expect(list.map((x) => x.filename)).toEqual([
      'invoice.pdf',
      'contract.docx',
      'totals.xlsx',
      'notes.csv',
      'page.html',
      'broken.pdf',
      'photo.pdf',
      'bomb.docx',
      'liar.docx',
    ]);
    for (const x of list) {
      expect(x.id).toMatch(/^att_[0-9a-z]{20}$/);
      expect(x.content_b64).toBeUndefined();
    }
    expect(list[0]!.size_bytes).toBe(files.pdf!.length);
    const withBytes = await rest(t, 'GET', `/messages/${messageId}?include=attachment_content`, { key: a.apiKey });
    expect(Buffer.from(withBytes.body.body.attachments[0].content_b64, 'base64').equals(files.pdf!)).toBe(true);
    const page = await rest(t, 'GET', '/messages?include=body', { key: a.apiKey });
    expect(page.body.messages.find((m: { id: string }) => m.id === messageId).body.attachments[0].content_b64).toBeUndefined();
  });

  it('the worker reads PDF, DOCX, XLSX, CSV and HTML; a corrupt PDF fails; a PNG named .pdf is read by content; zip bombs are refused', async () => {
    const list = await settled(a.apiKey, messageId);
    const by = Object.fromEntries(list.map((x) => [x.filename, x]));
    const read = async (name: string) => (await textOf(a.apiKey, messageId, by[name]!.id)).body;
    expect(await read('invoice.pdf')).toMatchObject({
      text_status: 'ready',
      detected_type: 'application/pdf',
      text: expect.stringContaining(`Invoice total ${marker} pdf`),
    });
    expect(await read('contract.docx')).toMatchObject({ text_status: 'ready', text: expect.stringContaining(`Contract clause ${marker} docx`) });
    expect((await read('totals.xlsx')).text).toContain(`widget-${marker}\t42`);
    expect((await read('notes.csv')).text).toContain(`row-${marker},7`);
    const html = await read('page.html');
    expect(html.text).toContain(`HEADING ${marker}`.toUpperCase());
    expect(html.text).not.toContain('x()');
    expect(await read('broken.pdf')).toMatchObject({ text_status: 'failed', text: null });
    expect(await read('photo.pdf')).toMatchObject({ text_status: 'unsupported', detected_type: 'image/png', text: null });
    // Zip bombs: refused by the inflated-size limit, whether the archive declares its size or lies about it.
    for (const bomb of ['bomb.docx', 'liar.docx']) {
      expect(await read(bomb)).toMatchObject({
        text_status: 'too_large',
        detected_type: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
        text: null,
        error: expect.stringContaining('inflates to more than'),
      });
    }
    // One event per attachment, whatever its status.
    const ev = await waitForEvent(t, a.apiKey, 'attachment.text_ready', (e) => e.data.attachment_id === by['bomb.docx']!.id);
    expect(ev.data).toMatchObject({ message_id: messageId, status: 'too_large' });
    // The worker is alive after the bombs (the sent messages below are read too); the text as search reads it.
    expect(await attachmentPlainText(t.svc, by['invoice.pdf']!.id)).toContain(marker);
    // Sealed at rest.
    const row = await t.db.messageAttachment.findUniqueOrThrow({ where: { id: by['invoice.pdf']!.id } });
    expect(row.textEnc).not.toContain(marker);
  });

  it('downloads with the stored type, attachment disposition, nosniff and a sandboxing CSP (curl)', async () => {
    const [pdf] = await attachmentsOf(a.apiKey, messageId);
    const got = await curl(`${t.apiBase}/messages/${messageId}/attachments/${pdf!.id}/content`, [`Authorization: Bearer ${a.apiKey}`]);
    expect(got.status).toBe(200);
    expect(got.body.equals(files.pdf!)).toBe(true);
    expect(got.headers['content-type']).toBe('application/pdf');
    expect(got.headers['content-disposition']).toBe(`attachment; filename="invoice.pdf"; filename*=UTF-8''invoice.pdf`);
    expect(got.headers['x-content-type-options']).toBe('nosniff');
    expect(got.headers['content-security-policy']).toBe("default-src 'none'; sandbox");
    const noKey = await curl(`${t.apiBase}/messages/${messageId}/attachments/${pdf!.id}/content`);
    expect(noKey.status).toBe(401);
  });

  it('a signed URL works without a key for 10 minutes; expired gives 410, tampered 403', async () => {
    const [pdf] = await attachmentsOf(a.apiKey, messageId);
    const info = await rest(t, 'GET', `/messages/${messageId}/attachments/${pdf!.id}`, { key: a.apiKey });
    expect(info.status).toBe(200);
    expect(info.body).toMatchObject({ id: pdf!.id, message_id: messageId, sha256: pdf!.sha256 });
    const expires = Number(new URL(info.body.download_url).searchParams.get('expires'));
    expect(expires * 1000 - Date.parse(info.body.download_url_expires_at)).toBe(0);
    const ok = await curl(info.body.download_url);
    expect(ok.status).toBe(200);
    expect(ok.body.equals(files.pdf!)).toBe(true);
    const url = new URL(info.body.download_url);
    const tampered = new URL(url);
    tampered.searchParams.set('expires', String(expires + 3600));
    const bad = await curl(tampered.toString());
    expect(bad.status).toBe(403);
    expect(JSON.parse(bad.body.toString()).error.code).toBe('invalid_signature');
    const other = new URL(url.toString().replace(pdf!.id, (await attachmentsOf(a.apiKey, messageId))[1]!.id));
    expect((await curl(other.toString())).status).toBe(403);
    // An expired URL: signed by the instance for a time already past.
    const { signAttachmentUrl } = await import('@boxes/core');
    const old = signAttachmentUrl(t.svc, { accountId: a.accountId, messageId, id: pdf!.id }, new Date(Date.now() - 3_600_000));
    const gone = await curl(old.signedUrl);
    expect(gone.status).toBe(410);
    expect(JSON.parse(gone.body.toString()).error.code).toBe('link_expired');
  });
});

describe('attachments sent through the API', () => {
  it('a sent message names its attachments and the worker reads them; an oversized input is too_large, a long text is cut', async () => {
    const marker = tag();
    const pdf = await makePdf(`Sent report ${marker}`);
    const big = Buffer.alloc(10 * 1024 * 1024 + 1, 'a');
    const long = `${'word '.repeat(220_000)}`;
    const sent = await rest(t, 'POST', '/messages/send', {
      key: a.apiKey,
      body: {
        to: 'someone@outside.test',
        text: 'report attached',
        attachments: [
          { filename: 'report.pdf', content_type: 'application/pdf', content_b64: pdf.toString('base64') },
          { filename: 'big.txt', content_type: 'text/plain', content_b64: big.toString('base64') },
          { filename: 'long.txt', content_type: 'text/plain', content_b64: Buffer.from(long).toString('base64') },
        ],
      },
    });
    expect(sent.status).toBe(200);
    const list = await settled(a.apiKey, sent.body.message_id);
    const report = (await textOf(a.apiKey, sent.body.message_id, list[0]!.id)).body;
    expect(report).toMatchObject({ text_status: 'ready', text: expect.stringContaining(`Sent report ${marker}`) });
    const large = (await textOf(a.apiKey, sent.body.message_id, list[1]!.id)).body;
    expect(large).toMatchObject({ text_status: 'too_large', text: null });
    // Text beyond 1,000,000 characters is cut, and says so.
    const cut = (await textOf(a.apiKey, sent.body.message_id, list[2]!.id)).body;
    expect(cut).toMatchObject({ text_status: 'ready', truncated: true, text_bytes: 1_000_000 });
    expect(cut.text).toBe(long.slice(0, 1_000_000));
  }, 120_000);
});

describe('the PDF page limit', () => {
  it('reads the first 500 pages of a longer PDF and says the text is truncated', async () => {
    const doc = await PDFDocument.create();
    const font = await doc.embedFont(StandardFonts.Helvetica);
    for (let i = 1; i <= 501; i++) doc.addPage().drawText(`page-${i}-end`, { x: 50, y: 700, size: 12, font });
    const pdf = Buffer.from(await doc.save());
    const sent = await rest(t, 'POST', '/messages/send', {
      key: a.apiKey,
      body: {
        to: 'p@outside.test',
        text: 'pages',
        attachments: [{ filename: 'long.pdf', content_type: 'application/pdf', content_b64: pdf.toString('base64') }],
      },
    });
    const [att] = await settled(a.apiKey, sent.body.message_id);
    const r = (await textOf(a.apiKey, sent.body.message_id, att!.id)).body;
    expect(r).toMatchObject({ text_status: 'ready', truncated: true });
    expect(r.text).toContain('page-500-end');
    expect(r.text).not.toContain('page-501-end');
  }, 120_000);
});

describe('file names in Content-Disposition', () => {
  it('any name is served as an attachment with an ASCII filename and the UTF-8 filename* (curl)', async () => {
    const name = 'Übersicht "Q3";\\x.html';
    const sent = await rest(t, 'POST', '/messages/send', {
      key: a.apiKey,
      body: {
        to: 'v@outside.test',
        text: 'x',
        attachments: [{ filename: name, content_type: 'text/html', content_b64: Buffer.from('<script>alert(1)</script>').toString('base64') }],
      },
    });
    const [att] = await attachmentsOf(a.apiKey, sent.body.message_id);
    const got = await curl(`${t.apiBase}/messages/${sent.body.message_id}/attachments/${att!.id}/content`, [`Authorization: Bearer ${a.apiKey}`]);
    expect(got.status).toBe(200);
    expect(got.headers['content-type']).toBe('text/html');
    expect(got.headers['content-disposition']).toBe(`attachment; filename="_bersicht _Q3___x.html"; filename*=UTF-8''%C3%9Cbersicht%20%22Q3%22%3B_x.html`);
    expect(got.headers['content-security-policy']).toBe("default-src 'none'; sandbox");
  });
});

describe('messages stored before attachments had rows', () => {
  it('get their rows on first read, and their text', async () => {
    const marker = tag();
    const sent = await rest(t, 'POST', '/messages/send', {
      key: a.apiKey,
      body: {
        to: 'z@outside.test',
        text: 'old',
        attachments: [{ filename: 'old.txt', content_type: 'text/plain', content_b64: Buffer.from(`old ${marker}`).toString('base64') }],
      },
    });
    const id: string = sent.body.message_id;
    await settled(a.apiKey, id);
    // As a message stored before: its attachments only in the sealed body.
    await t.db.messageAttachment.deleteMany({ where: { messageId: id } });
    const [again] = await settled(a.apiKey, id);
    expect(again).toMatchObject({ id: expect.stringMatching(/^att_/), filename: 'old.txt', text_status: 'ready' });
    expect((await textOf(a.apiKey, id, again!.id)).body.text).toBe(`old ${marker}`);
    expect(await t.db.messageAttachment.count({ where: { messageId: id } })).toBe(1);
  }, 120_000);
});

describe('bulk sends, storage and retention', () => {
  it("a bulk job names its messages' attachments and the worker reads them", async () => {
    const marker = tag();
    const job = await rest(t, 'POST', '/messages/send/bulk', {
      key: a.apiKey,
      body: {
        messages: [
          {
            to: a.primaryAddress,
            subject: `bulk ${marker}`,
            text: 'bulk',
            attachments: [{ filename: 'bulk.html', content_type: 'text/html', content_b64: Buffer.from(`<p>bulk ${marker}</p>`).toString('base64') }],
          },
        ],
      },
    });
    expect(job.status).toBe(200);
    const sent = await waitFor(
      'the bulk message',
      async () => {
        const list = await rest(t, 'GET', '/messages?direction=sent&limit=50', { key: a.apiKey });
        return (list.body.messages as { id: string; subject: string }[]).find((m) => m.subject === `bulk ${marker}`) ?? null;
      },
      60_000,
    );
    const [att] = await settled(a.apiKey, sent.id);
    expect(att).toMatchObject({ filename: 'bulk.html', text_status: 'ready', detected_type: 'text/html' });
    expect((await textOf(a.apiKey, sent.id, att!.id)).body.text).toContain(`bulk ${marker}`);
  }, 120_000);

  it('the text counts in storage with its message, and the retention window reclaims it with the body', async () => {
    const b = await signupAccount(t);
    const text = `stored text ${tag()} `.repeat(2000);
    const sent = await rest(t, 'POST', '/messages/send', {
      key: b.apiKey,
      body: {
        to: 'w@outside.test',
        text: 'kept',
        attachments: [{ filename: 'kept.txt', content_type: 'text/plain', content_b64: Buffer.from(text).toString('base64') }],
      },
    });
    const id: string = sent.body.message_id;
    const [att] = await settled(b.apiKey, id);
    expect(att).toMatchObject({ text_status: 'ready', text_bytes: Buffer.byteLength(text) });
    // Twelve days ago: the account and the message; storage of the two days since it was ten days old.
    await exec(t.db, k.updateTable('messages').set({ recorded_at: sql`recorded_at - interval '12 days'` }).where('id', '=', id));
    await exec(t.db, k.updateTable('accounts').set({ created_at: sql`created_at - interval '12 days'` }).where('id', '=', b.accountId));
    const m = await t.db.message.findUniqueOrThrow({ where: { id } });
    await t.runtime.worker!.billing.cycle();
    const storage = await t.db.ledgerEntry.findMany({ where: { accountId: b.accountId, type: 'storage' } });
    expect(storage.map((e) => e.quantity)).toEqual([BigInt(m.sizeBytes + Buffer.byteLength(text)), BigInt(m.sizeBytes + Buffer.byteLength(text))]);

    // The retention window (14 days by default) passes: body and text are reclaimed together.
    const later = new Date(Date.now() + 3 * 86_400_000);
    expect(await reclaimExpiredBodies({ ...t.svc, clock: { now: () => later } })).toBeGreaterThanOrEqual(1);
    expect((await t.db.messageAttachment.findUniqueOrThrow({ where: { id: att!.id } })).textEnc).toBeNull();
    const gone = await textOf(b.apiKey, id, att!.id);
    expect([gone.status, gone.body.error.code]).toEqual([410, 'body_reclaimed']);
  }, 120_000);
});

describe('keys, SDK, MCP and reclaiming', () => {
  it('a box-restricted key reads the attachments of its boxes, not those of other boxes', async () => {
    const box = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: `own-${tag()}` } });
    expect(box.status).toBe(200);
    const key = (await mintKey(t, a.apiKey, ['receive'], { allowed_boxes: [box.body.address] })).api_key;
    const file = (name: string) => [{ filename: name, content_type: 'text/plain', content_b64: Buffer.from(`secret ${name}`).toString('base64') }];
    const other = await rest(t, 'POST', '/messages/send', { key: a.apiKey, body: { to: 'x@outside.test', text: 'x', attachments: file('other.txt') } });
    const own = await rest(t, 'POST', '/messages/send', {
      key: a.apiKey,
      body: { from: box.body.address, to: 'x@outside.test', text: 'x', attachments: file('own.txt') },
    });
    expect([other.status, own.status]).toEqual([200, 200]);
    const [otherAtt] = await attachmentsOf(a.apiKey, other.body.message_id);
    const [ownAtt] = await attachmentsOf(a.apiKey, own.body.message_id);
    const paths = (m: string, id: string) => [`/messages/${m}/attachments/${id}`, `/messages/${m}/attachments/${id}/text`];
    for (const path of paths(other.body.message_id, otherAtt!.id)) expect((await rest(t, 'GET', path, { key })).status).toBe(404);
    for (const path of paths(own.body.message_id, ownAtt!.id)) expect((await rest(t, 'GET', path, { key })).status).toBe(200);
    const content = (m: string, id: string) => curl(`${t.apiBase}/messages/${m}/attachments/${id}/content`, [`Authorization: Bearer ${key}`]);
    expect((await content(other.body.message_id, otherAtt!.id)).status).toBe(404);
    const mine = await content(own.body.message_id, ownAtt!.id);
    expect(mine.status).toBe(200);
    expect(mine.body.toString()).toBe('secret own.txt');
  });

  it('the SDK downloads and reads the text; MCP has the tools; DELETE reclaims the attachments', async () => {
    const marker = tag();
    const docx = await makeDocx(`Memo ${marker}`);
    const sent = await rest(t, 'POST', '/messages/send', {
      key: a.apiKey,
      body: {
        to: 'y@outside.test',
        text: 'memo',
        attachments: [
          {
            filename: 'memo.docx',
            content_type: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
            content_b64: docx.toString('base64'),
          },
        ],
      },
    });
    const id: string = sent.body.message_id;
    const [att] = await attachmentsOf(a.apiKey, id);
    const client = createBoxesClient({ baseUrl: t.url, apiKey: a.apiKey });
    const file = await downloadAttachment(client, id, att!.id);
    expect(Buffer.from(file.bytes).equals(docx)).toBe(true);
    const text = await waitForAttachmentText(client, id, att!.id, { timeoutMs: 60_000 });
    expect(text.text).toContain(`Memo ${marker}`);

    const mcp = new Client({ name: 'boxes-e2e', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${a.apiKey}` } } }));
    const tools = (await mcp.listTools()).tools.map((x) => x.name);
    const textTool = tools.find((n) => /attachment.*text|text.*attachment/i.test(n));
    expect(textTool, tools.join(', ')).toBeDefined();
    const r = await mcp.callTool({ name: textTool!, arguments: { id, attachment_id: att!.id } });
    expect((r.structuredContent as { text: string }).text).toContain(`Memo ${marker}`);
    // Text and file names are what a sender wrote: inside the untrusted block.
    for (const [name, result] of [
      [textTool!, r],
      ['messages_attachment', await mcp.callTool({ name: 'messages_attachment', arguments: { id, attachment_id: att!.id } })],
    ] as const) {
      const text = (result.content as { text: string }[])[0]!.text;
      expect(text, name).toMatch(/\n<untrusted-mail-content sender_verified="[a-z]+">\n/);
      expect(text, name).toContain('memo.docx');
    }
    await mcp.close();

    const del = await rest(t, 'DELETE', `/messages/${id}`, { key: a.apiKey });
    expect(del.status).toBe(200);
    const after = await rest(t, 'GET', `/messages/${id}/attachments/${att!.id}/text`, { key: a.apiKey });
    expect(after.status).toBe(410);
    expect(after.body.error.code).toBe('body_reclaimed');
    const content = await curl(`${t.apiBase}/messages/${id}/attachments/${att!.id}/content`, [`Authorization: Bearer ${a.apiKey}`]);
    expect(content.status).toBe(410);
    const row = await t.db.messageAttachment.findUniqueOrThrow({ where: { id: att!.id } });
    expect(row.textEnc).toBeNull();
    expect(await attachmentPlainText(t.svc, att!.id)).toBeNull();
  }, 120_000);
});
