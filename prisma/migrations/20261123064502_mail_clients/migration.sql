-- CreateTable
CREATE TABLE "app_passwords" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "label" TEXT NOT NULL,
    "box_id" TEXT,
    "lookup" TEXT NOT NULL,
    "hash" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "last_used_at" TIMESTAMPTZ(3),
    "revoked_at" TIMESTAMPTZ(3),

    CONSTRAINT "app_passwords_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "mail_folders" (
    "id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "box_id" TEXT NOT NULL,
    "role" TEXT NOT NULL,
    "uid_validity" INTEGER NOT NULL,
    "uid_next" INTEGER NOT NULL DEFAULT 1,
    "highest_modseq" BIGINT NOT NULL DEFAULT 1,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "mail_folders_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "mail_folder_entries" (
    "folder_id" TEXT NOT NULL,
    "uid" INTEGER NOT NULL,
    "message_id" TEXT NOT NULL,
    "deleted" BOOLEAN NOT NULL DEFAULT false,
    "modseq" BIGINT NOT NULL,

    CONSTRAINT "mail_folder_entries_pkey" PRIMARY KEY ("folder_id","uid")
);

-- CreateTable
CREATE TABLE "message_flags" (
    "message_id" TEXT NOT NULL,
    "account_id" TEXT NOT NULL,
    "flags" INTEGER NOT NULL DEFAULT 0,
    "keywords" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "message_flags_pkey" PRIMARY KEY ("message_id")
);

-- CreateTable
CREATE TABLE "mail_sync_state" (
    "account_id" TEXT NOT NULL,
    "seq" INTEGER NOT NULL DEFAULT 0,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "mail_sync_state_pkey" PRIMARY KEY ("account_id")
);

-- CreateIndex
CREATE INDEX "app_passwords_account_id_idx" ON "app_passwords"("account_id");

-- CreateIndex
CREATE INDEX "app_passwords_lookup_idx" ON "app_passwords"("lookup");

-- CreateIndex
CREATE INDEX "mail_folders_account_id_idx" ON "mail_folders"("account_id");

-- CreateIndex
CREATE UNIQUE INDEX "mail_folders_box_id_role_key" ON "mail_folders"("box_id", "role");

-- CreateIndex
CREATE INDEX "mail_folder_entries_message_id_idx" ON "mail_folder_entries"("message_id");

-- CreateIndex
CREATE INDEX "mail_folder_entries_folder_id_modseq_idx" ON "mail_folder_entries"("folder_id", "modseq");

-- CreateIndex
CREATE UNIQUE INDEX "mail_folder_entries_folder_id_message_id_key" ON "mail_folder_entries"("folder_id", "message_id");

-- CreateIndex
CREATE INDEX "accounts_human_email_idx" ON "accounts"("human_email");

-- AddForeignKey
ALTER TABLE "app_passwords" ADD CONSTRAINT "app_passwords_account_id_fkey" FOREIGN KEY ("account_id") REFERENCES "accounts"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "mail_folders" ADD CONSTRAINT "mail_folders_box_id_fkey" FOREIGN KEY ("box_id") REFERENCES "boxes"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "mail_folder_entries" ADD CONSTRAINT "mail_folder_entries_folder_id_fkey" FOREIGN KEY ("folder_id") REFERENCES "mail_folders"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "mail_folder_entries" ADD CONSTRAINT "mail_folder_entries_message_id_fkey" FOREIGN KEY ("message_id") REFERENCES "messages"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "message_flags" ADD CONSTRAINT "message_flags_message_id_fkey" FOREIGN KEY ("message_id") REFERENCES "messages"("id") ON DELETE CASCADE ON UPDATE CASCADE;
