/**
 * Spam scoring with the real rspamd: with RSPAMD_URL every inbound message is scored before it is stored; GTUBE
 * is caught; the verdict and score are on the message and in mail.received; a box with spam_action refuse
 * answers 550 at DATA (counted, not stored); without rspamd answering, mail is stored unscored.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rest, signupAccount, startTestServer, type TestServer } from '@boxes/testing';
import { rawMessage, sendRaw, swaks, waitForEvent, waitForReceived } from './mail-receive-helpers';
import { startRspamd, type RunningRspamd } from './rspamd-helpers';

const GTUBE = 'XJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X';

let rspamd: RunningRspamd;
let t: TestServer;

beforeAll(async () => {
  rspamd = await startRspamd();
  t = await startTestServer({ mail: true, env: { RSPAMD_URL: rspamd.url } });
}, 120_000);

afterAll(async () => {
  await t?.stop();
  await rspamd?.stop();
});

describe('rspamd', () => {
  it('GTUBE is caught: stored with verdict spam (spam_action label, the default), in the message and mail.received', async () => {
    const a = await signupAccount(t);
    await sendRaw(
      t.smtpPort!,
      { from: 'spammer@outside.example', to: [a.primaryAddress] },
      rawMessage({ From: 'spammer@outside.example', To: a.primaryAddress, Subject: 'gtube labelled' }, GTUBE),
    );
    const m = await waitForReceived(t, a.apiKey, 'gtube labelled');
    expect(m.spam).toMatchObject({ verdict: 'spam', action: 'reject' });
    expect(m.spam.symbols).toContain('GTUBE');
    expect(m.spam.score).toBeGreaterThanOrEqual(m.spam.required_score);
    const ev = await waitForEvent(t, a.apiKey, 'mail.received', (e) => e.data.message.subject === 'gtube labelled');
    expect(ev.data.message.spam).toMatchObject({ verdict: 'spam', action: 'reject' });
  });

  it('an ordinary message is ham, with its score', async () => {
    const a = await signupAccount(t);
    await sendRaw(
      t.smtpPort!,
      { from: 'friend@outside.example', to: [a.primaryAddress] },
      rawMessage(
        { From: 'Friend <friend@outside.example>', To: a.primaryAddress, Subject: 'lunch', 'Message-ID': `<lunch-${Date.now()}@outside.example>` },
        'Shall we have lunch at noon?',
      ),
    );
    const m = await waitForReceived(t, a.apiKey, 'lunch');
    expect(m.spam.verdict).toBe('ham');
    expect(m.spam.action).toBe('no action');
    expect(typeof m.spam.score).toBe('number');
    expect(m.spam.score).toBeLessThan(m.spam.required_score);
  });

  it('spam_action refuse: GTUBE is refused with 550 at DATA (swaks), counted, never stored', async () => {
    const a = await signupAccount(t);
    const box = (await rest(t, 'GET', '/boxes', { key: a.apiKey })).body.boxes[0];
    const set = await rest(t, 'PUT', `/boxes/${box.id}/policy`, { key: a.apiKey, body: { spam_action: 'refuse' } });
    expect(set.body.spam_action).toBe('refuse');
    const r = await swaks(t.smtpPort!, ['--from', 'spammer@outside.example', '--to', box.address, '--header', 'Subject: gtube refused', '--body', GTUBE]);
    expect(r.out).toMatch(/<\*\* +550 5\.7\.1 .*spam/);
    expect(await t.db.message.count({ where: { accountId: a.accountId } })).toBe(0);
    expect((await rest(t, 'GET', `/boxes/${box.id}/policy`, { key: a.apiKey })).body.refused_count).toBe(1);
    // Ham still arrives.
    const ok = await swaks(t.smtpPort!, [
      '--from',
      'friend@outside.example',
      '--to',
      box.address,
      '--header',
      'Subject: still welcome',
      '--body',
      'See you tomorrow.',
    ]);
    expect(ok.code, ok.out).toBe(0);
    expect((await waitForReceived(t, a.apiKey, 'still welcome')).spam.verdict).toBe('ham');
  });
});

describe('rspamd not answering', () => {
  it('mail is stored unscored (spam null), never lost', async () => {
    const down = await startTestServer({ mail: true, env: { RSPAMD_URL: 'http://127.0.0.1:9', RSPAMD_TIMEOUT_MS: '500' } });
    try {
      const a = await signupAccount(down);
      await sendRaw(
        down.smtpPort!,
        { from: 'x@outside.example', to: [a.primaryAddress] },
        rawMessage({ From: 'x@outside.example', To: a.primaryAddress, Subject: 'unscored' }, GTUBE),
      );
      const m = await waitForReceived(down, a.apiKey, 'unscored');
      expect(m.spam).toBeNull();
      expect(m.authentication).not.toBeNull();
    } finally {
      await down.stop();
    }
  });
});
