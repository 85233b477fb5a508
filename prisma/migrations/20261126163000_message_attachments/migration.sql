-- Attachments of stored messages (received and sent): an id, what they are, and their extracted text. The
-- bytes stay in the sealed body (messages.body_enc), read by index, so each attachment is stored once.
CREATE TABLE "message_attachments" (
    "id" TEXT NOT NULL,
    "message_id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "idx" INTEGER NOT NULL,
    "filename" TEXT,
    "content_type" TEXT NOT NULL,
    "content_id" TEXT,
    "size_bytes" INTEGER NOT NULL,
    "sha256" TEXT NOT NULL,
    "text_status" TEXT NOT NULL DEFAULT 'pending',
    "detected_type" TEXT,
    "text_enc" TEXT,
    "text_bytes" INTEGER,
    "text_truncated" BOOLEAN NOT NULL DEFAULT false,
    "text_error" TEXT,
    "text_done_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "message_attachments_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "message_attachments_text_status_check" CHECK ("text_status" IN ('pending', 'ready', 'too_large', 'unsupported', 'failed'))
);

CREATE UNIQUE INDEX "message_attachments_message_id_idx_key" ON "message_attachments"("message_id", "idx");
CREATE INDEX "message_attachments_pending_idx" ON "message_attachments"("created_at") WHERE "text_status" = 'pending';

ALTER TABLE "message_attachments" ADD CONSTRAINT "message_attachments_message_id_fkey" FOREIGN KEY ("message_id") REFERENCES "messages"("id") ON DELETE CASCADE ON UPDATE CASCADE;
