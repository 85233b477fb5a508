/**
 * Sequence sets (RFC 3501 9: 1:3,5,7:*) resolved against the open mailbox: message sequence numbers, or UIDs
 * (a UID range names the UIDs that exist within it; "*" is the highest).
 */
import { BadArgs } from './parser';

export type SequenceSet = [number, number][];

const ITEM = /^(\d{1,10}|\*)(?::(\d{1,10}|\*))?$/;
/** Stands for "*" until resolved. */
const STAR = -1;

/** A plain number of 1 to 10 digits (the set most commands of a download carry), or -1. */
function plainNumber(s: string): number {
  if (!s.length || s.length > 10) return -1;
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const d = s.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return -1;
    n = n * 10 + d;
  }
  return n;
}

export function parseSequenceSet(s: string): SequenceSet {
  const one = plainNumber(s);
  if (one > 0) return [[one, one]];
  const out: SequenceSet = [];
  for (const part of s.split(',')) {
    const m = ITEM.exec(part);
    if (!m) throw new BadArgs(`Invalid sequence set: ${s.slice(0, 100)}`);
    const a = m[1] === '*' ? STAR : Number(m[1]);
    const b = m[2] === undefined ? a : m[2] === '*' ? STAR : Number(m[2]);
    if (a === 0 || b === 0) throw new BadArgs('Sequence numbers and UIDs start at 1');
    out.push([a, b]);
  }
  return out;
}

export function isSequenceSet(s: string): boolean {
  return s.split(',').every((p) => ITEM.test(p));
}

function bounds(range: [number, number], star: number): [number, number] {
  const a = range[0] === STAR ? star : range[0];
  const b = range[1] === STAR ? star : range[1];
  return a <= b ? [a, b] : [b, a];
}

/** Indexes (0-based) of the messages a sequence-number set names, ascending. */
export function resolveSequence(set: SequenceSet, count: number): number[] {
  if (!count) return [];
  return collect(
    set.map((r) => {
      const [lo, hi] = bounds(r, count);
      return [Math.max(1, lo) - 1, Math.min(count, hi) - 1];
    }),
  );
}

/** First index of a sorted array whose value is at least v. */
function lowerBound(sorted: number[], v: number): number {
  let a = 0;
  let b = sorted.length;
  while (a < b) {
    const mid = (a + b) >>> 1;
    if (sorted[mid]! < v) a = mid + 1;
    else b = mid;
  }
  return a;
}

/** Indexes (0-based) of the messages whose UIDs a UID set names, ascending; uids must be ascending. */
export function resolveUids(set: SequenceSet, uids: number[]): number[] {
  if (!uids.length) return [];
  const max = uids[uids.length - 1]!;
  if (set.length === 1 && set[0]![0] !== STAR && set[0]![0] === set[0]![1]) {
    // One UID (a download's FETCH of its next message): found or not.
    const at = lowerBound(uids, set[0]![0]);
    return at < uids.length && uids[at] === set[0]![0] ? [at] : [];
  }
  return collect(
    set.map((r) => {
      const [lo, hi] = bounds(r, max);
      return [lowerBound(uids, lo), lowerBound(uids, hi + 1) - 1];
    }),
  );
}

/** The indexes of inclusive index ranges, ascending and once each (cost: the ranges and what they name). */
function collect(ranges: [number, number][]): number[] {
  if (ranges.length === 1) {
    const out: number[] = [];
    for (let i = ranges[0]![0]; i <= ranges[0]![1]; i++) out.push(i);
    return out;
  }
  const valid = ranges.filter(([a, b]) => a <= b).sort((x, y) => x[0] - y[0]);
  const out: number[] = [];
  let next = 0;
  for (const [a, b] of valid) {
    for (let i = Math.max(a, next); i <= b; i++) out.push(i);
    next = Math.max(next, b + 1);
  }
  return out;
}

/** A compact set of numbers (1,3:5,9) for COPYUID and friends; the order given is kept. */
export function formatSet(nums: number[]): string {
  const parts: string[] = [];
  let i = 0;
  while (i < nums.length) {
    let j = i;
    while (j + 1 < nums.length && nums[j + 1] === nums[j]! + 1) j++;
    parts.push(j > i ? `${nums[i]}:${nums[j]}` : String(nums[i]));
    i = j + 1;
  }
  return parts.join(',');
}
