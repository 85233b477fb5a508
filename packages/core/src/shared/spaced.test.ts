import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { spacedBatches } from './spaced';

describe('spacedBatches', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'setImmediate', 'performance'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('flushes the first item after a quiet spell in the next turn, not synchronously', async () => {
    const flushed: string[][] = [];
    const add = spacedBatches<string>(10, (items) => flushed.push(items));
    add('a');
    expect(flushed).toEqual([]);
    await vi.advanceTimersByTimeAsync(0);
    expect(flushed).toEqual([['a']]);
  });

  it('items within the spacing after a flush wait for the next one and go together, each once', async () => {
    const flushed: string[][] = [];
    const add = spacedBatches<string>(10, (items) => flushed.push(items));
    add('a');
    await vi.advanceTimersByTimeAsync(0);
    await vi.advanceTimersByTimeAsync(2);
    add('b');
    add('c');
    add('b');
    await vi.advanceTimersByTimeAsync(7);
    expect(flushed).toEqual([['a']]);
    await vi.advanceTimersByTimeAsync(1);
    expect(flushed).toEqual([['a'], ['b', 'c']]);
  });

  it('a steady stream is flushed once per spacing; after a quiet spell the next item goes at once again', async () => {
    const flushed: number[][] = [];
    const add = spacedBatches<number>(10, (items) => flushed.push(items));
    for (let i = 0; i < 50; i++) {
      add(i);
      await vi.advanceTimersByTimeAsync(1);
    }
    await vi.advanceTimersByTimeAsync(10);
    // 50 items over 50 ms: the first at once, then one flush per 10 ms.
    expect(flushed.length).toBeLessThanOrEqual(7);
    expect(flushed.flat()).toEqual(Array.from({ length: 50 }, (_, i) => i));
    const before = flushed.length;
    await vi.advanceTimersByTimeAsync(100);
    add(99);
    await vi.advanceTimersByTimeAsync(0);
    expect(flushed.length).toBe(before + 1);
    expect(flushed.at(-1)).toEqual([99]);
  });
});
