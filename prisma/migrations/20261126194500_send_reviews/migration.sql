-- Owner review of sends (packages/core/src/reviews): a policy per box and per API key, and the sends held
-- for the owner's decision.
ALTER TABLE "boxes" ADD COLUMN "review" TEXT NOT NULL DEFAULT 'none';
ALTER TABLE "boxes" ADD CONSTRAINT "boxes_review_check" CHECK ("review" IN ('none', 'new_recipients', 'all'));
ALTER TABLE "api_keys" ADD COLUMN "review" TEXT NOT NULL DEFAULT 'none';
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_review_check" CHECK ("review" IN ('none', 'new_recipients', 'all'));
ALTER TABLE "owner_links" ADD COLUMN "review_id" TEXT;

CREATE TABLE "send_reviews" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "box_id" TEXT NOT NULL,
    "key_id" TEXT,
    "status" TEXT NOT NULL DEFAULT 'pending',
    "reason" TEXT NOT NULL DEFAULT 'all',
    "new_recipients" TEXT[],
    "from_address" TEXT NOT NULL,
    "to_addresses" TEXT[],
    "cc_addresses" TEXT[],
    "bcc_addresses" TEXT[],
    "subject" TEXT,
    "send_at" TIMESTAMPTZ(3),
    "request_enc" TEXT NOT NULL,
    "request_hash" TEXT NOT NULL,
    "idempotency_key" TEXT,
    "message_id" TEXT,
    "last_error" JSONB,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "decided_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "send_reviews_pkey" PRIMARY KEY ("id")
);
ALTER TABLE "send_reviews" ADD CONSTRAINT "send_reviews_status_check" CHECK ("status" IN ('pending', 'approved', 'denied', 'expired', 'withdrawn'));
ALTER TABLE "send_reviews" ADD CONSTRAINT "send_reviews_reason_check" CHECK ("reason" IN ('new_recipients', 'all'));

CREATE UNIQUE INDEX "send_reviews_account_id_idempotency_key_key" ON "send_reviews"("account_id", "idempotency_key");
CREATE INDEX "send_reviews_account_id_status_created_at_idx" ON "send_reviews"("account_id", "status", "created_at");
CREATE INDEX "send_reviews_status_expires_at_idx" ON "send_reviews"("status", "expires_at");
ALTER TABLE "send_reviews" ADD CONSTRAINT "send_reviews_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- The new_recipients check (one query per held-or-not send, only for boxes and keys with that policy): has the
-- box heard from the address (a received message's sender), or written to it (a sent message's to, cc or
-- bcc)? A btree on (box_id, from_address) answers the first; a GIN over the three recipient arrays the
-- second (its pending list keeps the cost of a send's insert small). The GIN index is not in schema.prisma:
-- the schema cannot say a multi-column GIN index the diff tool reads, as for message_search's.
CREATE INDEX "messages_box_id_from_address_idx" ON "messages"("box_id", "from_address");
CREATE INDEX "messages_recipients_gin_idx" ON "messages" USING GIN ("to_addresses", "cc_addresses", "bcc_addresses");
