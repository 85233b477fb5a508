-- Drafts (POST /drafts, and what mail clients APPEND to a box's Drafts folder). The body and the attachments
-- are sealed as message bodies are (body_enc), and so is the RFC 5322 rendering the Drafts folder serves
-- (raw_enc). A draft is sent through the send path; the message it becomes names it (messages.draft_id,
-- unique: a draft is sent once however many calls race) and the draft row is deleted.
CREATE TABLE "drafts" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "box_id" TEXT NOT NULL,
    "from_name" TEXT,
    "to_addresses" TEXT[],
    "cc_addresses" TEXT[],
    "bcc_addresses" TEXT[],
    "subject" TEXT,
    "in_reply_to" TEXT,
    "send_at" TIMESTAMPTZ(3),
    "body_enc" TEXT NOT NULL,
    "attachments" JSONB NOT NULL,
    "raw_enc" BYTEA NOT NULL,
    "size_bytes" INTEGER NOT NULL,
    "folder_id" TEXT NOT NULL,
    "uid" INTEGER NOT NULL,
    "modseq" BIGINT NOT NULL,
    "flags" INTEGER NOT NULL DEFAULT 9,
    "imap_deleted" BOOLEAN NOT NULL DEFAULT false,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "drafts_pkey" PRIMARY KEY ("id")
);

CREATE INDEX "drafts_account_id_created_at_idx" ON "drafts"("account_id", "created_at");

CREATE UNIQUE INDEX "drafts_folder_id_uid_key" ON "drafts"("folder_id", "uid");

ALTER TABLE "drafts" ADD CONSTRAINT "drafts_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

ALTER TABLE "drafts" ADD CONSTRAINT "drafts_box_id_fkey" FOREIGN KEY ("box_id") REFERENCES "boxes"("id") ON DELETE CASCADE ON UPDATE CASCADE;

ALTER TABLE "messages" ADD COLUMN "draft_id" TEXT;

CREATE UNIQUE INDEX "messages_draft_id_key" ON "messages"("draft_id");
