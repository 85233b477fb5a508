/**
 * Text extraction of stored attachments (queue attachment-text; never on a request's path). Each file is read
 * in its own worker thread (extract-thread.mjs) under memory limits, and terminated at the time limit, so a
 * hostile file (a zip bomb, a PDF that loops) costs at most one thread. The limits, all constants:
 * EXTRACTION_LIMITS. The end of each extraction (any status) is recorded once with its sealed text and the
 * event attachment.text_ready (core finishAttachmentText). A sweep re-enqueues attachments left pending (a lost
 * job).
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker as Thread } from 'node:worker_threads';
import { Worker, type ConnectionOptions } from 'bullmq';
import type { Config } from '@boxes/config';
import { attachmentForExtraction, finishAttachmentText, isServiceUnavailable, pendingAttachments, type ExtractionResult, type Services } from '@boxes/core';
import { createRedis, QUEUE, type AttachmentTextJob } from '@boxes/jobs';
import type { Logger } from 'pino';
import { logQueueError, pauseOnOutage } from './outage';

/** What one extraction may take. Over maxInputBytes (or maxUnzippedBytes inflated): too_large; over the time or memory: failed. */
export const EXTRACTION_LIMITS = {
  /** The attachment's size: larger ones are not read (too_large). */
  maxInputBytes: 10 * 1024 * 1024,
  /** DOCX and XLSX: what their zip declares inflated, in all (too_large beyond). */
  maxUnzippedBytes: 64 * 1024 * 1024,
  maxZipEntries: 10_000,
  /** PDF: the first pages read (the text says truncated beyond). */
  maxPdfPages: 500,
  /** The text kept, in characters (truncated beyond). */
  maxTextChars: 1_000_000,
  /** Wall-clock time of one extraction: the thread is terminated (failed). */
  timeoutMs: 30_000,
  /** The thread's V8 heap (it dies at the limit: failed). */
  maxHeapMb: 256,
} as const;

/** The thread script beside this file: the source one (src), or in the production bundle (apps/server/dist) its bundled copy; else the worker's src. */
function threadScript(): URL {
  for (const rel of ['./extract-thread.mjs', '../../worker/src/extract-thread.mjs']) {
    const url = new URL(rel, import.meta.url);
    if (existsSync(fileURLToPath(url))) return url;
  }
  throw new Error('extract-thread.mjs not found');
}

/** Reads one file's text in a thread; resolves with the outcome, never rejects. */
export function extractText(content: Buffer, declaredType: string, filename: string | null): Promise<ExtractionResult> {
  const limits = EXTRACTION_LIMITS;
  if (content.length > limits.maxInputBytes) {
    return Promise.resolve({ status: 'too_large', detectedType: null, error: `${content.length} bytes (at most ${limits.maxInputBytes} are read)` });
  }
  return new Promise((resolve) => {
    const bytes = new Uint8Array(content);
    const thread = new Thread(threadScript(), {
      workerData: { bytes, declaredType, filename, limits },
      transferList: [bytes.buffer as ArrayBuffer],
      resourceLimits: { maxOldGenerationSizeMb: limits.maxHeapMb, maxYoungGenerationSizeMb: 32, stackSizeMb: 4 },
      stdout: true,
      stderr: true,
    });
    // What the readers print (pdf.js warnings) is dropped, not mixed into the worker's log.
    thread.stdout.resume();
    thread.stderr.resume();
    let done = false;
    const finish = (r: ExtractionResult) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      void thread.terminate();
      resolve(r);
    };
    const timer = setTimeout(
      () => finish({ status: 'failed', detectedType: null, error: `not done within ${limits.timeoutMs / 1000} seconds` }),
      limits.timeoutMs,
    );
    thread.on('message', (m: ExtractionResult) => finish(m));
    thread.on('error', (err: Error & { code?: string }) =>
      finish({
        status: 'failed',
        detectedType: null,
        error: err.code === 'ERR_WORKER_OUT_OF_MEMORY' ? `over the memory limit (${limits.maxHeapMb} MB)` : err.message,
      }),
    );
    thread.on('exit', (code) => finish({ status: 'failed', detectedType: null, error: `the extraction stopped (exit ${code})` }));
  });
}

/** Extracts one attachment's text and records the outcome; nothing to do once it left pending. */
export async function runAttachmentText(svc: Services, attachmentId: string): Promise<void> {
  const found = await attachmentForExtraction(svc, attachmentId);
  if (!found) return;
  const result = found.content
    ? await extractText(found.content, found.row.contentType, found.row.filename)
    : ({ status: 'failed', detectedType: null, error: 'the message body was reclaimed before the text was read' } satisfies ExtractionResult);
  await finishAttachmentText(svc, attachmentId, result);
}

export interface AttachmentTextHandle {
  /** Enqueues the attachments left pending longer than graceMs; returns how many. */
  sweep(graceMs?: number): Promise<number>;
  stop(): Promise<void>;
}

export async function startAttachmentText(config: Config, deps: { svc: Services; log: Logger; sweepIntervalMs?: number }): Promise<AttachmentTextHandle> {
  const { svc, log } = deps;
  const connection = createRedis(config);
  const worker: Worker<AttachmentTextJob> = new Worker<AttachmentTextJob>(
    QUEUE.attachmentText,
    async (job) => {
      try {
        await runAttachmentText(svc, job.data.attachmentId);
      } catch (err) {
        // The last attempt of a job that keeps failing (an unreadable body, not an outage) ends the attachment
        // as failed, so it does not stay pending behind a failed job id.
        if (!isServiceUnavailable(err) && job.attemptsMade + 1 >= (job.opts.attempts ?? 1)) {
          log.warn({ attachmentId: job.data.attachmentId, err: (err as Error).message }, 'attachment text failed for good');
          await finishAttachmentText(svc, job.data.attachmentId, { status: 'failed', detectedType: null, error: 'the attachment could not be read' });
          return;
        }
        return pauseOnOutage(worker, svc, log, err);
      }
    },
    // One file at a time per worker: each may take a core and up to maxHeapMb for its thread.
    { connection: connection as ConnectionOptions, prefix: config.redisPrefix, concurrency: 1 },
  );
  worker.on('error', logQueueError(log, 'attachment text worker error'));
  const sweep = async (graceMs = 60_000) => {
    const ids = await pendingAttachments(svc, graceMs);
    await svc.jobs.enqueueAttachmentText(ids);
    return ids.length;
  };
  const timer = setInterval(() => {
    sweep().catch(logQueueError(log, 'attachment text sweep failed'));
  }, deps.sweepIntervalMs ?? 30_000);
  timer.unref();
  await worker.waitUntilReady();
  return {
    sweep,
    async stop() {
      clearInterval(timer);
      await worker.close();
      connection.disconnect();
    },
  };
}
