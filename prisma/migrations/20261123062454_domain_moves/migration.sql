-- AlterTable
ALTER TABLE "domains" ADD COLUMN     "grace_until" TIMESTAMPTZ(3);
