-- AlterTable
ALTER TABLE "accounts" ADD COLUMN     "balance_micros" BIGINT NOT NULL DEFAULT 0,
ADD COLUMN     "free_messages_left" INTEGER NOT NULL DEFAULT 250,
ADD COLUMN     "held_free_messages" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "held_micros" BIGINT NOT NULL DEFAULT 0,
ADD COLUMN     "reputation_state" TEXT NOT NULL DEFAULT 'ok';

-- CreateTable
CREATE TABLE "messages" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "box_id" TEXT,
    "direction" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "rfc_message_id" TEXT NOT NULL,
    "provider_message_id" TEXT NOT NULL,
    "in_reply_to" TEXT,
    "references" TEXT[],
    "from_address" TEXT,
    "to_addresses" TEXT[],
    "cc_addresses" TEXT[],
    "bcc_addresses" TEXT[],
    "subject" TEXT,
    "size_bytes" INTEGER NOT NULL,
    "body_enc" TEXT,
    "raw_enc" TEXT,
    "context" JSONB,
    "idempotency_key" TEXT,
    "request_hash" TEXT,
    "response" JSONB,
    "recorded_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "body_reclaimed_at" TIMESTAMPTZ(3),
    "purged_at" TIMESTAMPTZ(3),

    CONSTRAINT "messages_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "deliveries" (
    "id" TEXT NOT NULL,
    "message_id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "recipient" TEXT NOT NULL,
    "status" TEXT NOT NULL DEFAULT 'queued',
    "route" TEXT NOT NULL,
    "attempts" INTEGER NOT NULL DEFAULT 0,
    "last_error" TEXT,
    "next_attempt_at" TIMESTAMPTZ(3),
    "remote_mta" TEXT,
    "held_micros" BIGINT NOT NULL DEFAULT 0,
    "used_free" BOOLEAN NOT NULL DEFAULT false,
    "settled_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    "delivered_at" TIMESTAMPTZ(3),

    CONSTRAINT "deliveries_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "suppressions" (
    "account_id" TEXT NOT NULL,
    "address" TEXT NOT NULL,
    "reason" TEXT NOT NULL,
    "detail" TEXT,
    "message_id" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "suppressions_pkey" PRIMARY KEY ("account_id","address")
);

-- CreateTable
CREATE TABLE "ledger_entries" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "type" TEXT NOT NULL,
    "amount_micros" BIGINT NOT NULL,
    "free_messages" INTEGER NOT NULL DEFAULT 0,
    "balance_after" BIGINT NOT NULL,
    "message_id" TEXT,
    "delivery_id" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "ledger_entries_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "messages_account_id_recorded_at_idx" ON "messages"("account_id", "recorded_at");

-- CreateIndex
CREATE INDEX "messages_account_id_rfc_message_id_idx" ON "messages"("account_id", "rfc_message_id");

-- CreateIndex
CREATE UNIQUE INDEX "messages_account_id_idempotency_key_key" ON "messages"("account_id", "idempotency_key");

-- CreateIndex
CREATE INDEX "deliveries_message_id_idx" ON "deliveries"("message_id");

-- CreateIndex
CREATE INDEX "deliveries_account_id_created_at_idx" ON "deliveries"("account_id", "created_at");

-- CreateIndex
CREATE INDEX "deliveries_status_next_attempt_at_idx" ON "deliveries"("status", "next_attempt_at");

-- CreateIndex
CREATE UNIQUE INDEX "ledger_entries_delivery_id_key" ON "ledger_entries"("delivery_id");

-- CreateIndex
CREATE INDEX "ledger_entries_account_id_created_at_idx" ON "ledger_entries"("account_id", "created_at");

-- AddForeignKey
ALTER TABLE "messages" ADD CONSTRAINT "messages_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "deliveries" ADD CONSTRAINT "deliveries_message_id_fkey" FOREIGN KEY ("message_id") REFERENCES "messages"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "suppressions" ADD CONSTRAINT "suppressions_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "ledger_entries" ADD CONSTRAINT "ledger_entries_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;
