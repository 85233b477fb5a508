/**
 * Shared by the bulk*.test.ts files: building bulk requests, creating jobs over REST and waiting for a job to
 * reach a status.
 */
import { rest, type TestServer } from '@boxes/testing';
import { waitFor } from './mail-send-helpers';

export interface BulkMessageInput {
  to: string | string[];
  subject?: string;
  text?: string;
  [k: string]: unknown;
}

/** n messages to <prefix>-<i>@<domain>, one recipient each. */
export function messagesTo(n: number, prefix: string, domain = 'remote.test', start = 0): BulkMessageInput[] {
  return Array.from({ length: n }, (_, i) => ({
    to: `${prefix}-${start + i}@${domain}`,
    subject: `bulk ${prefix} ${start + i}`,
    text: `message ${start + i}`,
  }));
}

export function createJob(t: Pick<TestServer, 'apiBase'>, key: string, body: Record<string, unknown>) {
  return rest(t, 'POST', '/messages/send/bulk', { key, body });
}

export async function getJob(t: Pick<TestServer, 'apiBase'>, key: string, id: string): Promise<any> {
  const r = await rest(t, 'GET', `/messages/send/bulk/${id}`, { key });
  if (r.status !== 200) throw new Error(`GET /messages/send/bulk/${id}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

/** Waits until the job's status is one of `statuses`; returns the job. */
export function waitForJob(t: Pick<TestServer, 'apiBase'>, key: string, id: string, statuses: string[], ms = 30_000): Promise<any> {
  return waitFor(
    async () => {
      const job = await getJob(t, key, id);
      return statuses.includes(job.status) ? job : null;
    },
    `bulk job ${id} to be ${statuses.join(' or ')}`,
    ms,
  );
}
