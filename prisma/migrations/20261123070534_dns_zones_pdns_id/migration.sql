-- AlterTable
ALTER TABLE "dns_zones" ADD COLUMN     "pdns_id" SERIAL NOT NULL;

-- CreateIndex
CREATE UNIQUE INDEX "dns_zones_pdns_id_key" ON "dns_zones"("pdns_id");
