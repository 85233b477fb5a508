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
    // 50 items over 50 ms: the first at once, then one flush per 10 ms while the stream lasts (not one at its end).
    expect(flushed.length).toBeGreaterThanOrEqual(5);
    expect(flushed.length).toBeLessThanOrEqual(7);
    expect(flushed.flat()).toEqual(Array.from({ length: 50 }, (_, i) => i));
    const before = flushed.length;
    await vi.advanceTimersByTimeAsync(100);
    add(99);
    await vi.advanceTimersByTimeAsync(0);
    expect(flushed.length).toBe(before + 1);
    expect(flushed.at(-1)).toEqual([99]);
  });
  it('an item added while its batch is flushed goes in the next batch, and a flush that throws does not stop the next', async () => {
    const flushed: string[][] = [];
    let add: (item: string) => void = () => undefined;
    add = spacedBatches<string>(10, (items) => {
      flushed.push(items);
      if (items.includes('a')) add('from-flush');
      if (items.includes('boom')) throw new Error('flush failed');
    });
    add('a');
    await vi.advanceTimersByTimeAsync(0);
    await vi.advanceTimersByTimeAsync(10);
    expect(flushed).toEqual([['a'], ['from-flush']]);
    await vi.advanceTimersByTimeAsync(50);
    add('boom');
    // The failing flush runs in a timer callback: its error reaches the runtime, as any timer's would.
    await expect(vi.advanceTimersByTimeAsync(0)).rejects.toThrow('flush failed');
    await vi.advanceTimersByTimeAsync(50);
    add('after');
    await vi.advanceTimersByTimeAsync(0);
    expect(flushed.at(-1)).toEqual(['after']);
  });
});
