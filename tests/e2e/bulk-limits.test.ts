/**
 * The bounds of bulk jobs on an instance with the default settings: 10 minutes between batches (a job cannot ask
 * for less), a batch no larger than BULK_MAX_BATCH_SIZE (so no batch holds the whole job), and at most
 * BULK_MAX_ACTIVE_JOBS jobs of one account queued or sending at once (409 too_many_bulk_jobs beyond).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { createJob, messagesTo } from './bulk-helpers';
import { unique } from './mail-send-helpers';

let t: TestServer;
let a: TestAccount;

beforeAll(async () => {
  // No worker: jobs stay queued, as a job cooling off for 10 minutes does.
  t = await startTestServer();
  a = await signupAccount(t);
});
afterAll(() => t?.stop());

describe('bulk jobs with the instance defaults', () => {
  it('waits 10 minutes between batches; a shorter cool-off is refused with 400', async () => {
    const dflt = await createJob(t, a.apiKey, { messages: messagesTo(4, `dflt-${unique()}`), batch_size: 2 });
    expect(dflt.status, JSON.stringify(dflt.body)).toBe(200);
    expect(dflt.body.cool_off_seconds).toBe(600);
    await rest(t, 'POST', `/messages/send/bulk/${dflt.body.id}/cancel`, { key: a.apiKey });
    for (const cool of [0, 60, 599]) {
      const r = await createJob(t, a.apiKey, { messages: messagesTo(4, `cool-${unique()}`), batch_size: 2, cool_off_seconds: cool });
      expect(r.status, `cool_off_seconds ${cool}: ${JSON.stringify(r.body)}`).toBe(400);
      expect(r.body.error.code).toBe('validation_error');
      expect(r.body.error.message).toContain('cool_off_seconds');
    }
  });

  it('refuses a batch larger than BULK_MAX_BATCH_SIZE (1000) with 400', async () => {
    // Within the free allowance, so only the batch size can refuse it.
    const r = await createJob(t, a.apiKey, { messages: messagesTo(200, `big-${unique()}`), batch_size: 1500 });
    expect(r.status, JSON.stringify(r.body).slice(0, 300)).toBe(400);
    expect(r.body.error.message).toContain('batch_size');
    const ok = await createJob(t, a.apiKey, { messages: messagesTo(3, `fits-${unique()}`), batch_size: 1000 });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    await rest(t, 'POST', `/messages/send/bulk/${ok.body.id}/cancel`, { key: a.apiKey });
  });

  it('runs at most 3 jobs of one account at once: the 4th is 409 too_many_bulk_jobs, another account is not held up', async () => {
    const b = await signupAccount(t);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await createJob(t, b.apiKey, { messages: messagesTo(2, `act-${i}-${unique()}`), batch_size: 1 });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      ids.push(r.body.id);
    }
    const fourth = await createJob(t, b.apiKey, { messages: messagesTo(2, `act-4-${unique()}`), batch_size: 1 });
    expect(fourth.status, JSON.stringify(fourth.body)).toBe(409);
    expect(fourth.body.error).toMatchObject({ code: 'too_many_bulk_jobs', active_jobs: 3, limit: 3 });
    const listed = await rest(t, 'GET', '/messages/send/bulk', { key: b.apiKey });
    expect(listed.body.jobs).toHaveLength(3);
    const c = await signupAccount(t);
    expect((await createJob(t, c.apiKey, { messages: messagesTo(2, `other-${unique()}`), batch_size: 1 })).status).toBe(200);
    // A cancelled job frees its place.
    expect((await rest(t, 'POST', `/messages/send/bulk/${ids[0]}/cancel`, { key: b.apiKey })).status).toBe(200);
    expect((await createJob(t, b.apiKey, { messages: messagesTo(2, `act-5-${unique()}`), batch_size: 1 })).status).toBe(200);
  });
});
