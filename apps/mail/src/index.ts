/**
 * apps/mail: the MX, and (submission/, imap/) the servers of mail clients. The MX is an SMTP server (smtp-server) that accepts mail only for boxes (and bounce addresses) of
 * domains this instance hosts (550 otherwise: never an open relay), offers STARTTLS, advertises SIZE and answers
 * 552 above it, limits recipients and connections, refuses loops, and hands each message to core, which parses,
 * stores (sealed), charges and announces it.
 */
import type { AddressInfo } from 'node:net';
import { SMTPServer, type SMTPServerAddress, type SMTPServerDataStream, type SMTPServerSession } from 'smtp-server';
import { startImap } from './imap/server';
import { startSubmission } from './submission/server';
import type { Config } from '@boxes/config';
import { mailTlsMaterial, receiveMessage, resolveMxRecipient, type RecipientResolution, type Services } from '@boxes/core';
import type { Logger } from 'pino';
import { envelopeAddressProblem, headerHasNul } from './mx-input';
import { decideAtData, rcptRefusal, type RcptRows } from './mx-trust';

/** More Received headers than this means the message is looping between servers. */
export const MAX_RECEIVED_HEADERS = 30;

export interface MailServerHandle {
  /** The MX. */
  port: number;
  /** SMTP submission for mail clients (implicit TLS). */
  submissionPort: number;
  /** IMAP for mail clients (implicit TLS). */
  imapPort: number;
  /** The certificate the three listeners serve (what mail clients pin when it is self-signed). */
  tls: { sha256: string; selfSigned: boolean };
  stop(): Promise<void>;
}

class SmtpReply extends Error {
  constructor(
    readonly responseCode: number,
    message: string,
  ) {
    super(message);
  }
}

function countReceived(raw: Buffer): number {
  const end = raw.indexOf('\r\n\r\n');
  const head = raw.subarray(0, end === -1 ? Math.min(raw.length, 256 * 1024) : end).toString('latin1');
  return (head.match(/^Received:/gim) ?? []).length;
}

export async function start(config: Config, deps: { svc: Services; log: Logger }): Promise<MailServerHandle> {
  const { svc, log } = deps;
  const resolved = new Map<string, RecipientResolution[]>();
  const listRows = new Map<string, RcptRows>();
  const tls = await mailTlsMaterial(svc);

  const server = new SMTPServer({
    name: config.mailHost,
    banner: 'Boxes MX',
    size: config.smtp.maxMessageBytes,
    maxClients: config.smtp.maxConnections,
    // A client silent for this long is disconnected (slow or stuck clients do not hold a slot for ever).
    socketTimeout: config.smtp.socketTimeoutMs,
    // An MX takes no logins: submission is the API's job.
    disabledCommands: ['AUTH'],
    authOptional: true,
    key: tls.key,
    cert: tls.cert,
    logger: false,
    onConnect(session, cb) {
      resolved.set(session.id, []);
      cb();
    },
    onClose(session) {
      resolved.delete(session.id);
      listRows.delete(session.id);
    },
    onMailFrom(address, session, cb) {
      const bad = address.address ? envelopeAddressProblem(address.address) : null;
      if (bad) return cb(new SmtpReply(553, `5.1.7 Bad sender address syntax: ${bad}`));
      // A new transaction on the same connection starts with no recipients.
      resolved.set(session.id, []);
      listRows.set(session.id, new Map());
      cb();
    },
    onRcptTo(address: SMTPServerAddress, session: SMTPServerSession, cb) {
      const bad = envelopeAddressProblem(address.address);
      if (bad) return cb(new SmtpReply(553, `5.1.3 Bad recipient address syntax: ${bad}`));
      const list = resolved.get(session.id) ?? [];
      if (list.length >= config.smtp.maxRecipients) {
        cb(new SmtpReply(452, `4.5.3 Too many recipients (at most ${config.smtp.maxRecipients} per message)`));
        return;
      }
      const mailFrom = session.envelope.mailFrom ? session.envelope.mailFrom.address || null : null;
      resolveMxRecipient(svc, address.address, mailFrom)
        .then(async ({ resolution: r, rows: known }) => {
          if (r.kind === 'not_hosted')
            return cb(new SmtpReply(550, `5.7.1 <${address.address}>: relay access denied, this server only accepts mail for its own domains`));
          if (r.kind === 'unknown_box') return cb(new SmtpReply(550, `5.1.1 <${address.address}>: no such mailbox`));
          // The box's block lists against the envelope sender (core/trust).
          const refused = r.kind === 'box' ? await rcptRefusal(svc, listRows.get(session.id) ?? new Map(), r.box, mailFrom, known) : null;
          if (refused) return cb(new SmtpReply(refused.code, refused.message));
          list.push(r);
          resolved.set(session.id, list);
          cb();
        })
        .catch((err) => {
          log.error({ err }, 'recipient lookup failed');
          cb(new SmtpReply(451, '4.3.0 Temporary failure, try again later'));
        });
    },
    onData(stream: SMTPServerDataStream, session: SMTPServerSession, cb) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        // smtp-server only flags the size after DATA; answering 552 is ours to do.
        if (stream.sizeExceeded) return cb(new SmtpReply(552, `5.3.4 Message too big for this server (at most ${config.smtp.maxMessageBytes} bytes)`));
        const raw = Buffer.concat(chunks);
        if (headerHasNul(raw)) return cb(new SmtpReply(554, '5.6.0 NUL character in the message header: refused'));
        if (countReceived(raw) > MAX_RECEIVED_HEADERS) return cb(new SmtpReply(554, '5.4.6 Routing loop detected: too many Received headers'));
        const recipients = resolved.get(session.id) ?? [];
        const mailFrom = session.envelope.mailFrom ? session.envelope.mailFrom.address || null : null;
        // Verified, scored and checked against each box's lists and policy before anything is stored (core/trust).
        decideAtData(svc, config, {
          raw,
          recipients,
          mailFrom,
          ip: session.remoteAddress || null,
          helo: session.hostNameAppearsAs || null,
          rows: listRows.get(session.id) ?? new Map(),
        })
          .then(async (d) => {
            if (d.refusal) return cb(new SmtpReply(d.refusal.code, d.refusal.message));
            const stored = await receiveMessage(svc, { raw: d.raw, recipients: d.recipients, mailFrom, via: 'smtp', trust: d.trust });
            cb(null, `2.0.0 Ok: stored ${stored.messageIds.length} message(s)`);
          })
          .catch((err) => {
            log.error({ err }, 'storing inbound mail failed');
            cb(new SmtpReply(451, '4.3.0 Temporary failure storing the message, try again later'));
          });
      });
    },
  });
  server.on('error', (err) => log.error({ err }, 'smtp server error'));
  await new Promise<void>((resolve, reject) => {
    server.server.once('error', reject);
    server.listen(config.smtp.port, config.smtp.host, () => resolve());
  });
  const port = (server.server.address() as AddressInfo).port;
  const submission = await startSubmission(config, { svc, log, tls });
  const imap = await startImap(config, { svc, log, tls });
  return {
    port,
    submissionPort: submission.port,
    imapPort: imap.port,
    tls: { sha256: tls.sha256, selfSigned: tls.selfSigned },
    stop: async () => {
      await Promise.all([new Promise<void>((resolve) => server.close(() => resolve())), submission.stop(), imap.stop()]);
    },
  };
}
