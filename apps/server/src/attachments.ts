/**
 * GET /api/v1/messages/{id}/attachments/{attachment_id}/content: the bytes of an attachment, served beside the
 * router (a file, not JSON). With an API key (scope receive; a box-restricted key only for its boxes), or with
 * the signed URL GET /messages/{id}/attachments/{attachment_id} answers (expires + signature, no key). The
 * stored content type, Content-Disposition: attachment (RFC 6266 filename*), nosniff and a sandboxing CSP:
 * what a sender attached is never rendered as this site's page.
 */
import type { Hono } from 'hono';
import { authenticateCall, toAppError } from '@boxes/api';
import { AppError, attachmentContent, newId, signedAttachmentContent, type AttachmentDownload, type Services } from '@boxes/core';
import type { Logger } from './logger';
import { errorResponse, REST_PREFIX } from './rest';

/** A MIME type as stored, or application/octet-stream when it is not a plain type/subtype. */
function safeContentType(type: string): string {
  return /^[\w.+-]+\/[\w.+-]+$/.test(type) ? type.toLowerCase() : 'application/octet-stream';
}

/** Content-Disposition for any file name: an ASCII fallback and the UTF-8 name as filename* (RFC 6266, RFC 8187). */
export function contentDisposition(filename: string | null): string {
  const name = (filename ?? 'attachment').replace(/[\u0000-\u001f\u007f/\\]/g, '_').slice(0, 200) || 'attachment';
  const ascii = name.replace(/[^\x20-\x7e]/g, '_').replace(/["%;]/g, '_');
  const encoded = encodeURIComponent(name).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encoded}`;
}

function fileResponse(file: AttachmentDownload, requestId: string): Response {
  return new Response(new Uint8Array(file.content), {
    status: 200,
    headers: {
      'content-type': safeContentType(file.contentType),
      'content-length': String(file.content.length),
      'content-disposition': contentDisposition(file.filename),
      'x-content-type-options': 'nosniff',
      'content-security-policy': "default-src 'none'; sandbox",
      'x-content-sha256': file.sha256,
      'cache-control': 'private, no-store',
      'referrer-policy': 'no-referrer',
      'x-request-id': requestId,
    },
  });
}

export function mountAttachmentContent(app: Hono, svc: Services, log: Logger): void {
  app.get(`${REST_PREFIX}/messages/:id/attachments/:attachment/content`, async (c) => {
    const requestId = newId('req');
    const responseHeaders = new Headers();
    const messageId = c.req.param('id');
    const attachmentId = c.req.param('attachment');
    try {
      if (messageId.length > 40 || attachmentId.length > 40) throw new AppError('not_found', 'attachment not found');
      const signature = c.req.query('signature');
      const expires = c.req.query('expires');
      const file =
        signature !== undefined || expires !== undefined
          ? await signedAttachmentContent(svc, { messageId, attachmentId, expires, signature })
          : await (async () => {
              const auth = await authenticateCall({ svc, authorization: c.req.header('authorization') ?? null, responseHeaders }, { scope: 'receive' });
              return attachmentContent(svc, { accountId: auth.account.id, scope: auth.boxScope, messageId, attachmentId });
            })();
      const res = fileResponse(file, requestId);
      for (const [k, v] of responseHeaders) res.headers.set(k, v);
      return res;
    } catch (err) {
      const e = toAppError(err);
      if (e.code === 'internal') log.error({ err, requestId }, 'attachment download failed');
      return errorResponse(e, requestId, { ...Object.fromEntries(responseHeaders), 'cache-control': 'no-store' });
    }
  });
}
