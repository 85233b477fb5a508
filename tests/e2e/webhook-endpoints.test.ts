// Webhook endpoints end to end over real HTTP with real https receivers: create, list, get, change and delete
// with their checks (URL, event types against the catalogue, boxes, write-only custom headers, the cap); each
// endpoint gets only the events its filters pass, signed with its own secret (standardwebhooks and X-Boxes-Signature)
// and carrying its headers, while the account callback goes on as before; an endpoint that never answers times
// out and retries while a live one beside it gets its events at once; the per-endpoint delivery log,
// redelivery, rotation, disabling; box-restricted keys; and the same procedures through the SDK and MCP.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { BoxesError, createBoxesClient, verifyWebhook, type WebhookEndpoint, type WebhookEndpointCreated } from '@boxes/sdk';
import { mintKey, rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import {
  boxesSignatureMatches,
  deliveredEvents,
  deliveries as callbackDeliveries,
  receiverCertificate,
  setCallback,
  signingSecret,
  startReceiver,
  verifyStandard,
  waitFor,
  type Receiver,
} from './push-helpers';

let t: TestServer;
let receiver: Receiver;
/** The receiver that never answers (a dead endpoint), on its own port. */
let hung: Receiver;

const TIMEOUT_MS = 1000;

beforeAll(async () => {
  const pems = await receiverCertificate();
  receiver = await startReceiver(pems);
  hung = await startReceiver(pems);
  t = await startTestServer({
    worker: true,
    env: { WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_CA_FILE: pems.caFile, WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS), WEBHOOK_RETRY_SCALE: '0.01' },
  });
});
afterAll(async () => {
  await t?.stop();
  hung?.release('drop');
  await receiver?.close();
  await hung?.close();
});

const create = (key: string, body: Record<string, unknown>) => rest(t, 'POST', '/webhook-endpoints', { key, body });
const endpointDeliveries = async (key: string, id: string, query = '') => {
  const r = await rest(t, 'GET', `/webhook-endpoints/${id}/deliveries?limit=200${query}`, { key });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.deliveries as any[];
};
async function boxIds(a: TestAccount): Promise<{ primary: string; spare: string }> {
  const spare = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'spare' } });
  expect(spare.status).toBe(200);
  const all = await rest(t, 'GET', '/boxes', { key: a.apiKey });
  return { primary: all.body.boxes.find((b: any) => b.is_primary).id, spare: spare.body.id };
}

describe('the resource', () => {
  it('create answers the secret once; reads show header names, never values; checks refuse what they must; PATCH and DELETE', async () => {
    const a = await signupAccount(t);
    const { spare } = await boxIds(a);
    const made = await create(a.apiKey, {
      url: receiver.url('/crud'),
      event_types: ['box.*', 'api_key.created'],
      box_ids: [spare],
      headers: { Authorization: 'Bearer receiver-token-1', 'X-Tenant': 't1' },
      description: 'crud',
    });
    expect(made.status, JSON.stringify(made.body)).toBe(200);
    expect(made.body).toMatchObject({
      url: receiver.url('/crud'),
      event_types: ['box.*', 'api_key.created'],
      box_ids: [spare],
      enabled: true,
      header_names: ['authorization', 'x-tenant'],
      description: 'crud',
      previous_secret_valid_until: null,
    });
    expect(made.body.id).toMatch(/^whe_/);
    expect(made.body.signing_secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(JSON.stringify(made.body)).not.toContain('receiver-token-1');

    const got = await rest(t, 'GET', `/webhook-endpoints/${made.body.id}`, { key: a.apiKey });
    expect(got.status).toBe(200);
    const { signing_secret: _s, ...shown } = made.body;
    expect(got.body).toEqual(shown);
    const list = await rest(t, 'GET', '/webhook-endpoints', { key: a.apiKey });
    expect(list.body.endpoints).toEqual([shown]);
    for (const body of [got.body, list.body]) {
      expect(JSON.stringify(body)).not.toContain('receiver-token-1');
      expect(JSON.stringify(body)).not.toContain(made.body.signing_secret);
    }

    // The checks: 400 with the field named.
    const bad: [string, Record<string, unknown>, RegExp][] = [
      ['http', { url: 'http://agent.example.com/x' }, /url: must be an https/],
      ['credentials', { url: 'https://u:p@agent.example.com/x' }, /url: must not carry credentials/],
      ['unknown type', { url: receiver.url('/x'), event_types: ['mail.recieved'] }, /event_types: unknown event type/],
      ['prefix matching nothing', { url: receiver.url('/x'), event_types: ['nothing.*'] }, /event_types: nothing\.\* matches no event type/],
      ['signature header', { url: receiver.url('/x'), headers: { 'Webhook-Signature': 'v1,forged' } }, /headers: webhook-signature cannot be set/],
      ['our signature header', { url: receiver.url('/x'), headers: { 'X-Boxes-Signature': 't=1,v1=00' } }, /headers: x-boxes-signature cannot be set/],
      ['hop-by-hop', { url: receiver.url('/x'), headers: { Connection: 'close' } }, /headers: connection cannot be set/],
      ['transfer-encoding', { url: receiver.url('/x'), headers: { 'Transfer-Encoding': 'chunked' } }, /headers: transfer-encoding cannot be set/],
      ['host', { url: receiver.url('/x'), headers: { Host: 'elsewhere.example' } }, /headers: host cannot be set/],
      // Control characters are refused at the door (the input guard), before the header check sees them.
      ['CRLF injection', { url: receiver.url('/x'), headers: { 'X-A': 'ok\r\nX-Injected: 1' } }, /headers\.X-A: must not contain control characters/],
      ['LF injection', { url: receiver.url('/x'), headers: { 'X-A': 'ok\nX-Injected: 1' } }, /headers\.X-A: must not contain control characters/],
      ['NUL', { url: receiver.url('/x'), headers: { 'X-A': 'a\u0000b' } }, /headers\.X-A: must not contain NUL/],
      ['DEL', { url: receiver.url('/x'), headers: { 'X-A': 'a\u007fb' } }, /headers(\.X-A: must not contain control characters|: the value of x-a must be)/],
      ['bad name', { url: receiver.url('/x'), headers: { 'X A': '1' } }, /headers: "X A" is not a header name/],
      ['twice', { url: receiver.url('/x'), headers: { 'X-A': '1', 'x-a': '2' } }, /headers: x-a is given twice/],
      [
        'too many',
        { url: receiver.url('/x'), headers: Object.fromEntries(Array.from({ length: 11 }, (_, i) => [`x-h${i}`, 'v'])) },
        /headers: at most 10 custom headers/,
      ],
      [
        'too large',
        { url: receiver.url('/x'), headers: Object.fromEntries(Array.from({ length: 5 }, (_, i) => [`x-h${i}`, 'v'.repeat(1000)])) },
        /headers: custom headers take at most 4096 bytes/,
      ],
      ['a box of no one', { url: receiver.url('/x'), box_ids: ['box_00000000000000000000'] }, /box_ids: box box_0+ not found/],
    ];
    for (const [label, body, message] of bad) {
      const r = await create(a.apiKey, body);
      expect({ label, status: r.status, code: r.body.error?.code }).toEqual({ label, status: 400, code: 'validation_error' });
      expect(r.body.error.message, label).toMatch(message);
    }
    // Another account's box is no box of this one.
    const other = await signupAccount(t);
    const otherBoxes = await rest(t, 'GET', '/boxes', { key: other.apiKey });
    expect((await create(a.apiKey, { url: receiver.url('/x'), box_ids: [otherBoxes.body.boxes[0].id] })).status).toBe(400);
    // Nothing of the refused ones was created.
    expect((await rest(t, 'GET', '/webhook-endpoints', { key: a.apiKey })).body.endpoints).toHaveLength(1);

    // PATCH: the fields given; headers replace the old ones; the secret stays.
    const patched = await rest(t, 'PATCH', `/webhook-endpoints/${made.body.id}`, {
      key: a.apiKey,
      body: { event_types: ['mail.received'], box_ids: [], headers: { 'X-Other': 'v2' }, description: null },
    });
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);
    expect(patched.body).toMatchObject({
      event_types: ['mail.received'],
      box_ids: [],
      header_names: ['x-other'],
      description: null,
      url: receiver.url('/crud'),
    });
    expect((await rest(t, 'PATCH', `/webhook-endpoints/${made.body.id}`, { key: a.apiKey, body: { event_types: ['nope'] } })).status).toBe(400);
    expect((await rest(t, 'PATCH', `/webhook-endpoints/${made.body.id}`, { key: a.apiKey, body: { headers: { 'X-A': 'a\r\nb: c' } } })).status).toBe(400);
    expect((await rest(t, 'PATCH', `/webhook-endpoints/${made.body.id}`, { key: a.apiKey, body: { headers: null } })).body.header_names).toEqual([]);

    // Another account sees none of it.
    expect((await rest(t, 'GET', `/webhook-endpoints/${made.body.id}`, { key: other.apiKey })).status).toBe(404);
    expect((await rest(t, 'GET', '/webhook-endpoints', { key: other.apiKey })).body.endpoints).toEqual([]);

    const deleted = await rest(t, 'DELETE', `/webhook-endpoints/${made.body.id}`, { key: a.apiKey });
    expect(deleted.body).toEqual({ id: made.body.id, deleted: true });
    expect((await rest(t, 'GET', `/webhook-endpoints/${made.body.id}`, { key: a.apiKey })).status).toBe(404);
    expect((await rest(t, 'DELETE', `/webhook-endpoints/${made.body.id}`, { key: a.apiKey })).status).toBe(404);
  });

  it('an account has at most 10 endpoints: the 11th is 409, and deleting one makes room', async () => {
    const a = await signupAccount(t);
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) {
      const r = await create(a.apiKey, { url: receiver.url(`/cap-${i}`), enabled: false });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      ids.push(r.body.id);
    }
    const over = await create(a.apiKey, { url: receiver.url('/cap-10') });
    expect({ status: over.status, code: over.body.error.code, limit: over.body.error.limit }).toEqual({ status: 409, code: 'conflict', limit: 10 });
    await rest(t, 'DELETE', `/webhook-endpoints/${ids[0]}`, { key: a.apiKey });
    expect((await create(a.apiKey, { url: receiver.url('/cap-10'), enabled: false })).status).toBe(200);
  });
});

describe('delivery', () => {
  it('each endpoint gets what its filters pass, in order, signed with its own secret and with its headers; the callback is unchanged', async () => {
    const a = await signupAccount(t);
    const { primary, spare } = await boxIds(a);
    await setCallback(t, a.apiKey, receiver.url('/f-callback'));
    const mk = async (path: string, body: Record<string, unknown>) => {
      const r = await create(a.apiKey, { url: receiver.url(path), ...body });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      return r.body as { id: string; signing_secret: string };
    };
    const all = await mk('/f-all', { headers: { authorization: 'Bearer f-all-token', 'x-tenant': 'tenant-7' } });
    const boxEvents = await mk('/f-box', { event_types: ['box.*'] });
    const keyEvents = await mk('/f-key', { event_types: ['api_key.created'] });
    const spareOnly = await mk('/f-spare', { box_ids: [spare] });

    // Four events: two box.signature_updated (spare, primary), api_key.created (no box), box.created (a new box).
    expect((await rest(t, 'PUT', `/boxes/${spare}/signature`, { key: a.apiKey, body: { signature: 'spare sig' } })).status).toBe(200);
    expect((await rest(t, 'PUT', `/boxes/${primary}/signature`, { key: a.apiKey, body: { signature: 'primary sig' } })).status).toBe(200);
    await mintKey(t, a.apiKey, ['receive']);
    const late = await rest(t, 'POST', '/boxes', { key: a.apiKey, body: { address: 'late' } });
    expect(late.status).toBe(200);

    const allGot = await waitFor('four events at /f-all', () => {
      const d = deliveredEvents(receiver.at('/f-all'));
      return d.length >= 4 ? d : undefined;
    });
    expect(allGot.map((e) => e.type)).toEqual(['box.signature_updated', 'box.signature_updated', 'api_key.created', 'box.created']);
    expect(allGot.map((e) => e.seq)).toEqual([...allGot.map((e) => e.seq)].sort((x, y) => x - y));
    await waitFor('the filtered endpoints', () =>
      deliveredEvents(receiver.at('/f-box')).length >= 3 &&
      deliveredEvents(receiver.at('/f-key')).length >= 1 &&
      deliveredEvents(receiver.at('/f-spare')).length >= 1
        ? true
        : undefined,
    );
    // Let anything extra arrive before counting.
    await new Promise((r) => setTimeout(r, 500));
    expect(deliveredEvents(receiver.at('/f-box')).map((e) => e.type)).toEqual(['box.signature_updated', 'box.signature_updated', 'box.created']);
    expect(deliveredEvents(receiver.at('/f-key')).map((e) => e.type)).toEqual(['api_key.created']);
    const spareGot = deliveredEvents(receiver.at('/f-spare'));
    expect(spareGot.map((e) => [e.type, (e.data as { box_id: string }).box_id])).toEqual([['box.signature_updated', spare]]);
    for (const path of ['/f-all', '/f-box', '/f-key', '/f-spare']) expect(receiver.at(path)).toHaveLength(deliveredEvents(receiver.at(path)).length);

    // Signatures: each endpoint's own secret verifies (standardwebhooks and X-Boxes-Signature); another's does not.
    const secrets: Record<string, string> = {
      '/f-all': all.signing_secret,
      '/f-box': boxEvents.signing_secret,
      '/f-key': keyEvents.signing_secret,
      '/f-spare': spareOnly.signing_secret,
    };
    for (const [path, secret] of Object.entries(secrets)) {
      for (const r of receiver.at(path)) {
        expect(verifyStandard(r, secret).id).toBe(r.event.id);
        expect(boxesSignatureMatches(r, secret)).toBe(true);
        expect(r.headers['webhook-id']).toBe(r.event.id);
        expect(() => verifyStandard(r, path === '/f-all' ? boxEvents.signing_secret : all.signing_secret)).toThrow();
      }
    }
    const accountSecret = await signingSecret(t, a.apiKey);
    expect(() => verifyStandard(receiver.at('/f-all')[0]!, accountSecret)).toThrow();
    // The custom headers reach the receiver; the others' requests do not carry them.
    for (const r of receiver.at('/f-all')) expect([r.headers.authorization, r.headers['x-tenant']]).toEqual(['Bearer f-all-token', 'tenant-7']);
    for (const r of receiver.at('/f-box')) expect(r.headers.authorization).toBeUndefined();

    // The callback still gets everything, signed with the account secret, and its log has no endpoint attempts.
    const cb = await waitFor('the callback', () => {
      const d = deliveredEvents(receiver.at('/f-callback'));
      return d.some((e) => e.type === 'box.created' && e.id === allGot[3]!.id) ? d : undefined;
    });
    for (const r of receiver.at('/f-callback')) expect(verifyStandard(r, accountSecret).id).toBe(r.event.id);
    expect(cb.map((e) => e.id)).toEqual(expect.arrayContaining(allGot.map((e) => e.id)));
    const cbLog = await callbackDeliveries(t, a.apiKey);
    expect(cbLog.every((d) => d.url === receiver.url('/f-callback'))).toBe(true);

    // The endpoint's own log: one delivered attempt per event, with the status code.
    const log = await endpointDeliveries(a.apiKey, all.id);
    expect(log.map((d) => d.event_id).sort()).toEqual(allGot.map((e) => e.id).sort());
    expect(log.every((d) => d.status === 'delivered' && d.status_code === 200 && d.attempt === 1 && d.url === receiver.url('/f-all'))).toBe(true);
    expect((await endpointDeliveries(a.apiKey, all.id, '&status=failed')).length).toBe(0);
  });

  it('an endpoint that never answers times out and retries while a live one beside it gets every event promptly; then it catches up in order', async () => {
    const a = await signupAccount(t);
    const { spare } = await boxIds(a);
    let hangs = true;
    hung.behave('/dead', () => (hangs ? 'hang' : 200));
    const live = await create(a.apiKey, { url: receiver.url('/live') });
    const dead = await create(a.apiKey, { url: hung.url('/dead') });
    expect([live.status, dead.status]).toEqual([200, 200]);

    const started = Date.now();
    const sent: number[] = [];
    for (let i = 0; i < 5; i++) {
      expect((await rest(t, 'PUT', `/boxes/${spare}/signature`, { key: a.apiKey, body: { signature: `sig ${i}` } })).status).toBe(200);
      sent.push(Date.now());
    }
    const got = await waitFor('five events at the live endpoint', () => {
      const d = deliveredEvents(receiver.at('/live'));
      return d.length >= 5 ? d : undefined;
    });
    const took = Date.now() - started;
    // Promptly: well within one timeout of the dead endpoint per event (5 s) — it never waited behind it.
    expect(took).toBeLessThan(5 * TIMEOUT_MS);
    expect(got.map((e) => (e.data as { signature: string }).signature)).toEqual(['sig 0', 'sig 1', 'sig 2', 'sig 3', 'sig 4']);
    expect(receiver.at('/live')).toHaveLength(5);

    // The dead one: only the first event was tried (order), timed out, and is retried.
    const retrying = await waitFor('a retry of the dead endpoint', async () => {
      const log = await endpointDeliveries(a.apiKey, dead.body.id);
      return log.filter((d) => d.status === 'retrying').length >= 2 ? log : undefined;
    });
    const firstSeq = got[0]!.seq;
    expect(retrying.every((d) => d.seq === firstSeq && d.status_code === null && /no response within 1000 ms/.test(d.error) && d.next_retry_at)).toBe(true);
    expect(new Set(hung.at('/dead').map((r) => r.event.seq))).toEqual(new Set([firstSeq]));

    // It answers again: everything arrives in order, each event once with 2xx.
    hangs = false;
    hung.release('drop');
    const caughtUp = await waitFor(
      'the dead endpoint catching up',
      () => {
        const d = deliveredEvents(hung.at('/dead'));
        return d.length >= 5 ? d : undefined;
      },
      20_000,
    );
    expect(caughtUp.map((e) => e.id)).toEqual(got.map((e) => e.id));
    expect(hung.at('/dead').filter((r) => r.answered === 200)).toHaveLength(5);
    const log = await endpointDeliveries(a.apiKey, dead.body.id, '&status=delivered');
    expect(log.map((d) => d.seq).sort((x, y) => x - y)).toEqual(got.map((e) => e.seq));
    expect(log.find((d) => d.seq === firstSeq)!.attempt).toBeGreaterThan(1);
  });

  it('redelivery, rotation (both secrets sign for a day), disabling and re-enabling', async () => {
    const a = await signupAccount(t);
    const { spare } = await boxIds(a);
    const ep = await create(a.apiKey, { url: receiver.url('/r'), headers: { 'x-token': 'r-token' } });
    const other = await create(a.apiKey, { url: receiver.url('/r-other'), event_types: ['box.signature_updated'] });
    await rest(t, 'PUT', `/boxes/${spare}/signature`, { key: a.apiKey, body: { signature: 'one' } });
    const first = await waitFor('the first event', () => deliveredEvents(receiver.at('/r'))[0]);
    const [row] = await waitFor('its log row', async () => {
      const l = await endpointDeliveries(a.apiKey, ep.body.id);
      return l.length ? l : undefined;
    });

    const again = await rest(t, 'POST', `/webhook-endpoints/${ep.body.id}/deliveries/${row.id}/redeliver`, { key: a.apiKey });
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    expect(again.body).toMatchObject({ event_id: first.id, status: 'delivered', status_code: 200, redelivery: true, attempt: 1 });
    const resent = receiver.at('/r').filter((r) => r.event.id === first.id);
    expect(resent).toHaveLength(2);
    expect(verifyStandard(resent[1]!, ep.body.signing_secret).id).toBe(first.id);
    expect(resent[1]!.headers['x-token']).toBe('r-token');
    expect((await endpointDeliveries(a.apiKey, ep.body.id)).find((d) => d.id === again.body.id)).toMatchObject({ redelivery: true });
    // A delivery of another endpoint, an unknown one, or the callback's path for it: 404.
    await waitFor('the other endpoint', () => deliveredEvents(receiver.at('/r-other'))[0]);
    const otherRow = (await endpointDeliveries(a.apiKey, other.body.id))[0];
    expect((await rest(t, 'POST', `/webhook-endpoints/${ep.body.id}/deliveries/${otherRow.id}/redeliver`, { key: a.apiKey })).status).toBe(404);
    expect((await rest(t, 'POST', `/webhook-endpoints/${ep.body.id}/deliveries/whd_00000000000000000000/redeliver`, { key: a.apiKey })).status).toBe(404);
    expect((await rest(t, 'POST', `/account/webhook/deliveries/${row.id}/redeliver`, { key: a.apiKey })).status).toBe(404);

    // Rotation: a new secret; the next delivery verifies under both.
    const rotated = await rest(t, 'POST', `/webhook-endpoints/${ep.body.id}/secret/rotate`, { key: a.apiKey });
    expect(rotated.status).toBe(200);
    expect(rotated.body.signing_secret).not.toBe(ep.body.signing_secret);
    expect(new Date(rotated.body.previous_secret_valid_until).getTime()).toBeGreaterThan(Date.now() + 23 * 3600_000);
    await rest(t, 'PUT', `/boxes/${spare}/signature`, { key: a.apiKey, body: { signature: 'two' } });
    const second = await waitFor('the event after rotation', () => receiver.at('/r').find((r) => (r.event.data as { signature?: string }).signature === 'two'));
    expect(verifyStandard(second, rotated.body.signing_secret).id).toBe(second.event.id);
    expect(verifyStandard(second, ep.body.signing_secret).id).toBe(second.event.id);
    expect(boxesSignatureMatches(second, rotated.body.signing_secret)).toBe(true);
    expect((await rest(t, 'GET', `/webhook-endpoints/${ep.body.id}`, { key: a.apiKey })).body.previous_secret_valid_until).toBe(
      rotated.body.previous_secret_valid_until,
    );

    // Disabled: nothing is sent. Re-enabled: only what happens from then on.
    expect((await rest(t, 'PATCH', `/webhook-endpoints/${ep.body.id}`, { key: a.apiKey, body: { enabled: false } })).body.enabled).toBe(false);
    await rest(t, 'PUT', `/boxes/${spare}/signature`, { key: a.apiKey, body: { signature: 'while disabled' } });
    await waitFor('the other endpoint got it', () =>
      deliveredEvents(receiver.at('/r-other')).find((e) => (e.data as { signature?: string }).signature === 'while disabled'),
    );
    expect((await rest(t, 'PATCH', `/webhook-endpoints/${ep.body.id}`, { key: a.apiKey, body: { enabled: true } })).body.enabled).toBe(true);
    await rest(t, 'PUT', `/boxes/${spare}/signature`, { key: a.apiKey, body: { signature: 'after' } });
    await waitFor('the event after re-enabling', () => receiver.at('/r').find((r) => (r.event.data as { signature?: string }).signature === 'after'));
    expect(receiver.at('/r').some((r) => (r.event.data as { signature?: string }).signature === 'while disabled')).toBe(false);
  });
});

describe('box-restricted keys', () => {
  it('create only with box_ids inside the restriction; see and change only such endpoints; receive only those boxes', async () => {
    const a = await signupAccount(t);
    const { primary, spare } = await boxIds(a);
    const restricted = await mintKey(t, a.apiKey, ['admin'], { allowed_box_ids: [spare] });
    const wide = await create(a.apiKey, { url: receiver.url('/wide') });

    const none = await create(restricted.api_key, { url: receiver.url('/rk') });
    expect({ status: none.status, code: none.body.error.code }).toEqual({ status: 403, code: 'box_restricted_key' });
    const outside = await create(restricted.api_key, { url: receiver.url('/rk'), box_ids: [spare, primary] });
    expect({ status: outside.status, code: outside.body.error.code }).toEqual({ status: 400, code: 'validation_error' });
    const own = await create(restricted.api_key, { url: receiver.url('/rk'), box_ids: [spare] });
    expect(own.status, JSON.stringify(own.body)).toBe(200);

    expect((await rest(t, 'GET', '/webhook-endpoints', { key: restricted.api_key })).body.endpoints.map((e: any) => e.id)).toEqual([own.body.id]);
    expect((await rest(t, 'GET', '/webhook-endpoints', { key: a.apiKey })).body.endpoints.map((e: any) => e.id).sort()).toEqual(
      [wide.body.id, own.body.id].sort(),
    );
    for (const [method, path] of [
      ['GET', `/webhook-endpoints/${wide.body.id}`],
      ['PATCH', `/webhook-endpoints/${wide.body.id}`],
      ['DELETE', `/webhook-endpoints/${wide.body.id}`],
      ['POST', `/webhook-endpoints/${wide.body.id}/secret/rotate`],
      ['GET', `/webhook-endpoints/${wide.body.id}/deliveries`],
    ] as const) {
      const r = await rest(t, method, path, { key: restricted.api_key, ...(method === 'PATCH' ? { body: { enabled: false } } : {}) });
      expect({ path, status: r.status }).toEqual({ path, status: 404 });
    }
    // Its own endpoint cannot be widened to every box, or to another box.
    const widen = await rest(t, 'PATCH', `/webhook-endpoints/${own.body.id}`, { key: restricted.api_key, body: { box_ids: [] } });
    expect(widen.status).toBe(403);
    expect((await rest(t, 'PATCH', `/webhook-endpoints/${own.body.id}`, { key: restricted.api_key, body: { box_ids: [primary] } })).status).toBe(400);

    await rest(t, 'PUT', `/boxes/${primary}/signature`, { key: a.apiKey, body: { signature: 'primary' } });
    await rest(t, 'PUT', `/boxes/${spare}/signature`, { key: a.apiKey, body: { signature: 'spare' } });
    await waitFor('the spare event at /rk', () => deliveredEvents(receiver.at('/rk')).find((e) => (e.data as { box_id?: string }).box_id === spare));
    await waitFor('both at /wide', () =>
      deliveredEvents(receiver.at('/wide')).filter((e) => e.type === 'box.signature_updated').length >= 2 ? true : undefined,
    );
    expect(deliveredEvents(receiver.at('/rk')).every((e) => (e.data as { box_id?: string }).box_id === spare)).toBe(true);
  });
});

describe('SDK and MCP', () => {
  it('the SDK client covers every procedure', async () => {
    const a = await signupAccount(t);
    const { spare } = await boxIds(a);
    const client = createBoxesClient({ baseUrl: t.apiBase, apiKey: a.apiKey });
    const made: WebhookEndpointCreated = await client.webhookEndpoints.create.mutate({
      url: receiver.url('/sdk'),
      event_types: ['box.*'],
      headers: { 'x-sdk': '1' },
    });
    expect(made.signing_secret).toMatch(/^whsec_/);
    expect((await client.webhookEndpoints.list.query()).endpoints.map((e) => e.id)).toEqual([made.id]);
    const read: WebhookEndpoint = await client.webhookEndpoints.get.query({ id: made.id });
    expect(read.header_names).toEqual(['x-sdk']);
    expect((await client.webhookEndpoints.update.mutate({ id: made.id, description: 'via sdk' })).description).toBe('via sdk');
    const err = await client.webhookEndpoints.create.mutate({ url: receiver.url('/sdk'), event_types: ['not.a_type'] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BoxesError);
    expect((err as BoxesError).status).toBe(400);

    await rest(t, 'PUT', `/boxes/${spare}/signature`, { key: a.apiKey, body: { signature: 'sdk' } });
    const got = await waitFor('the sdk endpoint', () => receiver.at('/sdk')[0]);
    expect(verifyStandard(got, made.signing_secret).id).toBe(got.event.id);
    // The SDK's verifier takes the endpoint's own secret.
    expect(verifyWebhook<{ id: string }>(got.body, got.headers['x-boxes-signature'] as string, made.signing_secret).id).toBe(got.event.id);
    const log = await waitFor('its log', async () => {
      const l = await client.webhookEndpoints.deliveries.query({ id: made.id });
      return l.deliveries.length ? l.deliveries : undefined;
    });
    const again = await client.webhookEndpoints.redeliver.mutate({ id: made.id, delivery_id: log[0]!.id });
    expect(again).toMatchObject({ redelivery: true, status: 'delivered' });
    const rotated = await client.webhookEndpoints.rotateSecret.mutate({ id: made.id });
    expect(rotated.signing_secret).not.toBe(made.signing_secret);
    expect(await client.webhookEndpoints.delete.mutate({ id: made.id })).toEqual({ id: made.id, deleted: true });
  });

  it('MCP has one tool per procedure, and they work', async () => {
    const a = await signupAccount(t);
    const mcp = new Client({ name: 'boxes-e2e', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${a.apiKey}` } } }));
    try {
      const names = (await mcp.listTools()).tools.map((x) => x.name).filter((n) => n.startsWith('webhookEndpoints_'));
      expect(names.sort()).toEqual(
        ['create', 'delete', 'deliveries', 'get', 'list', 'redeliver', 'rotateSecret', 'update'].map((n) => `webhookEndpoints_${n}`).sort(),
      );
      const call = async (name: string, args: Record<string, unknown>) => {
        const r = await mcp.callTool({ name, arguments: args });
        expect(r.isError, `${name}: ${JSON.stringify(r.content)}`).toBeFalsy();
        return r.structuredContent as any;
      };
      const made = await call('webhookEndpoints_create', { url: receiver.url('/mcp'), event_types: ['api_key.*'] });
      expect(made.signing_secret).toMatch(/^whsec_/);
      expect((await call('webhookEndpoints_list', {})).endpoints).toHaveLength(1);
      expect((await call('webhookEndpoints_get', { id: made.id })).event_types).toEqual(['api_key.*']);
      expect((await call('webhookEndpoints_update', { id: made.id, enabled: false })).enabled).toBe(false);
      expect((await call('webhookEndpoints_deliveries', { id: made.id })).deliveries).toEqual([]);
      expect((await call('webhookEndpoints_rotateSecret', { id: made.id })).signing_secret).toMatch(/^whsec_/);
      const missing = await mcp.callTool({ name: 'webhookEndpoints_redeliver', arguments: { id: made.id, delivery_id: 'whd_00000000000000000000' } });
      expect(missing.isError).toBe(true);
      expect(await call('webhookEndpoints_delete', { id: made.id })).toEqual({ id: made.id, deleted: true });
    } finally {
      await mcp.close();
    }
  });
});
