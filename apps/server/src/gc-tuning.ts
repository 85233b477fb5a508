/**
 * The garbage collector's settings of a process, by the apps it runs: decided as soon as those are known (main.ts,
 * before the migrations and the apps load: the young generation grows from the first allocations) and again by
 * startRuntime (tests and benches that start apps in their own process). Only node:v8 is imported here.
 */
import v8 from 'node:v8';

/**
 * The V8 of Node 24 (13.6) reclaims short-lived Buffers with full mark-compact collections instead of scavenges:
 * its young-generation ArrayBuffer trigger moved above the fixed 64 MB external-memory limit that starts marking
 * (nodejs/node issues 61967 and 63863). Counting external memory in V8's global heap limit, as later V8 does by
 * default, takes that back for the apps that stream message bytes through Buffers (SMTP, HTTP bodies, sends): a
 * warm 10,000-message IMAP download went from 6 to 8 full collections (350 to 650 ms) to one.
 * The mail app on its own (`boxes start mx`) goes without it: there the pace it sets lets the bodies an IMAP
 * download opens pile up (its peak RSS over three syncs of 10,000 messages: 342 MB without it, 353 to 522 MB with it)
 * and its server CPU per sync did not grow. BOXES_GC_EXTERNAL_IN_LIMIT=1 or 0 sets it either way.
 *
 * The mail app on its own also keeps its young generation at V8's initial size (1 MB semi-spaces) instead of
 * letting it grow to 64 MB ones: it grew during start-up (the migrations, loading the apps) and again at the first
 * IMAP download, and stayed resident (45 to 60 MB of the process's RSS, idle or not). Smaller, it is scavenged
 * more often, each time over as little live data: over syncs of 10,000 messages the process idled at 183 to 200 MB
 * instead of 254 to 264 MB and peaked at 284 to 296 MB instead of 346 to 412 MB, and its CPU per sync stayed
 * within the spread of runs. Growth is the one young-generation limit V8 takes after start (--max-semi-space-size only on the command
 * line, where an operator may still give it). BOXES_GC_SMALL_YOUNG=1 or 0 sets it either way.
 * Called before the apps start (twice does no harm); a flag given on the command line or in NODE_OPTIONS is left as it is.
 */
export function tuneGarbageCollection(apps: { server: boolean; worker: boolean; mail: boolean }): void {
  const given = (flag: string) => process.execArgv.some((a) => a.includes(flag)) || (process.env.NODE_OPTIONS ?? '').includes(flag);
  if (smallYoungGeneration(apps, process.env.BOXES_GC_SMALL_YOUNG) && !given('semi-space')) v8.setFlagsFromString('--semi-space-growth-factor=1');
  if (!externalMemoryInLimit(apps, process.env.BOXES_GC_EXTERNAL_IN_LIMIT)) return;
  if (given('external-memory-accounted-in-global-limit')) return;
  v8.setFlagsFromString('--external-memory-accounted-in-global-limit');
}

const mailAlone = (apps: { server: boolean; worker: boolean; mail: boolean }) => apps.mail && !apps.server && !apps.worker;

/** Whether a process running these apps counts external memory in V8's heap limit (see tuneGarbageCollection). */
export function externalMemoryInLimit(apps: { server: boolean; worker: boolean; mail: boolean }, asked: string | undefined): boolean {
  if (asked === '0' || asked === '1') return asked === '1';
  return !mailAlone(apps);
}

/** Whether a process running these apps keeps its young generation at its initial size (see tuneGarbageCollection). */
export function smallYoungGeneration(apps: { server: boolean; worker: boolean; mail: boolean }, asked: string | undefined): boolean {
  if (asked === '0' || asked === '1') return asked === '1';
  return mailAlone(apps);
}
