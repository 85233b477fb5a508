-- CreateTable
CREATE TABLE "bulk_jobs" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "status" TEXT NOT NULL DEFAULT 'queued',
    "batch_size" INTEGER NOT NULL,
    "message_count" INTEGER NOT NULL,
    "batch_count" INTEGER NOT NULL,
    "batches_done" INTEGER NOT NULL DEFAULT 0,
    "cool_off_seconds" INTEGER NOT NULL,
    "max_bounce_rate" DOUBLE PRECISION NOT NULL,
    "max_complaint_rate" DOUBLE PRECISION NOT NULL,
    "trailer" BOOLEAN NOT NULL,
    "box_ids" TEXT[],
    "next_batch_at" TIMESTAMPTZ(3),
    "halt_reason" TEXT,
    "halt_detail" JSONB,
    "batch_log" JSONB NOT NULL DEFAULT '[]',
    "idempotency_key" TEXT,
    "request_hash" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    "finished_at" TIMESTAMPTZ(3),

    CONSTRAINT "bulk_jobs_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "bulk_job_items" (
    "job_id" TEXT NOT NULL,
    "index" INTEGER NOT NULL,
    "batch" INTEGER NOT NULL,
    "message_id" TEXT NOT NULL,
    "box_id" TEXT NOT NULL,
    "from_address" TEXT NOT NULL,
    "to_addresses" TEXT[],
    "cc_addresses" TEXT[],
    "bcc_addresses" TEXT[],
    "recipients" TEXT[],
    "subject" TEXT,
    "size_bytes" INTEGER NOT NULL,
    "attachment_bytes" INTEGER NOT NULL,
    "body_enc" TEXT,
    "context" JSONB,
    "in_reply_to" TEXT,
    "references" TEXT[],
    "started_at" TIMESTAMPTZ(3),
    "suppressed" INTEGER NOT NULL DEFAULT 0,

    CONSTRAINT "bulk_job_items_pkey" PRIMARY KEY ("job_id","index")
);

-- CreateIndex
CREATE INDEX "bulk_jobs_account_id_created_at_idx" ON "bulk_jobs"("account_id", "created_at");

-- CreateIndex
CREATE INDEX "bulk_jobs_status_next_batch_at_idx" ON "bulk_jobs"("status", "next_batch_at");

-- CreateIndex
CREATE UNIQUE INDEX "bulk_jobs_account_id_idempotency_key_key" ON "bulk_jobs"("account_id", "idempotency_key");

-- CreateIndex
CREATE INDEX "bulk_job_items_job_id_batch_idx" ON "bulk_job_items"("job_id", "batch");

-- CreateIndex
CREATE INDEX "bulk_job_items_message_id_idx" ON "bulk_job_items"("message_id");

-- AddForeignKey
ALTER TABLE "bulk_jobs" ADD CONSTRAINT "bulk_jobs_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "bulk_job_items" ADD CONSTRAINT "bulk_job_items_job_id_fkey" FOREIGN KEY ("job_id") REFERENCES "bulk_jobs"("id") ON DELETE CASCADE ON UPDATE CASCADE;
