-- Pausing an account or a box, send caps per box and per API key, and keys that expire.
ALTER TABLE "accounts" ADD COLUMN "paused_at" TIMESTAMPTZ(3);
ALTER TABLE "accounts" ADD COLUMN "paused_by" TEXT;
ALTER TABLE "boxes" ADD COLUMN "paused_at" TIMESTAMPTZ(3);
ALTER TABLE "boxes" ADD COLUMN "paused_by" TEXT;
ALTER TABLE "boxes" ADD COLUMN "send_caps" JSONB;
ALTER TABLE "api_keys" ADD COLUMN "expires_at" TIMESTAMPTZ(3);
ALTER TABLE "api_keys" ADD COLUMN "send_caps" JSONB;
