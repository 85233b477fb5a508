/**
 * Every line of a message Boxes composes ends in CRLF (RFC 5322 section 2.1), whatever the request's text and
 * html, the box's signature and the trailer use: the stored sent copy, the copy the receiving box stored, and
 * both as a mail client fetches them over IMAP (BODY[] through Python's imaplib) have no bare LF and no bare CR.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { open } from '@boxes/core';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { appPassword, execFileAsync, requireTool, waitFor } from './imap-helpers';
import { send, waitSettled } from './mail-send-helpers';

let t: TestServer;
let sender: TestAccount;
let recipient: TestAccount;

beforeAll(async () => {
  t = await startTestServer({ mail: true, worker: true });
  sender = await signupAccount(t, 'crlf-sender@example.com');
  recipient = await signupAccount(t, 'crlf-recipient@example.com');
}, 60_000);
afterAll(() => t?.stop());

/** The offsets of LF not after CR and of CR not before LF. */
function bareLineBreaks(raw: Buffer): { lf: number[]; cr: number[] } {
  const lf: number[] = [];
  const cr: number[] = [];
  for (let i = 0; i < raw.length; i++) {
    if (raw[i] === 0x0a && raw[i - 1] !== 0x0d) lf.push(i);
    if (raw[i] === 0x0d && raw[i + 1] !== 0x0a) cr.push(i);
  }
  return { lf, cr };
}

function expectCrlfOnly(what: string, raw: Buffer): void {
  const bare = bareLineBreaks(raw);
  const show = (at: number) => JSON.stringify(raw.subarray(Math.max(0, at - 30), at + 30).toString('latin1'));
  expect(bare.lf, `${what}: bare LF at ${bare.lf.slice(0, 3).map(show).join(', ')}`).toEqual([]);
  expect(bare.cr, `${what}: bare CR at ${bare.cr.slice(0, 3).map(show).join(', ')}`).toEqual([]);
}

async function storedRaw(messageId: string): Promise<Buffer> {
  const row = await waitFor(`raw of ${messageId}`, async () => {
    const m = await t.db.message.findUnique({ where: { id: messageId }, select: { rawEnc: true } });
    return m?.rawEnc ? m : null;
  });
  return open(t.svc.secretKey, row.rawEnc!);
}

/** BODY[] of every message in a folder, as imaplib hands it over (bytes, base64 for JSON). */
async function fetchAll(user: string, password: string, folder: string): Promise<Buffer[]> {
  const script = `
import imaplib, json, ssl, sys, base64
port, user, pw, folder = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
M = imaplib.IMAP4_SSL('127.0.0.1', port, ssl_context=ctx)
M.login(user, pw)
M.select(folder, readonly=True)
typ, data = M.uid('FETCH', '1:*', '(BODY.PEEK[])')
out = [base64.b64encode(part[1]).decode() for part in data if isinstance(part, tuple)]
M.logout()
print(json.dumps(out))
`;
  const { stdout } = await execFileAsync('python3', ['-c', script, String(t.imapPort), user, password, folder], { timeout: 30_000 });
  return (JSON.parse(stdout) as string[]).map((b) => Buffer.from(b, 'base64'));
}

it('a message with LF text and html, a signature and the trailer is CRLF throughout: sent copy, received copy, and both over IMAP', async () => {
  await requireTool('python3');
  const boxes = await rest(t, 'GET', '/boxes', { key: sender.apiKey });
  const box = boxes.body.boxes[0];
  const sig = await rest(t, 'PUT', `/boxes/${box.id}/signature`, { key: sender.apiKey, body: { signature: 'Agent Smith\nOperations\r\nBoxes' } });
  expect(sig.status, JSON.stringify(sig.body)).toBe(200);
  const subject = `line endings ${Date.now()}`;
  const sent = await send(t, sender.apiKey, {
    to: recipient.primaryAddress,
    subject,
    text: 'First line\nsecond line\n\nA paragraph after a blank line.\rOld Mac line.\n',
    html: '<p>First</p>\n<p>Second</p>\n',
  });
  expect(sent.status, JSON.stringify(sent.body)).toBe(200);
  await waitSettled(t, sender.apiKey, sent.body.message_id);

  const sentRaw = await storedRaw(sent.body.message_id);
  // The signature and the trailer are in it (the parts that used to be joined with bare LF).
  expect(sentRaw.toString('latin1')).toContain('Operations');
  expect(sentRaw.toString('latin1')).toContain('Sent by an AI agent with Boxes');
  expectCrlfOnly('stored sent copy', sentRaw);

  const received = await waitFor('the received copy', async () => {
    const r = await rest(t, 'GET', '/messages?direction=received&limit=50', { key: recipient.apiKey });
    return (r.body.messages as { id: string; subject: string }[]).find((m) => m.subject === subject) ?? null;
  });
  expectCrlfOnly('stored received copy', await storedRaw(received.id));

  const senderPassword = (await appPassword(t, sender)).password;
  const recipientPassword = (await appPassword(t, recipient)).password;
  const inbox = await fetchAll(recipient.primaryAddress, recipientPassword, 'INBOX');
  const sentFolder = await fetchAll(sender.primaryAddress, senderPassword, 'Sent');
  expect(inbox.length).toBeGreaterThan(0);
  expect(sentFolder.length).toBeGreaterThan(0);
  for (const raw of inbox) expectCrlfOnly('INBOX BODY[] over IMAP', raw);
  for (const raw of sentFolder) expectCrlfOnly('Sent BODY[] over IMAP', raw);
  expect(inbox.some((r) => r.toString('latin1').includes(subject))).toBe(true);
  expect(sentFolder.some((r) => r.toString('latin1').includes(subject))).toBe(true);
}, 60_000);
