// dig (Debian bind9-dnsutils, installed by scripts/start-services.sh) against a DNS server on 127.0.0.1, its
// answer read from dig's YAML output.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { parse } from 'yaml';

export interface DigResult {
  rcode: string;
  flags: string[];
  answer: string[];
  authority: string[];
  /** The OPT pseudo-section (EDNS version and UDP size) when the answer carried one. */
  edns: { version: number; udp: number } | null;
  /** dig's whole output, for messages. */
  text: string;
}

const run = promisify(execFile);

/** Asks `server:port` for name/type with dig; `opts` are extra dig options (+tcp, +bufsize=512, +noedns...). */
export async function dig(port: number, name: string, type: string, opts: string[] = []): Promise<DigResult> {
  const { stdout } = await run('dig', ['@127.0.0.1', '-p', String(port), '+yaml', '+norec', '+tries=1', '+time=3', ...opts, name, type], { timeout: 15_000 });
  const doc = parse(stdout) as { type: string; message: { response_message_data: Record<string, any> } }[];
  const data = doc[0]!.message.response_message_data;
  const lines = (section: unknown) => ((section as string[] | undefined) ?? []).map((l) => l.replace(/\s+/g, ' ').trim());
  return {
    rcode: data.status,
    flags: String(data.flags ?? '').split(/\s+/).filter(Boolean),
    answer: lines(data.ANSWER_SECTION),
    authority: lines(data.AUTHORITY_SECTION),
    edns: data.OPT_PSEUDOSECTION?.EDNS ? { version: Number(data.OPT_PSEUDOSECTION.EDNS.version), udp: Number(data.OPT_PSEUDOSECTION.EDNS.udp) } : null,
    text: stdout,
  };
}

/** The record data of answer lines ("name. ttl IN TYPE data" -> "data"), sorted. */
export const rdata = (lines: string[], type?: string): string[] =>
  lines
    .map((l) => l.split(' '))
    .filter((p) => !type || p[3] === type)
    .map((p) => p.slice(4).join(' '))
    .sort();
