import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { EVENT_CATALOGUE, EVENT_TYPES, EventOutput, eventDataProblem, eventDescription, undocumentedPaths, upcastEvent, type BoxesEvent } from './index';
import { renderEventDocs } from './event-docs';

describe('the event catalogue', () => {
  it('describes every type and every field of its data', () => {
    const missing: string[] = [];
    for (const t of EVENT_TYPES) {
      if (!eventDescription(t)) missing.push(t);
      for (const line of renderEventDocs().split(`\n## ${t}\n`)[1]!.split('\n## ')[0]!.split('\n')) {
        if (/^\| `[^`]+` \|.*\| (yes|no) \| *\|$/.test(line)) missing.push(`${t}: ${line.split('`')[1]}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('docs/events.md is the catalogue as written by pnpm docs:events', () => {
    const file = path.resolve(import.meta.dirname, '../../../docs/events.md');
    expect(fs.readFileSync(file, 'utf8'), 'run pnpm docs:events').toBe(renderEventDocs());
  });

  it('finds a misspelt or undeclared member, at any depth, and a wrong type', () => {
    const ok = { box_id: 'box_1', address: 'a@b.c', signature: null };
    expect(eventDataProblem('box.signature_updated', ok)).toBeNull();
    expect(eventDataProblem('box.signature_updated', { ...ok, signatur: 'x' })).toBe('undocumented member signatur');
    expect(eventDataProblem('box.signature_updated', { box_id: 'box_1', address: 'a@b.c' })).toMatch(/^signature: /);
    expect(eventDataProblem('box.renamed', ok)).toBe('unknown event type box.renamed');
    const deep = {
      entry: { id: 'tle_1', list: 'block', kind: 'address', value: 'x@y.z', direction: 'receive', box_id: null, note: null, created_at: 'now', extra: 1 },
    };
    expect(undocumentedPaths(EVENT_CATALOGUE['list.entry_added'], deep)).toEqual(['entry.extra']);
    const arr = { domain: 'd', records: [{ name: 'n', type: 'TXT', ttl: 1, values: [], purpose: 'p', oops: true }], claim_expires_at: null };
    expect(undocumentedPaths(EVENT_CATALOGUE['domain.dns_required'], arr)).toEqual(['records[0].oops']);
  });

  it('keeps members it does not know when an event is read back, so the stored bytes still hash', () => {
    const event = {
      id: 'evt_1',
      seq: 1,
      type: 'box.deleted',
      account_id: 'acct_1',
      created_at: '2026-11-26T00:00:00.000Z',
      data: { box_id: 'box_1', address: 'a@b.c', added_later: { x: 1 } },
      _chain: { prev_hash: '0'.repeat(64), hash: 'f'.repeat(64) },
    };
    expect(EventOutput.parse(event)).toEqual(event);
    expect(z.array(EventOutput).safeParse([{ ...event, type: 'box.renamed' }]).success).toBe(false);
  });

  it("upcastEvent brings a mail.received stored before 1.3.0 to today's shape and leaves current events as they are", () => {
    const message = {
      id: 'msg_1',
      box_id: 'box_1',
      to_box: 'agent@a.test',
      from: 'x@y.test',
      to: ['agent@a.test'],
      cc: [],
      subject: 's',
      rfc_message_id: '<1@y.test>',
      in_reply_to: null,
      thread_id: 'thr_1',
      size_bytes: 10,
      attachments: 0,
      via: 'smtp',
      authentication: null,
      spam: null,
    };
    const base = {
      id: 'evt_1',
      seq: 3,
      account_id: 'acct_1',
      created_at: '2026-11-01T00:00:00.000Z',
      _chain: { prev_hash: '0'.repeat(64), hash: '1'.repeat(64) },
    };
    const old = EventOutput.parse({ ...base, type: 'mail.received', data: { message, context: null } });
    const up = upcastEvent(old);
    expect(up.type === 'mail.received' && up.data.message_id).toBe('msg_1');
    expect(old.data).not.toHaveProperty('message_id');
    expect(eventDataProblem('mail.received', up.data)).toBeNull();
    const current: BoxesEvent = EventOutput.parse({ ...base, type: 'mail.received', data: { message_id: 'msg_1', message, context: null } });
    expect(upcastEvent(current)).toEqual(current);
    const other: BoxesEvent = EventOutput.parse({ ...base, type: 'box.deleted', data: { box_id: 'box_1', address: 'a@b.c' } });
    expect(upcastEvent(other)).toBe(other);
  });
});
