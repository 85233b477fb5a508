/**
 * @boxes/sdk: the typed client for TypeScript agents. createBoxesClient gives every procedure of the router
 * with its input and output types (client.boxes.create.mutate({ address }), client.events.list.query({})),
 * over tRPC at <site>/trpc. signup(), confirmSignup() and claimSignup() need no key. Errors are BoxesError with the same
 * code, status and request_id the REST API returns.
 */
import { createTRPCClient, httpLink, TRPCClientError, type TRPCClient, type TRPCLink } from '@trpc/client';
import { observable } from '@trpc/server/observable';
import type { AppRouter } from './router-type';
import type { inferRouterInputs, inferRouterOutputs } from '@trpc/server';

export type { AppRouter };
export { verifyWebhook, WebhookVerificationError, type VerifyWebhookOptions } from './webhooks';
export type BoxesInputs = inferRouterInputs<AppRouter>;
export type BoxesOutputs = inferRouterOutputs<AppRouter>;
/**
 * One event of the account stream (GET /events, streamEvents, webhooks, MQTT): a union discriminated on type, so
 * `if (e.type === 'mail.received') e.data.message.subject` is typed, and a misspelt field does not compile.
 */
export type BoxesEvent = BoxesOutputs['events']['list']['events'][number];
/** The event types of the catalogue. */
export type BoxesEventType = BoxesEvent['type'];
/** The data of one event type: BoxesEventData<'mail.received'>. */
export type BoxesEventData<T extends BoxesEventType> = Extract<BoxesEvent, { type: T }>['data'];

export interface BoxesClientOptions {
  /** The site (http://localhost:3000) or the API base (http://localhost:3000/api/v1); either works. */
  baseUrl: string;
  /** A bxs_live_ key. Omit only for signup calls. */
  apiKey?: string;
  /** A fetch implementation (defaults to the global one). */
  fetch?: typeof fetch;
}

interface BoxesErrorData {
  boxes?: { code: string; status: number; request_id: string; details: Record<string, unknown> } | null;
  httpStatus?: number;
}

/** An error answered by Boxes: code (e.g. insufficient_scope), HTTP status, request_id and details. */
export class BoxesError extends TRPCClientError<AppRouter> {
  override name = 'BoxesError';
  readonly code: string;
  readonly status: number;
  readonly requestId: string | null;
  readonly details: Record<string, unknown>;

  constructor(cause: TRPCClientError<AppRouter>) {
    super(cause.message, { cause, result: cause.shape ? { error: cause.shape } : undefined, meta: cause.meta });
    // TRPCClientError's constructor resets the prototype to its own; restore ours so instanceof works.
    Object.setPrototypeOf(this, new.target.prototype);
    const data = (cause.data ?? {}) as BoxesErrorData;
    this.code = data.boxes?.code ?? (data.httpStatus ? `http_${data.httpStatus}` : 'network_error');
    this.status = data.boxes?.status ?? data.httpStatus ?? 0;
    this.requestId = data.boxes?.request_id ?? null;
    this.details = data.boxes?.details ?? {};
  }
}

export function siteUrlOf(baseUrl: string): string {
  return baseUrl.replace(/\/+$/, '').replace(/\/api\/v1$/, '');
}

/** Rewraps every error as BoxesError so callers can switch on err.code. */
const boxesErrors: TRPCLink<AppRouter> =
  () =>
  ({ next, op }) =>
    observable((observer) =>
      next(op).subscribe({
        next: (value) => observer.next(value),
        error: (err) => observer.error(err instanceof BoxesError ? err : new BoxesError(err)),
        complete: () => observer.complete(),
      }),
    );

/** The typed client: every procedure of the router with its input and output types. */
export type BoxesClient = TRPCClient<AppRouter>;

export function createBoxesClient(options: BoxesClientOptions): BoxesClient {
  return createTRPCClient<AppRouter>({
    links: [
      boxesErrors,
      httpLink({
        url: `${siteUrlOf(options.baseUrl)}/trpc`,
        ...(options.fetch ? { fetch: options.fetch } : {}),
        headers: () => (options.apiKey ? { authorization: `Bearer ${options.apiKey}` } : {}),
      }),
    ],
  });
}

/** POST /signup/agentic: starts a signup and returns the intent. */
export function signup(
  baseUrl: string,
  input: BoxesInputs['signup']['create'],
  opts: { fetch?: typeof fetch } = {},
): Promise<BoxesOutputs['signup']['create']> {
  return createBoxesClient({ baseUrl, ...opts }).signup.create.mutate(input);
}

/** POST /signup/agentic/confirm: provisions the account; the api_key in the result is shown only once. */
export function confirmSignup(
  baseUrl: string,
  input: BoxesInputs['signup']['confirm'],
  opts: { fetch?: typeof fetch } = {},
): Promise<BoxesOutputs['signup']['confirm']> {
  return createBoxesClient({ baseUrl, ...opts }).signup.confirm.mutate(input);
}

/**
 * POST /signup/agentic/claim: a funded or register signup (no confirm call). Answers pending_payment until the
 * owner pays, then completed with account.api_key, exactly once. waitForClaim() polls it for you.
 */
export function claimSignup(
  baseUrl: string,
  input: BoxesInputs['signup']['claim'],
  opts: { fetch?: typeof fetch } = {},
): Promise<BoxesOutputs['signup']['claim']> {
  return createBoxesClient({ baseUrl, ...opts }).signup.claim.mutate(input);
}

/**
 * Polls POST /signup/agentic/claim every retry_after_seconds while the signup is pending_payment or
 * delivering_to_callback (or until timeoutMs passes): completed carries account.api_key; payment_denied,
 * payment_failed and expired are final. A claim after the callback got the key is 409 (BoxesError).
 */
export async function waitForClaim(
  baseUrl: string,
  input: BoxesInputs['signup']['claim'],
  opts: { fetch?: typeof fetch; timeoutMs?: number; signal?: AbortSignal } = {},
): Promise<BoxesOutputs['signup']['claim']> {
  const deadline = Date.now() + (opts.timeoutMs ?? 15 * 60_000);
  for (;;) {
    const r = await claimSignup(baseUrl, input, opts.fetch ? { fetch: opts.fetch } : {});
    if ((r.status !== 'pending_payment' && r.status !== 'delivering_to_callback') || Date.now() >= deadline) return r;
    const wait = Math.min((r.retry_after_seconds ?? 5) * 1000, Math.max(0, deadline - Date.now()));
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(resolve, wait);
      opts.signal?.addEventListener(
        'abort',
        () => {
          clearTimeout(timer);
          reject(opts.signal!.reason);
        },
        { once: true },
      );
    });
    opts.signal?.throwIfAborted();
  }
}

export type PaymentStatus = BoxesOutputs['credit']['mppStatus'];

/**
 * The MPP top-up's final step: waits while the owner decides and the shared payment token attaches, and
 * returns the payment once it is final (succeeded or denied). An expired challenge or a declined card
 * throws BoxesError (status 402, code mpp_challenge_expired or card_declined with details.decline_code).
 */
export async function waitForMppTopup(client: BoxesClient, challengeId: string, opts: { timeoutMs?: number } = {}): Promise<PaymentStatus> {
  const end = Date.now() + (opts.timeoutMs ?? 16 * 60_000);
  for (;;) {
    const left = Math.ceil((end - Date.now()) / 1000);
    const p = await client.credit.mppStatus.query({ id: challengeId, wait_seconds: Math.max(0, Math.min(25, left)) });
    if (!['pending_approval', 'approved'].includes(p.status) || Date.now() >= end) return p;
  }
}

/** Starts an MPP top-up and waits for it to finish (see waitForMppTopup); onChallenge sees the challenge first. */
export async function topUpWithMpp(
  client: BoxesClient,
  amountCents: number,
  opts: { timeoutMs?: number; onChallenge?: (challenge: BoxesOutputs['credit']['mpp']) => void } = {},
): Promise<PaymentStatus> {
  const challenge = await client.credit.mpp.mutate({ amount_cents: amountCents });
  opts.onChallenge?.(challenge);
  return waitForMppTopup(client, challenge.challenge_id, opts);
}
export { streamEvents, BoxesStreamError, type StreamEventsOptions } from './event-stream';

export type AttachmentInfo = BoxesOutputs['messages']['attachment'];
export type AttachmentText = BoxesOutputs['messages']['attachmentText'];

/**
 * GET /messages/{id}/attachments/{attachment_id}: the attachment's metadata and a signed download_url (no key
 * needed, valid 10 minutes).
 */
export function attachmentUrl(client: BoxesClient, messageId: string, attachmentId: string): Promise<AttachmentInfo> {
  return client.messages.attachment.query({ id: messageId, attachment_id: attachmentId });
}

/** GET /messages/{id}/attachments/{attachment_id}/text: the extracted text and its text_status. */
export function attachmentText(client: BoxesClient, messageId: string, attachmentId: string): Promise<AttachmentText> {
  return client.messages.attachmentText.query({ id: messageId, attachment_id: attachmentId });
}

/**
 * Polls the attachment's text until text_status leaves pending (ready, too_large, unsupported or failed) or
 * timeoutMs passes; the event attachment.text_ready says the same without polling.
 */
export async function waitForAttachmentText(
  client: BoxesClient,
  messageId: string,
  attachmentId: string,
  opts: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<AttachmentText> {
  const end = Date.now() + (opts.timeoutMs ?? 60_000);
  for (;;) {
    const t = await attachmentText(client, messageId, attachmentId);
    if (t.text_status !== 'pending' || Date.now() >= end) return t;
    await new Promise((resolve) => setTimeout(resolve, opts.intervalMs ?? 500));
  }
}

/**
 * Downloads an attachment's bytes: asks for a signed URL, then fetches it (the bytes never pass through JSON).
 * Throws BoxesError-like errors with the code the content route answers.
 */
export async function downloadAttachment(
  client: BoxesClient,
  messageId: string,
  attachmentId: string,
  opts: { fetch?: typeof fetch } = {},
): Promise<{ bytes: Uint8Array; contentType: string; filename: string | null; sha256: string }> {
  const info = await attachmentUrl(client, messageId, attachmentId);
  const res = await (opts.fetch ?? fetch)(info.download_url);
  if (!res.ok) {
    const body = (await res.json().catch(() => null)) as { error?: { code?: string; message?: string } } | null;
    throw Object.assign(new Error(body?.error?.message ?? `download failed with HTTP ${res.status}`), {
      code: body?.error?.code ?? `http_${res.status}`,
      status: res.status,
    });
  }
  return {
    bytes: new Uint8Array(await res.arrayBuffer()),
    contentType: res.headers.get('content-type') ?? info.content_type,
    filename: info.filename,
    sha256: info.sha256,
  };
}

/**
 * Webhook endpoints (client.webhookEndpoints.create / list / get / update / delete / rotateSecret / deliveries /
 * redeliver): the endpoint as read, and as created (with its signing_secret, shown only then). Verify their
 * deliveries with verifyWebhook and the endpoint's own secret.
 */
export type WebhookEndpoint = BoxesOutputs['webhookEndpoints']['get'];
export type WebhookEndpointCreated = BoxesOutputs['webhookEndpoints']['create'];
export type WebhookEndpointDelivery = BoxesOutputs['webhookEndpoints']['redeliver'];

/** A draft (client.drafts.create / get / update / list; client.drafts.send sends it through the send rules). */
export type Draft = BoxesOutputs['drafts']['get'];
/**
 * What sending a draft answers: a send's answer with draft_id (idempotent_replay: true when it was sent before), or
 * the Review when owner review holds it (isHeldForReview, sentMessage).
 */
export type DraftSendResult = BoxesOutputs['drafts']['send'];
/** A draft that went: the message's answer with draft_id. */
export type SentDraft = Exclude<DraftSendResult, Review>;

/** A send held for the owner's review (POST /messages/send answered 202): GET /reviews/{id}. */
export type Review = BoxesOutputs['reviews']['get'];
/** What messages.send and messages.reply answer: the queued message, or the Review when owner review holds it. */
export type SendResult = BoxesOutputs['messages']['send'];
/** A send that went: the queued (or scheduled, or suppressed) message. */
export type SentMessage = Exclude<SendResult, Review>;

/** Whether owner review held the send (nothing sent or charged until the owner approves). */
export function isHeldForReview<T extends object>(result: T | Review): result is Review {
  return 'expires_at' in result;
}

/**
 * The message of a send that went; throws (code held_for_review, details.review) when owner review held it, for
 * code that sends only from boxes and keys without a review policy.
 */
export function sentMessage<T extends object = SentMessage>(result: T | Review): Exclude<T, Review> {
  if (!isHeldForReview(result)) return result as Exclude<T, Review>;
  throw Object.assign(new Error(`the send is held for the owner's review (${result.id}); nothing was sent yet`), {
    code: 'held_for_review',
    status: 202,
    details: { review: result },
  });
}

/**
 * Polls GET /reviews/{id} until the owner decides (approved: message_id is the sent message; denied), it expires
 * or is withdrawn, or timeoutMs passes (default 10 minutes; the review itself waits up to REVIEW_TTL_HOURS).
 */
export async function waitForReview(client: BoxesClient, id: string, opts: { timeoutMs?: number; intervalMs?: number } = {}): Promise<Review> {
  const end = Date.now() + (opts.timeoutMs ?? 10 * 60_000);
  for (;;) {
    const r = await client.reviews.get.query({ id });
    if (r.status !== 'pending' || Date.now() >= end) return r;
    await new Promise((resolve) => setTimeout(resolve, opts.intervalMs ?? 2000));
  }
}
