import { flagNames, sealBytes, type FolderEntry, type RawCopy, type Services } from '@boxes/core';
import { describe, expect, it } from 'vitest';
import { paren } from './encode';
import { flagList, SelectedMailbox } from './mailbox';

const entry = (flags: number, deleted: boolean, keywords: string[]): FolderEntry => ({
  uid: 1,
  messageId: 'msg_x',
  flags,
  keywords,
  deleted,
  modseq: 1n,
  size: 1,
  internalDate: new Date(0),
});

const text = (chunks: unknown[]) => chunks.join('');

describe('flagList', () => {
  it('answers every combination of flag bits and \\Deleted as the flag names say, with and without keywords', () => {
    for (let bits = 0; bits < 16; bits++) {
      for (const deleted of [false, true]) {
        for (const keywords of [[], ['$Forwarded'], ['billing', 'later']]) {
          const expected = text(paren(flagNames(bits, deleted, keywords).map((f) => [f])));
          expect(text(flagList(entry(bits, deleted, keywords)))).toBe(expected);
        }
      }
    }
    expect(text(flagList(entry(1 | 4, true, [])))).toBe('(\\Seen \\Flagged \\Deleted)');
    expect(text(flagList(entry(0, false, [])))).toBe('()');
  });
});

describe('SelectedMailbox read-ahead', () => {
  const key = Buffer.alloc(32, 7);
  const n = 300;
  const entries: FolderEntry[] = Array.from({ length: n }, (_, i) => ({ ...entry(0, false, []), uid: i + 1, messageId: `msg_${i}` }));
  const raw = (id: string) => Buffer.from(`Subject: ${id}\r\n\r\nbody of ${id}\r\n`);

  /** A mailbox over these entries whose bytes come from a COPY stand-in that counts its queries. */
  function mailbox() {
    const queries: string[] = [];
    const rawCopy: RawCopy = async (query, onRow) => {
      queries.push(query);
      for (const id of query.match(/msg_\d+/g) ?? []) onRow([Buffer.from(id, 'latin1'), sealBytes(key, raw(id))]);
    };
    const Ctor = SelectedMailbox as unknown as new (...args: unknown[]) => SelectedMailbox;
    const folder = { name: 'INBOX', folderId: 'fld_x', boxId: null, role: 'inbox', attributes: [] };
    return { box: new Ctor(folder, true, rawCopy, entries, 1, n + 1, 1n), queries };
  }
  const svc = { secretKey: key } as unknown as Services;

  it('reads a client going through a folder message by message in blocks, and nothing it was served twice', async () => {
    const { box, queries } = mailbox();
    for (let i = 0; i < n; i++) {
      await box.messages(svc, [i]);
      expect(box.message(svc, i)?.raw.toString()).toBe(raw(`msg_${i}`).toString());
    }
    // 300 messages: the first alone (not yet known to be one of a run), the rest of its block of 128, and the two
    // blocks after it read ahead; not one read per message, and nothing served read twice.
    expect(queries.length).toBe(4);
    expect(queries.join(' ').match(/msg_\d+/g)?.length).toBe(n);
  });

  it('serves every message right through a folder larger than its cache, twice (slabs filled again)', async () => {
    const many = 2000;
    const big = (id: string) => Buffer.from(`Subject: ${id}\r\n\r\n${id.padEnd(2000, '.')}\r\n`);
    const list: FolderEntry[] = Array.from({ length: many }, (_, i) => ({ ...entry(0, false, []), uid: i + 1, messageId: `msg_${i}` }));
    const rawCopy: RawCopy = async (query, onRow) => {
      // Rows as a COPY hands them: views into one buffer written over after each row.
      const scratch = Buffer.alloc(4096);
      for (const id of query.match(/msg_\d+/g) ?? []) {
        const sealed = sealBytes(key, big(id));
        sealed.copy(scratch);
        onRow([Buffer.from(id, 'latin1'), scratch.subarray(0, sealed.length)]);
        scratch.fill(0);
      }
    };
    const Ctor = SelectedMailbox as unknown as new (...args: unknown[]) => SelectedMailbox;
    const folder = { name: 'INBOX', folderId: 'fld_x', boxId: null, role: 'inbox', attributes: [] };
    const box = new Ctor(folder, true, rawCopy, list, 1, many + 1, 1n);
    for (let pass = 0; pass < 2; pass++) {
      for (let i = 0; i < many; i++) {
        await box.messages(svc, [i]);
        expect(box.message(svc, i)?.raw.toString()).toBe(big(`msg_${i}`).toString());
      }
    }
  });

  it('opened() reads again a message the cache let go after messages() (read-ahead running during an await)', async () => {
    const many = 1000;
    const list: FolderEntry[] = Array.from({ length: many }, (_, i) => ({ ...entry(0, false, []), uid: i + 1, messageId: `msg_${i}` }));
    const rawCopy: RawCopy = async (query, onRow) => {
      for (const id of query.match(/msg_\d+/g) ?? []) onRow([Buffer.from(id, 'latin1'), sealBytes(key, raw(id))]);
    };
    const Ctor = SelectedMailbox as unknown as new (...args: unknown[]) => SelectedMailbox;
    const folder = { name: 'INBOX', folderId: 'fld_x', boxId: null, role: 'inbox', attributes: [] };
    const box = new Ctor(folder, true, rawCopy, list, 1, many + 1, 1n);
    await box.messages(svc, [0, 1]);
    // Another read fills the cache past its size: the first targets are pushed out.
    await box.messages(
      svc,
      Array.from({ length: 900 }, (_, i) => i + 100),
    );
    expect(box.held(0)).toBe(false);
    expect(box.message(svc, 0)).toBeNull();
    expect((await box.opened(svc, 0))?.raw.toString()).toBe(raw('msg_0').toString());
    expect(box.held(0)).toBe(true);
  });

  it('serves a message fetched again from what it read', async () => {
    const { box, queries } = mailbox();
    await box.messages(svc, [5]);
    await box.messages(svc, [5]);
    expect(box.message(svc, 5)?.raw.toString()).toBe(raw('msg_5').toString());
    expect(queries.length).toBe(1);
  });
});
