/**
 * GET /exports/<token>: the data export of a closing account (a tar archive), by the secret link returned by
 * DELETE /account and mailed to the owner. No key (every key of a closing account is revoked): the token is
 * the credential. 202 while the worker builds it, 410 once the link expired, 404 for anything else.
 */
import type { Hono } from 'hono';
import { AppError, exportByToken, newId, type Services } from '@boxes/core';
import type { Logger } from './logger';
import { errorResponse } from './rest';

export function mountExports(app: Hono, svc: Services, log: Logger): void {
  app.get('/exports/:token', async (c) => {
    const requestId = newId('req');
    try {
      const r = await exportByToken(svc, c.req.param('token'));
      if (!r.ready) {
        return Response.json(
          { status: 'building', export_id: r.id, message: 'The archive is being built; try again in a few seconds.', retry_after_seconds: 5 },
          { status: 202, headers: { 'retry-after': '5', 'cache-control': 'no-store', 'x-request-id': requestId } },
        );
      }
      return new Response(new Uint8Array(r.archive), {
        status: 200,
        headers: {
          'content-type': 'application/x-tar',
          'content-disposition': `attachment; filename="${r.filename}"`,
          'content-length': String(r.archive.length),
          'x-content-sha256': r.sha256,
          'cache-control': 'no-store',
          'referrer-policy': 'no-referrer',
          'x-request-id': requestId,
        },
      });
    } catch (err) {
      if (err instanceof AppError) return errorResponse(err, requestId, { 'cache-control': 'no-store' });
      log.error({ err, requestId }, 'export download failed');
      return errorResponse(new AppError('internal', 'Internal error; quote the request_id if you contact support.'), requestId);
    }
  });
}
