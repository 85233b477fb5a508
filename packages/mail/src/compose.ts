/** Building outgoing MIME with nodemailer's MailComposer, and DKIM-signing it with nodemailer's signer. */
import MailComposer from 'nodemailer/lib/mail-composer';
import { Encoder as Base64Encoder } from 'nodemailer/lib/base64';
import { Encoder as QpEncoder } from 'nodemailer/lib/qp';
import { createHash, sign as cryptoSign, type KeyObject } from 'node:crypto';
import { Writable } from 'node:stream';
import { domainToASCII } from 'node:url';
import { promisify } from 'node:util';

export interface OutgoingAttachment {
  filename: string;
  content: Buffer;
  contentType: string;
  /** Makes the attachment inline (Content-ID), so HTML can reference it as cid:<contentId>. */
  contentId?: string | undefined;
}

export interface OutgoingMail {
  from: { name?: string | undefined; address: string };
  to: string[];
  cc: string[];
  /** Only for a message that is not sent (a draft as mail clients see it): written as a Bcc header. */
  bcc?: string[] | undefined;
  replyTo: string[];
  subject: string;
  text?: string | undefined;
  html?: string | undefined;
  /** Custom headers, already validated (no reserved names, no line breaks). */
  headers: Record<string, string>;
  attachments: OutgoingAttachment[];
  /** Message-ID including angle brackets. */
  messageId: string;
  date: Date;
  inReplyTo?: string | undefined;
  references?: string[] | undefined;
}

/**
 * Every line break as CRLF (RFC 5322 section 2.1). MailComposer writes its own header and boundary lines with
 * CRLF but copies a 7bit or quoted-printable body's line breaks as given, so text joined with LF (a request's
 * text, the box's signature, the trailer) would leave bare LFs among the CRLFs that IMAP clients then serve.
 */
export const toCrlf = (s: string): string => s.replace(/\r\n|\r|\n/g, '\r\n');

/**
 * The RFC 5322 message, without Bcc (bcc recipients only appear in the SMTP envelope) unless bcc is given (a
 * draft's rendering).
 */
export async function composeMessage(m: OutgoingMail): Promise<Buffer> {
  const composer = new MailComposer({
    from: m.from.name ? { name: m.from.name, address: m.from.address } : m.from.address,
    to: m.to.length ? m.to : undefined,
    cc: m.cc.length ? m.cc : undefined,
    bcc: m.bcc?.length ? m.bcc : undefined,
    replyTo: m.replyTo.length ? m.replyTo : undefined,
    subject: m.subject,
    text: m.text === undefined ? undefined : toCrlf(m.text),
    html: m.html === undefined ? undefined : toCrlf(m.html),
    // As a list: given an object, nodemailer takes one that has `key` and `value` members for a single header
    // named by the first ({"key": "Sender", "value": ...} would set Sender and drop the rest).
    headers: Object.entries(m.headers).map(([key, value]) => ({ key, value })),
    messageId: m.messageId,
    date: m.date,
    inReplyTo: m.inReplyTo,
    references: m.references,
    attachments: m.attachments.map((a) => ({
      filename: a.filename,
      content: a.content,
      contentType: a.contentType,
      // nodemailer makes a message/rfc822 part inline unless told: a forwarded original is an attachment.
      ...(a.contentId ? { cid: a.contentId, contentDisposition: 'inline' as const } : { contentDisposition: 'attachment' as const }),
    })),
    // Content comes only from the request: never let a value be read as a file path or URL.
    disableFileAccess: true,
    disableUrlAccess: true,
  });
  const node = composer.compile();
  if (m.bcc?.length) node.keepBcc = true;
  return treeBytes(node) ?? buildNode(node);
}

/** A compiled tree's bytes written at once (see writeTree), or null for a tree that must be streamed. */
export function treeBytes(node: ReturnType<MailComposer['compile']>): Buffer | null {
  const chunks: Buffer[] = [];
  return writeTree(node as unknown as TreeNode, chunks) ? finishBytes(chunks) : null;
}

/** The parts of nodemailer's MimeNode that its stream() reads. */
interface TreeNode {
  _raw?: unknown;
  content?: unknown;
  contentType?: string;
  multipart?: unknown;
  boundary?: string;
  childNodes: TreeNode[];
  getTransferEncoding(): string | false;
  buildHeaders(): string;
}

/**
 * The tree's bytes written as MimeNode.stream() writes them (the headers and a blank line, the content encoded,
 * then each child between boundary lines), but at once: stream() reads every part through a stream of its content
 * joined to an encoder stream by stream.pipeline, with a turn of the event loop between the steps. The encoders
 * are nodemailer's own, fed the content as the one chunk stream() feeds them. False, with nothing of use written,
 * for a tree whose content is not all in memory (a stream, a file, a URL, raw MIME): that goes through stream().
 */
function writeTree(node: TreeNode, out: Buffer[]): boolean {
  if (node._raw) return false;
  const content = node.content;
  let bytes: Buffer | null = null;
  if (typeof content === 'string') bytes = content ? Buffer.from(content) : null;
  else if (Buffer.isBuffer(content)) bytes = content.length ? content : null;
  else if (content) return false;
  const transferEncoding = node.getTransferEncoding();
  out.push(Buffer.from(`${node.buildHeaders()}\r\n\r\n`));
  if (bytes) {
    if (transferEncoding === 'base64') out.push(...encodeAll(new Base64Encoder({}), bytes));
    else if (transferEncoding === 'quoted-printable') out.push(...encodeAll(new QpEncoder({ binary: !/^text\//i.test(node.contentType || '') }), bytes));
    else out.push(bytes);
  }
  if (node.multipart) {
    for (let i = 0; i < node.childNodes.length; i++) {
      out.push(Buffer.from(`${i ? '\r\n' : ''}--${node.boundary}\r\n`));
      if (!writeTree(node.childNodes[i]!, out)) return false;
    }
    out.push(Buffer.from(`\r\n--${node.boundary}--\r\n`));
  }
  return true;
}

/** What an encoder stream writes for the input as one chunk, run through its transform and flush steps directly. */
function encodeAll(encoder: Base64Encoder | QpEncoder, input: Buffer): Buffer[] {
  const out: Buffer[] = [];
  const steps = encoder as unknown as {
    push(chunk: Buffer | string | null, encoding?: BufferEncoding): boolean;
    _transform(chunk: Buffer, encoding: string, done: (err?: Error | null) => void): void;
    _flush(done: (err?: Error | null) => void): void;
  };
  let failed: Error | null = null;
  const done = (err?: Error | null) => {
    if (err) failed = err;
  };
  steps.push = (chunk, encoding) => {
    if (chunk !== null) out.push(typeof chunk === 'string' ? Buffer.from(chunk, encoding ?? 'utf8') : chunk);
    return true;
  };
  steps._transform(input, 'buffer', done);
  steps._flush(done);
  if (failed) throw failed;
  return out;
}

/** The bytes joined, ending with a line break as build() makes sure (a transform after the tree's stream). */
function finishBytes(chunks: Buffer[]): Buffer {
  let i = chunks.length - 1;
  while (i >= 0 && !chunks[i]!.length) i--;
  const last = i >= 0 ? chunks[i]![chunks[i]!.length - 1] : undefined;
  if (last !== 0x0a) chunks.push(Buffer.from(last === 0x0d ? '\n' : '\r\n'));
  return Buffer.concat(chunks);
}

/**
 * The bytes of a compiled MIME tree: what node.build() returns, written straight into a collector. build() reads
 * them through createReadStream, a PassThrough joined by stream.pipeline to a transform that only makes sure of
 * the final line break; that pipeline (an AbortController, an abort error made when it finishes, listeners on
 * every stage) cost more than the collecting itself. The final line break is added as that transform does (finishBytes).
 */
function buildNode(node: ReturnType<MailComposer['compile']>): Promise<Buffer> {
  const tree = node as unknown as { stream(out: Writable, options: object, done: (err?: Error | null) => void): void };
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const out = new Writable({
      write(chunk: Buffer, _encoding, callback) {
        chunks.push(chunk);
        callback();
      },
    });
    out.once('error', reject);
    out.once('finish', () => resolve(finishBytes(chunks)));
    tree.stream(out, {}, (err) => {
      if (err) {
        out.destroy(err);
        reject(err);
      } else out.end();
    });
  });
}

export interface DkimKey {
  domainName: string;
  keySelector: string;
  /**
   * PKCS#8 PEM, or the key already parsed (crypto.createPrivateKey): nodemailer hands it to crypto's sign, which
   * parses a PEM string on every signature; a KeyObject halves the cost of an RSA-2048 signature (0.53 -> 0.27 ms).
   */
  privateKey: string | KeyObject;
}

/**
 * The message with its DKIM-Signature header (relaxed/relaxed, rsa-sha256, the header fields nodemailer signs),
 * byte for byte what nodemailer's DKIM signer writes (a test holds the two together). Done here rather than through
 * nodemailer's signer, which streams the message through three transforms: the body hash is one pass over the
 * bytes. The RSA signature, the one costly step (RSA-2048: from about 0.25 ms to over 1 ms of CPU on the 2-core
 * bench machines), runs on libuv's threadpool (crypto.sign with a callback), not on the calling thread: that
 * thread is the one that answers the API and runs the deliveries, and under load it is the busiest part of the
 * process while the other core has room. The pool's own size (4 threads unless UV_THREADPOOL_SIZE says otherwise)
 * bounds how many signatures run at once; it is shared with the app passwords' scrypt checks (about 40 ms each, on
 * a login whose password was not verified lately), behind which a signature may wait. Measured in
 * docs/benchmarks.md (send and bulk): more deliveries a second, and no slower with the machine's cores kept busy
 * by other processes.
 */
export async function dkimSign(raw: Buffer, key: DkimKey): Promise<Buffer> {
  const split = headerEnd(raw);
  const rawHeaders = raw.subarray(0, split);
  const bodyHash = bodyHashOf(raw.subarray(split));
  const { headers, fieldNames } = relaxedHeaders(parseHeaderLines(rawHeaders));
  const dkimHeader = dkimHeaderPrefix(key.domainName, key.keySelector, fieldNames, bodyHash);
  const signed = `${headers}dkim-signature:${relaxedHeaderValue(dkimHeader)}`;
  const signature = await signOnPool('sha256', Buffer.from(signed, 'latin1'), key.privateKey);
  const field =
    dkimHeader +
    signature
      .toString('base64')
      .replace(/(^.{73}|.{75}(?!\r?\n|\r))/g, '$&\r\n ')
      .trim();
  return Buffer.concat([Buffer.from(`${field}\r\n`, 'latin1'), raw]);
}

/** crypto.sign with a callback: the signature is computed on libuv's threadpool. */
const signOnPool = promisify(cryptoSign) as (algorithm: string, data: Buffer, key: string | KeyObject) => Promise<Buffer>;

/**
 * The last body hashed and its hash (bh=). The messages of a bulk batch without personal content share their body
 * byte for byte, and are signed one after another: the relaxed canonical form and its SHA-256 are then made once.
 * A body that differs costs one comparison, which stops at the first differing byte.
 */
let lastBody: { bytes: Buffer; hash: string } | null = null;

function bodyHashOf(body: Buffer): string {
  if (lastBody?.bytes.equals(body)) return lastBody.hash;
  const hash = createHash('sha256').update(relaxedBody(body)).digest('base64');
  // A copy: the caller's buffer may be reused for something else once it has its signed message.
  lastBody = { bytes: Buffer.from(body), hash };
  return hash;
}

/** Where the body starts: after the first empty line (LF LF or LF CR LF); the whole message if there is none. */
function headerEnd(raw: Buffer): number {
  for (let i = raw.indexOf(0x0a); i !== -1; i = raw.indexOf(0x0a, i + 1)) {
    if (i === 0) continue;
    if (raw[i - 1] === 0x0a || (raw[i - 1] === 0x0d && i > 1 && raw[i - 2] === 0x0a)) return i + 1;
  }
  return raw.length;
}

/** The header fields, unfolded (continuation lines kept with their line break), one byte per character. */
function parseHeaderLines(rawHeaders: Buffer): { key: string; line: string }[] {
  const lines: string[] = [];
  for (const rawLine of rawHeaders.toString('latin1').split(/\r?\n/)) {
    if (lines.length && (rawLine.startsWith(' ') || rawLine.startsWith('\t'))) lines[lines.length - 1] += `\n${rawLine}`;
    else lines.push(rawLine);
  }
  return lines
    .filter((line) => /[^ \t\r]/.test(line))
    .map((line) => ({
      key: line
        .slice(0, Math.max(0, line.indexOf(':')))
        .replace(/^[ \t]+|[ \t]+$/g, '')
        .toLowerCase(),
      line,
    }));
}

/** The header fields DKIM signs (RFC 6376 5.4's list, as nodemailer signs them), the last of each name. */
const SIGNED_FIELDS = [
  'from',
  'sender',
  'reply-to',
  'subject',
  'date',
  'message-id',
  'to',
  'cc',
  'mime-version',
  'content-type',
  'content-transfer-encoding',
  'content-id',
  'content-description',
  'resent-date',
  'resent-from',
  'resent-sender',
  'resent-to',
  'resent-cc',
  'resent-message-id',
  'in-reply-to',
  'references',
  'list-id',
  'list-help',
  'list-unsubscribe',
  'list-subscribe',
  'list-post',
  'list-owner',
  'list-archive',
  'otp-token',
];

function relaxedHeaders(lines: { key: string; line: string }[]): { headers: string; fieldNames: string } {
  const found = new Map<string, string>();
  for (let i = lines.length - 1; i >= 0; i--) {
    const { key, line } = lines[i]!;
    if (SIGNED_FIELDS.includes(key) && !found.has(key)) found.set(key, relaxedHeaderValue(line));
  }
  const fields = SIGNED_FIELDS.filter((f) => found.has(f));
  return { headers: `${fields.map((f) => `${f}:${found.get(f)}`).join('\r\n')}\r\n`, fieldNames: fields.join(':') };
}

/** Relaxed canonicalization of a header field's value (RFC 6376 3.4.2): unfolded, runs of SP and HTAB as one SP, trimmed. */
function relaxedHeaderValue(line: string): string {
  return line
    .slice(line.indexOf(':') + 1)
    .replace(/\r?\n/g, '')
    .replace(/[ \t]+/g, ' ')
    .replace(/^ | $/g, '');
}

function dkimHeaderPrefix(domainName: string, keySelector: string, fieldNames: string, bodyHash: string): string {
  const clean = (value: string) => value.replace(/[\x00-\x1f\x7f;=]/g, '');
  const tags = [
    'v=1',
    'a=rsa-sha256',
    'c=relaxed/relaxed',
    `d=${domainToASCII(clean(domainName)) || clean(domainName).toLowerCase()}`,
    'q=dns/txt',
    `s=${clean(keySelector)}`,
    `bh=${bodyHash}`,
    `h=${clean(fieldNames)}`,
  ];
  return `${foldLines(`DKIM-Signature: ${tags.join('; ')}`)};\r\n b=`;
}

/** nodemailer's mime-funcs foldLines at 76 characters (not after spaces): the DKIM header as its signer folds it. */
function foldLines(str: string, lineLength = 76): string {
  let pos = 0;
  let result = '';
  while (pos < str.length) {
    let line = str.substr(pos, lineLength);
    if (line.length < lineLength) {
      result += line;
      break;
    }
    const br = line.match(/^[^\n\r]*(\r?\n|\r)/);
    if (br) {
      result += br[0];
      pos += br[0].length;
      continue;
    }
    // Broken at the last whitespace of the line, or else after the word that runs past it.
    const tail = line.match(/(\s+)[^\s]*$/);
    if (tail && tail[0].length < line.length) line = line.substr(0, line.length - tail[0].length);
    else {
      const word = str.substr(pos + line.length).match(/^[^\s]+(\s*)/);
      if (word) line += word[0].substr(0, word[0].length - (word[1] || '').length);
    }
    result += line;
    pos += line.length;
    if (pos < str.length) result += '\r\n';
  }
  return result;
}

/**
 * The relaxed canonical form of a body (RFC 6376 3.4.4): whitespace at the end of a line dropped, runs of SP and
 * HTAB within a line as one SP, every line ending with CRLF (a bare LF too), empty lines at the end dropped, a
 * non-empty body ending with CRLF; a CR not followed by LF is content.
 */
function relaxedBody(body: Buffer): Buffer {
  const out = Buffer.allocUnsafe(body.length * 2 + 2);
  let pos = 0;
  let lineHasContent = false;
  let pendingWsp = false;
  let pendingCr = false;
  let emptyLines = 0;
  const content = (c: number) => {
    if (!lineHasContent) {
      // Empty lines count only once content follows them.
      if (emptyLines) {
        for (; emptyLines > 0; emptyLines--) {
          out[pos++] = 0x0d;
          out[pos++] = 0x0a;
        }
      }
      lineHasContent = true;
    }
    if (pendingWsp) {
      out[pos++] = 0x20;
      pendingWsp = false;
    }
    out[pos++] = c;
  };
  for (let i = 0; i < body.length; i++) {
    const c = body[i]!;
    if (c === 0x0a) {
      if (lineHasContent) {
        out[pos++] = 0x0d;
        out[pos++] = 0x0a;
        lineHasContent = false;
      } else emptyLines++;
      pendingWsp = false;
      pendingCr = false;
      continue;
    }
    if (pendingCr) {
      content(0x0d);
      pendingCr = false;
    }
    if (c === 0x0d) pendingCr = true;
    else if (c === 0x20 || c === 0x09) pendingWsp = true;
    else content(c);
  }
  if (pendingCr) content(0x0d);
  if (lineHasContent) {
    out[pos++] = 0x0d;
    out[pos++] = 0x0a;
  }
  return out.subarray(0, pos);
}
