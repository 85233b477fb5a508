/**
 * Spaced batches: items are gathered and handed to `flush` together, at most once every `spacingMs`. The first
 * item after a quiet spell is flushed in the next turn of the event loop (it waits for nothing); items that
 * arrive within the spacing after a flush wait for the next one and share it. So a lone item goes out at once
 * and a steady stream costs one flush per spacing, not one per item. Items are kept in a Set: the same item
 * twice in one batch is flushed once.
 */
export function spacedBatches<T>(spacingMs: number, flush: (items: T[]) => void): (item: T) => void {
  let pending: Set<T> | null = null;
  let lastFlush = Number.NEGATIVE_INFINITY;
  const run = () => {
    const items = pending ? [...pending] : [];
    pending = null;
    lastFlush = performance.now();
    flush(items);
  };
  return (item) => {
    if (pending) {
      pending.add(item);
      return;
    }
    pending = new Set([item]);
    const wait = lastFlush + spacingMs - performance.now();
    if (wait > 0) setTimeout(run, wait);
    else setImmediate(run);
  };
}
