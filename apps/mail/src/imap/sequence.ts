/**
 * Sequence sets (RFC 3501 9: 1:3,5,7:*) resolved against the open mailbox: message sequence numbers, or UIDs
 * (a UID range names the UIDs that exist within it; "*" is the highest).
 */
import { BadArgs } from './parser';

export type SequenceSet = [number, number][];

const ITEM = /^(\d{1,10}|\*)(?::(\d{1,10}|\*))?$/;
/** Stands for "*" until resolved. */
const STAR = -1;

export function parseSequenceSet(s: string): SequenceSet {
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
  const marks = new Uint8Array(count);
  for (const r of set) {
    const [lo, hi] = bounds(r, count);
    for (let n = Math.max(1, lo); n <= Math.min(count, hi); n++) marks[n - 1] = 1;
  }
  const out: number[] = [];
  for (let i = 0; i < count; i++) if (marks[i]) out.push(i);
  return out;
}

/** Indexes (0-based) of the messages whose UIDs a UID set names, ascending; uids must be ascending. */
export function resolveUids(set: SequenceSet, uids: number[]): number[] {
  if (!uids.length) return [];
  const max = uids[uids.length - 1]!;
  const marks = new Uint8Array(uids.length);
  for (const r of set) {
    const [lo, hi] = bounds(r, max);
    // First index with uid >= lo.
    let a = 0;
    let b = uids.length;
    while (a < b) {
      const mid = (a + b) >>> 1;
      if (uids[mid]! < lo) a = mid + 1;
      else b = mid;
    }
    for (let i = a; i < uids.length && uids[i]! <= hi; i++) marks[i] = 1;
  }
  const out: number[] = [];
  for (let i = 0; i < uids.length; i++) if (marks[i]) out.push(i);
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
