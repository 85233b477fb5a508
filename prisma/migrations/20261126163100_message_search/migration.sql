-- Full-text search of messages (GET /messages/search, IMAP SEARCH TEXT/BODY).
--
-- Bodies are sealed at rest (messages.body_enc); an index cannot be. What is kept here is only a tsvector:
-- the normalised words (english stems) of the subject, the addresses, the body text and the attachments' text,
-- each with its positions and a weight (A subject, B addresses, C body, D attachments), never the text itself.
-- Someone who reads the database learns which words a message contains and roughly in which order (positions),
-- not its wording, punctuation, numbers' context or attachments. The vector goes with the body: DELETE
-- /messages/{id} and retention delete the row, and a deleted message takes it along (ON DELETE CASCADE).
-- Highlights are made at query time from the decrypted bodies of one page of results.
--
-- Messages stored before this migration have no vector until the worker's search backfill (job
-- search-backfill, run at worker start and then every few minutes until none is left) indexes them.
CREATE TABLE "message_search" (
    "message_id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    -- Copies of the message's columns the search filters on (none of them changes once stored), so a search
    -- reads this table alone until it has its page.
    "box_id" TEXT,
    "direction" TEXT NOT NULL,
    "recorded_at" TIMESTAMPTZ(3) NOT NULL,
    "thread_id" TEXT NOT NULL,
    "tsv" TSVECTOR NOT NULL,
    "indexed_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "message_search_pkey" PRIMARY KEY ("message_id"),
    CONSTRAINT "message_search_message_id_fkey" FOREIGN KEY ("message_id") REFERENCES "messages"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
-- Ranking reads every matching vector: kept compressed in the row (MAIN, up to a page) rather than out of
-- line in TOAST, and compressed with lz4 where the server has it (faster to decompress than pglz).
ALTER TABLE "message_search" ALTER COLUMN "tsv" SET STORAGE MAIN;
ALTER TABLE "message_search" SET (toast_tuple_target = 8160);
DO $$
BEGIN
  ALTER TABLE "message_search" ALTER COLUMN "tsv" SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
  NULL;
END $$;
CREATE INDEX "message_search_tsv_idx" ON "message_search" USING GIN ("tsv");
CREATE INDEX "message_search_account_id_idx" ON "message_search" ("account_id");
CREATE INDEX "message_search_thread_idx" ON "message_search" ("account_id", "thread_id");

-- The one definition of a message's vector, used by every path that stores or re-indexes a message.
-- addresses: space-separated; each is indexed whole and as local part and domain ("alice", "example.com").
CREATE FUNCTION boxes_search_vector(subject TEXT, addresses TEXT, body TEXT, attachments TEXT) RETURNS TSVECTOR
LANGUAGE SQL IMMUTABLE PARALLEL SAFE AS $$
  SELECT setweight(to_tsvector('english'::regconfig, coalesce(subject, '')), 'A')
      || setweight(to_tsvector('english'::regconfig, coalesce(addresses, '') || ' ' || translate(coalesce(addresses, ''), '@', ' ')), 'B')
      || setweight(to_tsvector('english'::regconfig, left(coalesce(body, ''), 100000)), 'C')
      || setweight(to_tsvector('english'::regconfig, left(coalesce(attachments, ''), 100000)), 'D')
$$;

-- An account may keep no search index at all (PATCH /account search_indexing false): its vectors are dropped
-- and none is written until it is turned back on (then the backfill indexes its messages again).
ALTER TABLE "accounts" ADD COLUMN "search_indexing" BOOLEAN NOT NULL DEFAULT true;
