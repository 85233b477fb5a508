-- AlterTable
ALTER TABLE "boxes" ADD COLUMN     "forwarding" BOOLEAN NOT NULL DEFAULT false;

-- CreateTable
CREATE TABLE "sending_ips" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "mode" TEXT NOT NULL,
    "ip" TEXT NOT NULL,
    "live_ip" TEXT,
    "helo_name" TEXT NOT NULL,
    "warmup_started_at" TIMESTAMPTZ(3),
    "last_error" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "sending_ips_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "box_forwards" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "box_id" TEXT NOT NULL,
    "target" TEXT NOT NULL,
    "match_from" TEXT,
    "match_subject" TEXT,
    "status" TEXT NOT NULL DEFAULT 'pending_confirmation',
    "stop_reason" TEXT,
    "confirm_token_hash" TEXT NOT NULL,
    "confirm_expires_at" TIMESTAMPTZ(3) NOT NULL,
    "confirmed_at" TIMESTAMPTZ(3),
    "stopped_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "box_forwards_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "forward_runs" (
    "id" TEXT NOT NULL,
    "forward_id" TEXT NOT NULL,
    "message_id" TEXT NOT NULL,
    "status" TEXT NOT NULL DEFAULT 'pending',
    "reason" TEXT,
    "sent_message_id" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "forward_runs_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "sending_ips_account_id_key" ON "sending_ips"("account_id");

-- CreateIndex
CREATE UNIQUE INDEX "sending_ips_live_ip_key" ON "sending_ips"("live_ip");

-- CreateIndex
CREATE UNIQUE INDEX "box_forwards_confirm_token_hash_key" ON "box_forwards"("confirm_token_hash");

-- CreateIndex
CREATE INDEX "box_forwards_box_id_status_idx" ON "box_forwards"("box_id", "status");

-- CreateIndex
CREATE INDEX "box_forwards_account_id_idx" ON "box_forwards"("account_id");

-- CreateIndex
CREATE UNIQUE INDEX "forward_runs_sent_message_id_key" ON "forward_runs"("sent_message_id");

-- CreateIndex
CREATE INDEX "forward_runs_status_created_at_idx" ON "forward_runs"("status", "created_at");

-- CreateIndex
CREATE UNIQUE INDEX "forward_runs_forward_id_message_id_key" ON "forward_runs"("forward_id", "message_id");

-- AddForeignKey
ALTER TABLE "sending_ips" ADD CONSTRAINT "sending_ips_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "box_forwards" ADD CONSTRAINT "box_forwards_box_id_fkey" FOREIGN KEY ("box_id") REFERENCES "boxes"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "forward_runs" ADD CONSTRAINT "forward_runs_forward_id_fkey" FOREIGN KEY ("forward_id") REFERENCES "box_forwards"("id") ON DELETE CASCADE ON UPDATE CASCADE;
