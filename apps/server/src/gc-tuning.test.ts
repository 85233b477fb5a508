import v8 from 'node:v8';
import vm from 'node:vm';
import { describe, expect, it } from 'vitest';
import { externalMemoryInLimit, smallYoungGeneration } from './gc-tuning';
import { releaseStartupMemory } from './startup-memory';

describe('externalMemoryInLimit', () => {
  const all = { server: true, worker: true, mail: true };
  const mailAlone = { server: false, worker: false, mail: true };
  it('counts external memory in the heap limit wherever the HTTP server or the worker runs', () => {
    expect(externalMemoryInLimit(all, undefined)).toBe(true);
    expect(externalMemoryInLimit({ server: false, worker: true, mail: false }, undefined)).toBe(true);
    expect(externalMemoryInLimit({ server: true, worker: false, mail: false }, undefined)).toBe(true);
  });
  it('leaves the mail app on its own to the default pace', () => {
    expect(externalMemoryInLimit(mailAlone, undefined)).toBe(false);
  });
  it('follows BOXES_GC_EXTERNAL_IN_LIMIT either way', () => {
    expect(externalMemoryInLimit(all, '0')).toBe(false);
    expect(externalMemoryInLimit(mailAlone, '1')).toBe(true);
  });
});

describe('releaseStartupMemory', () => {
  const newSpace = () => v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space')!;
  it('shrinks a young generation that start-up grew, and leaves no gc function to scripts', () => {
    // Objects that survive a few scavenges grow the young generation, as loading every module does.
    let keep: object[][] | null = [];
    for (let i = 0; i < 5000 && newSpace().space_size < 16 * 2 ** 20; i++) {
      keep.push(Array.from({ length: 1000 }, (_, j) => ({ j })));
      if (keep.length > 200) keep = keep.slice(100);
    }
    keep = null;
    const grown = newSpace().space_size;
    expect(grown).toBeGreaterThanOrEqual(16 * 2 ** 20);
    releaseStartupMemory();
    expect(newSpace().space_size).toBeLessThan(grown / 4);
    expect(vm.runInNewContext('typeof gc')).toBe('undefined');
    expect(typeof (globalThis as { gc?: unknown }).gc).toBe('undefined');
  });
});

describe('smallYoungGeneration', () => {
  const all = { server: true, worker: true, mail: true };
  const mailAlone = { server: false, worker: false, mail: true };
  it('keeps the young generation small in the mail app on its own only', () => {
    expect(smallYoungGeneration(mailAlone, undefined)).toBe(true);
    expect(smallYoungGeneration(all, undefined)).toBe(false);
    expect(smallYoungGeneration({ server: false, worker: true, mail: false }, undefined)).toBe(false);
  });
  it('follows BOXES_GC_SMALL_YOUNG either way', () => {
    expect(smallYoungGeneration(mailAlone, '0')).toBe(false);
    expect(smallYoungGeneration(all, '1')).toBe(true);
  });
});
