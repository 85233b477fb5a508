/**
 * Every event a test wrote must match its type in the event catalogue (packages/schemas): before a test file's
 * database is dropped, its events are checked (the type exists, the data parses, and no member is left
 * undocumented), and what does not match is recorded for this run; global-setup.ts fails the run when anything
 * was recorded. Events whose hash no longer recomputes were altered by a test on purpose (the tamper tests of the
 * chain) and are not what any writer wrote, so they are left out.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { chainHash } from '@boxes/core';
import { eventDataProblem } from '@boxes/schemas';

export const problemsFile = (runId: string): string => path.join(os.tmpdir(), `boxes-event-check-${runId}.jsonl`);

interface Row {
  id: string;
  seq: number;
  type: string;
  account_id: string;
  created_at: Date;
  data: unknown;
  prev_hash: string;
  hash: string;
}

/** The events of one database that do not match the catalogue, as "type seq: problem" lines. */
export async function eventProblems(url: string): Promise<string[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const { rows } = await c.query<Row>('SELECT id, seq, type, account_id, created_at, data, prev_hash, hash FROM events');
    const out: string[] = [];
    for (const e of rows) {
      const body = { id: e.id, seq: e.seq, type: e.type, account_id: e.account_id, created_at: e.created_at.toISOString(), data: e.data };
      if (chainHash(e.prev_hash, body) !== e.hash) continue;
      const problem = eventDataProblem(e.type, e.data);
      if (problem) out.push(`${e.type} (seq ${e.seq} of ${e.account_id}): ${problem}; data ${JSON.stringify(e.data).slice(0, 300)}`);
    }
    return out;
  } finally {
    await c.end();
  }
}

/** Checks a database about to be dropped and records what does not match for the run. */
export async function checkEventsBeforeDrop(runId: string, url: string): Promise<void> {
  const problems = await eventProblems(url).catch((err: Error) => [`could not read the events of ${new URL(url).pathname}: ${err.message}`]);
  if (problems.length) fs.appendFileSync(problemsFile(runId), problems.map((p) => `${JSON.stringify(p)}\n`).join(''));
}

/** What the run recorded (and forgets it). */
export function takeRecordedProblems(runId: string): string[] {
  const file = problemsFile(runId);
  if (!fs.existsSync(file)) return [];
  const lines = fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as string);
  fs.rmSync(file, { force: true });
  return lines;
}
