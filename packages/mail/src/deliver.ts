/**
 * Delivering a signed message over SMTP (nodemailer's SMTP transport, pooled per destination), and finding
 * where to deliver it: a configured relay, static routes (local testing), or the recipient domain's MX hosts.
 */
import { promises as dns } from 'node:dns';
import { Readable } from 'node:stream';
import nodemailer, { type Transporter } from 'nodemailer';

export interface SmtpDestination {
  host: string;
  port: number;
  /** Implicit TLS (smtps, port 465). Otherwise STARTTLS is used when offered. */
  secure?: boolean;
  auth?: { user: string; pass: string } | undefined;
  /** Connections kept open to it at most (default: the sender's, 5); more than that many messages at once queue for one. */
  maxConnections?: number | undefined;
}

/** The local address an SMTP connection is made from, and the HELO name it announces (a dedicated sending IP). */
export interface SmtpSource {
  localAddress: string;
  heloName: string;
}

export interface DeliveryOutcome {
  ok: boolean;
  /** temporary: try again later; permanent: bounce. */
  kind: 'delivered' | 'temporary' | 'permanent';
  code: number | null;
  response: string;
  mta: string;
}

export interface MxResolver {
  resolve(domain: string): Promise<SmtpDestination[]>;
}

/** Real DNS: MX records by preference, falling back to the domain itself (RFC 5321 5.1 implicit MX). */
export function dnsMxResolver(port = 25): MxResolver {
  return {
    async resolve(domain) {
      try {
        const records = await dns.resolveMx(domain);
        // A null MX (RFC 7505) means the domain accepts no mail.
        if (records.length === 1 && records[0]!.exchange === '') return [];
        return records.sort((a, b) => a.priority - b.priority).map((r) => ({ host: r.exchange, port }));
      } catch (err) {
        const code = (err as { code?: string }).code;
        if (code === 'ENODATA') return [{ host: domain, port }];
        throw err;
      }
    },
  };
}

/** Fixed routes, domain -> host:port, for local testing without DNS; unknown domains fall through. */
export function staticResolver(routes: Record<string, SmtpDestination>, fallback?: MxResolver): MxResolver {
  return {
    async resolve(domain) {
      const hit = routes[domain.toLowerCase()];
      if (hit) return [hit];
      if (fallback) return fallback.resolve(domain);
      throw Object.assign(new Error(`no route to ${domain}`), { code: 'ENOTFOUND' });
    },
  };
}

/** Parses "example.test=127.0.0.1:2525,other.test=host:25". */
export function parseStaticRoutes(spec: string | undefined): Record<string, SmtpDestination> {
  const routes: Record<string, SmtpDestination> = {};
  for (const part of (spec ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const m = /^([^=]+)=([^:]+):(\d+)$/.exec(part);
    if (!m) throw new Error(`bad SMTP route "${part}": expected domain=host:port`);
    routes[m[1]!.toLowerCase()] = { host: m[2]!, port: Number(m[3]) };
  }
  return routes;
}

/** smtp://user:pass@host:port or smtps://... */
export function parseRelayUrl(url: string): SmtpDestination {
  const u = new URL(url);
  const secure = u.protocol === 'smtps:';
  return {
    host: u.hostname,
    port: Number(u.port || (secure ? 465 : 587)),
    secure,
    auth: u.username ? { user: decodeURIComponent(u.username), pass: decodeURIComponent(u.password) } : undefined,
  };
}

export class SmtpSender {
  private transports = new Map<string, Transporter>();

  constructor(
    private readonly opts: { heloName: string; connectionTimeoutMs?: number /** Pooled connections per destination (default 5). */; maxConnections?: number },
  ) {}

  private transport(dest: SmtpDestination, source?: SmtpSource): Transporter {
    // One pool per destination and source address: connections bound to a dedicated IP are never shared.
    const key = `${dest.secure ? 's' : ''}${dest.host}:${dest.port}:${dest.auth?.user ?? ''}:${source ? `${source.localAddress}=${source.heloName}` : ''}`;
    let t = this.transports.get(key);
    if (!t) {
      t = nodemailer.createTransport({
        pool: true,
        maxConnections: dest.maxConnections ?? this.opts.maxConnections ?? 5,
        maxMessages: 1000,
        host: dest.host,
        port: dest.port,
        secure: dest.secure ?? false,
        auth: dest.auth,
        name: source?.heloName ?? this.opts.heloName,
        ...(source ? { localAddress: source.localAddress } : {}),
        // Opportunistic STARTTLS: most MX hosts present certificates that do not name the MX host.
        tls: { rejectUnauthorized: false },
        connectionTimeout: this.opts.connectionTimeoutMs ?? 30_000,
        greetingTimeout: this.opts.connectionTimeoutMs ?? 30_000,
        socketTimeout: 60_000,
      });
      this.transports.set(key, t);
    }
    return t;
  }

  /** source: bind the connection to that address and announce its HELO name (default: the shared address). */
  async send(dest: SmtpDestination, envelope: { from: string; to: string }, raw: Buffer, source?: SmtpSource): Promise<DeliveryOutcome> {
    const mta = `${dest.host}:${dest.port}`;
    const transport = this.transport(dest, source);
    try {
      const info = plainEnvelope(envelope)
        ? await sendPrepared(transport, envelope, raw)
        : await transport.sendMail({ envelope: { from: envelope.from, to: [envelope.to] }, raw });
      if (info.rejected?.length) {
        return { ok: false, kind: 'permanent', code: 550, response: String(info.response ?? 'rejected'), mta };
      }
      return { ok: true, kind: 'delivered', code: 250, response: String(info.response ?? ''), mta };
    } catch (err) {
      const e = err as { responseCode?: number; response?: string; message: string; code?: string };
      const code = e.responseCode ?? null;
      const permanent = code !== null && code >= 500 && code < 600;
      return { ok: false, kind: permanent ? 'permanent' : 'temporary', code, response: e.response ?? e.message, mta };
    }
  }

  close(): void {
    for (const t of this.transports.values()) t.close();
    this.transports.clear();
  }
}

/** A dot-atom local part and a lower-case ASCII domain: addresses nodemailer's envelope normalization leaves as they are. */
const PLAIN_ADDRESS = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[a-z0-9-]+(?:\.[a-z0-9-]+)*$/;

function plainEnvelope(envelope: { from: string; to: string }): boolean {
  return PLAIN_ADDRESS.test(envelope.from) && PLAIN_ADDRESS.test(envelope.to);
}

interface SendInfo {
  rejected?: unknown[];
  response?: unknown;
}

/**
 * The signed bytes handed straight to the transport's connection pool. transporter.sendMail would wrap them in a
 * MailMessage and a MIME node (address parsing, a generated Message-ID, header normalization, a pipeline of
 * transforms) only to stream the same bytes out again; the pool needs no more than the envelope and a stream of
 * the message. Only for envelopes whose addresses need no normalization (punycode, quoting): the others go
 * through sendMail. The message ends with a line break, as nodemailer makes sure for a raw message.
 */
function sendPrepared(transport: Transporter, envelope: { from: string; to: string }, raw: Buffer): Promise<SendInfo> {
  const bytes = raw.length && raw[raw.length - 1] === 0x0a ? raw : Buffer.concat([raw, Buffer.from(raw[raw.length - 1] === 0x0d ? '\n' : '\r\n')]);
  const mail = {
    data: {},
    message: {
      getEnvelope: () => ({ from: envelope.from, to: [envelope.to] }),
      messageId: () => '',
      getHeader: () => '',
      // A new stream for each attempt: the pool sends an entry again over another connection when the first one
      // closed before reading any of it.
      createReadStream: () =>
        new Readable({
          read() {
            this.push(bytes);
            this.push(null);
          },
        }),
    },
  };
  const pool = (transport as unknown as { transporter: { send(mail: unknown, cb: (err: Error | null, info: SendInfo) => void): void } }).transporter;
  return new Promise((resolve, reject) => pool.send(mail, (err, info) => (err ? reject(err) : resolve(info))));
}
