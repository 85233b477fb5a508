-- append_event notifies only when given a channel. A transaction that sends NOTIFY holds one lock shared by the
-- whole server (every database) from just before its commit until the commit's WAL flush is done, so such commits
-- run one at a time, each waiting for its own flush, instead of sharing flushes as other commits do. An append
-- made on its own (not inside a larger transaction) now passes no channel: appendEvent announces it right after the
-- commit, several accounts in one statement whose commit does not wait for a flush (see appendEvent).
CREATE OR REPLACE FUNCTION "append_event"(
    p_account_id TEXT, p_id TEXT, p_type TEXT, p_box_id TEXT, p_data JSONB, p_created_at TIMESTAMPTZ,
    p_before TEXT, p_after TEXT, p_channel TEXT)
RETURNS TABLE ("seq" INTEGER, "prev_hash" TEXT, "hash" TEXT)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_seq INTEGER;
    v_prev TEXT;
    v_hash TEXT;
BEGIN
    -- FOR NO KEY UPDATE, as an update of non-key columns locks: rows inserted in the same transaction hold KEY
    -- SHARE on the account through their foreign key, which FOR UPDATE would conflict with.
    UPDATE "accounts" AS a
       SET "chain_seq" = h."chain_seq" + 1,
           "chain_hash" = encode(sha256(convert_to(h."chain_hash" || chr(10) || p_before || (h."chain_seq" + 1)::text || p_after, 'UTF8')), 'hex')
      FROM (SELECT x."chain_seq", x."chain_hash" FROM "accounts" AS x WHERE x."id" = p_account_id FOR NO KEY UPDATE) AS h
     WHERE a."id" = p_account_id
    RETURNING a."chain_seq", h."chain_hash", a."chain_hash" INTO v_seq, v_prev, v_hash;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO "events" ("id", "account_id", "seq", "type", "box_id", "data", "created_at", "prev_hash", "hash")
    VALUES (p_id, p_account_id, v_seq, p_type, p_box_id, p_data, p_created_at, v_prev, v_hash);
    IF p_channel IS NOT NULL THEN
        PERFORM pg_notify(p_channel, p_account_id);
    END IF;
    RETURN QUERY SELECT v_seq, v_prev, v_hash;
END
$fn$;
