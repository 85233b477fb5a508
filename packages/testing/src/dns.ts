/**
 * A stand-in for "the DNS of the internet" in tests: a recursive-resolver lookalike on 127.0.0.1 that answers
 * whatever records the test publishes (MX, TXT, NS, A, ...), NXDOMAIN for names it has nothing at, and NODATA
 * for names that exist with other types. Point DNS_RESOLVERS at `address` and publish or withdraw records as a
 * domain owner would at their provider. UDP only (what node:dns asks first); answers are small.
 */
import dgram from 'node:dgram';
import * as packet from 'dns-packet';

export interface StandInDns {
  /** ip:port, the form DNS_RESOLVERS takes. */
  address: string;
  port: number;
  /** Replaces the values of one name and type (TXT values are whole strings: split into 255-byte chunks here). */
  set(name: string, type: 'A' | 'AAAA' | 'MX' | 'TXT' | 'NS' | 'CNAME', values: string[]): void;
  remove(name: string, type?: string): void;
  /** Questions asked so far (name and type). */
  queries: { name: string; type: string }[];
  stop(): Promise<void>;
}

const key = (name: string) => name.toLowerCase().replace(/\.$/, '');

function answer(name: string, type: string, value: string): packet.Answer {
  const base = { name, ttl: 60, class: 'IN' as const };
  switch (type) {
    case 'MX': {
      const [pref, exchange] = value.split(/\s+/);
      return { ...base, type: 'MX', data: { preference: Number(pref), exchange: key(exchange ?? '') } };
    }
    case 'TXT': {
      const chunks: Buffer[] = [];
      const bytes = Buffer.from(value, 'utf8');
      for (let at = 0; at < bytes.length || chunks.length === 0; at += 255) chunks.push(bytes.subarray(at, at + 255));
      return { ...base, type: 'TXT', data: chunks };
    }
    case 'NS':
    case 'CNAME':
      return { ...base, type, data: key(value) } as packet.Answer;
    default:
      return { ...base, type: type as 'A', data: value };
  }
}

export async function startStandInDns(): Promise<StandInDns> {
  const zone = new Map<string, Map<string, string[]>>();
  const queries: { name: string; type: string }[] = [];
  const socket = dgram.createSocket('udp4');
  socket.on('message', (msg, rinfo) => {
    let q: packet.Packet;
    try {
      q = packet.decode(msg);
    } catch {
      return;
    }
    const question = q.questions?.[0];
    if (!question) return;
    queries.push({ name: key(question.name), type: question.type });
    const at = zone.get(key(question.name));
    const values = at?.get(question.type) ?? [];
    const reply = packet.encode({
      id: q.id,
      type: 'response',
      flags: packet.RECURSION_DESIRED | packet.RECURSION_AVAILABLE | (at ? 0 : 3), // rcode 3: NXDOMAIN
      questions: [question],
      answers: values.map((v) => answer(question.name, question.type, v)),
    });
    socket.send(reply, rinfo.port, rinfo.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  const port = socket.address().port;
  return {
    address: `127.0.0.1:${port}`,
    port,
    queries,
    set(name, type, values) {
      const k = key(name);
      const types = zone.get(k) ?? new Map<string, string[]>();
      types.set(type, values);
      zone.set(k, types);
    },
    remove(name, type) {
      const k = key(name);
      if (!type) zone.delete(k);
      else {
        zone.get(k)?.delete(type);
        if (zone.get(k)?.size === 0) zone.delete(k);
      }
    },
    stop: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}
