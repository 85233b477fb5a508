/**
 * Every sealed column (named *_enc: AES-256-GCM ciphertext) of a migrated database is stored EXTERNAL: moved out of
 * line when large, without an attempt at compressing it first (ciphertext does not compress). A new sealed column
 * needs the same in its migration.
 */
import { describe, expect, it } from 'vitest';
import type { Db } from './client';
import { rows, sql } from './sql';
import { templateDatabase } from './template-database';

let db: Db;
templateDatabase('sealedstorage', (d) => {
  db = d;
});

/** The sealed columns that hold large values (whole messages, exports): among those the rule covers. */
const LARGE = ['account_exports.archive_enc', 'drafts.raw_enc', 'messages.body_enc', 'messages.raw_enc', 'send_reviews.request_enc'];

describe('sealed columns', () => {
  it('are all stored EXTERNAL (out of line when large, never compressed)', async () => {
    const found = await rows(
      db,
      sql<{ name: string; storage: string }>`SELECT c.relname || '.' || a.attname AS name, a.attstorage::text AS storage
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
          AND a.attname LIKE ${'%\\_enc'}
        ORDER BY 1`,
    );
    expect(found.map((r) => r.name)).toEqual(expect.arrayContaining(LARGE));
    expect(found.filter((r) => r.storage !== 'e').map((r) => `${r.name} (${r.storage})`)).toEqual([]);
  });
});
