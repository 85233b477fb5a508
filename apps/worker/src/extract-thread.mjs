// The text of one attachment, read in a worker thread (attachment-text.ts starts it with memory limits and
// terminates it at the time limit): the type is read from the bytes (magic numbers), never from the name. Plain
// JavaScript so the same file runs under tsx, vitest and the production build.
import { parentPort, workerData } from 'node:worker_threads';
import { inflateRawSync } from 'node:zlib';
import { fileTypeFromBuffer } from 'file-type';

const DOCX = 'application/vnd.openxmlformats-officedocument.wordprocessingml.document';
const XLSX = 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet';
const ZIPS = new Set(['application/zip', DOCX, XLSX]);

class Refused extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/**
 * A zip (DOCX, XLSX) is handed to its reader only once it is known to inflate to at most maxUnzippedBytes in
 * all, in at most maxZipEntries entries: first by what its central directory declares, then by inflating each
 * entry here with a cap on the output (a zip that lies about its sizes stops at the cap), so a tiny file that
 * inflates huge is refused before any reader holds it.
 */
function checkZip(buf, limits) {
  const min = Math.max(0, buf.length - 65_557);
  let eocd = -1;
  for (let i = buf.length - 22; i >= min; i--) {
    if (buf.readUInt32LE(i) === 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) throw new Error('not a readable zip archive (no end of central directory)');
  const entries = buf.readUInt16LE(eocd + 10);
  const cdOffset = buf.readUInt32LE(eocd + 16);
  if (entries === 0xffff || cdOffset === 0xffffffff) throw new Refused('too_large', 'zip64 archives are not read');
  if (entries > limits.maxZipEntries) throw new Refused('too_large', `${entries} entries in the archive (at most ${limits.maxZipEntries})`);
  const tooLarge = () => new Refused('too_large', `the archive inflates to more than ${limits.maxUnzippedBytes} bytes (at most ${limits.maxUnzippedBytes})`);
  const list = [];
  let declared = 0;
  let p = cdOffset;
  for (let n = 0; n < entries; n++) {
    if (p + 46 > buf.length || buf.readUInt32LE(p) !== 0x02014b50) throw new Error('corrupt zip central directory');
    const size = buf.readUInt32LE(p + 24);
    if (size === 0xffffffff) throw new Refused('too_large', 'zip64 entries are not read');
    declared += size;
    if (declared > limits.maxUnzippedBytes) throw tooLarge();
    list.push({ method: buf.readUInt16LE(p + 10), compressed: buf.readUInt32LE(p + 20), offset: buf.readUInt32LE(p + 42) });
    p += 46 + buf.readUInt16LE(p + 28) + buf.readUInt16LE(p + 30) + buf.readUInt16LE(p + 32);
  }
  let inflated = 0;
  for (const e of list) {
    if (e.offset + 30 > buf.length || buf.readUInt32LE(e.offset) !== 0x04034b50) throw new Error('corrupt zip entry');
    const start = e.offset + 30 + buf.readUInt16LE(e.offset + 26) + buf.readUInt16LE(e.offset + 28);
    const data = buf.subarray(start, start + e.compressed);
    if (e.method === 0) inflated += data.length;
    else if (e.method === 8) {
      try {
        inflated += inflateRawSync(data, { maxOutputLength: limits.maxUnzippedBytes - inflated + 1 }).length;
      } catch (err) {
        if (err?.code === 'ERR_BUFFER_TOO_LARGE') throw tooLarge();
        throw new Error(`corrupt zip entry: ${err?.message ?? err}`);
      }
    } else throw new Error(`zip compression method ${e.method} is not read`);
    if (inflated > limits.maxUnzippedBytes) throw tooLarge();
  }
}

/** Text without NUL bytes that decodes as UTF-8: what plain text, CSV and HTML are. */
function asText(buf) {
  if (buf.subarray(0, 65_536).includes(0)) return null;
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(buf);
  } catch {
    return null;
  }
}

async function pdfText(buf, limits) {
  const { getDocumentProxy } = await import('unpdf');
  const pdf = await getDocumentProxy(new Uint8Array(buf));
  const pages = Math.min(pdf.numPages, limits.maxPdfPages);
  const out = [];
  let chars = 0;
  for (let i = 1; i <= pages && chars <= limits.maxTextChars; i++) {
    const page = await pdf.getPage(i);
    const content = await page.getTextContent();
    const text = content.items.map((it) => ('str' in it ? it.str + (it.hasEOL ? '\n' : '') : '')).join('');
    out.push(text);
    chars += text.length;
  }
  return { text: out.join('\n\n'), truncated: pdf.numPages > pages };
}

async function docxText(buf) {
  const mammoth = (await import('mammoth')).default;
  const r = await mammoth.extractRawText({ buffer: buf });
  return { text: r.value };
}

async function xlsxText(buf, limits) {
  const ExcelJS = (await import('exceljs')).default;
  const wb = new ExcelJS.Workbook();
  await wb.xlsx.load(buf);
  const out = [];
  let chars = 0;
  wb.eachSheet((sheet) => {
    if (chars > limits.maxTextChars) return;
    out.push(`# ${sheet.name}`);
    sheet.eachRow({ includeEmpty: false }, (row) => {
      if (chars > limits.maxTextChars) return;
      const values = Array.isArray(row.values) ? row.values.slice(1) : [];
      const line = values.map((v) => cellText(v)).join('\t');
      out.push(line);
      chars += line.length + 1;
    });
  });
  return { text: out.join('\n') };
}

function cellText(v) {
  if (v === null || v === undefined) return '';
  if (v instanceof Date) return v.toISOString();
  if (typeof v === 'object') {
    if ('richText' in v && Array.isArray(v.richText)) return v.richText.map((r) => r.text).join('');
    if ('text' in v) return String(v.text);
    if ('result' in v) return cellText(v.result);
    return '';
  }
  return String(v);
}

async function htmlText(html) {
  const { convert } = await import('html-to-text');
  return { text: convert(html, { wordwrap: false, selectors: [{ selector: 'img', format: 'skip' }] }) };
}

const looksHtml = (s) => /^\s*(<!doctype html|<html[\s>]|<head[\s>]|<body[\s>])/i.test(s.slice(0, 2048));

/** The type read from the bytes, reported whatever the outcome. */
let detected = null;

async function extract({ bytes, declaredType, filename, limits }) {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const found = await fileTypeFromBuffer(buf);
  detected = found?.mime ?? null;
  if (found) {
    // Any zip is measured before a byte of it is inflated, whatever it turns out to be.
    if (ZIPS.has(found.mime)) checkZip(buf, limits);
    if (found.mime === 'application/pdf') return { detectedType: found.mime, ...(await pdfText(buf, limits)) };
    if (found.mime === DOCX) return { detectedType: found.mime, ...(await docxText(buf)) };
    if (found.mime === XLSX) return { detectedType: found.mime, ...(await xlsxText(buf, limits)) };
    throw new Refused('unsupported', `${found.mime} has no text to read`);
  }
  const text = asText(buf);
  if (text === null) throw new Refused('unsupported', 'binary content of no known type');
  detected = 'text/plain';
  const declared = (declaredType ?? '').toLowerCase();
  if (declared === 'text/html' || declared === 'application/xhtml+xml' || looksHtml(text)) return { detectedType: 'text/html', ...(await htmlText(text)) };
  if (declared === 'text/csv' || /\.csv$/i.test(filename ?? '')) return { detectedType: 'text/csv', text };
  return { detectedType: 'text/plain', text };
}

try {
  const r = await extract(workerData);
  let text = r.text ?? '';
  let truncated = Boolean(r.truncated);
  if (text.length > workerData.limits.maxTextChars) {
    text = text.slice(0, workerData.limits.maxTextChars);
    truncated = true;
  }
  parentPort.postMessage({ status: 'ready', detectedType: r.detectedType, text, truncated });
} catch (err) {
  if (err instanceof Refused) parentPort.postMessage({ status: err.status, detectedType: detected, error: err.message });
  else parentPort.postMessage({ status: 'failed', detectedType: detected, error: String(err?.message ?? err).slice(0, 500) });
}
