/**
 * send_at on POST /messages/send: the message is accepted and its credit reserved at once; it goes when due,
 * once, through a delayed job that survives the worker being down at scheduling time (two workers started
 * later, one copy delivered) and, if the job itself is lost, through the sweeper. POST /messages/{id}/cancel
 * stops it until then and releases the credit.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reclaimExpiredBodies } from '@boxes/core';
import { rest, signupAccount, startTestServer, waitFor, type TestAccount, type TestServer } from '@boxes/testing';
import { events, getMessage, MailSink, send, unique } from './mail-send-helpers';

let t: TestServer;
let sink: MailSink;
let a: TestAccount;
const workers: TestServer[] = [];

beforeAll(async () => {
  sink = new MailSink();
  await sink.start();
  // No worker here: scheduled jobs wait in Redis for workers started later.
  t = await startTestServer({ resolver: sink.resolver() });
  a = await signupAccount(t, 'scheduled@example.com');
});
afterAll(async () => {
  for (const w of workers) await w.stop();
  await t?.stop();
  await sink?.close();
});

const inSeconds = (s: number) => new Date(Date.now() + s * 1000).toISOString();
const held = async (accountId: string) => {
  const r = await t.db.account.findUniqueOrThrow({ where: { id: accountId }, select: { heldMicros: true, heldFreeMessages: true } });
  return { micros: r.heldMicros, free: r.heldFreeMessages };
};

describe('scheduled send', () => {
  it('is reserved at acceptance, waits, and goes once when due, with the worker started only after it was scheduled (two of them)', async () => {
    const to = `later-${unique()}@remote.test`;
    const before = await held(a.accountId);
    const sendAt = inSeconds(2);
    const r = await send(t, a.apiKey, { to, subject: 'Reminder', text: 'It is time.', send_at: sendAt });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({
      status: 'scheduled',
      send_at: new Date(sendAt).toISOString(),
      recipients: [to],
      billing: { messages: 1, free_messages_used: 1 },
    });
    expect(r.body.thread_id).toMatch(/^thr_/);
    expect((await held(a.accountId)).free).toBe(before.free + 1);

    const m = await getMessage(t, a.apiKey, r.body.message_id);
    expect(m).toMatchObject({ status: 'scheduled', send_at: new Date(sendAt).toISOString() });
    expect(m.deliveries.map((d: any) => d.status)).toEqual(['scheduled']);
    expect((await events(t, a.apiKey, 'mail.scheduled')).map((e) => e.data.message_id)).toContain(r.body.message_id);

    // Two workers of the same service come up now; the job they find was scheduled before either existed.
    for (let i = 0; i < 2; i++) workers.push(await startTestServer({ sameStoreAs: t, worker: true, resolver: sink.resolver() }));
    await waitFor('the scheduled message to be delivered', async () => (await getMessage(t, a.apiKey, r.body.message_id)).status === 'delivered', 30_000);
    expect(sink.to(to)).toHaveLength(1);
    // Its hold was charged, not kept.
    expect((await held(a.accountId)).free).toBe(before.free);
    const sent = (await events(t, a.apiKey, 'mail.sent')).filter((e) => e.data.message_id === r.body.message_id);
    expect(sent).toHaveLength(1);
    expect(sent[0]!.data).toMatchObject({ status: 'queued', send_at: new Date(sendAt).toISOString() });
    // A sweep finds nothing left to do, and nothing more arrives.
    expect(await workers[0]!.runtime.worker!.sweep(0)).toBe(0);
    expect(sink.to(to)).toHaveLength(1);
    expect((await rest(t, 'POST', `/messages/${r.body.message_id}/cancel`, { key: a.apiKey })).body.error.code).toBe('conflict');
  });

  it('can be cancelled until it goes: nothing is sent, the reserved credit is released, mail.cancelled; a second cancel is 409', async () => {
    const to = [`c1-${unique()}@remote.test`, `c2-${unique()}@remote.test`];
    const before = await held(a.accountId);
    const r = await send(t, a.apiKey, { to, subject: 'Never', text: 'x', send_at: inSeconds(3600) });
    expect(r.body.status).toBe('scheduled');
    expect((await held(a.accountId)).free).toBe(before.free + 2);

    // Its body cannot be reclaimed while it waits: it is what will be sent.
    const del = await rest(t, 'DELETE', `/messages/${r.body.message_id}`, { key: a.apiKey });
    expect(del.status).toBe(409);
    expect(del.body.error.message).toContain('/cancel');
    const c = await rest(t, 'POST', `/messages/${r.body.message_id}/cancel`, { key: a.apiKey });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect(c.body).toMatchObject({ id: r.body.message_id, status: 'cancelled', released_messages: 2 });
    expect(await held(a.accountId)).toEqual(before);
    const m = await getMessage(t, a.apiKey, r.body.message_id);
    expect(m.status).toBe('cancelled');
    expect(m.deliveries.map((d: any) => d.status)).toEqual(['cancelled', 'cancelled']);
    expect((await events(t, a.apiKey, 'mail.cancelled')).map((e) => e.data.message_id)).toEqual([r.body.message_id]);
    expect((await rest(t, 'DELETE', `/messages/${r.body.message_id}`, { key: a.apiKey })).status).toBe(200);

    const again = await rest(t, 'POST', `/messages/${r.body.message_id}/cancel`, { key: a.apiKey });
    expect(again.status).toBe(409);
    expect(again.body.error.code).toBe('conflict');
    // Even a job run for it now (a sweep, a stale copy of the job) sends nothing.
    const ids = (await t.db.delivery.findMany({ where: { messageId: r.body.message_id } })).map((d) => d.id);
    await t.svc.jobs.enqueueDeliveries(ids);
    expect(await workers[0]!.runtime.worker!.sweep(0)).toBe(0);
    await waitFor(
      'the stale jobs to finish',
      async () => (await Promise.all(ids.map(async (id) => (await t.svc.jobs.deliveries.getJob(id))?.isCompleted()))).every(Boolean),
      20_000,
    );
    for (const x of to) expect(sink.to(x)).toHaveLength(0);
    expect((await getMessage(t, a.apiKey, r.body.message_id)).status).toBe('cancelled');
  });

  it('a due message whose job was lost is sent by the sweeper, once', async () => {
    const to = `lost-${unique()}@remote.test`;
    const r = await send(t, a.apiKey, { to, text: 'x', send_at: inSeconds(1) });
    const [d] = await t.db.delivery.findMany({ where: { messageId: r.body.message_id } });
    // Redis lost the delayed job.
    await t.svc.jobs.deliveries.remove(d!.id);
    expect(await t.svc.jobs.deliveries.getJob(d!.id)).toBeUndefined();
    await waitFor('the sweeper to find it due', async () => (await workers[0]!.runtime.worker!.sweep(0)) > 0, 20_000);
    await waitFor('delivery', async () => (await getMessage(t, a.apiKey, r.body.message_id)).status === 'delivered', 20_000);
    expect(sink.to(to)).toHaveLength(1);
  });

  it('the audit retention window of a scheduled send starts when it goes: its body is not reclaimed while it waits', async () => {
    const r = await send(t, a.apiKey, { to: `kept-${unique()}@remote.test`, text: 'kept for later', send_at: inSeconds(20 * 86_400) });
    const due = (await getMessage(t, a.apiKey, r.body.message_id)).body_reclaim_due_at_utc;
    expect(new Date(due).getTime()).toBe(new Date(r.body.send_at).getTime() + 14 * 86_400_000);
    // The hourly audit job, run as if 15 days had passed: past the window counted from acceptance.
    const later = new Date(Date.now() + 15 * 86_400_000);
    await reclaimExpiredBodies({ ...t.svc, clock: { now: () => later } });
    const m = await getMessage(t, a.apiKey, r.body.message_id);
    expect(m.body_state).toBe('available');
    expect(m.body.text).toContain('kept for later');
  });

  it('closing the account stops a scheduled send: it fails at once, its hold is released, and its job sends nothing', async () => {
    const c = await signupAccount(t, 'scheduled-close@example.com');
    const to = `closing-${unique()}@remote.test`;
    const r = await send(t, c.apiKey, { to, text: 'x', send_at: inSeconds(1) });
    expect(r.body.status).toBe('scheduled');
    const closed = await rest(t, 'DELETE', '/account', { key: c.apiKey, body: { confirm_domain: c.domain } });
    expect(closed.status, JSON.stringify(closed.body)).toBe(200);
    expect(closed.body.deliveries_stopped).toBe(1);
    const m = await t.db.message.findUniqueOrThrow({ where: { id: r.body.message_id }, include: { deliveries: true } });
    expect(m.status).toBe('failed');
    expect(m.deliveries.map((d) => d.status)).toEqual(['failed']);
    expect(await held(c.accountId)).toEqual({ micros: 0n, free: 0 });
    const id = m.deliveries[0]!.id;
    await waitFor('its delayed job to have run', async () => (await t.svc.jobs.deliveries.getJob(id))?.isCompleted(), 20_000);
    expect(sink.to(to)).toHaveLength(0);
  });

  it('refuses a time in the past, more than 30 days ahead or not ISO 8601; cancel of another account or of an unscheduled message', async () => {
    const noZone = inSeconds(3600).replace(/Z$/, '');
    for (const sendAt of [inSeconds(-60), inSeconds(31 * 86_400), 'tomorrow', '2026-13-45T00:00:00Z', noZone]) {
      const r = await send(t, a.apiKey, { to: 'x@remote.test', text: 'x', send_at: sendAt });
      expect(r.status, sendAt).toBe(400);
      expect(r.body.error.code).toBe('validation_error');
    }
    // An offset is as good as Z.
    const at = new Date(Date.now() + 7200_000);
    const withOffset = new Date(at.getTime() + 3600_000).toISOString().replace(/\.\d+Z$/, '+01:00');
    const offset = await send(t, a.apiKey, { to: `tz-${unique()}@remote.test`, text: 'x', send_at: withOffset });
    expect(offset.status, JSON.stringify(offset.body)).toBe(200);
    expect(Math.abs(new Date(offset.body.send_at).getTime() - at.getTime())).toBeLessThan(1000);
    const now = await send(t, a.apiKey, { to: `now-${unique()}@remote.test`, text: 'x' });
    const notScheduled = await rest(t, 'POST', `/messages/${now.body.message_id}/cancel`, { key: a.apiKey });
    expect(notScheduled.status).toBe(409);
    const b = await signupAccount(t, 'scheduled-b@example.com');
    const later = await send(t, a.apiKey, { to: `x-${unique()}@remote.test`, text: 'x', send_at: inSeconds(3600) });
    expect((await rest(t, 'POST', `/messages/${later.body.message_id}/cancel`, { key: b.apiKey })).status).toBe(404);
    expect((await getMessage(t, a.apiKey, later.body.message_id)).status).toBe('scheduled');
    // A reply can be scheduled too.
    const reply = await rest(t, 'POST', `/messages/${now.body.message_id}/reply`, { key: a.apiKey, body: { text: 'later', send_at: inSeconds(3600) } });
    expect(reply.body).toMatchObject({ status: 'scheduled', thread_id: now.body.thread_id });
  });
});
