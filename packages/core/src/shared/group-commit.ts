/**
 * Group commit: callers add items and wait for their own result; whenever no flush is running, everything
 * added so far is flushed as one batch (one transaction for many items). Nothing waits on a timer: at low load
 * a batch is the one item that came, under load the items that arrive while a flush runs share the next one.
 * A batch that fails is retried item by item (a batch of one each), so one bad item fails only its own caller.
 */
export interface GroupCommitStats {
  name: string;
  /** Flushes so far, items in them, and the largest batch. */
  batches: number;
  items: number;
  largest: number;
}

export class GroupCommit<T, R> {
  private queue: { item: T; resolve: (r: R) => void; reject: (err: unknown) => void }[] = [];
  private running = false;
  readonly stats: GroupCommitStats;

  constructor(
    name: string,
    private readonly flush: (items: T[]) => Promise<R[]>,
    private readonly maxBatch = 200,
  ) {
    this.stats = { name, batches: 0, items: 0, largest: 0 };
  }

  add(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      // Started on the next turn of the event loop: items that arrive in the same turn share the first batch.
      if (!this.running) {
        this.running = true;
        setImmediate(() => void this.drain());
      }
    });
  }

  private async drain(): Promise<void> {
    try {
      while (this.queue.length) {
        const batch = this.queue.splice(0, this.maxBatch);
        this.stats.batches += 1;
        this.stats.items += batch.length;
        this.stats.largest = Math.max(this.stats.largest, batch.length);
        let results: R[];
        try {
          results = await this.flush(batch.map((b) => b.item));
        } catch (err) {
          if (batch.length === 1) {
            batch[0]!.reject(err);
            continue;
          }
          // Retried one by one: only the items that fail on their own fail.
          await Promise.all(batch.map((b) => this.flush([b.item]).then((r) => b.resolve(r[0]!), b.reject)));
          continue;
        }
        batch.forEach((b, i) => {
          b.resolve(results[i]!);
        });
      }
    } finally {
      this.running = false;
    }
  }
}

const owned = new WeakMap<object, Map<string, GroupCommit<unknown, unknown>>>();

/** The group commits of `owner` (a process's Services) so far, for /metrics (items / batches is the mean batch size). */
export function groupCommitStats(owner: object): GroupCommitStats[] {
  return [...(owned.get(owner)?.values() ?? [])].map((g) => ({ ...g.stats }));
}

/** The group commit `name` of `owner` (a process's Services): one per process, made on first use. */
export function groupCommitOf<T, R>(owner: object, name: string, flush: (items: T[]) => Promise<R[]>): GroupCommit<T, R> {
  let byName = owned.get(owner);
  if (!byName) {
    byName = new Map();
    owned.set(owner, byName);
  }
  let g = byName.get(name) as GroupCommit<T, R> | undefined;
  if (!g) {
    g = new GroupCommit<T, R>(name, flush);
    byName.set(name, g as GroupCommit<unknown, unknown>);
  }
  return g;
}
