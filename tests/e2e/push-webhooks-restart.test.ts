// The worker that pushes webhooks stops (a deploy, a crash) with deliveries pending or in flight; events keep
// being appended; a new worker starts on the same services. Nothing is lost: every event reaches the receiver,
// at least once and in seq order (webhook push reads the one ordered stream of the account).
import { afterAll, beforeAll, expect, it } from 'vitest';
import { start as startWorker, type WorkerHandle } from '@boxes/worker';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { allEvents, deliveredEvents, receiverCertificate, setCallback, startReceiver, waitFor, type Receiver } from './push-helpers';

let t: TestServer;
let receiver: Receiver;
/** The worker running now (the runtime's, then the ones these tests start). */
let current: WorkerHandle;
const started: WorkerHandle[] = [];
let accounts: Promise<TestAccount>[] = [];

beforeAll(async () => {
  const pems = await receiverCertificate();
  receiver = await startReceiver(pems);
  t = await startTestServer({ worker: true, env: { WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_CA_FILE: pems.caFile } });
  current = t.runtime.worker!;
  accounts = [signupAccount(t), signupAccount(t)];
  for (const p of accounts) p.catch(() => undefined);
});
afterAll(async () => {
  for (const w of started) await w.stop();
  await t?.stop();
  await receiver?.close();
});

async function restartWorker(): Promise<void> {
  current = await startWorker(t.config, { svc: t.svc, log: t.runtime.log, publish: null });
  started.push(current);
}

async function addBoxes(key: string, names: string[]): Promise<void> {
  for (const address of names) {
    const r = await rest(t, 'POST', '/boxes', { key, body: { address } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  }
}

/** Every event of the account after `afterSeq` reached the receiver (2xx), in seq order, none missing. */
async function expectAllDelivered(a: TestAccount, path: string, afterSeq: number, ms = 20_000) {
  const expected = (await allEvents(t, a.apiKey)).filter((e) => e.seq > afterSeq);
  await waitFor(
    `all ${expected.length} events at ${path}`,
    () => {
      const got = deliveredEvents(receiver.at(path)).filter((e) => e.seq > afterSeq);
      return got.length >= expected.length;
    },
    ms,
  );
  const got = deliveredEvents(receiver.at(path)).filter((e) => e.seq > afterSeq);
  expect(got.map((e) => e.seq)).toEqual(expected.map((e) => e.seq));
  expect(got.map((e) => e.id)).toEqual(expected.map((e) => e.id));
  // Duplicates are allowed (at least once) but never out of order.
  const seqs = receiver
    .at(path)
    .filter((r) => r.answered === 200)
    .map((r) => r.event.seq);
  expect(seqs).toEqual([...seqs].sort((x, y) => x - y));
}

it('stopped while a retry is pending: a new worker delivers the pending event and everything appended meanwhile, in order', async () => {
  const a = await accounts[0]!;
  let healthy = false;
  receiver.behave('/pending', () => (healthy ? 200 : 503));
  await setCallback(t, a.apiKey, receiver.url('/pending'));
  const head = await waitFor('a 503 answered', () => receiver.at('/pending').find((r) => r.answered === 503));
  await addBoxes(a.apiKey, ['p-0', 'p-1']);

  await current.stop();
  await addBoxes(a.apiKey, ['p-2', 'p-3', 'p-4']);
  healthy = true;
  const before = receiver.at('/pending').filter((r) => r.answered === 200).length;
  expect(before).toBe(0);
  await restartWorker();

  await expectAllDelivered(a, '/pending', head.event.seq - 1);
  const boxes = deliveredEvents(receiver.at('/pending')).filter((e) => e.type === 'box.created');
  expect(boxes.map((e) => e.data.box.local_part)).toEqual(['p-0', 'p-1', 'p-2', 'p-3', 'p-4']);
});

it('stopped while a delivery is in flight: a new worker delivers everything, in order', async () => {
  const a = await accounts[1]!;
  // The receiver holds the delivery of box h-2 open until the worker has stopped.
  let held = false;
  receiver.behave('/inflight', (_n, e) => {
    if (!held && e.type === 'box.created' && e.data?.box?.local_part === 'h-2') {
      held = true;
      return 'hang';
    }
    return 200;
  });
  await setCallback(t, a.apiKey, receiver.url('/inflight'));
  const head = await waitFor('the callback update delivered', () => deliveredEvents(receiver.at('/inflight'))[0]);
  await addBoxes(a.apiKey, ['h-0', 'h-1', 'h-2', 'h-3']);
  await waitFor('the held delivery', () => receiver.hanging() === 1);

  await current.stop();
  // The held request now fails the way a dying worker's would: the connection goes away unanswered.
  receiver.release('drop');
  await addBoxes(a.apiKey, ['h-4', 'h-5', 'h-6']);
  await restartWorker();

  await expectAllDelivered(a, '/inflight', head.seq);
  const boxes = deliveredEvents(receiver.at('/inflight')).filter((e) => e.type === 'box.created');
  expect(boxes.map((e) => e.data.box.local_part)).toEqual(['h-0', 'h-1', 'h-2', 'h-3', 'h-4', 'h-5', 'h-6']);
});
