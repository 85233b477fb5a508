-- AlterTable
ALTER TABLE "deliveries" ADD COLUMN "accepted_at" TIMESTAMPTZ(3),
ADD COLUMN "accepted_response" TEXT;
