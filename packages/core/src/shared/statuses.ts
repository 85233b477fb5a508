/**
 * The status columns and their vocabularies on the database side. The lists themselves are in
 * packages/schemas (statuses.ts), because the public API shows several of them; here is which column holds
 * which list (each column has a CHECK constraint with exactly that list: tests/e2e/status-vocabularies.test.ts
 * compares them), the narrowing of a value read from a column, and the SQL form of a typed list.
 *
 * Prisma types these columns as string: code narrows once where it reads a row (narrowStatus), and writes
 * literals as `'queued' satisfies DeliveryStatus`, so a misspelt status is a compile error, not a row the
 * database refuses at run time.
 */
import { type RawBuilder, sql } from '@boxes/db';
import {
  ACCOUNT_STATUSES,
  ATTACHMENT_TEXT_STATUSES,
  BULK_STATUSES,
  CLOSE_REQUEST_STATUSES,
  DELIVERY_STATUSES,
  DOMAIN_REGISTRATION_STATUSES,
  DOMAIN_STATUSES,
  EXPORT_STATUSES,
  FEATURE_REQUEST_STATUSES,
  FORWARD_RUN_STATUSES,
  FORWARD_STATUSES,
  isOneOf,
  MESSAGE_STATUSES,
  NOTICE_STATUSES,
  PAYMENT_STATUSES,
  REVIEW_POLICIES,
  REVIEW_REASONS,
  REVIEW_STATUSES,
  SENDING_IP_MODES,
  SIGNUP_INTENT_STATUSES,
  SUPPORT_QUESTION_STATUSES,
  WEBHOOK_DELIVERY_STATUSES,
} from '@boxes/schemas';

/** "table.column" to its vocabulary: every column here has a CHECK (column IN (...)) with that list. */
export const STATUS_COLUMNS = {
  'accounts.status': ACCOUNT_STATUSES,
  'signup_intents.status': SIGNUP_INTENT_STATUSES,
  'domains.status': DOMAIN_STATUSES,
  'messages.status': MESSAGE_STATUSES,
  'deliveries.status': DELIVERY_STATUSES,
  'webhook_deliveries.status': WEBHOOK_DELIVERY_STATUSES,
  'support_questions.status': SUPPORT_QUESTION_STATUSES,
  'feature_requests.status': FEATURE_REQUEST_STATUSES,
  'payments.status': PAYMENT_STATUSES,
  'notices.status': NOTICE_STATUSES,
  'account_close_requests.status': CLOSE_REQUEST_STATUSES,
  'account_exports.status': EXPORT_STATUSES,
  'domain_registrations.status': DOMAIN_REGISTRATION_STATUSES,
  'box_forwards.status': FORWARD_STATUSES,
  'forward_runs.status': FORWARD_RUN_STATUSES,
  'bulk_jobs.status': BULK_STATUSES,
  'sending_ips.mode': SENDING_IP_MODES,
  'message_attachments.text_status': ATTACHMENT_TEXT_STATUSES,
  'boxes.review': REVIEW_POLICIES,
  'api_keys.review': REVIEW_POLICIES,
  'send_reviews.status': REVIEW_STATUSES,
  'send_reviews.reason': REVIEW_REASONS,
} as const satisfies Record<string, readonly string[]>;

/**
 * A status read from the database, as its union. The column's CHECK rules anything else out, so a value
 * outside the list means the list and the database disagree: an error, not a value to pass on.
 */
export function narrowStatus<const V extends readonly string[]>(vocabulary: V, value: string): V[number] {
  if (!isOneOf(vocabulary, value)) throw new Error(`unknown status '${value}' (expected one of ${vocabulary.join(', ')})`);
  return value;
}

/** A status as an SQL literal; refused unless it is a value of vocabulary (only [a-z_], so quoting is safe). */
function literal(vocabulary: readonly string[], value: string): string {
  if (!isOneOf(vocabulary, value) || !/^[a-z_]+$/.test(value)) throw new Error(`'${value}' is not a status of ${vocabulary.join(', ')}`);
  return `'${value}'`;
}

/** The unions, for the apps that take their types from packages/core only. */
export type {
  AccountStatus,
  BulkStatus,
  CloseRequestStatus,
  DeliveryStatus,
  DomainRegistrationStatus,
  DomainStatus,
  ExportStatus,
  FeatureRequestStatus,
  ForwardRunStatus,
  ForwardStatus,
  MessageStatus,
  NoticeStatus,
  PaymentStatus,
  SendingIpMode,
  SendingIpStatus,
  SignupIntentStatus,
  SupportQuestionStatus,
  WebhookDeliveryStatus,
} from '@boxes/schemas';

/**
 * One status as an SQL literal in a typed (Kysely) statement: `.where('status', '=', statusLit(DELIVERY_STATUSES,
 * 'queued'))`. tsc checks the value; the statement keeps a constant, as if written inline.
 */
export function statusLit<const V extends readonly string[]>(vocabulary: V, value: V[number]): RawBuilder<V[number]> {
  literal(vocabulary, value);
  return sql.lit(value);
}

/** Some statuses as a parenthesised list of literals in a typed statement: sql`${ref} IN ${statusIn(...)}`. */
export function statusIn<const V extends readonly string[]>(vocabulary: V, values: readonly V[number][]): RawBuilder<V[number]> {
  return sql`(${sql.join(values.map((v) => statusLit(vocabulary, v)))})`;
}
