/**
 * AppError is the one error type core throws. Its code decides the HTTP status (REST) and the tRPC code; the
 * table below is the only place that mapping lives.
 */
export const ERROR_CODES = {
  bad_request: { status: 400, trpc: 'BAD_REQUEST' },
  validation_error: { status: 400, trpc: 'BAD_REQUEST' },
  invalid_json: { status: 400, trpc: 'PARSE_ERROR' },
  invalid_cursor: { status: 400, trpc: 'BAD_REQUEST' },
  /** A label that is no IMAP keyword atom (or $Junk, which is spelt spam). */
  invalid_label: { status: 400, trpc: 'BAD_REQUEST' },
  /** sent: a label that says where a message came from, not one to add or remove. */
  label_read_only: { status: 400, trpc: 'BAD_REQUEST' },
  /** The same label (or read and unread) both added and removed. */
  label_conflict: { status: 400, trpc: 'BAD_REQUEST' },
  too_many_labels: { status: 400, trpc: 'BAD_REQUEST' },
  unauthorized: { status: 401, trpc: 'UNAUTHORIZED' },
  /** The API key's expires_at has passed. */
  key_expired: { status: 401, trpc: 'UNAUTHORIZED' },
  /** A key with expires_at cannot mint a key that expires later (or never). */
  key_outlives_parent: { status: 400, trpc: 'BAD_REQUEST' },
  payment_required: { status: 402, trpc: 'PAYMENT_REQUIRED' },
  card_declined: { status: 402, trpc: 'PAYMENT_REQUIRED' },
  wallet_not_enrolled: { status: 402, trpc: 'PAYMENT_REQUIRED' },
  mpp_challenge_expired: { status: 402, trpc: 'PAYMENT_REQUIRED' },
  forbidden: { status: 403, trpc: 'FORBIDDEN' },
  insufficient_scope: { status: 403, trpc: 'FORBIDDEN' },
  box_restricted_key: { status: 403, trpc: 'FORBIDDEN' },
  /** A signed URL whose signature does not match what it names (changed, or not made here). */
  invalid_signature: { status: 403, trpc: 'FORBIDDEN' },
  owner_key_protected: { status: 403, trpc: 'FORBIDDEN' },
  from_domain_mismatch: { status: 403, trpc: 'FORBIDDEN' },
  domain_not_verified: { status: 403, trpc: 'FORBIDDEN' },
  dns_record_reserved: { status: 403, trpc: 'FORBIDDEN' },
  recipient_blocked: { status: 403, trpc: 'FORBIDDEN' },
  /** The account is paused (by its owner or an admin key): no send is accepted until it is resumed. */
  account_paused: { status: 403, trpc: 'FORBIDDEN' },
  /** The sending box is paused. */
  box_paused: { status: 403, trpc: 'FORBIDDEN' },
  /** The pause was set by the owner on the owner pages: only the owner lifts it. */
  paused_by_owner: { status: 403, trpc: 'FORBIDDEN' },
  /** A bulk job from a box (or with a key) whose sends wait for the owner's review. */
  review_required: { status: 403, trpc: 'FORBIDDEN' },
  not_found: { status: 404, trpc: 'NOT_FOUND' },
  method_not_allowed: { status: 405, trpc: 'METHOD_NOT_SUPPORTED' },
  conflict: { status: 409, trpc: 'CONFLICT' },
  domain_taken: { status: 409, trpc: 'CONFLICT' },
  box_exists: { status: 409, trpc: 'CONFLICT' },
  primary_box: { status: 409, trpc: 'CONFLICT' },
  intent_already_confirmed: { status: 409, trpc: 'CONFLICT' },
  idempotency_key_reused: { status: 409, trpc: 'CONFLICT' },
  already_voted: { status: 409, trpc: 'CONFLICT' },
  funded_signup: { status: 409, trpc: 'CONFLICT' },
  payment_not_pending: { status: 409, trpc: 'CONFLICT' },
  dns_not_managed: { status: 409, trpc: 'CONFLICT' },
  dns_record_exists: { status: 409, trpc: 'CONFLICT' },
  sending_ip_exists: { status: 409, trpc: 'CONFLICT' },
  sending_ip_unavailable: { status: 409, trpc: 'CONFLICT' },
  forward_exists: { status: 409, trpc: 'CONFLICT' },
  /** The account's bulk jobs still running are as many as the instance runs at once (not a rate: no wait to tell). */
  too_many_bulk_jobs: { status: 409, trpc: 'CONFLICT' },
  link_used: { status: 410, trpc: 'NOT_FOUND' },
  link_expired: { status: 410, trpc: 'NOT_FOUND' },
  /** The message body (and its attachments) was reclaimed: DELETE /messages/{id} or the retention window. */
  body_reclaimed: { status: 410, trpc: 'NOT_FOUND' },
  mcp_disabled: { status: 403, trpc: 'FORBIDDEN' },
  intent_expired: { status: 410, trpc: 'NOT_FOUND' },
  domain_claim_expired: { status: 410, trpc: 'NOT_FOUND' },
  request_timeout: { status: 408, trpc: 'TIMEOUT' },
  payload_too_large: { status: 413, trpc: 'PAYLOAD_TOO_LARGE' },
  unsupported_media_type: { status: 415, trpc: 'UNSUPPORTED_MEDIA_TYPE' },
  rate_limited: { status: 429, trpc: 'TOO_MANY_REQUESTS' },
  /** A send cap of the box or the key is used up for its window (details.cap names it, retry_after_seconds). */
  cap_exceeded: { status: 429, trpc: 'TOO_MANY_REQUESTS' },
  headers_too_large: { status: 431, trpc: 'BAD_REQUEST' },
  internal: { status: 500, trpc: 'INTERNAL_SERVER_ERROR' },
  not_implemented: { status: 501, trpc: 'NOT_IMPLEMENTED' },
  service_unavailable: { status: 503, trpc: 'SERVICE_UNAVAILABLE' },
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;
export type ErrorDetails = Record<string, unknown>;

export class AppError extends Error {
  override name = 'AppError';
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details: ErrorDetails = {},
  ) {
    super(message);
  }
  get status(): number {
    return ERROR_CODES[this.code].status;
  }
}

export const notFound = (what: string, id: string): AppError => new AppError('not_found', `${what} ${id} not found`);

/** 400 validation_error naming one field (the message starts with its path, as zod's errors do). */
export const invalidField = (path: string, message: string, details: ErrorDetails = {}): AppError =>
  new AppError('validation_error', `${path}: ${message}`, { fields: [{ path, message }], ...details });

/**
 * A unique-constraint violation, from a Prisma model query (P2002), a raw query (P2010 carrying PostgreSQL's
 * 23505) or a statement on the pg pool (pg's DatabaseError with code 23505, whatever the server's language).
 */
export function isUniqueViolation(err: unknown): boolean {
  const e = err as { code?: string; meta?: { code?: string } } | null;
  if (!e || typeof e !== 'object') return false;
  return (
    e.code === 'P2002' ||
    e.code === '23505' ||
    (e.code === 'P2010' && e.meta?.code === '23505') ||
    /\b23505\b|unique constraint/i.test(String((err as Error).message ?? ''))
  );
}
