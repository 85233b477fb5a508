-- appendEvent as a function: the head's lock and move, the insert and the NOTIFY, as the one statement it replaces
-- did, but planned once per connection (PL/pgSQL keeps its statements' plans) instead of parsed and planned on
-- every append, which was about a third of the append's PostgreSQL CPU. The chain hash is the one chain.ts
-- defines: sha256 over the previous hash, a newline and the event's canonical body, which the caller builds as
-- the text before the seq (p_before) and after it (p_after). No row when the account does not exist.
CREATE FUNCTION "append_event"(
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
    PERFORM pg_notify(p_channel, p_account_id);
    RETURN QUERY SELECT v_seq, v_prev, v_hash;
END
$fn$;
