-- AlterTable
ALTER TABLE "boxes" ADD COLUMN     "receive_mode" TEXT NOT NULL DEFAULT 'open',
ADD COLUMN     "refused_at" TIMESTAMPTZ(3),
ADD COLUMN     "refused_count" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "require_verified_sender" BOOLEAN NOT NULL DEFAULT false,
ADD COLUMN     "spam_action" TEXT NOT NULL DEFAULT 'label';

-- AlterTable
ALTER TABLE "messages" ADD COLUMN     "authentication" JSONB,
ADD COLUMN     "spam" JSONB;

-- CreateTable
CREATE TABLE "trust_list_entries" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "box_id" TEXT,
    "list" TEXT NOT NULL,
    "direction" TEXT NOT NULL,
    "value" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "note" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "trust_list_entries_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "trust_list_entries_account_id_value_idx" ON "trust_list_entries"("account_id", "value");

-- AddForeignKey
ALTER TABLE "trust_list_entries" ADD CONSTRAINT "trust_list_entries_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;
