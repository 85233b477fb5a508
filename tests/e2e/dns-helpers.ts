// dig (Debian bind9-dnsutils, installed by scripts/start-services.sh) against a DNS server on 127.0.0.1, its
// answer read from dig's YAML output.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { goLive, newId } from '@boxes/core';
import { rest, type TestServer } from '@boxes/testing';

export interface DigResult {
  rcode: string;
  flags: string[];
  answer: string[];
  authority: string[];
  additional: string[];
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
    flags: String(data.flags ?? '')
      .split(/\s+/)
      .filter(Boolean),
    answer: lines(data.ANSWER_SECTION),
    authority: lines(data.AUTHORITY_SECTION),
    additional: lines(data.ADDITIONAL_SECTION),
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

/**
 * A byo_delegated account whose domain is live (made live as the verifier does once the delegation is seen;
 * tests/e2e/domains.test.ts proves the DNS part), or still pending with live: false.
 */
export async function delegatedAccount(t: TestServer, zone: string, live = true): Promise<{ zone: string; key: string; zoneId: string; domainId: string }> {
  const intent = await rest(t, 'POST', '/signup/agentic', {
    body: { human_email: 'dns-owner@example.com', domain_intent: { mode: 'byo_delegated', byo_domain: zone } },
  });
  const done = await rest(t, 'POST', '/signup/agentic/confirm', { body: { intent_id: intent.body.intent_id } });
  if (done.status !== 200) throw new Error(`signup failed: ${JSON.stringify(done.body)}`);
  const d = await t.db.domain.findFirstOrThrow({ where: { name: zone, accountId: done.body.account_id } });
  if (live) await t.db.$transaction((tx) => goLive(t.svc, tx, d));
  const z = await t.db.dnsZone.findUniqueOrThrow({ where: { name: zone } });
  return { zone, key: done.body.api_key, zoneId: z.id, domainId: d.id };
}

/** A byo_delegated domain made live as the verifier would once its NS are seen: its domain and zone ids. */
export async function liveDelegatedZone(t: TestServer, zone: string): Promise<{ domainId: string; zoneId: string }> {
  const { domainId, zoneId } = await delegatedAccount(t, zone);
  return { domainId, zoneId };
}

/** Managed records written as rows (the managed DNS API writes the same rows), bumping the zone's serial. */
export async function addRecords(t: TestServer, zoneId: string, rows: [name: string, type: string, content: string][], ttl = 300): Promise<void> {
  await t.db.$transaction(async (tx) => {
    await tx.dnsRecord.createMany({ data: rows.map(([name, type, content]) => ({ id: newId('rr'), zoneId, name, type, ttl, content })) });
    await tx.dnsZone.update({ where: { id: zoneId }, data: { serial: { increment: 1 } } });
  });
}
