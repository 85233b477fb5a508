-- AlterTable
ALTER TABLE "signup_intents" ADD COLUMN     "registration_price_cents" INTEGER;

-- CreateTable
CREATE TABLE "domain_registrations" (
    "id" TEXT NOT NULL,
    "domain_id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "registrar" TEXT NOT NULL,
    "price_cents_per_year" INTEGER NOT NULL,
    "registered_at" TIMESTAMPTZ(3) NOT NULL,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "status" TEXT NOT NULL DEFAULT 'active',
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "domain_registrations_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "simulated_registry" (
    "name" TEXT NOT NULL,
    "holder" TEXT NOT NULL,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "auth_code" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "simulated_registry_pkey" PRIMARY KEY ("name")
);

-- CreateIndex
CREATE UNIQUE INDEX "domain_registrations_domain_id_key" ON "domain_registrations"("domain_id");

-- AddForeignKey
ALTER TABLE "domain_registrations" ADD CONSTRAINT "domain_registrations_domain_id_fkey" FOREIGN KEY ("domain_id") REFERENCES "domains"("id") ON DELETE CASCADE ON UPDATE CASCADE;
