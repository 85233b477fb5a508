-- Each status column takes only the values of its vocabulary (packages/schemas/src/statuses.ts; which column
-- holds which list: packages/core/src/shared/statuses.ts). The lists include every value the code has ever
-- written, so existing rows pass. Changing a vocabulary means a migration that drops and re-adds the column's
-- constraint; tests/e2e/status-vocabularies.test.ts compares these lists with the TypeScript arrays.
ALTER TABLE "accounts" ADD CONSTRAINT "accounts_status_check" CHECK ("status" IN ('active', 'closing'));
ALTER TABLE "signup_intents" ADD CONSTRAINT "signup_intents_status_check" CHECK ("status" IN ('pending', 'completed'));
ALTER TABLE "domains" ADD CONSTRAINT "domains_status_check" CHECK ("status" IN ('active', 'pending_dns', 'pending_delegation', 'expired', 'retiring', 'retired', 'closed'));
ALTER TABLE "messages" ADD CONSTRAINT "messages_status_check" CHECK ("status" IN ('scheduled', 'cancelled', 'queued', 'suppressed', 'delivered', 'partially_delivered', 'bounced', 'failed', 'received'));
ALTER TABLE "deliveries" ADD CONSTRAINT "deliveries_status_check" CHECK ("status" IN ('scheduled', 'queued', 'bulk', 'deferred', 'delivered', 'bounced', 'failed', 'cancelled'));
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_status_check" CHECK ("status" IN ('delivered', 'retrying', 'failed'));
ALTER TABLE "support_questions" ADD CONSTRAINT "support_questions_status_check" CHECK ("status" IN ('open', 'answered'));
ALTER TABLE "feature_requests" ADD CONSTRAINT "feature_requests_status_check" CHECK ("status" IN ('open', 'shipped'));
ALTER TABLE "payments" ADD CONSTRAINT "payments_status_check" CHECK ("status" IN ('requires_approval', 'pending_approval', 'approved', 'succeeded', 'denied', 'expired', 'failed'));
ALTER TABLE "notices" ADD CONSTRAINT "notices_status_check" CHECK ("status" IN ('pending', 'sent', 'failed'));
ALTER TABLE "account_close_requests" ADD CONSTRAINT "account_close_requests_status_check" CHECK ("status" IN ('pending', 'approved', 'denied', 'expired', 'replaced'));
ALTER TABLE "account_exports" ADD CONSTRAINT "account_exports_status_check" CHECK ("status" IN ('building', 'ready', 'failed'));
ALTER TABLE "domain_registrations" ADD CONSTRAINT "domain_registrations_status_check" CHECK ("status" IN ('active', 'held_for_transfer'));
ALTER TABLE "box_forwards" ADD CONSTRAINT "box_forwards_status_check" CHECK ("status" IN ('pending_confirmation', 'active', 'stopped'));
ALTER TABLE "forward_runs" ADD CONSTRAINT "forward_runs_status_check" CHECK ("status" IN ('pending', 'sent', 'skipped'));
ALTER TABLE "bulk_jobs" ADD CONSTRAINT "bulk_jobs_status_check" CHECK ("status" IN ('queued', 'sending', 'cooling_off', 'halted', 'completed', 'cancelled'));
ALTER TABLE "sending_ips" ADD CONSTRAINT "sending_ips_mode_check" CHECK ("mode" IN ('live', 'simulated'));
