-- AlterTable
ALTER TABLE "accounts" ADD COLUMN     "alert_first_micros" BIGINT,
ADD COLUMN     "alert_second_micros" BIGINT,
ADD COLUMN     "deficit_since" TIMESTAMPTZ(3),
ADD COLUMN     "payer_customer_id" TEXT,
ADD COLUMN     "payer_email" TEXT,
ADD COLUMN     "storage_billed_through" DATE,
ADD COLUMN     "trailer_opted_out_at" TIMESTAMPTZ(3),
ADD COLUMN     "trailer_paid_micros" BIGINT NOT NULL DEFAULT 0;

-- AlterTable
ALTER TABLE "deliveries" ADD COLUMN     "attachment_micros" BIGINT NOT NULL DEFAULT 0,
ADD COLUMN     "surcharge_micros" BIGINT NOT NULL DEFAULT 0;

-- AlterTable
ALTER TABLE "ledger_entries" ADD COLUMN     "description" TEXT,
ADD COLUMN     "idempotency_key" TEXT,
ADD COLUMN     "payment_id" TEXT,
ADD COLUMN     "quantity" BIGINT;

-- CreateTable
CREATE TABLE "payments" (
    "id" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "account_id" TEXT,
    "signup_intent_id" TEXT,
    "owner_email" TEXT NOT NULL,
    "amount_cents" INTEGER NOT NULL,
    "status" TEXT NOT NULL,
    "provider" TEXT NOT NULL DEFAULT 'local',
    "client_secret_hash" TEXT,
    "paid_via" TEXT,
    "decline_code" TEXT,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "decided_at" TIMESTAMPTZ(3),
    "settled_at" TIMESTAMPTZ(3),
    "spend_request_id" TEXT,
    "payer_email" TEXT,
    "token_due_at" TIMESTAMPTZ(3),
    "shared_payment_token" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "payments_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "wallets" (
    "id" TEXT NOT NULL,
    "owner_email" TEXT NOT NULL,
    "card_brand" TEXT,
    "card_last4" TEXT,
    "card_exp" TEXT,
    "card_ref" TEXT,
    "mandate_per_topup_cents" INTEGER,
    "mandate_per_30d_cents" INTEGER,
    "mandate_accepted_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "wallets_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "simulated_cards" (
    "ref" TEXT NOT NULL,
    "outcome" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "simulated_cards_pkey" PRIMARY KEY ("ref")
);

-- CreateTable
CREATE TABLE "owner_links" (
    "id" TEXT NOT NULL,
    "token_hash" TEXT NOT NULL,
    "owner_email" TEXT NOT NULL,
    "purpose" TEXT NOT NULL,
    "payment_id" TEXT,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "used_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "owner_links_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "owner_sessions" (
    "id" TEXT NOT NULL,
    "token_hash" TEXT NOT NULL,
    "owner_email" TEXT NOT NULL,
    "form_token" TEXT NOT NULL,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "owner_sessions_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "notices" (
    "id" TEXT NOT NULL,
    "account_id" TEXT,
    "kind" TEXT NOT NULL,
    "to" TEXT NOT NULL,
    "subject" TEXT NOT NULL,
    "text" TEXT NOT NULL,
    "status" TEXT NOT NULL DEFAULT 'pending',
    "attempts" INTEGER NOT NULL DEFAULT 0,
    "last_error" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "sent_at" TIMESTAMPTZ(3),

    CONSTRAINT "notices_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "dns_query_counts" (
    "domain_id" TEXT NOT NULL,
    "month" TEXT NOT NULL,
    "queries" BIGINT NOT NULL DEFAULT 0,

    CONSTRAINT "dns_query_counts_pkey" PRIMARY KEY ("domain_id","month")
);

-- CreateIndex
CREATE UNIQUE INDEX "payments_signup_intent_id_key" ON "payments"("signup_intent_id");

-- CreateIndex
CREATE UNIQUE INDEX "payments_spend_request_id_key" ON "payments"("spend_request_id");

-- CreateIndex
CREATE INDEX "payments_account_id_created_at_idx" ON "payments"("account_id", "created_at");

-- CreateIndex
CREATE INDEX "payments_owner_email_created_at_idx" ON "payments"("owner_email", "created_at");

-- CreateIndex
CREATE INDEX "payments_status_token_due_at_idx" ON "payments"("status", "token_due_at");

-- CreateIndex
CREATE UNIQUE INDEX "wallets_owner_email_key" ON "wallets"("owner_email");

-- CreateIndex
CREATE UNIQUE INDEX "owner_links_token_hash_key" ON "owner_links"("token_hash");

-- CreateIndex
CREATE UNIQUE INDEX "owner_sessions_token_hash_key" ON "owner_sessions"("token_hash");

-- CreateIndex
CREATE INDEX "notices_status_created_at_idx" ON "notices"("status", "created_at");

-- CreateIndex
CREATE UNIQUE INDEX "ledger_entries_idempotency_key_key" ON "ledger_entries"("idempotency_key");

-- AddForeignKey
ALTER TABLE "payments" ADD CONSTRAINT "payments_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "payments" ADD CONSTRAINT "payments_signup_intent_id_fkey" FOREIGN KEY ("signup_intent_id") REFERENCES "signup_intents"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "notices" ADD CONSTRAINT "notices_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;
