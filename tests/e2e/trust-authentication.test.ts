/**
 * Who really sent it: the MX verifies every inbound message (SPF, DKIM, DMARC, ARC) through DNS_RESOLVERS, here a
 * DNS server the test controls where outside test domains publish their keys and policies. Signed mail passes,
 * mail tampered with after signing fails, unsigned mail from a p=reject domain fails, a forwarder that changed
 * the message and sealed it with ARC shows its seal, and mail between two accounts of this instance (signed by
 * us) is sender_verified. The result is on GET /messages, GET /messages/{id}, mail.received and, as an
 * Authentication-Results header, on the stored message that IMAP serves.
 */
import { generateKeyPairSync } from 'node:crypto';
import { Resolver } from 'node:dns/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authenticate, dkimSign, sealMessage } from 'mailauth';
import { rest, signupAccount, startStandInDns, startTestServer, waitFor, type StandInDns, type TestAccount, type TestServer } from '@boxes/testing';
import { MailSink } from './mail-send-helpers';
import { crlf, rawMessage, sendRaw, waitForEvent, waitForReceived } from './mail-receive-helpers';

let dns: StandInDns;
let sink: MailSink;
let t: TestServer;
let inbox: TestAccount;

const stamp = Date.now().toString(36);
/** An outside domain that signs its mail and publishes DMARC p=reject (SPF names no sender: only DKIM can pass). */
const SENDER = `sender-${stamp}.test`;
/** A mailing list that rewrites subjects and seals with ARC. */
const LIST = `list-${stamp}.test`;

function rsaKey() {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return {
    privateKey: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    p: publicKey.export({ type: 'spki', format: 'der' }).toString('base64'),
  };
}
const senderKey = rsaKey();
const listKey = rsaKey();

async function signed(raw: string): Promise<string> {
  const r = await dkimSign(raw, {
    canonicalization: 'relaxed/relaxed',
    signatureData: [{ signingDomain: SENDER, selector: 's1', privateKey: senderKey.privateKey }],
  } as Parameters<typeof dkimSign>[1]);
  expect(r.errors ?? []).toEqual([]);
  expect(r.signatures).toContain('DKIM-Signature');
  return r.signatures + raw;
}

/** The stand-in DNS as a mailauth resolver (what the list server sees when it verifies before sealing). */
function standInResolver() {
  const r = new Resolver();
  r.setServers([dns.address]);
  return (name: string, type: string) => r.resolve(name, type) as Promise<string[][] | string[]>;
}

async function receivedBySubject(subject: string) {
  const m = await waitForReceived(t, inbox.apiKey, subject);
  const one = await rest(t, 'GET', `/messages/${m.id}`, { key: inbox.apiKey });
  expect(one.status).toBe(200);
  return { listed: m, one: one.body };
}

beforeAll(async () => {
  dns = await startStandInDns();
  dns.set(`s1._domainkey.${SENDER}`, 'TXT', [`v=DKIM1; k=rsa; p=${senderKey.p}`]);
  dns.set(`_dmarc.${SENDER}`, 'TXT', ['v=DMARC1; p=reject; adkim=r; aspf=r']);
  dns.set(SENDER, 'TXT', ['v=spf1 -all']);
  dns.set(`arc._domainkey.${LIST}`, 'TXT', [`v=DKIM1; k=rsa; p=${listKey.p}`]);
  dns.set(LIST, 'TXT', ['v=spf1 ip4:127.0.0.1 -all']);
  sink = new MailSink();
  await sink.start();
  t = await startTestServer({ mail: true, worker: true, resolver: sink.resolver(), env: { DNS_RESOLVERS: dns.address } });
  inbox = await signupAccount(t);
}, 60_000);

afterAll(async () => {
  await t?.stop();
  await sink?.close();
  await dns?.stop();
});

describe('inbound with real signatures', () => {
  it('a message signed with a published key passes: DKIM aligned, DMARC pass under p=reject, sender_verified', async () => {
    const subject = `signed ${stamp}`;
    const raw = await signed(
      rawMessage(
        { From: `Boss <boss@${SENDER}>`, To: inbox.primaryAddress, Subject: subject, 'Message-ID': `<signed-${stamp}@${SENDER}>` },
        'Please wire the money.',
      ),
    );
    await sendRaw(t.smtpPort!, { from: `boss@${SENDER}`, to: [inbox.primaryAddress] }, raw);
    const { listed, one } = await receivedBySubject(subject);
    for (const m of [listed, one]) {
      expect(m.authentication.sender_verified).toBe(true);
      expect(m.authentication.dkim).toEqual([{ domain: SENDER, selector: 's1', result: 'pass', aligned: true, comment: null }]);
      expect(m.authentication.dmarc).toMatchObject({ result: 'pass', policy: 'reject', from_domain: SENDER, alignment: { dkim: true, spf: false } });
      // SPF names no sender address, so it fails for 127.0.0.1; DKIM alone carries DMARC.
      expect(m.authentication.spf).toMatchObject({ result: 'fail', domain: SENDER, client_ip: expect.stringContaining('127.0.0.1') });
      expect(m.authentication.arc).toEqual({ result: 'none', instance: 0, sealer: null });
      expect(m.authentication.checked_by).toBe(t.config.mailHost);
    }
    // The stored copy carries our Authentication-Results on top (what IMAP clients see).
    expect(one.body.headers['authentication-results']).toContain(t.config.mailHost);
    expect(one.body.headers['authentication-results']).toContain('dkim=pass');
    const ev = await waitForEvent(t, inbox.apiKey, 'mail.received', (e) => e.data.message.subject === subject);
    expect(ev.data.message.authentication.sender_verified).toBe(true);
    expect(ev.data.message.authentication.dmarc.result).toBe('pass');
  });

  it('a message changed after signing fails DKIM and DMARC: not verified, and still delivered for the agent to judge', async () => {
    const subject = `tampered ${stamp}`;
    const raw = await signed(rawMessage({ From: `Boss <boss@${SENDER}>`, To: inbox.primaryAddress, Subject: subject }, 'Wire 100 dollars to account 1234.'));
    const tampered = raw.replace('Wire 100 dollars to account 1234.', 'Wire 90000 dollars to account 6666.');
    expect(tampered).not.toBe(raw);
    await sendRaw(t.smtpPort!, { from: `boss@${SENDER}`, to: [inbox.primaryAddress] }, tampered);
    const { one } = await receivedBySubject(subject);
    expect(one.authentication.sender_verified).toBe(false);
    // A body that no longer matches its signed hash: mailauth reports neutral with the reason (RFC 6376 6.3).
    expect(one.authentication.dkim).toEqual([{ domain: SENDER, selector: 's1', result: 'neutral', aligned: false, comment: 'body hash did not verify' }]);
    expect(one.authentication.dmarc).toMatchObject({ result: 'fail', policy: 'reject' });
    expect(one.body.text).toContain('90000');
  });

  it('an unsigned message claiming a p=reject domain fails DMARC', async () => {
    const subject = `forged ${stamp}`;
    await sendRaw(
      t.smtpPort!,
      { from: `boss@${SENDER}`, to: [inbox.primaryAddress] },
      rawMessage({ From: `Boss <boss@${SENDER}>`, To: inbox.primaryAddress, Subject: subject }, 'It is me, really.'),
    );
    const { one } = await receivedBySubject(subject);
    expect(one.authentication).toMatchObject({
      sender_verified: false,
      dkim: [],
      spf: { result: 'fail' },
      dmarc: { result: 'fail', policy: 'reject', from_domain: SENDER },
    });
  });

  it('a list that changed the message and sealed it with ARC: the seal passes, the broken signature is not taken as verified', async () => {
    const subject = `original ${stamp}`;
    const original = await signed(
      rawMessage({ From: `Boss <boss@${SENDER}>`, To: `team@${LIST}`, Subject: subject, 'Message-ID': `<arc-${stamp}@${SENDER}>` }, 'Meeting moved to 3pm.'),
    );
    // The list verifies what it received, then tags the subject (breaking DKIM) and seals the result.
    const seen = await authenticate(original, {
      resolver: standInResolver(),
      ip: '127.0.0.1',
      helo: `mx.${SENDER}`,
      sender: `boss@${SENDER}`,
      mta: `mx.${LIST}`,
      disableBimi: true,
    });
    expect(seen.dkim.results[0]!.status.result).toBe('pass');
    const listed = original.replace(`Subject: ${subject}`, `Subject: [team] ${subject}`);
    const authResults = seen.arc && 'authResults' in seen.arc ? String((seen.arc as { authResults: string }).authResults) : '';
    expect(authResults).toContain('dkim=pass');
    const seal = await sealMessage(listed, {
      signingDomain: LIST,
      selector: 'arc',
      privateKey: listKey.privateKey,
      authResults: authResults.replace(/^[^;]*;\s*/, ''),
      cv: 'none',
    });
    expect(seal.length).toBeGreaterThan(0);
    await sendRaw(t.smtpPort!, { from: `team-bounces@${LIST}`, to: [inbox.primaryAddress] }, Buffer.concat([seal, Buffer.from(crlf(listed))]));
    const { one } = await receivedBySubject(`[team] ${subject}`);
    expect(one.authentication.arc).toEqual({ result: 'pass', instance: 1, sealer: LIST });
    expect(one.authentication.dkim[0]).toMatchObject({ domain: SENDER, result: 'fail' });
    expect(one.authentication.spf).toMatchObject({ result: 'pass', domain: LIST });
    expect(one.authentication.sender_verified).toBe(false);
  });

  it('mail between two accounts of this instance is signed by us and arrives sender_verified', async () => {
    const sender = await signupAccount(t);
    // The stand-in DNS knows nothing of our zones: the instance reads its own records (trust-own-zones.test.ts).
    const d = await t.db.domain.findFirstOrThrow({ where: { accountId: sender.accountId } });
    const subject = `agent to agent ${stamp}`;
    const sent = await rest(t, 'POST', '/messages/send', { key: sender.apiKey, body: { to: inbox.primaryAddress, subject, text: 'hello from a neighbour' } });
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    const { one } = await receivedBySubject(subject);
    expect(one.authentication.sender_verified).toBe(true);
    expect(one.authentication.dkim).toEqual([{ domain: d.name, selector: d.dkimSelector, result: 'pass', aligned: true, comment: null }]);
    expect(one.authentication.dmarc).toMatchObject({ result: 'pass', from_domain: d.name });
    // Sent records carry no verdict.
    const mine = await rest(t, 'GET', `/messages/${sent.body.message_id}`, { key: sender.apiKey });
    expect(mine.body.authentication).toBeNull();
    expect(mine.body.body.extracted_text).toBeNull();
  });

  // The second form carries RFC 8601's version after the authserv-id.
  it.each([
    ['plain', ''],
    ['versioned', ' 1'],
  ])('an Authentication-Results header forged in our name is removed from the stored copy (%s)', async (form, version) => {
    const subject = `forged results ${form} ${stamp}`;
    const raw = rawMessage(
      {
        'Authentication-Results': `${t.config.mailHost}${version}; dkim=pass header.d=${SENDER}; dmarc=pass`,
        From: `boss@${SENDER}`,
        To: inbox.primaryAddress,
        Subject: subject,
      },
      'trust me',
    );
    await sendRaw(t.smtpPort!, { from: `boss@${SENDER}`, to: [inbox.primaryAddress] }, raw);
    const { one } = await receivedBySubject(subject);
    expect(one.authentication.sender_verified).toBe(false);
    const ar = String(one.body.headers['authentication-results']);
    expect(ar).toContain('dmarc=fail');
    expect(ar).not.toContain('dmarc=pass');
  });
});

describe('extracted_text', () => {
  const replies: Record<string, { text: string; expected: string }> = {
    gmail: {
      text: 'Sounds good, see you at 3.\n\nAlex\n\nOn Mon, Nov 23, 2026 at 9:14 AM Agent <agent@example.com> wrote:\n> Can we meet at 3?\n>\n> Thanks\n',
      expected: 'Sounds good, see you at 3.\n\nAlex',
    },
    outlook: {
      text: 'Yes, approved.\n\n________________________________\nFrom: Agent <agent@example.com>\nSent: Monday, November 23, 2026 9:14 AM\nTo: Dana <dana@example.com>\nSubject: Approval\n\nPlease approve the invoice.\n',
      expected: 'Yes, approved.',
    },
    outlook_original_message: {
      text: 'Approved as well.\n\n-----Original Message-----\nFrom: Agent <agent@example.com>\nSent: Monday, November 23, 2026 9:14 AM\nSubject: Approval\n\nPlease approve.\n',
      expected: 'Approved as well.',
    },
    apple_mail: {
      text: 'Works for me.\n\nSent from my iPhone\n\n> On 23 Nov 2026, at 09:14, Agent <agent@example.com> wrote:\n> \n> Can we meet at 3?\n',
      expected: 'Works for me.',
    },
    thunderbird: {
      text: 'Thanks, done.\n\n-- \nSam Smith\nACME Corp\n\nOn 23/11/2026 09:14, Agent wrote:\n> Please do it.\n',
      expected: 'Thanks, done.',
    },
  };
  for (const [client, { text, expected }] of Object.entries(replies)) {
    it(`keeps only the new text of a ${client} reply`, async () => {
      const subject = `Re: question (${client}) ${stamp}`;
      await sendRaw(
        t.smtpPort!,
        { from: `someone@${LIST}`, to: [inbox.primaryAddress] },
        rawMessage({ From: `someone@${LIST}`, To: inbox.primaryAddress, Subject: subject }, crlf(text)),
      );
      const { listed, one } = await receivedBySubject(subject);
      expect(one.body.extracted_text).toBe(expected);
      expect(listed.body.extracted_text).toBe(expected);
      expect(one.body.text).toContain(text.split('\n')[0]!);
    });
  }
});

// GET /messages lists the messages with their verdicts without bodies too.
it('GET /messages without include=body carries authentication', async () => {
  const r = await waitFor('messages', async () => {
    const res = await rest(t, 'GET', '/messages?direction=received&limit=200', { key: inbox.apiKey });
    return res.body.messages?.length ? res : null;
  });
  expect(r.body.messages.every((m: any) => m.authentication && typeof m.authentication.sender_verified === 'boolean')).toBe(true);
});
