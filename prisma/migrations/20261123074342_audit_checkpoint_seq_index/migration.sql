-- CreateIndex
CREATE INDEX "audit_checkpoints_account_id_seq_idx" ON "audit_checkpoints"("account_id", "seq");
