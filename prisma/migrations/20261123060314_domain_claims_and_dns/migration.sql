-- DropIndex
DROP INDEX "accounts_primary_address_key";

-- DropIndex
DROP INDEX "boxes_address_key";

-- DropIndex
DROP INDEX "domains_name_key";

-- AlterTable
ALTER TABLE "boxes" ADD COLUMN     "live_address" TEXT;

-- AlterTable
ALTER TABLE "domains" ADD COLUMN     "check_attempts" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "checks" JSONB,
ADD COLUMN     "claim_expires_at" TIMESTAMPTZ(3),
ADD COLUMN     "last_checked_at" TIMESTAMPTZ(3),
ADD COLUMN     "live_name" TEXT,
ADD COLUMN     "next_check_at" TIMESTAMPTZ(3),
ADD COLUMN     "proof_seen_at" TIMESTAMPTZ(3);

-- CreateTable
CREATE TABLE "dns_zones" (
    "id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "domain_id" TEXT,
    "serial" INTEGER NOT NULL DEFAULT 1,
    "soa_mname" TEXT NOT NULL,
    "soa_rname" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "dns_zones_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "dns_records" (
    "id" TEXT NOT NULL,
    "zone_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "type" TEXT NOT NULL,
    "ttl" INTEGER NOT NULL,
    "content" TEXT NOT NULL,
    "reserved" BOOLEAN NOT NULL DEFAULT false,
    "domain_id" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "dns_records_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "dns_zones_name_key" ON "dns_zones"("name");

-- CreateIndex
CREATE UNIQUE INDEX "dns_zones_domain_id_key" ON "dns_zones"("domain_id");

-- CreateIndex
CREATE INDEX "dns_records_name_type_idx" ON "dns_records"("name", "type");

-- CreateIndex
CREATE INDEX "dns_records_zone_id_name_idx" ON "dns_records"("zone_id", "name");

-- CreateIndex
CREATE INDEX "dns_records_domain_id_idx" ON "dns_records"("domain_id");

-- CreateIndex
CREATE UNIQUE INDEX "boxes_live_address_key" ON "boxes"("live_address");

-- CreateIndex
CREATE INDEX "boxes_address_idx" ON "boxes"("address");

-- CreateIndex
CREATE UNIQUE INDEX "domains_live_name_key" ON "domains"("live_name");

-- CreateIndex
CREATE INDEX "domains_name_idx" ON "domains"("name");

-- CreateIndex
CREATE INDEX "domains_status_next_check_at_idx" ON "domains"("status", "next_check_at");

-- AddForeignKey
ALTER TABLE "dns_zones" ADD CONSTRAINT "dns_zones_domain_id_fkey" FOREIGN KEY ("domain_id") REFERENCES "domains"("id") ON DELETE SET NULL ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "dns_records" ADD CONSTRAINT "dns_records_zone_id_fkey" FOREIGN KEY ("zone_id") REFERENCES "dns_zones"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- Data: domains live before claims existed keep routing mail; pending ones get a claim deadline and a first check.
UPDATE "domains" SET "live_name" = "name" WHERE "status" = 'active';
UPDATE "boxes" SET "live_address" = "boxes"."address" FROM "domains" WHERE "domains"."id" = "boxes"."domain_id" AND "domains"."status" = 'active';
UPDATE "domains" SET "next_check_at" = CURRENT_TIMESTAMP, "claim_expires_at" = CURRENT_TIMESTAMP + interval '7 days' WHERE "status" <> 'active';
