/**
 * What the worker's periodic sweep brings back without a restart: the recurring jobs' schedules after Redis lost
 * them (its keys flushed), with /metrics saying which are missing; and a send stored by a process whose enqueue
 * was lost (as a front that died between its commit and its enqueue), delivered within seconds rather than after
 * a minute or more.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deleteKeysWithPrefix, rest, signupAccount, startTestServer, waitFor, type TestServer } from '@boxes/testing';
import { MailSink, unique } from './mail-send-helpers';

/** The recurring jobs' schedules, as /metrics labels them. */
const RECURRING_SCHEDULER_IDS = ['billing-cycle', 'domain-verification', 'audit'];
const BILLING_SCHEDULER_ID = 'billing-cycle';

let t: TestServer;
let sink: MailSink;

beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  // The default sweep interval (WORKER_SWEEP_INTERVAL_MS, 5 s): what production does.
  t = await startTestServer({ worker: true, resolver: sink.resolver() });
});
afterAll(async () => {
  await t?.stop();
  await sink?.close();
});

const missingOf = async (server: TestServer): Promise<Record<string, number>> => {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  return Object.fromEntries([...text.matchAll(/^boxes_job_schedule_missing\{schedule="([^"]+)"\} (\d+)$/gm)].map((m) => [m[1]!, Number(m[2])]));
};
const all = (n: number) => Object.fromEntries(RECURRING_SCHEDULER_IDS.map((id) => [id, n]));

describe('recurring job schedules', () => {
  it('come back by themselves, without a restart, after Redis lost them', async () => {
    expect(await t.svc.jobs.missingSchedules()).toEqual([]);
    // Every key of this instance gone, as after FLUSHALL or a failover to an empty replica.
    await deleteKeysWithPrefix(t.config, t.config.redisPrefix);
    expect((await t.svc.jobs.missingSchedules()).length).toBeGreaterThan(0);
    await waitFor('the schedules to be back', async () => (await t.svc.jobs.missingSchedules()).length === 0, 20_000);
    expect(await missingOf(t)).toEqual(all(0));
    const billing = await t.svc.jobs.billing.getJobScheduler(BILLING_SCHEDULER_ID);
    expect(billing?.every).toBe(t.config.billing.cycleMs);
  }, 40_000);

  it('/metrics shows each missing schedule as 1', async () => {
    // An instance of its own (its own Redis prefix) whose worker never ran: no schedule at all.
    const bare = await startTestServer();
    try {
      expect(await missingOf(bare)).toEqual(all(1));
    } finally {
      await bare.stop();
    }
  });
});

describe('a send stored but never queued', () => {
  it('is delivered by the sweep within seconds', async () => {
    const a = await signupAccount(t);
    // Another front of the same service whose enqueues no worker sees: it stores the send, its job is lost.
    const front = await startTestServer({ sameStoreAs: t, ownQueues: true });
    try {
      const to = `lost-${unique()}@remote.test`;
      const started = Date.now();
      const r = await rest(front, 'POST', '/messages/send', { key: a.apiKey, body: { to, subject: 'never queued', text: 'swept' } });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      await waitFor('the sweep to deliver it', () => sink.to(to).length === 1, 25_000);
      console.log(`worker-sweeps: a send never queued was delivered ${((Date.now() - started) / 1000).toFixed(1)} s after it was stored`);
    } finally {
      await front.stop();
    }
  }, 60_000);
});
