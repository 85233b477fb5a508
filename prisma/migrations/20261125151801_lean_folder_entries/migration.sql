-- Folder entries carry only what their readers use. A first login folds a whole mailbox in (10,000 rows for a
-- box of 10,000 messages): the two foreign keys checked every row (half the fold's cost), the (folder, modseq)
-- index was never read (a session filters modseq in memory), and (message_id) is covered by (message, folder),
-- which also answers "already in this folder".
--
-- Order: the index is built first, while only this table is locked; the foreign keys, whose removal locks
-- messages and mail_folders too, go last, just before the commit.
CREATE UNIQUE INDEX "mail_folder_entries_message_id_folder_id_key" ON "mail_folder_entries"("message_id", "folder_id");
DROP INDEX "mail_folder_entries_folder_id_message_id_key";
DROP INDEX "mail_folder_entries_folder_id_modseq_idx";
DROP INDEX "mail_folder_entries_message_id_idx";

-- What the foreign keys cascaded, once per statement: deleting folders (a box deleted, an account deleted) or
-- messages (an account deleted) deletes their entries. The functions keep the search_path they were made with
-- (the schema these tables are in), whoever's session deletes.
CREATE FUNCTION "mail_folder_entries_of_gone_folders"() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  DELETE FROM "mail_folder_entries" e USING gone g WHERE e."folder_id" = g."id";
  RETURN NULL;
END $$;

CREATE FUNCTION "mail_folder_entries_of_gone_messages"() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  DELETE FROM "mail_folder_entries" e USING gone g WHERE e."message_id" = g."id";
  RETURN NULL;
END $$;

ALTER TABLE "mail_folder_entries" DROP CONSTRAINT "mail_folder_entries_folder_id_fkey";
ALTER TABLE "mail_folder_entries" DROP CONSTRAINT "mail_folder_entries_message_id_fkey";

CREATE TRIGGER "mail_folders_delete_entries" AFTER DELETE ON "mail_folders"
  REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION "mail_folder_entries_of_gone_folders"();

CREATE TRIGGER "messages_delete_folder_entries" AFTER DELETE ON "messages"
  REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION "mail_folder_entries_of_gone_messages"();

-- Emptying either table by hand (TRUNCATE, which fires no DELETE trigger) empties the entries too.
CREATE FUNCTION "mail_folder_entries_truncate"() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  TRUNCATE "mail_folder_entries";
  RETURN NULL;
END $$;

CREATE TRIGGER "mail_folders_truncate_entries" BEFORE TRUNCATE ON "mail_folders"
  FOR EACH STATEMENT EXECUTE FUNCTION "mail_folder_entries_truncate"();

CREATE TRIGGER "messages_truncate_folder_entries" BEFORE TRUNCATE ON "messages"
  FOR EACH STATEMENT EXECUTE FUNCTION "mail_folder_entries_truncate"();
