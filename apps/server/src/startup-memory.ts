import v8 from 'node:v8';
import vm from 'node:vm';

/**
 * Start-up (every module loaded, the database client's query compiler compiled, the first queries) grows V8's young
 * generation to its largest (128 MB reserved, about 85 MB of it resident), and an idle process never shrinks it:
 * 40 s later it still holds the same. One full collection that gives free memory back to the system, once the
 * apps run (in the split layout's supervisor, once its two processes run), takes an idle process with every app
 * from about 255 to 160 MB; the young generation grows again as a load needs it (its limits are not changed). It
 * costs about 0.2 s of CPU, once. V8 offers that collection to scripts only behind --expose-gc: the flag is set
 * for the one context that fetches the function, then cleared again. Node's own modules only: the supervisor
 * imports it.
 */
export function releaseStartupMemory(): void {
  try {
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as (options: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void;
    v8.setFlagsFromString('--no-expose-gc');
    gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
  } catch {
    // A runtime without it: the memory is released when V8 decides to.
  }
}
