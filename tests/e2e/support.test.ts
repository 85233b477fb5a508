// Support questions and feature requests (events support.answered and
// feature_request.shipped): agents ask and vote over REST; operators answer and ship with the operator CLI
// (`pnpm boxes admin ...`, run here as a real process on the test database); the events reach GET /events and the
// account's signed webhook (a real https receiver).
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rest, signupAccount, startTestServer, type TestAccount, type TestServer } from '@boxes/testing';
import { allEvents, receiverCertificate, setCallback, signingSecret, startReceiver, verifyStripe, waitFor, type Receiver } from './push-helpers';

const ROOT = path.resolve(import.meta.dirname, '../..');

let t: TestServer;
let receiver: Receiver;
/** a: callback set at signup (/a); b: callback set with PUT /account/callback-webhook (/b); c, d: no callback. */
let a: TestAccount;
let b: TestAccount;
let c: TestAccount;
let d: TestAccount;

beforeAll(async () => {
  const pems = await receiverCertificate();
  receiver = await startReceiver(pems);
  t = await startTestServer({ worker: true, env: { WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_CA_FILE: pems.caFile } });
  const intent = await rest(t, 'POST', '/signup/agentic', {
    body: { human_email: 'owner-a@example.com', domain_intent: { mode: 'subdomain', slug_style: 'word_pair' }, agent_callback_webhook: receiver.url('/a') },
  });
  expect(intent.status, JSON.stringify(intent.body)).toBe(200);
  const done = await rest(t, 'POST', '/signup/agentic/confirm', { body: { intent_id: intent.body.intent_id } });
  expect(done.status, JSON.stringify(done.body)).toBe(200);
  a = {
    accountId: done.body.account_id,
    apiKey: done.body.api_key,
    keyId: done.body.key_id,
    primaryAddress: done.body.primary_address,
    domain: done.body.domain,
  };
  [b, c, d] = [await signupAccount(t, 'owner-b@example.com'), await signupAccount(t, 'owner-c@example.com'), await signupAccount(t, 'owner-d@example.com')];
  await setCallback(t, b.apiKey, receiver.url('/b'));
});
afterAll(async () => {
  await t?.stop();
  await receiver?.close();
});

/** `pnpm boxes admin <args>` on the test database, as a real process (asynchronously: the server runs here). */
async function admin(...args: string[]): Promise<string> {
  const { stdout } = await promisify(execFile)(path.join(ROOT, 'node_modules/.bin/tsx'), ['apps/server/src/cli.ts', 'admin', ...args], {
    cwd: ROOT,
    env: { ...process.env, DATABASE_URL: t.config.databaseUrl },
    encoding: 'utf8',
    timeout: 20_000,
  });
  return stdout;
}

async function eventsOf(acct: TestAccount, type: string) {
  return (await allEvents(t, acct.apiKey)).filter((e) => e.type === type);
}

describe('support questions', () => {
  it('a question is asked, listed, read with its thread and replied to', async () => {
    const asked = await rest(t, 'POST', '/support/questions', {
      key: a.apiKey,
      body: {
        subject: 'Bounces from example.org',
        body: 'Every message to example.org bounces with 5.7.1. What should I check?',
        context: { message_id: 'msg_123' },
      },
    });
    expect(asked.status, JSON.stringify(asked.body)).toBe(200);
    const q = asked.body;
    expect(q).toMatchObject({
      subject: 'Bounces from example.org',
      body: 'Every message to example.org bounces with 5.7.1. What should I check?',
      context: { message_id: 'msg_123' },
      status: 'open',
    });
    expect(q.id).toMatch(/^sq_/);
    expect(q.messages).toHaveLength(1);
    expect(q.messages[0]).toMatchObject({ author: 'agent', body: q.body });

    const list = await rest(t, 'GET', '/support/questions', { key: a.apiKey });
    expect(list.status).toBe(200);
    expect(list.body.questions.find((x: any) => x.id === q.id)).toMatchObject({ subject: q.subject, status: 'open', replies: 0 });

    const one = await rest(t, 'GET', `/support/questions/${q.id}`, { key: a.apiKey });
    expect(one.status).toBe(200);
    expect(one.body).toEqual(q);

    const replied = await rest(t, 'POST', `/support/questions/${q.id}/replies`, { key: a.apiKey, body: { body: 'It started yesterday at 10:00 UTC.' } });
    expect(replied.status, JSON.stringify(replied.body)).toBe(200);
    expect(replied.body.messages.map((m: any) => [m.author, m.body])).toEqual([
      ['agent', q.body],
      ['agent', 'It started yesterday at 10:00 UTC.'],
    ]);
    expect((await rest(t, 'GET', `/support/questions/${q.id}`, { key: a.apiKey })).body.messages).toHaveLength(2);
    expect((await rest(t, 'GET', '/support/questions', { key: a.apiKey })).body.questions.find((x: any) => x.id === q.id).replies).toBe(1);
  });

  it('rejects a question without a subject, an empty reply and unknown fields, naming the field', async () => {
    const noSubject = await rest(t, 'POST', '/support/questions', { key: a.apiKey, body: { body: 'no subject here' } });
    expect(noSubject.status).toBe(400);
    expect(noSubject.body.error.fields.map((f: any) => f.path)).toEqual(['subject']);
    const extra = await rest(t, 'POST', '/support/questions', { key: a.apiKey, body: { subject: 's', body: 'b', email: 'help@example.com' } });
    expect(extra.status).toBe(400);
    expect(extra.body.error.message).toContain('email');
    const q = (await rest(t, 'POST', '/support/questions', { key: a.apiKey, body: { subject: 'empty reply', body: 'x' } })).body;
    const empty = await rest(t, 'POST', `/support/questions/${q.id}/replies`, { key: a.apiKey, body: { body: '   ' } });
    expect(empty.status).toBe(400);
    expect(empty.body.error.fields.map((f: any) => f.path)).toEqual(['body']);
  });

  it('another account cannot list, read or reply to the question (404)', async () => {
    const q = (await rest(t, 'POST', '/support/questions', { key: a.apiKey, body: { subject: 'private', body: 'only for account a' } })).body;
    const read = await rest(t, 'GET', `/support/questions/${q.id}`, { key: c.apiKey });
    expect(read.status).toBe(404);
    expect(read.body.error.code).toBe('not_found');
    expect(JSON.stringify(read.body)).not.toContain('only for account a');
    const reply = await rest(t, 'POST', `/support/questions/${q.id}/replies`, { key: c.apiKey, body: { body: 'let me in' } });
    expect(reply.status).toBe(404);
    expect((await rest(t, 'GET', '/support/questions', { key: c.apiKey })).body.questions.map((x: any) => x.id)).not.toContain(q.id);
    // The thread is untouched.
    expect((await rest(t, 'GET', `/support/questions/${q.id}`, { key: a.apiKey })).body.messages).toHaveLength(1);
    expect((await rest(t, 'GET', `/support/questions/${q.id}`)).status).toBe(401);
  });
});

describe('feature requests', () => {
  it('rejects a title under 5 or a description under 20 characters with 400 naming the field', async () => {
    const cases: [Record<string, string>, string[]][] = [
      [{ title: 'abcd', description: 'a description long enough' }, ['title']],
      [{ title: 'Scheduled sends', description: 'too short' }, ['description']],
      [{ title: 'ab', description: 'short' }, ['title', 'description']],
      // Surrounding spaces do not count.
      [{ title: '   abcd   ', description: `   ${'y'.repeat(19)}   ` }, ['title', 'description']],
    ];
    for (const [body, fields] of cases) {
      const r = await rest(t, 'POST', '/feature-requests', { key: a.apiKey, body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.error.code).toBe('validation_error');
      expect(r.body.error.fields.map((f: any) => f.path)).toEqual(fields);
      for (const f of fields) expect(r.body.error.message).toContain(f);
    }
    // Exactly 5 and 20 are enough.
    const ok = await rest(t, 'POST', '/feature-requests', { key: a.apiKey, body: { title: 'abcde', description: 'x'.repeat(20) } });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
  });
});

// The operator CLI is a process start each time (it loads all of @boxes/core: seconds on a busy machine): the two
// operator flows run side by side, with room beyond the default 30 s test timeout.
const CLI_TEST_TIMEOUT = 60_000;

describe('operators, through the CLI', () => {
  it.concurrent(
    'questions: the operator answers through the CLI: support.answered on GET /events and at the webhook; admin questions lists the open ones',
    async ({ expect }) => {
      const qa = (await rest(t, 'POST', '/support/questions', { key: a.apiKey, body: { subject: 'DKIM for my domain', body: 'Is DKIM set up for me?' } })).body;
      const qb = (await rest(t, 'POST', '/support/questions', { key: b.apiKey, body: { subject: 'Webhook retries', body: 'How often are webhooks retried?' } }))
        .body;

      // (An answer to an unknown question fails with exit code 1 and says which; run alongside.)
      const [open, unknown] = await Promise.all([
        admin('questions'),
        admin('answer', 'sq_doesnotexist', 'hello').then(
          () => null,
          (e: { code: number; stderr: string }) => e,
        ),
      ]);
      expect(unknown?.code).toBe(1);
      expect(unknown?.stderr).toContain('sq_doesnotexist');
      for (const q of [qa, qb]) {
        const line = open.split('\n').find((l) => l.startsWith(q.id));
        expect(line, open).toBeDefined();
        expect(line).toContain(q.subject);
      }
      expect(open).toContain('[agent] Is DKIM set up for me?');

      // Both answered at once (two operator processes).
      const [outA, outB] = await Promise.all([
        admin('answer', qa.id, 'Yes:', 'the DKIM key is published for your subdomain.'),
        admin('answer', qb.id, 'With exponential backoff for about a day.'),
      ]);
      expect(outA).toContain(`answered ${qa.id}`);
      expect(outB).toContain(`answered ${qb.id}`);

      const thread = (await rest(t, 'GET', `/support/questions/${qa.id}`, { key: a.apiKey })).body;
      expect(thread.status).toBe('answered');
      expect(thread.messages.at(-1)).toMatchObject({ author: 'operator', body: 'Yes: the DKIM key is published for your subdomain.' });

      const answered = await eventsOf(a, 'support.answered');
      expect(answered).toHaveLength(1);
      expect(answered[0]!.data).toMatchObject({ question_id: qa.id, subject: qa.subject, answer: 'Yes: the DKIM key is published for your subdomain.' });
      const answeredB = await eventsOf(b, 'support.answered');
      expect(answeredB.map((e) => e.data.question_id)).toEqual([qb.id]);

      // The account's webhook (set at signup) gets it, signed.
      const delivered = await waitFor('support.answered at /a', () =>
        receiver.at('/a').find((r) => r.event.type === 'support.answered' && r.event.data.question_id === qa.id),
      );
      expect(delivered.event.id).toBe(answered[0]!.id);
      expect(verifyStripe(delivered, await signingSecret(t, a.apiKey)).type).toBe('support.answered');
      // b's reaches the callback b set with PUT /account/callback-webhook, and only b's.
      const atB = await waitFor('support.answered at /b', () =>
        receiver.at('/b').find((r) => r.event.type === 'support.answered' && r.event.data.question_id === qb.id),
      );
      expect(atB.event.id).toBe(answeredB[0]!.id);
      expect(verifyStripe(atB, await signingSecret(t, b.apiKey)).type).toBe('support.answered');
      expect(receiver.at('/b').some((r) => r.event.data?.question_id === qa.id)).toBe(false);
      expect(receiver.at('/a').some((r) => r.event.data?.question_id === qb.id)).toBe(false);

      // A follow-up reopens a's question for the operators; b's answered one is no longer listed.
      const followUp = await rest(t, 'POST', `/support/questions/${qa.id}/replies`, { key: a.apiKey, body: { body: 'And DMARC?' } });
      expect(followUp.body.status).toBe('open');
      const reopened = await admin('questions');
      expect(reopened).toContain(qa.id);
      expect(reopened).toContain('[agent] And DMARC?');
      expect(reopened).not.toContain(qb.id);
    },
    CLI_TEST_TIMEOUT,
  );

  it.concurrent(
    'feature requests: one upvote per account, counted across accounts; admin ship tells the requester and every voter',
    async ({ expect }) => {
      const created = await rest(t, 'POST', '/feature-requests', {
        key: a.apiKey,
        body: { title: 'Scheduled sends', description: 'Let me give send_at so a message goes out later.' },
      });
      expect(created.status, JSON.stringify(created.body)).toBe(200);
      const fr = created.body;
      expect(fr).toMatchObject({ title: 'Scheduled sends', status: 'open', votes: 0, voted: false, mine: true, shipped_at: null });
      expect(fr.id).toMatch(/^fr_/);

      const byB = await rest(t, 'POST', `/feature-requests/${fr.id}/vote`, { key: b.apiKey });
      expect(byB.status, JSON.stringify(byB.body)).toBe(200);
      expect(byB.body).toMatchObject({ votes: 1, voted: true, mine: false });
      const twice = await rest(t, 'POST', `/feature-requests/${fr.id}/vote`, { key: b.apiKey });
      expect(twice.status).toBe(409);
      expect(twice.body.error.code).toBe('already_voted');
      expect((await rest(t, 'POST', `/feature-requests/${fr.id}/vote`, { key: c.apiKey })).body.votes).toBe(2);
      // The requester may vote for its own request, once.
      expect((await rest(t, 'POST', `/feature-requests/${fr.id}/vote`, { key: a.apiKey })).body.votes).toBe(3);
      expect((await rest(t, 'POST', `/feature-requests/${fr.id}/vote`, { key: a.apiKey })).status).toBe(409);
      expect((await rest(t, 'POST', '/feature-requests/fr_doesnotexist/vote', { key: a.apiKey })).status).toBe(404);

      // The board is shared: d (no vote) sees the count and that it has not voted.
      const asD = await rest(t, 'GET', `/feature-requests/${fr.id}`, { key: d.apiKey });
      expect(asD.body).toMatchObject({ votes: 3, voted: false, mine: false });
      const board = await rest(t, 'GET', '/feature-requests', { key: c.apiKey });
      expect(board.body.feature_requests.find((x: any) => x.id === fr.id)).toMatchObject({ votes: 3, voted: true, mine: false });

      const features = await admin('features');
      expect(features.split('\n').find((l) => l.startsWith(fr.id))).toMatch(/votes 3\s+Scheduled sends/);

      const shipped = await admin('ship', fr.id, 'Use', 'send_at', 'on', 'POST /messages/send.');
      expect(shipped).toContain(`shipped ${fr.id}; feature_request.shipped sent to 3 account(s)`);

      // Exactly one event each for the requester (who also voted) and the voters; none for d.
      for (const [acct, mine] of [
        [a, true],
        [b, false],
        [c, false],
      ] as const) {
        const evs = await eventsOf(acct, 'feature_request.shipped');
        expect(evs, acct.accountId).toHaveLength(1);
        expect(evs[0]!.data).toMatchObject({
          feature_request_id: fr.id,
          title: 'Scheduled sends',
          note: 'Use send_at on POST /messages/send.',
          requested_by_you: mine,
        });
      }
      expect(await eventsOf(d, 'feature_request.shipped')).toHaveLength(0);
      const now = (await rest(t, 'GET', `/feature-requests/${fr.id}`, { key: a.apiKey })).body;
      expect(now.status).toBe('shipped');
      expect(Date.parse(now.shipped_at)).not.toBeNaN();

      // Pushed to the webhooks of a and b.
      for (const [p, acct] of [
        ['/a', a],
        ['/b', b],
      ] as const) {
        const r = await waitFor(`feature_request.shipped at ${p}`, () =>
          receiver.at(p).find((x) => x.event.type === 'feature_request.shipped' && x.event.data.feature_request_id === fr.id),
        );
        expect(verifyStripe(r, await signingSecret(t, acct.apiKey)).type).toBe('feature_request.shipped');
      }

      // Shipping again tells nobody again; the open list no longer has it.
      const [again, open] = await Promise.all([admin('ship', fr.id), admin('features')]);
      expect(again).toContain('sent to 0 account(s)');
      expect(open).not.toContain(fr.id);
      expect(await eventsOf(b, 'feature_request.shipped')).toHaveLength(1);
    },
    CLI_TEST_TIMEOUT,
  );
});
