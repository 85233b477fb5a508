import { describe, expect, it } from 'vitest';
import { externalMemoryInLimit, smallYoungGeneration } from './gc-tuning';

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
