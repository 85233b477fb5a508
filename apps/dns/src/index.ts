/**
 * apps/dns: the instance's authoritative DNS server, over UDP and TCP on DNS_HOST:DNS_PORT (53 in production),
 * answering from PostgreSQL (dns_zones, dns_records; packages/core/src/dns) for the base domain, delegated and
 * registered domains and their managed records. Wire format: dns-packet. Behaviour:
 *  - AA on every answer from a zone served here; REFUSED (no AA) for names in no zone, and for classes other
 *    than IN; queries that are responses are dropped; opcodes other than QUERY get NOTIMP;
 *  - the SOA (made from dns_zones, timers in packages/core/src/dns/lookup.ts) and NS at each apex;
 *  - NXDOMAIN for a name with nothing at or below it, NODATA (NOERROR, empty answer) for a name that exists
 *    with other types or only has names below it (an empty non-terminal); both carry the zone's SOA in the
 *    authority section with min(SOA TTL, SOA minimum) as its TTL (RFC 2308);
 *  - CNAME: answered, and followed within the zones served here (at most 8 steps); the rcode is the one of the
 *    last name (RFC 6604: NXDOMAIN when the target does not exist in our zones); a target elsewhere ends it;
 *  - wildcards (`*.<name>` owners) stand in for names that do not exist below their closest encloser (RFC 4592);
 *  - NS records below an apex delegate: names at and below them get a referral (no AA, the NS in the
 *    authority section, A/AAAA glue from the zone in the additional section);
 *  - ANY: every record at the name (no minimal-ANY shortcut of RFC 8482, the records of a name are few);
 *  - EDNS0: an OPT record is answered with an OPT record (UDP size 1232); the UDP size a client advertises is
 *    honoured up to 1232 bytes (512 without EDNS); an EDNS version other than 0 gets BADVERS. An answer that
 *    does not fit is sent truncated (TC, question only); the client asks again over TCP, which carries any
 *    size. dns-packet does not compress names, so answers are somewhat larger than other servers' answers.
 * Queries for zones of delegated and registered domains (zones with a domain) are counted per zone and UTC month
 * into dns_query_counts (batched in memory, written every few seconds and at stop), for the DNS overage charge.
 * No cache: every question is one statement against PostgreSQL (two for a referral, one more per CNAME step),
 * so a change is served at once.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import * as packet from 'dns-packet';
import type { Config } from '@boxes/config';
import { col, exec, sql, tbl } from '@boxes/db';
import { addressRecords, ensureBaseZone, hostContent, lookupName, NEGATIVE_TTL, soaRecord, txtStrings, type ServedRecord, type Services } from '@boxes/core';
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
const TCP_IDLE_MS = 10_000;

type Rcode = 'NOERROR' | 'NXDOMAIN' | 'REFUSED' | 'FORMERR' | 'SERVFAIL' | 'NOTIMP' | 'BADVERS';
/** RCODE values; BADVERS (16) does not fit the header's four bits: its upper bits go into the OPT record. */
const RCODE: Record<Rcode, number> = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3, NOTIMP: 4, REFUSED: 5, BADVERS: 16 };

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
      return { ...base, type: 'TXT', data: txtStrings(r.content).flatMap(splitTxt) };
    case 'SRV':
      return {
        ...base,
        type: 'SRV',
        data: { priority: Number(parts[0]), weight: Number(parts[1]), port: Number(parts[2]), target: hostContent(parts[3] ?? '') },
      };
    case 'CAA': {
      const m = /^(\d+)\s+(\S+)\s+"?((?:[^"\\]|\\.)*)"?\s*$/.exec(r.content.trim());
      const flags = Number(m?.[1] ?? 0);
      return {
        ...base,
        type: 'CAA',
        data: { flags, tag: (m?.[2] ?? 'issue') as 'issue', value: (m?.[3] ?? '').replace(/\\(.)/g, '$1'), issuerCritical: (flags & 128) !== 0 },
      };
    }
    case 'SOA': {
      const [mname, rname, serial, refresh, retry, expire, minimum] = parts;
      return {
        ...base,
        type: 'SOA',
        data: {
          mname: mname!,
          rname: rname!,
          serial: Number(serial),
          refresh: Number(refresh),
          retry: Number(retry),
          expire: Number(expire),
          minimum: Number(minimum),
        },
      };
    }
    default:
      throw new Error(`record type ${r.type} is not served`);
  }
}

/** One TXT string as character-strings of at most 255 bytes (stored content is split already; this is a guard). */
function splitTxt(s: string): Buffer[] {
  const bytes = Buffer.from(s, 'utf8');
  const out: Buffer[] = [];
  for (let at = 0; at < bytes.length || out.length === 0; at += 255) out.push(bytes.subarray(at, at + 255));
  return out;
}

export interface Answered {
  rcode: Rcode;
  aa: boolean;
  answers: packet.Answer[];
  authorities: packet.Answer[];
  additionals: packet.Answer[];
  /** The domain of the zone that was asked (null for the base zone and pending claims): what is counted. */
  domainId: string | null;
}

const refused: Answered = { rcode: 'REFUSED', aa: false, answers: [], authorities: [], additionals: [], domainId: null };

/** Resolves one question against the served zones. */
export async function answerQuestion(svc: Pick<Services, 'db'>, q: packet.Question): Promise<Answered> {
  // dns-packet's type list has no ANY (it decodes QTYPE 255 as the string 'ANY').
  const qtype = q.type as string;
  const answers: packet.Answer[] = [];
  const seen = new Set<string>();
  let name = hostContent(q.name);
  let domainId: string | null = null;
  // Answers for the name asked carry it as asked (resolvers may randomize its case, draft-vixie-dnsext-dns0x20).
  const owner = (r: ServedRecord) => toAnswer(answers.length === 0 && r.name === hostContent(q.name) ? { ...r, name: q.name.replace(/\.$/, '') } : r);
  for (let step = 0; step <= MAX_CNAME_CHAIN && !seen.has(name); step++) {
    seen.add(name);
    const l = await lookupName(svc.db, name);
    if (!l.zone) return step === 0 ? refused : { rcode: 'NOERROR', aa: true, answers, authorities: [], additionals: [], domainId };
    if (step === 0) domainId = l.zone.domainId;
    const negative = [toAnswer({ ...soaRecord(l.zone), ttl: NEGATIVE_TTL })];
    if (l.delegation && !(qtype === 'DS' && l.delegation[0]!.name === name)) {
      // Below a zone cut: a referral to the delegated servers (not authoritative), with their in-zone addresses.
      if (step > 0) return { rcode: 'NOERROR', aa: true, answers, authorities: [], additionals: [], domainId };
      const glue = await addressRecords(
        svc.db,
        l.zone.id,
        l.delegation.map((r) => r.content),
      );
      return { rcode: 'NOERROR', aa: false, answers: [], authorities: l.delegation.map(toAnswer), additionals: glue.map(toAnswer), domainId };
    }
    const records = l.exists ? l.records : l.wildcard;
    if (!records.length && !l.exists) return { rcode: 'NXDOMAIN', aa: true, answers, authorities: negative, additionals: [], domainId };
    const cname = records.find((r) => r.type === 'CNAME');
    if (cname && qtype !== 'CNAME' && qtype !== 'ANY') {
      answers.push(owner(cname));
      name = hostContent(cname.content);
      continue;
    }
    const matching = records.filter((r) => qtype === 'ANY' || r.type === qtype);
    if (!matching.length) return { rcode: 'NOERROR', aa: true, answers, authorities: negative, additionals: [], domainId };
    return { rcode: 'NOERROR', aa: true, answers: [...answers, ...matching.map(owner)], authorities: [], additionals: [], domainId };
  }
  // A CNAME loop or a chain longer than we follow: what was found so far.
  return { rcode: 'NOERROR', aa: true, answers, authorities: [], additionals: [], domainId };
}

export async function start(config: Config, deps: { svc: Services; log: Logger }): Promise<DnsHandle> {
  const { svc, log } = deps;
  await ensureBaseZone(svc.db, config);

  // Query counts per zone (domain) and month, written in batches: one statement, one upsert row per zone.
  const counts = new Map<string, number>();
  const count = (domainId: string) => {
    const key = `${domainId}|${new Date().toISOString().slice(0, 7)}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  };
  const flushCounts = async () => {
    if (!counts.size) return;
    const taken = [...counts];
    counts.clear();
    const batch = taken.map(([key, n]) => {
      const [domainId, month] = key.split('|') as [string, string];
      return { domain_id: domainId, month, n };
    });
    try {
      const q = tbl('dns_query_counts');
      await exec(
        svc.db,
        sql`
        INSERT INTO ${q.$} (${q.domain_id}, ${q.month}, ${q.queries})
        SELECT b.domain_id, b.month, b.n FROM jsonb_to_recordset(${JSON.stringify(batch)}::jsonb) AS b(domain_id text, month text, n bigint)
        ON CONFLICT (${q.domain_id}, ${q.month}) DO UPDATE SET ${q.queries} = ${col('dns_query_counts', 'queries')} + EXCLUDED.queries`,
      );
    } catch (err) {
      // Kept for the next flush: queries are billed, they must not be lost to a passing database error.
      for (const [key, n] of taken) counts.set(key, (counts.get(key) ?? 0) + n);
      throw err;
    }
  };
  const countTimer = setInterval(() => flushCounts().catch((err) => log.error({ err }, 'dns: writing query counts failed')), COUNT_FLUSH_MS);
  countTimer.unref();

  async function respond(msg: Buffer, transport: 'udp' | 'tcp'): Promise<Buffer | null> {
    let query: packet.Packet & { opcode?: string };
    try {
      query = packet.decode(msg);
    } catch {
      return null; // not DNS: no answer
    }
    if (query.type !== 'query') return null; // a response: never answer one (no loops between servers)
    const opt = query.additionals?.find((a) => a.type === 'OPT') as packet.OptAnswer | undefined;
    const limit = transport === 'tcp' ? 65_535 : opt ? Math.min(Math.max(opt.udpPayloadSize ?? PLAIN_UDP, PLAIN_UDP), MAX_UDP) : PLAIN_UDP;
    const question = query.questions?.[0];
    const reply = (a: Partial<Answered> & { rcode: Rcode }) => {
      const rcode = RCODE[a.rcode];
      const out: packet.Packet = {
        id: query.id ?? 0,
        type: 'response',
        // The opcode and RD are copied from the query; dns-packet takes the RCODE in the low four bits of flags.
        flags: (a.aa ? packet.AUTHORITATIVE_ANSWER : 0) | ((query.flags ?? 0) & (packet.RECURSION_DESIRED | 0x7800)) | (rcode & 0xf),
        questions: question ? [question] : [],
        answers: a.answers ?? [],
        authorities: a.authorities ?? [],
        additionals: [
          ...(a.additionals ?? []),
          ...(opt
            ? [
                {
                  type: 'OPT',
                  name: '.',
                  udpPayloadSize: MAX_UDP,
                  extendedRcode: rcode >> 4,
                  ednsVersion: 0,
                  flags: 0,
                  options: [],
                } as unknown as packet.OptAnswer,
              ]
            : []),
        ],
      } as packet.Packet;
      let buf = packet.encode(out);
      if (buf.length > limit) {
        // Truncated: the question (and OPT) only, with TC; the client retries over TCP.
        buf = packet.encode({
          ...out,
          flags: (out.flags ?? 0) | packet.TRUNCATED_RESPONSE,
          answers: [],
          authorities: [],
          additionals: out.additionals!.filter((x) => x.type === 'OPT'),
        });
      }
      return buf;
    };
    if (query.opcode && query.opcode !== 'QUERY') return reply({ rcode: 'NOTIMP' });
    if (opt && (opt.ednsVersion ?? 0) !== 0) return reply({ rcode: 'BADVERS' }); // RFC 6891 section 6.1.3
    if (!question || (query.questions?.length ?? 0) !== 1) return reply({ rcode: 'FORMERR' });
    if ((question.class ?? 'IN') !== 'IN') return reply({ rcode: 'REFUSED' });
    try {
      const a = await answerQuestion(svc, question);
      if (a.domainId) count(a.domainId);
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
      if (buf) udp.send(buf, rinfo.port, rinfo.address, (err) => err && log.warn({ err: err.message }, 'dns: udp send failed'));
    });
  });

  const sockets = new Set<net.Socket>();
  function serveTcp(socket: net.Socket): void {
    sockets.add(socket);
    socket.setTimeout(TCP_IDLE_MS, () => socket.destroy());
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
      await flushCounts().catch((err) => log.error({ err }, 'dns: writing query counts at stop failed'));
    },
  };
}
