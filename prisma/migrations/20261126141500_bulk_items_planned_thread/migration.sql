-- A bulk job's message keeps the Message-ID and the thread the send planner gave it (a reply joins the thread
-- of the message it answers, as a single send does). Items stored before this get the Message-ID they would
-- have been sent with and a thread of their own, as before.
ALTER TABLE "bulk_job_items" ADD COLUMN "rfc_message_id" TEXT,
ADD COLUMN "thread_id" TEXT NOT NULL DEFAULT ('thr_'::text || substr(replace((gen_random_uuid())::text, '-'::text, ''::text), 1, 20));

UPDATE "bulk_job_items" SET "rfc_message_id" = '<' || "message_id" || '@' || split_part("from_address", '@', 2) || '>';

ALTER TABLE "bulk_job_items" ALTER COLUMN "rfc_message_id" SET NOT NULL;
