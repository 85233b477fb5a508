-- AlterTable
ALTER TABLE "accounts" ADD COLUMN     "audit_retention_days" INTEGER,
ADD COLUMN     "close_protection_at" TIMESTAMPTZ(3),
ADD COLUMN     "closed_at" TIMESTAMPTZ(3),
ADD COLUMN     "delete_after" TIMESTAMPTZ(3),
ADD COLUMN     "evidence_enrolled_at" TIMESTAMPTZ(3);

-- AlterTable
ALTER TABLE "messages" ADD COLUMN     "raw_sha256" TEXT;

-- AlterTable
ALTER TABLE "owner_links" ADD COLUMN     "close_request_id" TEXT;

-- CreateTable
CREATE TABLE "audit_signing_keys" (
    "id" TEXT NOT NULL,
    "public_key_pem" TEXT NOT NULL,
    "private_key_enc" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "retired_at" TIMESTAMPTZ(3),

    CONSTRAINT "audit_signing_keys_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "audit_checkpoints" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "seq" INTEGER NOT NULL,
    "hash" TEXT NOT NULL,
    "key_id" TEXT NOT NULL,
    "jws" TEXT NOT NULL,
    "signed_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "audit_checkpoints_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "account_close_requests" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "status" TEXT NOT NULL DEFAULT 'pending',
    "requested_by_key_id" TEXT NOT NULL,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "decided_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "account_close_requests_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "account_exports" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "status" TEXT NOT NULL DEFAULT 'building',
    "token_hash" TEXT NOT NULL,
    "token_enc" TEXT NOT NULL,
    "archive_enc" TEXT,
    "size_bytes" INTEGER,
    "sha256" TEXT,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "ready_at" TIMESTAMPTZ(3),
    "downloads" INTEGER NOT NULL DEFAULT 0,
    "error" TEXT,

    CONSTRAINT "account_exports_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "audit_checkpoints_account_id_signed_at_idx" ON "audit_checkpoints"("account_id", "signed_at");

-- CreateIndex
CREATE INDEX "account_close_requests_account_id_created_at_idx" ON "account_close_requests"("account_id", "created_at");

-- CreateIndex
CREATE UNIQUE INDEX "account_exports_token_hash_key" ON "account_exports"("token_hash");

-- CreateIndex
CREATE INDEX "account_exports_account_id_idx" ON "account_exports"("account_id");

-- CreateIndex
CREATE INDEX "accounts_status_delete_after_idx" ON "accounts"("status", "delete_after");

-- AddForeignKey
ALTER TABLE "audit_checkpoints" ADD CONSTRAINT "audit_checkpoints_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "account_close_requests" ADD CONSTRAINT "account_close_requests_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "account_exports" ADD CONSTRAINT "account_exports_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;
