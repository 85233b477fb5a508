/**
 * The vocabulary of every status column (and of sending_ips.mode): one `as const` array and its union each.
 *
 * They live here rather than in packages/core or packages/db because the public API shows several of them
 * (a domain's, a forward's, a bulk job's, a webhook delivery's status...) and its z.enum must be the same list:
 * this package is free of server dependencies, so the API schemas, the SDK and packages/core can all import it.
 * The database holds each list as a CHECK constraint on its column (packages/core/src/shared/statuses.ts maps
 * columns to lists; tests/e2e/status-vocabularies.test.ts reads the constraints back and compares), so a value
 * added here needs a migration that replaces that column's constraint, and a misspelt status fails tsc.
 */

/** accounts.status: closing from DELETE /account until the data is deleted for good (the row goes then). */
export const ACCOUNT_STATUSES = ['active', 'closing'] as const;
export type AccountStatus = (typeof ACCOUNT_STATUSES)[number];

/** signup_intents.status: completed once its account exists. */
export const SIGNUP_INTENT_STATUSES = ['pending', 'completed'] as const;
export type SignupIntentStatus = (typeof SIGNUP_INTENT_STATUSES)[number];

/**
 * domains.status. expired: a pending claim not proven in time; retiring: the account moved to another domain
 * (mail to it is still delivered until grace_until), then retired; closed: its account closed.
 */
export const DOMAIN_STATUSES = ['active', 'pending_dns', 'pending_delegation', 'expired', 'retiring', 'retired', 'closed'] as const;
export type DomainStatus = (typeof DOMAIN_STATUSES)[number];
/** What the API shows of a domain: a closed account's domains are never served. */
export const PUBLIC_DOMAIN_STATUSES = [
  'active',
  'pending_dns',
  'pending_delegation',
  'expired',
  'retiring',
  'retired',
] as const satisfies readonly DomainStatus[];
export type PublicDomainStatus = (typeof PUBLIC_DOMAIN_STATUSES)[number];

/**
 * messages.status. Sent: scheduled (waits for send_at) | cancelled | queued | suppressed (no recipient left),
 * then, once every delivery is final, delivered | partially_delivered | bounced | failed. Received: received.
 */
export const MESSAGE_STATUSES = [
  'scheduled',
  'cancelled',
  'queued',
  'suppressed',
  'delivered',
  'partially_delivered',
  'bounced',
  'failed',
  'received',
] as const;
export type MessageStatus = (typeof MESSAGE_STATUSES)[number];

/**
 * deliveries.status. scheduled: its message waits for send_at; bulk: a remote delivery of a bulk job's batch,
 * sent by the job rather than the delivery queue. delivered, bounced and failed are final.
 */
export const DELIVERY_STATUSES = ['scheduled', 'queued', 'bulk', 'deferred', 'delivered', 'bounced', 'failed', 'cancelled'] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];
/** The states a delivery never leaves. */
export const FINAL_DELIVERY_STATUSES = ['delivered', 'bounced', 'failed'] as const satisfies readonly DeliveryStatus[];

/** webhook_deliveries.status: one row per attempt. */
export const WEBHOOK_DELIVERY_STATUSES = ['delivered', 'retrying', 'failed'] as const;
export type WebhookDeliveryStatus = (typeof WEBHOOK_DELIVERY_STATUSES)[number];

/** support_questions.status: open (waiting for an operator) | answered (an operator replied last). */
export const SUPPORT_QUESTION_STATUSES = ['open', 'answered'] as const;
export type SupportQuestionStatus = (typeof SUPPORT_QUESTION_STATUSES)[number];

/** feature_requests.status. */
export const FEATURE_REQUEST_STATUSES = ['open', 'shipped'] as const;
export type FeatureRequestStatus = (typeof FEATURE_REQUEST_STATUSES)[number];

/**
 * payments.status. Card top-ups and signups: requires_approval, then succeeded | denied | expired | failed.
 * MPP: pending_approval, approved (the token attaching), then succeeded | denied | expired | failed.
 */
export const PAYMENT_STATUSES = ['requires_approval', 'pending_approval', 'approved', 'succeeded', 'denied', 'expired', 'failed'] as const;
export type PaymentStatus = (typeof PAYMENT_STATUSES)[number];

/** notices.status: the outbox of the service's own mail. */
export const NOTICE_STATUSES = ['pending', 'sent', 'failed'] as const;
export type NoticeStatus = (typeof NOTICE_STATUSES)[number];

/** account_close_requests.status: replaced by a newer request, or by the account closing otherwise. */
export const CLOSE_REQUEST_STATUSES = ['pending', 'approved', 'denied', 'expired', 'replaced'] as const;
export type CloseRequestStatus = (typeof CLOSE_REQUEST_STATUSES)[number];

/** account_exports.status. */
export const EXPORT_STATUSES = ['building', 'ready', 'failed'] as const;
export type ExportStatus = (typeof EXPORT_STATUSES)[number];

/** domain_registrations.status: held_for_transfer once the account closed (the auth code lets it move). */
export const DOMAIN_REGISTRATION_STATUSES = ['active', 'held_for_transfer'] as const;
export type DomainRegistrationStatus = (typeof DOMAIN_REGISTRATION_STATUSES)[number];

/** box_forwards.status: stopped is for good (stop_reason says why). */
export const FORWARD_STATUSES = ['pending_confirmation', 'active', 'stopped'] as const;
export type ForwardStatus = (typeof FORWARD_STATUSES)[number];

/** forward_runs.status: skipped carries its reason. */
export const FORWARD_RUN_STATUSES = ['pending', 'sent', 'skipped'] as const;
export type ForwardRunStatus = (typeof FORWARD_RUN_STATUSES)[number];

/** bulk_jobs.status. halted, completed and cancelled are final. */
export const BULK_STATUSES = ['queued', 'sending', 'cooling_off', 'halted', 'completed', 'cancelled'] as const;
export type BulkStatus = (typeof BULK_STATUSES)[number];
/** A job still going: it may send a batch. */
export const RUNNING_BULK_STATUSES = ['queued', 'sending', 'cooling_off'] as const satisfies readonly BulkStatus[];
export const FINAL_BULK_STATUSES = ['halted', 'completed', 'cancelled'] as const satisfies readonly BulkStatus[];

/**
 * sending_ips.mode: live binds outbound SMTP to the address; simulated routes nothing. (A sending IP's status,
 * provisioning | warming | active, is not stored: it follows from warmup_started_at and the warm-up schedule.)
 */
export const SENDING_IP_MODES = ['live', 'simulated'] as const;
export type SendingIpMode = (typeof SENDING_IP_MODES)[number];
export const SENDING_IP_STATUSES = ['provisioning', 'warming', 'active'] as const;
export type SendingIpStatus = (typeof SENDING_IP_STATUSES)[number];

/** boxes.review and api_keys.review: which sends wait for the owner's review (the stricter of box and key applies). */
export const REVIEW_POLICIES = ['none', 'new_recipients', 'all'] as const;
export type ReviewPolicy = (typeof REVIEW_POLICIES)[number];

/** send_reviews.status: pending until the owner approves or denies, it expires, or the agent withdraws it. */
export const REVIEW_STATUSES = ['pending', 'approved', 'denied', 'expired', 'withdrawn'] as const;
export type ReviewStatus = (typeof REVIEW_STATUSES)[number];

/** send_reviews.reason: the policy that held the send. */
export const REVIEW_REASONS = ['new_recipients', 'all'] as const;
export type ReviewReason = (typeof REVIEW_REASONS)[number];

/** Whether value is one of vocabulary (narrows a string read from the database or a request). */
export function isOneOf<const V extends readonly string[]>(vocabulary: V, value: string): value is V[number] {
  return (vocabulary as readonly string[]).includes(value);
}
