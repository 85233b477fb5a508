-- AlterTable
ALTER TABLE "accounts" ADD COLUMN     "mqtt_cursor" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "webhook_attempts" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "webhook_cursor" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "webhook_next_attempt_at" TIMESTAMPTZ(3),
ADD COLUMN     "webhook_secret_enc" TEXT,
ADD COLUMN     "webhook_secret_prev_enc" TEXT,
ADD COLUMN     "webhook_secret_prev_until" TIMESTAMPTZ(3);

-- AlterTable
ALTER TABLE "signup_intents" ADD COLUMN     "api_key_for_callback_enc" TEXT;

-- CreateTable
CREATE TABLE "webhook_deliveries" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "event_id" TEXT NOT NULL,
    "seq" INTEGER NOT NULL,
    "event_type" TEXT NOT NULL,
    "url" TEXT NOT NULL,
    "attempt" INTEGER NOT NULL,
    "status" TEXT NOT NULL,
    "status_code" INTEGER,
    "error" TEXT,
    "latency_ms" INTEGER,
    "next_retry_at" TIMESTAMPTZ(3),
    "redelivery" BOOLEAN NOT NULL DEFAULT false,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "webhook_deliveries_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "iot_credentials" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "client_id" TEXT NOT NULL,
    "fingerprint" TEXT NOT NULL,
    "serial" TEXT NOT NULL,
    "not_after" TIMESTAMPTZ(3) NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "revoked_at" TIMESTAMPTZ(3),

    CONSTRAINT "iot_credentials_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "platform_settings" (
    "key" TEXT NOT NULL,
    "value" TEXT NOT NULL,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "platform_settings_pkey" PRIMARY KEY ("key")
);

-- CreateIndex
CREATE INDEX "webhook_deliveries_account_id_created_at_idx" ON "webhook_deliveries"("account_id", "created_at");

-- CreateIndex
CREATE UNIQUE INDEX "iot_credentials_client_id_key" ON "iot_credentials"("client_id");

-- CreateIndex
CREATE UNIQUE INDEX "iot_credentials_fingerprint_key" ON "iot_credentials"("fingerprint");

-- CreateIndex
CREATE INDEX "iot_credentials_account_id_idx" ON "iot_credentials"("account_id");

-- AddForeignKey
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "iot_credentials" ADD CONSTRAINT "iot_credentials_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;
