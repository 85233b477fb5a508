/**
 * What an agent reading its mail does, end to end with the real pieces: an invoice arrives over SMTP as a PDF
 * whose text alone says which invoice it is; the worker extracts the text and says so (attachment.text_ready);
 * the agent searches "invoice 1234" and finds that message first, with the match highlighted, above another
 * invoice that only shares the word; it labels the thread `paid`; a person's mail client (Python's imaplib)
 * sees `paid` as a keyword on the message.
 */
import { randomBytes } from 'node:crypto';
import { PDFDocument, StandardFonts } from 'pdf-lib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { appPassword } from './imap-helpers';
import { execFileAsync, smtpClient, waitForEvent, waitForReceived } from './mail-receive-helpers';

let t: TestServer;
let a: TestAccount;

beforeAll(async () => {
  t = await startTestServer({ mail: true, worker: true });
  a = await signupAccount(t, `invoice-${randomBytes(4).toString('hex')}@example.com`);
});
afterAll(() => t?.stop());

async function pdf(line: string): Promise<Buffer> {
  const doc = await PDFDocument.create();
  const font = await doc.embedFont(StandardFonts.Helvetica);
  doc.addPage().drawText(line, { x: 50, y: 700, size: 14, font });
  return Buffer.from(await doc.save());
}

describe('an agent and an invoice', () => {
  it('text ready, found first by search with a highlight, thread labelled paid, the label seen in a mail client', async () => {
    const client = smtpClient(t.smtpPort!);
    // Another invoice first: it shares the word "invoice" (in its body), not the number.
    await client.sendMail({
      envelope: { from: 'billing@vendor.test', to: [a.primaryAddress] },
      from: 'billing@vendor.test',
      to: a.primaryAddress,
      subject: 'Your statement',
      text: 'Invoice 77 is attached as promised.',
    });
    const subject = `Documents ${randomBytes(3).toString('hex')}`;
    await client.sendMail({
      envelope: { from: 'accounts@supplier.test', to: [a.primaryAddress] },
      from: 'accounts@supplier.test',
      to: a.primaryAddress,
      subject,
      text: 'Please find the attached file.',
      attachments: [{ filename: 'scan.pdf', content: await pdf('INVOICE 1234 - total due 512.00 EUR'), contentType: 'application/pdf' }],
    });
    client.close();
    const received = await waitForReceived(t, a.apiKey, subject);

    // Told when the text is ready (the event carries the attachment and its status).
    const ready = await waitForEvent(t, a.apiKey, 'attachment.text_ready', (e) => e.data.message_id === received.id, 60_000);
    expect(ready.data).toMatchObject({ status: 'ready', filename: 'scan.pdf', detected_type: 'application/pdf' });

    // Found first, the number only in the PDF; the highlight marks the match.
    const found = await rest(t, 'GET', `/messages/search?q=${encodeURIComponent('invoice 1234')}`, { key: a.apiKey });
    expect(found.status, JSON.stringify(found.body)).toBe(200);
    expect(found.body.results.map((r: { message: { id: string } }) => r.message.id)).toEqual([received.id]);
    const plain = await rest(t, 'GET', '/messages/search?q=invoice', { key: a.apiKey });
    expect(plain.body.results).toHaveLength(2);
    const text = await rest(t, 'GET', `/messages/${received.id}/attachments/${ready.data.attachment_id}/text`, { key: a.apiKey });
    expect(text.body.text).toContain('INVOICE 1234');
    // The page's highlights come from the decrypted subject and body (the index holds no text): the subject
    // does not match, so it is returned without a marker.
    expect(found.body.results[0].highlights.subject).toBe(subject);

    // The whole thread labelled paid.
    const labelled = await rest(t, 'POST', `/threads/${received.thread_id}/labels`, { key: a.apiKey, body: { add: ['paid'] } });
    expect(labelled.status, JSON.stringify(labelled.body)).toBe(200);
    const byLabel = await rest(t, 'GET', '/messages?label=paid', { key: a.apiKey });
    expect(byLabel.body.messages.map((m: { id: string }) => m.id)).toEqual([received.id]);
    const searchPaid = await rest(t, 'GET', '/messages/search?q=invoice&label=paid', { key: a.apiKey });
    expect(searchPaid.body.results.map((r: { message: { id: string } }) => r.message.id)).toEqual([received.id]);

    // A person's mail client sees the label as a keyword on that message.
    const password = (await appPassword(t, a)).password;
    const script = `
import imaplib, json, ssl, sys
port, user, pw, subject = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
M = imaplib.IMAP4_SSL('127.0.0.1', port, ssl_context=ctx)
M.login(user, pw)
M.select('INBOX')
typ, data = M.search(None, 'SUBJECT', '"%s"' % subject)
seq = data[0].split()[0]
typ, flags = M.fetch(seq, '(FLAGS)')
typ, paid = M.search(None, 'KEYWORD', 'paid')
M.logout()
print(json.dumps({'flags': flags[0].decode(), 'paid': paid[0].decode().split(), 'seq': seq.decode()}))
`;
    const { stdout } = await execFileAsync('python3', ['-c', script, String(t.imapPort), a.primaryAddress, password, subject], { timeout: 30_000 });
    const out = JSON.parse(stdout.trim());
    expect(out.flags).toMatch(/FLAGS \([^)]*\bpaid\b[^)]*\)/);
    expect(out.paid).toEqual([out.seq]);
  }, 120_000);
});
