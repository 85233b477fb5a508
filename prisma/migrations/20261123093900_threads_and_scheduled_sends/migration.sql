-- AlterTable
ALTER TABLE "messages" ADD COLUMN     "send_at" TIMESTAMPTZ(3),
ADD COLUMN     "thread_id" TEXT NOT NULL DEFAULT ('thr_'::text || substr(replace((gen_random_uuid())::text, '-'::text, ''::text), 1, 20));

-- CreateIndex
CREATE INDEX "messages_account_id_thread_id_recorded_at_idx" ON "messages"("account_id", "thread_id", "recorded_at");
