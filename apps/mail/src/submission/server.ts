/**
 * SMTP submission for mail clients: implicit TLS from the first byte (465 in production), AUTH PLAIN or LOGIN
 * with an app-password (checked by core's verify call; nothing is accepted before it, so it is never an open
 * relay), MAIL FROM and the From header limited to the boxes the credential may use, and each message sent
 * through sendMessage exactly as POST /messages/send sends it. Core's refusals become SMTP replies: 402's
 * guidance as a 554, sender rules as 550, content rules as 554.
 */
import type { AddressInfo } from 'node:net';
import { SMTPServer, type SMTPServerAddress, type SMTPServerAuthentication, type SMTPServerDataStream, type SMTPServerSession } from 'smtp-server';
import type { Config } from '@boxes/config';
import type { ApiKey } from '@boxes/db';
import { AppError, appPasswordActive, heldForReview, sendMessage, verifyMailLogin, type MailLogin, type MailTls, type Services } from '@boxes/core';
import { MAX_RECIPIENTS } from '@boxes/schemas';
import type { Logger } from 'pino';
import { SubmissionRefused, toSendInput } from './message';
import { rememberSubmission } from './recent';

export interface SubmissionHandle {
  port: number;
  stop(): Promise<void>;
}

/**
 * The credential in the shape sendMessage's caller takes: it sends with the app-password's own box limit; the
 * send scope is what an app-password is for.
 */
function credentialAsCaller(login: MailLogin): ApiKey {
  return {
    id: login.appPasswordId,
    accountId: login.accountId,
    hash: '',
    prefix: '',
    label: login.label,
    scopes: ['send'],
    isOwner: false,
    allowedBoxIds: login.sendBoxIds ?? [],
    // App-passwords have no review policy of their own: the box's applies.
    review: 'none',
    createdAt: new Date(0),
    lastUsedAt: null,
    revokedAt: null,
    // An app-password has no expiry and no caps of its own; the box's caps apply to what it sends.
    expiresAt: null,
    sendCaps: null,
  };
}

function refusalOf(svc: Services, err: AppError): SubmissionRefused {
  switch (err.code) {
    case 'payment_required': {
      const topUp = err.details.top_up as { mpp?: { url?: string }; card?: { url?: string } } | undefined;
      return new SubmissionRefused(
        554,
        `5.7.0 ${err.message} Nothing was sent. Top up with POST ${topUp?.mpp?.url ?? `${svc.config.apiBaseUrl}/account/credit/topup/mpp`} (Machine Payments Protocol) or POST ${topUp?.card?.url ?? `${svc.config.apiBaseUrl}/account/credit/topup`} (card); your human owner approves the payment.`,
      );
    }
    case 'account_paused':
    case 'box_paused':
      return new SubmissionRefused(550, `5.7.1 ${err.message}`);
    case 'cap_exceeded':
      return new SubmissionRefused(451, `4.7.1 ${err.message}`);
    case 'from_domain_mismatch':
    case 'box_restricted_key':
    case 'domain_not_verified':
      return new SubmissionRefused(550, `5.7.1 ${err.message}`);
    case 'validation_error':
    case 'idempotency_key_reused':
      return new SubmissionRefused(554, `5.6.0 ${err.message}`);
    case 'rate_limited':
      return new SubmissionRefused(451, `4.7.1 ${err.message}`);
    default:
      return new SubmissionRefused(451, '4.3.0 Temporary failure, try again later');
  }
}

/** Whether the login may send from this address: a box of its account, within the app-password's limit. */
async function maySendFrom(svc: Services, login: MailLogin, address: string): Promise<boolean> {
  const box = await svc.db.box.findFirst({ where: { accountId: login.accountId, address: address.toLowerCase() }, select: { id: true } });
  return Boolean(box && (!login.sendBoxIds || login.sendBoxIds.includes(box.id)));
}

export async function startSubmission(config: Config, deps: { svc: Services; log: Logger; tls: MailTls }): Promise<SubmissionHandle> {
  const { svc, log } = deps;
  const rcptCount = new Map<string, number>();

  const server = new SMTPServer({
    secure: true,
    key: deps.tls.key,
    cert: deps.tls.cert,
    name: config.mailHost,
    banner: 'Boxes submission',
    size: config.smtp.maxMessageBytes,
    maxClients: config.smtp.maxConnections,
    // A session that goes quiet is closed like the MX's (SMTP_SOCKET_TIMEOUT_MS).
    socketTimeout: config.smtp.socketTimeoutMs,
    authMethods: ['PLAIN', 'LOGIN'],
    // Implicit TLS: STARTTLS has nothing to do, and AUTH is never offered in the clear.
    disabledCommands: ['STARTTLS'],
    allowInsecureAuth: false,
    logger: false,
    onAuth(auth: SMTPServerAuthentication, session: SMTPServerSession, cb) {
      if (auth.method !== 'PLAIN' && auth.method !== 'LOGIN')
        return cb(Object.assign(new Error('5.7.4 Use AUTH PLAIN or LOGIN with an app-password'), { responseCode: 504 }));
      verifyMailLogin(svc, { username: auth.username ?? '', password: auth.password ?? '', service: 'smtp', remoteAddress: session.remoteAddress })
        .then((r) => {
          if (r.ok) return cb(null, { user: r.login });
          if (r.reason === 'locked') return cb(Object.assign(new Error(`4.7.0 ${r.message}`), { responseCode: 454 }));
          cb(
            Object.assign(
              new Error(
                "5.7.8 Authentication failed: use your box address (or the owner's email) and an app-password from POST /account/app-passwords; API keys do not work here",
              ),
              { responseCode: 535 },
            ),
          );
        })
        .catch((err) => {
          log.error({ err }, 'submission login check failed');
          cb(Object.assign(new Error('4.7.0 Temporary authentication failure'), { responseCode: 454 }));
        });
    },
    onMailFrom(address: SMTPServerAddress, session: SMTPServerSession, cb) {
      const login = session.user as MailLogin | undefined;
      rcptCount.set(session.id, 0);
      if (!login) return cb(Object.assign(new Error('5.7.0 Authentication required'), { responseCode: 530 }));
      Promise.all([appPasswordActive(svc.db, login.appPasswordId), address.address ? maySendFrom(svc, login, address.address) : Promise.resolve(false)])
        .then(([active, allowed]) => {
          if (!active) return cb(Object.assign(new Error('5.7.8 This app-password has been revoked'), { responseCode: 535 }));
          if (!allowed) return cb(new SubmissionRefused(550, `5.7.1 <${address.address}>: not a box this app-password may send from`));
          cb();
        })
        .catch((err) => {
          log.error({ err }, 'submission sender check failed');
          cb(new SubmissionRefused(451, '4.3.0 Temporary failure, try again later'));
        });
    },
    onRcptTo(address: SMTPServerAddress, session: SMTPServerSession, cb) {
      const n = (rcptCount.get(session.id) ?? 0) + 1;
      if (n > MAX_RECIPIENTS) return cb(new SubmissionRefused(452, `4.5.3 Too many recipients (at most ${MAX_RECIPIENTS} per message)`));
      rcptCount.set(session.id, n);
      cb();
    },
    onClose(session) {
      rcptCount.delete(session.id);
    },
    onData(stream: SMTPServerDataStream, session: SMTPServerSession, cb) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        if (stream.sizeExceeded) return cb(new SubmissionRefused(552, `5.3.4 Message too big (at most ${config.smtp.maxMessageBytes} bytes)`));
        const login = session.user as MailLogin;
        const rcpts = session.envelope.rcptTo.map((r) => r.address);
        submit(Buffer.concat(chunks), login, rcpts)
          .then((text) => cb(null, text))
          .catch((err) => {
            if (err instanceof SubmissionRefused) return cb(err);
            if (err instanceof AppError) return cb(refusalOf(svc, err));
            log.error({ err }, 'submission failed');
            cb(new SubmissionRefused(451, '4.3.0 Temporary failure, try again later'));
          });
      });
    },
  });

  async function submit(raw: Buffer, login: MailLogin, rcpts: string[]): Promise<string> {
    const { input, from } = await toSendInput(raw, rcpts);
    if (!(await maySendFrom(svc, login, from))) throw new SubmissionRefused(550, `5.7.1 From <${from}>: not a box this app-password may send from`);
    const account = await svc.db.account.findUniqueOrThrow({ where: { id: login.accountId } });
    const out = await sendMessage(svc, { account, key: credentialAsCaller(login), boxScope: login.sendBoxIds }, input);
    // The box's owner review holds it: accepted, and sent (as a message the Sent folder then shows) only once approved.
    if (heldForReview(out)) return `2.0.0 Ok: held for the owner's review as ${out.id}, not sent until approved`;
    await rememberSubmission(svc, login.accountId, raw, out.message_id);
    const suppressed = out.suppressed.length ? `; suppressed, not sent: ${out.suppressed.join(', ')}` : '';
    return `2.0.0 Ok: queued as ${out.message_id}${suppressed}`;
  }

  server.on('error', (err) => log.error({ err }, 'submission server error'));
  await new Promise<void>((resolve, reject) => {
    server.server.once('error', reject);
    server.listen(config.mailClients.submissionPort, config.mailClients.submissionHost, () => resolve());
  });
  return {
    port: (server.server.address() as AddressInfo).port,
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
