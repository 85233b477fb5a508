/**
 * apps/dns: the instance's authoritative DNS server, over UDP and TCP on DNS_HOST:DNS_PORT (53 in production),
 * answering from PostgreSQL (dns_zones, dns_records; packages/core/src/dns) for the base domain, delegated and
 * registered domains and their managed records. Wire format: dns-packet. Behaviour:
 *  - AA on every answer from a zone served here; REFUSED (no AA) for names in no zone;
 *  - NXDOMAIN for a name with nothing at or below it, NODATA (NOERROR, empty answer) for a name that exists
 *    with other types or only has names below it; both carry the zone's SOA in the authority section, with
 *    the SOA minimum as its TTL (RFC 2308);
 *  - CNAME: answered, and followed within the zones served here (at most 8 steps);
 *  - ANY: every record at the name (no minimal-ANY shortcut);
 *  - EDNS0: an OPT record is answered with an OPT record; the UDP size a client advertises is honoured up to
 *    1232 bytes (512 without EDNS). An answer that does not fit is sent truncated (TC, question only); the
 *    client asks again over TCP, which carries any size.
 * Queries for zones of delegated and registered domains are counted per zone and UTC month into
 * dns_query_counts (batched in memory, written every few seconds and at stop), for the DNS overage charge.
 * Answers are read from the database on every query, so a change is served at once.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import * as packet from 'dns-packet';
import type { Config } from '@boxes/config';
import { ensureBaseZone, hostContent, lookupName, soaRecord, SOA_TIMERS, txtStrings, type Lookup, type ServedRecord, type Services } from '@boxes/core';
import type { Logger } from 'pino';

export interface DnsHandle {
  /** The UDP and TCP port (the same one). */
  port: number;
  host: string;
  /** Writes the query counts gathered so far. */
  flushCounts(): Promise<void>;
  stop(): Promise<void>;
}

const MAX_UDP = 1232;
const PLAIN_UDP = 512;
const MAX_CNAME_CHAIN = 8;
const COUNT_FLUSH_MS = 5_000;

type Rcode = 'NOERROR' | 'NXDOMAIN' | 'REFUSED' | 'FORMERR' | 'SERVFAIL' | 'NOTIMP';
const RCODE: Record<Rcode, number> = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3, NOTIMP: 4, REFUSED: 5 };

/** A stored record as a dns-packet answer. */
export function toAnswer(r: ServedRecord): packet.Answer {
  const base = { name: r.name, ttl: r.ttl, class: 'IN' as const };
  const parts = r.content.trim().split(/\s+/);
  switch (r.type) {
    case 'A':
    case 'AAAA':
      return { ...base, type: r.type, data: r.content.trim() };
    case 'CNAME':
    case 'NS':
    case 'PTR':
      return { ...base, type: r.type, data: hostContent(r.content) } as packet.Answer;
    case 'MX':
      return { ...base, type: 'MX', data: { preference: Number(parts[0]), exchange: hostContent(parts[1] ?? '') } };
    case 'TXT':
      return { ...base, type: 'TXT', data: txtStrings(r.content).map((s) => Buffer.from(s, 'utf8')) };
    case 'SRV':
      return { ...base, type: 'SRV', data: { priority: Number(parts[0]), weight: Number(parts[1]), port: Number(parts[2]), target: hostContent(parts[3] ?? '') } };
    case 'CAA': {
      const m = /^(\d+)\s+(\S+)\s+"?((?:[^"\\]|\\.)*)"?\s*$/.exec(r.content.trim());
      const flags = Number(m?.[1] ?? 0);
      return { ...base, type: 'CAA', data: { flags, tag: (m?.[2] ?? 'issue') as 'issue', value: (m?.[3] ?? '').replace(/\\(.)/g, '$1'), issuerCritical: (flags & 128) !== 0 } };
    }
    case 'SOA': {
      const [mname, rname, serial, refresh, retry, expire, minimum] = parts;
      return { ...base, type: 'SOA', data: { mname: mname!, rname: rname!, serial: Number(serial), refresh: Number(refresh), retry: Number(retry), expire: Number(expire), minimum: Number(minimum) } };
    }
    default:
      throw new Error(`record type ${r.type} is not served`);
  }
}

interface Answered {
  rcode: Rcode;
  aa: boolean;
  answers: packet.Answer[];
  authorities: packet.Answer[];
  /** The zone that answered, for counting. */
  domainId: string | null;
}

/** Resolves one question against the served zones. */
export async function answerQuestion(svc: Pick<Services, 'db'>, q: packet.Question): Promise<Answered> {
  // dns-packet's type list has no ANY (it decodes QTYPE 255 as the string 'ANY').
  const qtype = q.type as string;
  const answers: packet.Answer[] = [];
  let name = q.name;
  let first: Lookup | null = null;
  for (let step = 0; step <= MAX_CNAME_CHAIN; step++) {
    const l = await lookupName(svc.db, name);
    first ??= l;
    if (!l.zone) {
      // The first name: not ours. A CNAME target outside our zones: the answer ends with the CNAME.
      return step === 0 ? { rcode: 'REFUSED', aa: false, answers: [], authorities: [], domainId: null } : { rcode: 'NOERROR', aa: true, answers, authorities: [], domainId: first.zone?.domainId ?? null };
    }
    const negative = { name: l.zone.name, ttl: SOA_TIMERS.minimum, class: 'IN' as const };
    const soa = { ...toAnswer(soaRecord(l.zone)), ...negative } as packet.Answer;
    const cname = l.records.find((r) => r.type === 'CNAME');
    if (cname && qtype !== 'CNAME' && qtype !== 'ANY') {
      answers.push(toAnswer(cname));
      name = hostContent(cname.content);
      continue;
    }
    const matching = l.records.filter((r) => qtype === 'ANY' || r.type === qtype);
    if (matching.length) return { rcode: 'NOERROR', aa: true, answers: [...answers, ...matching.map(toAnswer)], authorities: [], domainId: first.zone!.domainId };
    const exists = l.records.length > 0 || l.hasDescendants;
    return { rcode: exists || answers.length ? 'NOERROR' : 'NXDOMAIN', aa: true, answers, authorities: [soa], domainId: first.zone!.domainId };
  }
  return { rcode: 'SERVFAIL', aa: false, answers: [], authorities: [], domainId: null };
}

export async function start(config: Config, deps: { svc: Services; log: Logger }): Promise<DnsHandle> {
  const { svc, log } = deps;
  await ensureBaseZone(svc.db, config);

  // Query counts per zone (domain) and month, written in batches.
  const counts = new Map<string, number>();
  const flushCounts = async () => {
    if (!counts.size) return;
    const batch = [...counts].map(([key, n]) => {
      const [domainId, month] = key.split('|') as [string, string];
      return { domain_id: domainId, month, n };
    });
    counts.clear();
    await svc.db.$executeRaw`
      INSERT INTO dns_query_counts (domain_id, month, queries)
      SELECT b.domain_id, b.month, b.n FROM jsonb_to_recordset(${JSON.stringify(batch)}::jsonb) AS b(domain_id text, month text, n bigint)
      ON CONFLICT (domain_id, month) DO UPDATE SET queries = dns_query_counts.queries + EXCLUDED.queries`;
  };
  const countTimer = setInterval(() => flushCounts().catch((err) => log.error({ err }, 'dns: writing query counts failed')), COUNT_FLUSH_MS);
  countTimer.unref();

  async function respond(msg: Buffer, transport: 'udp' | 'tcp'): Promise<Buffer | null> {
    let query: packet.Packet;
    try {
      query = packet.decode(msg);
    } catch {
      return null; // not DNS: no answer
    }
    const opt = query.additionals?.find((a) => a.type === 'OPT') as packet.OptAnswer | undefined;
    const limit = transport === 'tcp' ? 65_535 : opt ? Math.min(Math.max(opt.udpPayloadSize ?? PLAIN_UDP, PLAIN_UDP), MAX_UDP) : PLAIN_UDP;
    const question = query.questions?.[0];
    const reply = (a: Partial<Answered> & { rcode: Rcode }) => {
      const out: packet.Packet = {
        id: query.id ?? 0,
        type: 'response',
        // dns-packet takes the RCODE in the low four bits of flags.
        flags: (a.aa ? packet.AUTHORITATIVE_ANSWER : 0) | ((query.flags ?? 0) & packet.RECURSION_DESIRED) | RCODE[a.rcode],
        questions: question ? [question] : [],
        answers: a.answers ?? [],
        authorities: a.authorities ?? [],
        additionals: opt ? [{ type: 'OPT', name: '.', udpPayloadSize: MAX_UDP, extendedRcode: 0, ednsVersion: 0, flags: 0, options: [] } as unknown as packet.OptAnswer] : [],
      } as packet.Packet;
      let buf = packet.encode(out);
      if (buf.length > limit) {
        // Truncated: the question (and OPT) only, with TC; the client retries over TCP.
        buf = packet.encode({ ...out, flags: (out.flags ?? 0) | packet.TRUNCATED_RESPONSE, answers: [], authorities: [] });
      }
      return buf;
    };
    if (query.type !== 'query' || (query as { opcode?: string }).opcode && (query as { opcode?: string }).opcode !== 'QUERY') return reply({ rcode: 'NOTIMP' });
    if (!question || (query.questions?.length ?? 0) !== 1) return reply({ rcode: 'FORMERR' });
    try {
      const a = await answerQuestion(svc, question);
      if (a.domainId) {
        const key = `${a.domainId}|${new Date().toISOString().slice(0, 7)}`;
        counts.set(key, (counts.get(key) ?? 0) + 1);
      }
      return reply(a);
    } catch (err) {
      log.error({ err, name: question.name, type: question.type }, 'dns: answering failed');
      return reply({ rcode: 'SERVFAIL' });
    }
  }

  // UDP and TCP on one port: the UDP socket picks it (DNS_PORT=0: any free one), TCP takes the same.
  let udp: dgram.Socket;
  let tcp: net.Server;
  let port = 0;
  for (let attempt = 0; ; attempt++) {
    udp = dgram.createSocket(config.dns.host.includes(':') ? 'udp6' : 'udp4');
    await new Promise<void>((resolve, reject) => {
      udp.once('error', reject);
      udp.bind(config.dns.port, config.dns.host, () => resolve());
    });
    port = udp.address().port;
    tcp = net.createServer((socket) => serveTcp(socket));
    const ok = await new Promise<boolean>((resolve, reject) => {
      tcp.once('error', (err: NodeJS.ErrnoException) => (err.code === 'EADDRINUSE' && config.dns.port === 0 && attempt < 10 ? resolve(false) : reject(err)));
      tcp.listen(port, config.dns.host, () => resolve(true));
    });
    if (ok) break;
    udp.close();
  }
  udp.on('error', (err) => log.error({ err }, 'dns: udp socket error'));
  udp.on('message', (msg, rinfo) => {
    void respond(msg, 'udp').then((buf) => {
      if (buf) udp.send(buf, rinfo.port, rinfo.address);
    });
  });

  const sockets = new Set<net.Socket>();
  function serveTcp(socket: net.Socket): void {
    sockets.add(socket);
    socket.setTimeout(10_000, () => socket.destroy());
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    let pending = Buffer.alloc(0);
    socket.on('data', (chunk) => {
      pending = Buffer.concat([pending, chunk]);
      // Each message is prefixed by its two-byte length (RFC 1035 4.2.2); several may arrive at once.
      while (pending.length >= 2) {
        const len = pending.readUInt16BE(0);
        if (pending.length < 2 + len) break;
        const msg = pending.subarray(2, 2 + len);
        pending = pending.subarray(2 + len);
        void respond(msg, 'tcp').then((buf) => {
          if (!buf || socket.destroyed) return;
          const head = Buffer.alloc(2);
          head.writeUInt16BE(buf.length);
          socket.write(Buffer.concat([head, buf]));
        });
      }
    });
  }

  log.info({ host: config.dns.host, port }, 'dns listening');
  return {
    port,
    host: config.dns.host,
    flushCounts,
    async stop() {
      clearInterval(countTimer);
      await new Promise<void>((r) => udp.close(() => r()));
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => tcp.close(() => r()));
      await flushCounts().catch(() => undefined);
    },
  };
}
