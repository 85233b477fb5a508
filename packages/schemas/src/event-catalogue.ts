/**
 * The event catalogue: every event type an account's stream can hold, with the schema of its `data`. It is the
 * one source for appending (core accepts only these types and payloads), for the OpenAPI `Event` union and its
 * `webhooks`, for the SDK's types and MCP's output, and for the list of event types in docs/events.md.
 *
 * Stored events never change: each is hashed into its account's chain as it was written. So the schemas here
 * describe every payload a type has carried: a field added after a type first shipped is optional, and says
 * since when. Code that wants today's shape of an older event reads it through `upcastEvent` (event-upcast.ts),
 * the one place where older shapes are brought forward.
 *
 * Payload objects are open at run time (a reader keeps members it does not know, so the bytes it hashes are the
 * bytes that were stored) and exact in TypeScript (a misspelt field is a compile error for writers and readers).
 * The test suite checks every event it wrote against these schemas with nothing left over (undocumentedPaths).
 */
import { z } from 'zod';
import { Timestamp } from './common';
import { BoxOutput } from './boxes';
import { REVIEW_POLICIES, REVIEW_REASONS } from './statuses';
import { Authentication, BoxPolicy, ListEntry, SpamVerdict } from './trust';

/** An object schema that keeps unknown members at run time but is exact in TypeScript. */
function o<S extends z.ZodRawShape>(shape: S): z.ZodObject<S, z.core.$strip> {
  return z.looseObject(shape) as unknown as z.ZodObject<S, z.core.$strip>;
}

const d = (description: string) => ({ description });
const id = (prefix: string, description: string) => z.string().meta({ description, example: `${prefix}_0a1b2c3d4e5f6g7h8j9k` });
const byKey = z.string().nullable().meta(d('The API key that made the change (null when the service itself or an owner page did)'));
const usd = (description: string) => z.string().meta({ description: `${description}, in US dollars as a decimal string`, example: '0.0016' });
const cents = (description: string) =>
  z
    .number()
    .int()
    .meta({ description: `${description}, in integer cents`, example: 500 });
const address = (description: string) => z.string().meta({ description, example: 'agent@brave-otter.boxes.localhost' });
const addresses = (description: string) => z.array(z.string()).meta({ description, example: ['someone@example.com'] });
const messageId = id('msg', 'The message (GET /messages/{id})');
const context = z.record(z.string(), z.unknown()).nullable().meta(d('The context object of the send this mail answers (matched through In-Reply-To), or null'));

/** What every review.* event says of the held send. */
const ReviewFacts = {
  review_id: id('rev', 'The review (GET /reviews/{id})'),
  from: address('The sending box'),
  to: addresses('To addresses'),
  cc: addresses('Cc addresses'),
  subject: z.string().nullable().meta(d('The subject, or null')),
};

const DnsRecordToPublish = o({
  name: z.string().meta({ description: 'Owner name of the record', example: '_dmarc.example.com' }),
  type: z.string().meta({ description: 'Record type', example: 'TXT' }),
  ttl: z.number().int().meta(d('Suggested TTL in seconds')),
  values: z.array(z.string()).meta(d('The values to publish')),
  purpose: z.string().meta({ description: 'What the record is for', example: 'DMARC policy' }),
});

const BulkCounts = o({
  messages: z.number().int().meta(d('Messages in the batch or job')),
  delivered: z.number().int().meta(d('Recipients delivered')),
  bounced: z.number().int().meta(d('Recipients bounced')),
  deferred: z.number().int().meta(d('Recipients still being retried')),
  failed: z.number().int().meta(d('Recipients given up on')),
  pending: z.number().int().meta(d('Recipients not yet attempted')),
  suppressed: z.number().int().meta(d('Recipients skipped because they are on the suppression list')),
});

const BulkTotals = o({
  recipients: z.number().int().meta(d('Recipients in the job')),
  delivered: z.number().int().meta(d('Recipients delivered')),
  bounced: z.number().int().meta(d('Recipients bounced')),
  deferred: z.number().int().meta(d('Recipients still being retried')),
  failed: z.number().int().meta(d('Recipients given up on')),
  pending: z.number().int().meta(d('Recipients not yet attempted')),
  suppressed: z.number().int().meta(d('Recipients skipped because they are suppressed')),
  complaints: z.number().int().meta(d('Complaints about messages of the job')),
});

const Reputation = {
  window_days: z.number().int().meta(d('The sliding window the rates are computed over, in days')),
  sent: z.number().int().meta(d('Recipients delivered or bounced in the window')),
  bounced: z.number().int().meta(d('Hard bounces in the window')),
  complained: z.number().int().meta(d('Complaints (ARF reports) in the window')),
  bounce_rate: z.number().meta(d('bounced / sent')),
  complaint_rate: z.number().meta(d('complained / sent')),
  bounce_rate_limit: z.number().meta(d('The bounce rate above which the state turns bounce_rate_high')),
  complaint_rate_limit: z.number().meta(d('The complaint rate above which the state turns complaint_rate_high')),
};

const TopupPayment = {
  payment_id: z.string().meta({ description: 'The payment (pi_ for card payments, mpp_ for MPP challenges)', example: 'pi_0a1b2c3d4e5f6g7h8j9k' }),
  kind: z.enum(['topup', 'signup', 'mpp']).meta(d('topup: a card top-up; signup: a funded signup; mpp: a Machine Payments Protocol top-up')),
  amount_cents: cents('The amount'),
  decline_code: z.string().nullable().meta(d('Why the card was declined (failed only), e.g. card_declined or insufficient_funds')),
  paid_via: z
    .enum(['mandate', 'owner', 'wallet'])
    .nullable()
    .meta(d('mandate: the saved card within its caps; owner: approved on the owner page; wallet: MPP')),
};

const ForwardRef = {
  id: id('fwd', 'The forward'),
  box_id: id('box', 'The box whose mail it forwards'),
  to: z.string().meta({ description: 'The person mail is forwarded to', example: 'me@example.com' }),
};

/** Every event type, with the schema of its data. Adding a type here is the whole of declaring it. */
export const EVENT_CATALOGUE = {
  // --- signup and account -------------------------------------------------------------------------------
  'signup.completed': o({
    account_id: id('acct', 'The new account'),
    primary_address: address('agent@<domain>'),
    domain: z.string().meta({ description: 'The account domain', example: 'brave-otter.boxes.localhost' }),
    mode: z.enum(['subdomain', 'register', 'byo_manual', 'byo_delegated']).meta(d('The domain mode chosen at signup')),
    account_status: z.literal('active').meta(d('The account is usable')),
  }).meta(d('The account exists. Pushed to agent_callback_webhook with the owner api_key beside it (webhook deliveries only, once).')),
  'account.callback_webhook_updated': o({
    agent_callback_webhook: z.string().nullable().meta(d('The new callback URL, or null when it was removed')),
    by_key_id: byKey,
  }).meta(d('PUT /account/callback-webhook changed where events are pushed')),
  'account.usermetadata_updated': o({
    audit_retention_days: z.number().int().meta(d('How long message bodies are kept, in days')),
    source: z.string().meta({ description: 'Where the value comes from (account or instance default)', example: 'account' }),
    by_key_id: byKey,
  }).meta(d('The account settings changed')),
  'account.close_protection.enabled': o({ by_key_id: byKey }).meta(d('Close protection turned on: closing now needs the owner')),
  'account.close_protection.disabled': o({ by: z.literal('support').meta(d('Only support can turn it off')) }).meta(d('Support turned close protection off')),
  'account.close_refused': o({
    reason: z.string().meta(d('Why DELETE /account was refused (confirm_domain missing or wrong)')),
    by_key_id: byKey,
  }).meta(d('Someone tried to close the account without the right confirm_domain; the owner was emailed')),
  'account.close_requested': o({
    close_request_id: id('clr', 'The owner approval request'),
    by_key_id: byKey,
    expires_at: Timestamp.meta(d('When the approval link lapses')),
  }).meta(d('With close protection on, closing waits for the owner; they were emailed a link')),
  'account.close_denied': o({ close_request_id: id('clr', 'The owner approval request') }).meta(d('The owner denied closing the account')),
  'account.closing': o({
    closed_at: Timestamp.meta(d('When the account closed')),
    delete_after: Timestamp.meta(d('When its data is deleted for good')),
    by_key_id: z.string().optional().meta(d('The key that closed it (absent when the owner approved)')),
    approved_by_owner: z.literal(true).optional().meta(d('Present when the owner approved closing on the owner page')),
    close_request_id: z.string().optional().meta(d('The approval request the owner approved')),
    keys_revoked: z.number().int().meta(d('API keys revoked')),
    deliveries_stopped: z.number().int().meta(d('Queued deliveries that will not be attempted')),
    domains: z.array(z.string()).meta(d("The account's domains")),
    domains_held_for_transfer: z.array(z.string()).meta(d('Registered domains held for the owner to transfer away')),
    export_id: id('exp', 'The data export being prepared'),
    export_expires_at: Timestamp.meta(d('When the export link lapses')),
  }).meta(d('The account is closing: every key is revoked; the data export link is mailed to the owner')),
  'account.export_ready': o({
    export_id: id('exp', 'The data export'),
    size_bytes: z.number().int().meta(d('Size of the tar archive')),
    sha256: z.string().meta(d('Hex SHA-256 of the archive')),
    expires_at: Timestamp.meta(d('When the download link lapses')),
  }).meta(d("The closing account's data export is ready; its link was mailed to the owner")),
  'account.evidence.enrolled': o({ by_key_id: byKey, enrolled_at: Timestamp }).meta(d('The account joined the evidence beta (POST /beta/evidence/opt-in)')),
  'account.mcp.enabled': o({
    enabled: z.boolean().meta(d('true')),
    enrolled_at: Timestamp.nullable().meta(d('When MCP was first enabled')),
    disabled_at: Timestamp.nullable().meta(d('Cleared on re-enable')),
    by_key_id: byKey,
  }).meta(d('MCP access enabled')),
  'account.mcp.disabled': o({
    enabled: z.boolean().meta(d('false')),
    enrolled_at: Timestamp.nullable().meta(d('When MCP was first enabled (kept)')),
    disabled_at: Timestamp.nullable().meta(d('When it was disabled')),
    by_key_id: byKey,
  }).meta(d('MCP access disabled')),
  'account.iot.provisioned': o({
    client_id: z.string().meta(d('The MQTT client id the certificate is for')),
    serial: z.string().meta(d('Serial number of the new client certificate')),
    not_after: Timestamp.meta(d('When the certificate expires')),
    revoked_previous: z.number().int().meta(d('Earlier certificates revoked by this one')),
    by_key_id: byKey,
  }).meta(d('A new MQTT client certificate was issued (earlier ones no longer connect)')),
  'account.app_password.created': o({
    app_password_id: id('apw', 'The app-password'),
    label: z.string().meta(d('Its label')),
    box_id: z.string().nullable().meta(d('The box it is limited to, or null for every box')),
    box: z.string().nullable().meta(d('That box address, or null')),
    by_key_id: byKey,
  }).meta(d('A mail-client app-password was created')),
  'account.app_password.revoked': o({
    app_password_id: id('apw', 'The app-password'),
    label: z.string().meta(d('Its label')),
    by_key_id: byKey,
  }).meta(d('An app-password was revoked; its sessions end')),
  'account.app_password.used': o({
    app_password_id: id('apw', 'The app-password'),
    label: z.string().meta(d('Its label')),
    service: z.enum(['imap', 'smtp']).meta(d('Where it logged in: imap, or smtp (submission)')),
    username: z.string().meta(d('The login name given')),
    remote_address: z.string().nullable().meta(d('The client address')),
  }).meta(d('An app-password logged in (at most once an hour per password and service)')),
  'account.credit.payer_email_updated': o({
    payer_email: z.string().meta(d('The new payer email')),
    previous_payer_email: z.string().nullable().meta(d('The one before, or null')),
    customer_created: z.boolean().meta(d('true when this created the payment customer')),
  }).meta(d('PUT /account/credit/payer-email')),
  'account.trailer.opted_out': o({ surcharge_remaining_usd: usd('What remains of the opt-out surcharge') }).meta(
    d('The outbound trailer is off; each send carries a surcharge until paid off'),
  ),
  'account.trailer.bought_out': o({ charged_usd: usd('What was charged') }).meta(d('The remaining trailer surcharge was prepaid')),
  'account.sending_ip.provisioned': o({
    id: id('sip', 'The dedicated sending IP row'),
    ip: z.string().meta(d('The address')),
    helo_name: z.string().optional().meta(d('The HELO name it sends with (live rows)')),
    provisioning_mode: z.enum(['simulated', 'live']).meta(d('simulated routes nothing; live sends from the address')),
    status: z.literal('warming').meta(d('The row starts warming up')),
    configuration_set: z.string().meta(d('The configuration set sends of the account now carry')),
  }).meta(d('A dedicated sending IP is ready and warming up')),
  'account.sending_ip.deprovisioned': o({
    id: id('sip', 'The dedicated sending IP row'),
    ip: z.string().meta(d('The address')),
    provisioning_mode: z.enum(['simulated', 'live']).meta(d('simulated or live')),
  }).meta(d('The dedicated sending IP was torn down')),
  'api_key.created': o({
    key_id: id('key', 'The new key'),
    prefix: z.string().meta(d('Its display prefix')),
    label: z.string().meta(d('Its label')),
    scopes: z.array(z.enum(['send', 'receive', 'admin'])).meta(d('What it may do')),
    allowed_box_ids: z.array(z.string()).nullable().meta(d('The boxes it is limited to, or null for all')),
    review: z.enum(REVIEW_POLICIES).optional().meta(d('Its owner review policy, when not none (absent: none)')),
    by_key_id: byKey,
    expires_at: Timestamp.nullable().optional().meta(d('When the key stops working, or null: never (since expiring keys)')),
  }).meta(d('An API key was created (the raw key is never in an event)')),
  'api_key.revoked': o({
    key_id: id('key', 'The key'),
    prefix: z.string().meta(d('Its display prefix')),
    by_key_id: byKey,
  }).meta(d('An API key was revoked')),
  'account.paused': o({
    paused_by: z.enum(['owner', 'key']).meta(d('owner: on the owner pages (only the owner resumes); key: an admin API key')),
    by_key_id: byKey,
  }).meta(d('The account was paused: every send is refused (403 account_paused) until it is resumed')),
  'account.resumed': o({
    resumed_by: z.enum(['owner', 'key']).meta(d('owner: on the owner pages; key: an admin API key')),
    by_key_id: byKey,
    released_scheduled: z.number().int().meta(d('Scheduled messages that fell due during the pause and go now')),
  }).meta(d('The account was resumed: sends are accepted again')),
  'box.paused': o({
    box_id: id('box', 'The box'),
    address: address('Its address'),
    paused_by: z.enum(['owner', 'key']).meta(d('owner: on the owner pages (only the owner resumes); key: an admin API key')),
    by_key_id: byKey,
  }).meta(d('A box was paused: sends from it are refused (403 box_paused) until it is resumed')),
  'box.resumed': o({
    box_id: id('box', 'The box'),
    address: address('Its address'),
    resumed_by: z.enum(['owner', 'key']).meta(d('owner: on the owner pages; key: an admin API key')),
    by_key_id: byKey,
    released_scheduled: z.number().int().meta(d('Scheduled messages that fell due during the pause and go now')),
  }).meta(d('A box was resumed: sends from it are accepted again')),
  'cap.reached': o({
    cap: z.string().meta({ description: 'The cap: box.<name> or key.<name>', example: 'box.per_hour' }),
    box_id: z.string().nullable().meta(d('The box, for a box cap')),
    key_id: z.string().nullable().meta(d('The API key, for a key cap')),
    limit: z.number().int().meta(d('The cap')),
    window_seconds: z.number().int().meta(d('Length of its window')),
    resets_at: Timestamp.meta(d('When the window ends and sends are accepted again')),
  }).meta(d('A send cap was reached for the first time in its window: sends over it get 429 cap_exceeded until the window ends')),
  'webhook.secret_rotated': o({
    previous_valid_until: Timestamp.meta(d('Until when deliveries are also signed with the previous secret')),
    by_key_id: byKey,
  }).meta(d('The webhook signing secret was rotated')),
  'webhook.delivery_failed': o({
    event_id: id('evt', 'The event that could not be delivered'),
    seq: z.number().int().meta(d('Its seq')),
    event_type: z.string().meta(d('Its type')),
    attempts: z.number().int().meta(d('Attempts made')),
    last_status: z.number().int().nullable().meta(d('The last HTTP status, or null when no answer came')),
    last_error: z.string().nullable().meta(d('What went wrong on the last attempt')),
    url: z.string().meta(d('The callback URL')),
    endpoint_id: z.string().optional().meta({
      description: 'The webhook endpoint given up on (since webhook endpoints); absent for agent_callback_webhook',
      example: 'whe_0a1b2c3d4e5f6g7h8j9k',
    }),
  }).meta(d('A webhook push was given up on after its retries (the event stays readable with GET /events)')),
  'platform.updated': o({
    version: z.string().meta({ description: 'The API version now served', example: '1.3.0' }),
    previous_version: z.string().nullable().meta(d('The version before')),
    openapi_url: z.string().meta(d('The OpenAPI document (JSON)')),
    openapi_yaml_url: z.string().meta(d('The OpenAPI document (YAML)')),
    skill_url: z.string().meta(d('The agent skill')),
    docs_url: z.string().meta(d('The API reference')),
    discovery_url: z.string().meta(d('The discovery manifest')),
  }).meta(d('This instance now serves a new API version')),

  // --- boxes, lists, forwards --------------------------------------------------------------------------------
  'box.created': o({
    box: BoxOutput.extend({
      review: z.enum(REVIEW_POLICIES).optional().meta(d('Its owner review policy (since API 1.4.0; absent in older events)')),
    }).meta(d('The box')),
  }).meta(d('A box (address) was created')),
  'box.deleted': o({ box_id: id('box', 'The box'), address: address('Its address') }).meta(d('A box was deleted')),
  'box.signature_updated': o({
    box_id: id('box', 'The box'),
    address: address('Its address'),
    signature: z.string().nullable().meta(d('The new signature, or null when removed')),
  }).meta(d("A box's signature changed")),
  'box.policy_updated': o({ policy: BoxPolicy }).meta(d("A box's receiving policy changed")),
  'box.review_updated': o({
    box_id: id('box', 'The box'),
    address: address('Its address'),
    review: z.enum(REVIEW_POLICIES).meta({ description: 'The new owner review policy', example: 'new_recipients' }),
    previous: z.enum(REVIEW_POLICIES).meta({ description: 'The policy before', example: 'none' }),
    by_key_id: byKey,
  }).meta(d("A box's owner review policy changed (the owner is emailed when it becomes less strict)")),

  // --- owner review of sends ------------------------------------------------------------------------------
  'review.requested': o({
    ...ReviewFacts,
    reason: z.enum(REVIEW_REASONS).meta({ description: 'The policy that held the send', example: 'new_recipients' }),
    new_recipients: addresses('Recipients the box never wrote to nor heard from'),
    expires_at: Timestamp.meta(d('Nothing is sent unless the owner approves before this')),
    by_key_id: byKey,
  }).meta(d("A send was held for the owner's review (the API answered 202); the owner was emailed a link to approve or deny it")),
  'review.approved': o({
    ...ReviewFacts,
    message_id: messageId,
  }).meta(d('The owner approved a held send: it went through the send path as written (mail.sent or mail.scheduled follows)')),
  'review.denied': o(ReviewFacts).meta(d('The owner denied a held send: nothing was sent or charged')),
  'review.expired': o(ReviewFacts).meta(d('Nobody decided about a held send in time: nothing was sent or charged')),
  'review.withdrawn': o({ ...ReviewFacts, by_key_id: byKey }).meta(d('The agent withdrew a held send: nothing was sent or charged')),
  'list.entry_added': o({ entry: ListEntry }).meta(d('An allow or block list entry was added')),
  'list.entry_removed': o({ entry: ListEntry }).meta(d('An allow or block list entry was removed')),
  'box.forward.created': o({
    ...ForwardRef,
    box: address('The box address'),
    match: o({
      from_contains: z.string().nullable().meta(d('Only mail whose From contains this')),
      subject_contains: z.string().nullable().meta(d('Only mail whose Subject contains this')),
    }).meta(d('Which mail is forwarded')),
    status: z.string().meta({ description: 'pending_confirmation until the person confirms, then active', example: 'pending_confirmation' }),
  }).meta(d('An auto-forward was set up; the person was asked to confirm')),
  'box.forward.confirmed': o(ForwardRef).meta(d('The person confirmed the forward; copies flow')),
  'box.forward.stopped': o({
    ...ForwardRef,
    reason: z.string().meta({ description: 'Why: declined, bounced, ...', example: 'declined' }),
    message_id: z.string().optional().meta(d('The forwarded copy that bounced (reason bounced)')),
    response: z.string().optional().meta(d('The bounce response, when a copy bounced')),
    detail: z.string().optional().meta(d('More about why')),
  }).meta(d('The forward stopped (the person declined, or a copy bounced)')),
  'box.forward.deleted': o(ForwardRef).meta(d('The forward was deleted')),
  'box.forward.skipped': o({
    ...ForwardRef,
    message_id: messageId,
    reason: z.string().meta({ description: 'Why no copy went: loop, insufficient_credit, ...', example: 'loop' }),
    detail: z.string().optional().meta(d('More about why')),
  }).meta(d('A message matched a forward but no copy was sent')),

  // --- mail ---------------------------------------------------------------------------------------------------
  'mail.sent': o({
    message_id: messageId,
    rfc_message_id: z.string().meta(d('The Message-ID header')),
    thread_id: id('thr', 'The thread (GET /threads/{id})'),
    from: z.string().nullable().meta(d('The From address')),
    to: addresses('To addresses'),
    cc: addresses('Cc addresses'),
    recipients: z.number().int().meta(d('Distinct recipients the message goes to (after suppression)')),
    suppressed: z.array(z.string()).optional().meta(d('Recipients left out because they are suppressed (absent when a scheduled send is released)')),
    subject: z.string().nullable().optional().meta(d('The subject (absent or null when there is none)')),
    status: z.string().meta({ description: 'queued, or delivered for local mail already in the box', example: 'queued' }),
    send_at: Timestamp.nullable().optional().meta(d('When a scheduled send was due (released scheduled sends only)')),
    context: z.record(z.string(), z.unknown()).nullable().meta(d('The context object given with the send')),
  }).meta(d('A message was accepted for delivery')),
  'mail.scheduled': o({
    message_id: messageId,
    rfc_message_id: z.string().meta(d('The Message-ID header')),
    thread_id: id('thr', 'The thread'),
    from: z.string().meta(d('The From address')),
    to: addresses('To addresses'),
    cc: addresses('Cc addresses'),
    recipients: z.number().int().meta(d('Distinct recipients')),
    suppressed: z.array(z.string()).meta(d('Recipients left out because they are suppressed')),
    subject: z.string().optional().meta(d('The subject (absent when there is none)')),
    status: z.string().meta({ description: 'scheduled', example: 'scheduled' }),
    send_at: Timestamp.meta(d('When it goes out')),
    context: z.record(z.string(), z.unknown()).nullable().meta(d('The context object given with the send')),
  }).meta(d('A message was scheduled (send_at); mail.sent follows when it goes out, mail.cancelled if cancelled')),
  'mail.cancelled': o({
    message_id: messageId,
    send_at: Timestamp.nullable().meta(d('When it was due')),
    recipients: z.number().int().meta(d('Deliveries cancelled')),
    by_key_id: byKey,
  }).meta(d('A scheduled message was cancelled before it went out')),
  'mail.delivered': o({
    message_id: messageId,
    recipient: z.string().meta(d('The recipient')),
    route: z.string().meta({ description: 'local (a box of this instance) or mx', example: 'mx' }),
    remote_mta: z.string().nullable().meta(d('The host that accepted it (null for local mail)')),
    response: z.string().meta(d("The receiving server's answer (at most 500 characters)")),
  }).meta(d('A recipient accepted the message')),
  'mail.bounced': o({
    message_id: messageId,
    recipient: z.string().meta(d('The recipient')),
    code: z.number().int().nullable().meta(d('The SMTP reply code, when known')),
    response: z.string().meta(d('What the server (or the DSN) said, at most 500 characters')),
    source: z.string().meta({ description: 'smtp (refused while sending) or dsn (a bounce report came back)', example: 'smtp' }),
  }).meta(d('A recipient refused the message for good; the address is now suppressed')),
  'mail.failed': o({
    message_id: messageId,
    recipient: z.string().meta(d('The recipient')),
    attempts: z.number().int().meta(d('Attempts made')),
    last_error: z.string().meta(d('The last error, at most 500 characters')),
  }).meta(d('Delivery to a recipient was given up on after its retries')),
  'mail.received': o({
    message_id: z.string().optional().meta({
      description: 'The message, as in every event about one message (since API 1.3.0; older events have only message.id: upcastEvent fills it)',
      example: 'msg_0a1b2c3d4e5f6g7h8j9k',
    }),
    message: o({
      id: messageId,
      box_id: id('box', 'The box it arrived in'),
      to_box: address('That box address'),
      from: z.string().nullable().meta(d('The From address (null when the message has none)')),
      to: addresses('To addresses'),
      cc: addresses('Cc addresses'),
      subject: z.string().nullable().meta(d('The subject')),
      rfc_message_id: z.string().nullable().meta(d('The Message-ID header')),
      in_reply_to: z.string().nullable().meta(d('The In-Reply-To header')),
      thread_id: id('thr', 'The thread'),
      size_bytes: z.number().int().meta(d('Size of the raw message')),
      attachments: z.number().int().meta(d('Number of attachments')),
      via: z.string().meta({ description: 'smtp (from the internet) or local (from a box of this instance)', example: 'smtp' }),
      authentication: Authentication.nullable(),
      spam: SpamVerdict.nullable(),
    }).meta(d('The message (GET /messages/{id} has its body)')),
    context: z.record(z.string(), z.unknown()).nullable().meta(d('The context of the send this answers (through In-Reply-To), or null')),
  }).meta(d('A message arrived in a box')),
  'attachment.text_ready': o({
    message_id: messageId,
    attachment_id: id('att', 'The attachment (GET /messages/{id}/attachments/{attachment_id})'),
    filename: z.string().nullable().meta(d('Its file name, as sent')),
    status: z.enum(['ready', 'too_large', 'unsupported', 'failed']).meta(d('How the extraction ended (text_status)')),
    detected_type: z.string().nullable().meta(d('The type read from the bytes (magic numbers), not from the name')),
    text_bytes: z.number().int().nullable().meta(d('UTF-8 size of the text when ready; null otherwise')),
    truncated: z.boolean().meta(d('true when the text stopped at a limit')),
  }).meta(d("The worker finished reading an attachment's text (any final status): GET /messages/{id}/attachments/{attachment_id}/text")),
  'message.deleted': o({
    message_id: messageId,
    purged: z.boolean().meta(d('true when subject and addresses were removed too')),
    reclaimed_at_utc: Timestamp.meta(d('When the body was reclaimed')),
    by_key_id: byKey,
    reason: z.literal('retention').optional().meta(d('Present when the retention period reclaimed it')),
    audit_retention_days: z.number().int().optional().meta(d('The retention period that applied')),
  }).meta(d("A message's body was reclaimed (DELETE /messages/{id} or retention)")),
  'message.labels_changed': o({
    message_id: messageId,
    thread_id: id('thr', 'Its thread'),
    box_id: id('box', 'Its box').nullable().meta(d('Its box (null when the box is gone)')),
    added: z.array(z.string()).meta({ description: 'Labels it gained', example: ['flagged', 'invoices'] }),
    removed: z.array(z.string()).meta({ description: 'Labels it lost', example: ['unread'] }),
    labels: z.array(z.string()).meta({ description: 'Its labels now', example: ['flagged', 'invoices'] }),
    via: z.enum(['api', 'imap']).meta(d('api: POST /messages/{id}/labels or /threads/{id}/labels; imap: a mail client STOREd flags or keywords')),
    by_key_id: z.string().nullable().meta(d('The API key that made the change (via api; null via imap)')),
    app_password_id: z.string().nullable().meta(d("The mail client's app-password (via imap; null via api)")),
  }).meta(d("A message's labels (its IMAP flags and keywords) changed, over the API or from a mail client")),
  'send.loop_detected': o({
    distinct_recipients_last_minute: z.number().int().meta(d('Distinct recipients of single sends in the last minute')),
    advice: z.string().meta(d('What to do instead')),
  }).meta(d('Single sends are being looped over many recipients; bulk send is the alternative')),
  'suppression.added': o({
    address: z.string().meta(d('The suppressed address')),
    reason: z.enum(['bounce', 'complaint']).meta(d('Why')),
    detail: z.string().nullable().meta(d('The bounce response or complaint detail')),
    message_id: z.string().nullable().meta(d('The message that bounced or was complained about')),
  }).meta(d('An address is now suppressed: sends to it are skipped')),
  'suppression.removed': o({ address: z.string().meta(d('The address')), by_key_id: byKey }).meta(d('An address was unblocked')),
  'reputation.warning': o({
    ...Reputation,
    state: z.enum(['bounce_rate_high', 'complaint_rate_high', 'bounce_and_complaint_rate_high']).meta(d('Which rate is too high')),
  }).meta(d('The bounce or complaint rate over the window went above its limit')),
  'reputation.recovered': o({ ...Reputation, state: z.literal('ok').meta(d('Both rates are under their limits')) }).meta(
    d('Both rates are back under their limits'),
  ),

  // --- bulk -----------------------------------------------------------------------------------------------------
  'bulk.queued': o({
    bulk_job_id: id('bulk', 'The bulk job'),
    messages: z.number().int().meta(d('Messages in the job')),
    recipients: z.number().int().meta(d('Recipients in all')),
    batch_size: z.number().int().meta(d('Messages per batch')),
    batches: z.number().int().meta(d('Batches')),
    cool_off_seconds: z.number().int().meta(d('Pause between batches')),
    free_messages: z.number().int().meta(d('Free messages the job uses')),
    estimated_usd: usd('The amount held for it'),
  }).meta(d('A bulk job was accepted')),
  'bulk.batch_completed': o({
    bulk_job_id: id('bulk', 'The bulk job'),
    batch: z.number().int().meta(d('The batch (from 1)')),
    batches_total: z.number().int().meta(d('Batches in the job')),
    counts: BulkCounts.meta(d('This batch')),
    totals: BulkTotals.meta(d('The job so far')),
    next_batch_at: Timestamp.nullable().meta(d('When the next batch starts (null for the last, or when the job halts)')),
  }).meta(d('A batch of a bulk job was handed over')),
  'bulk.completed': o({
    bulk_job_id: id('bulk', 'The bulk job'),
    batches: z.number().int().meta(d('Batches sent')),
    counts: BulkTotals.meta(d('The whole job')),
    bounce_rate: z.number().meta(d('Bounced / attempted')),
    complaint_rate: z.number().meta(d('Complaints / attempted')),
  }).meta(d('Every batch of a bulk job was sent')),
  'bulk.halted': o({
    bulk_job_id: id('bulk', 'The bulk job'),
    reason: z
      .enum(['bounce_rate', 'complaint_rate', 'insufficient_credit', 'batch_failed'])
      .meta(d("Why: the job's own bounce or complaint rate passed its limit, the credit ran out, or a batch failed after every retry")),
    message: z.string().meta(d('What happened and what to do')),
    batches_completed: z.number().int().meta(d('Batches handed over before the halt')),
    batches_total: z.number().int().meta(d('Batches in the job')),
    attempted: z.number().int().optional().meta(d('Recipients attempted (rate trips)')),
    bounced: z.number().int().optional().meta(d('Recipients bounced (rate trips)')),
    complaints: z.number().int().optional().meta(d('Complaints (rate trips)')),
    bounce_rate: z.number().optional().meta(d('bounced / attempted (rate trips)')),
    complaint_rate: z.number().optional().meta(d('complaints / attempted (rate trips)')),
    max_bounce_rate: z.number().optional().meta(d("The job's bounce limit (bounce_rate trips)")),
    max_complaint_rate: z.number().optional().meta(d("The job's complaint limit (complaint_rate trips)")),
    top_up: z.record(z.string(), z.unknown()).optional().meta(d('How to top up, as in a 402 payment_required error (insufficient_credit)')),
    required_usd: z.string().optional().meta(d('What the next batch needed (insufficient_credit)')),
    available_usd: z.string().optional().meta(d('What was available (insufficient_credit)')),
    batch: z.number().int().optional().meta(d('The batch that failed, from 0 (batch_failed)')),
  }).meta(d('A bulk job stopped before its end; what it had not sent is released')),
  'bulk.cancelled': o({
    bulk_job_id: id('bulk', 'The bulk job'),
    batches_completed: z.number().int().meta(d('Batches handed over before the cancel')),
    batches_total: z.number().int().meta(d('Batches in the job')),
    cancelled_by_key: z.string().optional().meta(d('The key that cancelled it')),
    reason: z.string().optional().meta(d('Why, when the service cancelled it (the account is closing)')),
  }).meta(d('A bulk job was cancelled; what it had not sent is released')),

  // --- credit and billing -----------------------------------------------------------------------------------------
  low_balance: o({
    alert: z.enum(['first', 'second']).meta(d('first: the early threshold; second: the urgent one')),
    threshold_cents: cents('The threshold crossed'),
    credit_balance_cents: cents('The balance now'),
    balance_state: z.enum(['ok', 'low', 'critical']).meta(d('low below the first threshold, critical below the second')),
    cause: z.string().meta(d('What charge crossed it')),
    top_up: z.string().meta(d('Where to top up (MPP)')),
  }).meta(d('The balance fell below an alert threshold')),
  'billing.deficit': o({
    credit_balance_cents: cents('The balance (negative)'),
    credit_balance_usd: usd('The balance'),
    cause: z.string().meta(d('What charge caused it')),
    sending_blocked: z.literal(true).meta(d('Sends are refused until the balance is back at zero or above')),
    inbound_continues: z.literal(true).meta(d('Mail is still received and readable')),
    top_up: o({
      mpp: z.string().meta(d('POST here to top up through the wallet (Machine Payments Protocol)')),
      card: z.string().meta(d('POST here for a card payment the owner approves')),
    }).meta(d('Where to top up')),
  }).meta(d('The balance went below zero: sends are blocked until a top-up; inbound continues')),
  'billing.recovered': o({
    credit_balance_cents: cents('The balance now'),
    sending_blocked: z.literal(false).meta(d('Sends work again')),
    cause: z.string().meta(d('What brought it back')),
  }).meta(d('The balance is back at zero or above; sends work again')),
  'credit.topup.succeeded': o({ ...TopupPayment, status: z.literal('succeeded').meta(d('The payment is succeeded')) }).meta(d('A payment landed as credit')),
  'credit.topup.failed': o({ ...TopupPayment, status: z.literal('failed').meta(d('The payment is failed')) }).meta(
    d('A payment failed (the card was declined)'),
  ),
  'credit.topup.denied': o({ ...TopupPayment, status: z.literal('denied').meta(d('The payment is denied')) }).meta(d('The owner denied a payment')),
  'credit.topup.expired': o({ ...TopupPayment, status: z.literal('expired').meta(d('The payment is expired')) }).meta(
    d('A payment lapsed before the owner decided'),
  ),
  'credit.topup.declined': o({
    payment_id: z.string().meta({ description: 'The payment', example: 'pi_0a1b2c3d4e5f6g7h8j9k' }),
    amount_cents: cents('The amount'),
    decline_code: z.string().meta(d('Why the card was declined')),
  }).meta(d('The owner tried a card on the owner page and it was declined; they may try another')),

  // --- domains and DNS -----------------------------------------------------------------------------------------------
  'domain.ready': o({
    domain: z.string().meta(d('The domain')),
    mode: z.string().optional().meta(d('Its mode (absent for a domain live at signup)')),
    verified_at: Timestamp.optional().meta(d('When it verified (absent for a domain live at signup)')),
  }).meta(d('The domain is live: mail flows')),
  'domain.dns_required': o({
    domain: z.string().meta(d('The domain')),
    records: z.array(DnsRecordToPublish).meta(d('The records to publish at your DNS')),
    claim_expires_at: Timestamp.nullable().meta(d('When the claim lapses if the records never appear')),
  }).meta(d('Publish these records (mode byo_manual); domain.ready follows when they resolve')),
  'domain.delegation_required': o({
    domain: z.string().meta(d('The domain')),
    nameservers: z.array(z.string()).meta(d('Set these as the nameservers at your registrar')),
    claim_expires_at: Timestamp.nullable().meta(d('When the claim lapses if the delegation never appears')),
  }).meta(d('Delegate the domain (mode byo_delegated); domain.ready follows when it propagates')),
  'domain.registered': o({
    domain: z.string().meta(d('The domain')),
    registrar: z.string().meta(d('The registrar (a simulated one says so)')),
    expires_at: Timestamp.meta(d('When the registration ends')),
    price_cents_per_year: z.number().int().nullable().meta(d('The yearly price')),
  }).meta(d('A domain was registered for the account')),
  'domain.claim_expired': o({
    domain: z.string().meta(d('The domain')),
    mode: z.string().meta(d('Its mode')),
    expired_at: Timestamp,
  }).meta(d('A domain claim lapsed before it verified')),
  'domain.move_started': o({
    from: z.string().meta(d('The current domain')),
    to: z.string().meta(d('The new domain')),
    mode: z.string().meta(d('The new domain mode')),
  }).meta(d('POST /account/domain: the account moves once the new domain verifies')),
  'domain.move_replaced': o({
    replaced: z.array(z.string()).meta(d('Pending move targets dropped')),
    by: z.string().meta(d('The new target')),
  }).meta(d('A new move replaced a pending one')),
  'domain.moved': o({
    from: z.string().meta(d('The old domain')),
    to: z.string().meta(d('The new primary domain')),
    grace_until: Timestamp.meta(d('Until when the old domain still receives')),
  }).meta(d('The account moved onto its new domain; boxes kept their ids')),
  'domain.retired': o({ domain: z.string().meta(d('The domain')), retired_at: Timestamp.meta(d('When it stopped receiving')) }).meta(
    d('An old domain stopped receiving after its grace period'),
  ),
  'domain.dns.changed': o({
    zone: z.string().meta(d('The zone')),
    action: z.enum(['create', 'replace', 'delete']).meta(d('What happened to the record set')),
    id: z.string().meta(d('The record set')),
    name: z.string().meta(d('Its owner name')),
    type: z.string().meta(d('Its type')),
    ttl: z.number().int().nullable().meta(d('Its TTL (null when deleted)')),
    values: z.array(z.string()).meta(d('Its values now (empty when deleted)')),
    previous: o({ ttl: z.number().int().meta(d('Its TTL before')), values: z.array(z.string()).meta(d('Its values before')) })
      .nullable()
      .meta(d('What it was, or null when new')),
    serial: z.number().int().nullable().meta(d("The zone's new SOA serial")),
    by_key_id: byKey,
  }).meta(d('A managed DNS record set changed')),

  // --- support ---------------------------------------------------------------------------------------------------------
  'support.question_asked': o({ question_id: id('sq', 'The question'), subject: z.string().meta(d('Its subject')) }).meta(d('A support question was asked')),
  'support.answered': o({
    question_id: id('sq', 'The question'),
    subject: z.string().meta(d('Its subject')),
    answer: z.string().meta(d('The answer')),
    message_id: z.string().meta(d('The reply in the thread')),
    answered_at: Timestamp,
  }).meta(d('Support answered a question')),
  'feature_request.created': o({ feature_request_id: id('fr', 'The feature request'), title: z.string().meta(d('Its title')) }).meta(
    d('A feature request was filed'),
  ),
  'feature_request.shipped': o({
    feature_request_id: id('fr', 'The feature request'),
    title: z.string().meta(d('Its title')),
    shipped_at: Timestamp,
    note: z.string().nullable().meta(d("The operator's note")),
    requested_by_you: z.boolean().meta(d('true when this account filed it')),
  }).meta(d('A feature request shipped')),
} as const;

export type EventCatalogue = typeof EVENT_CATALOGUE;
export type EventType = keyof EventCatalogue;
/** The data of an event of type T, as readers see it. */
export type EventData<T extends EventType> = z.output<EventCatalogue[T]>;
/** The data a writer passes when appending an event of type T. */
export type EventDataInput<T extends EventType> = z.input<EventCatalogue[T]>;
/** What a writer appends: a type from the catalogue and its data, checked against each other. */
export type NewEvent = { [T in EventType]: { type: T; data: EventDataInput<T>; boxId?: string | null } }[EventType];

export const EVENT_TYPES = Object.keys(EVENT_CATALOGUE).sort() as EventType[];

export const isEventType = (t: string): t is EventType => Object.hasOwn(EVENT_CATALOGUE, t);

/** A short description of each type (the catalogue's own text), for docs and tools. */
export function eventDescription(t: EventType): string {
  return (EVENT_CATALOGUE[t].meta() as { description?: string } | undefined)?.description ?? '';
}

/**
 * Paths in `value` that `schema` does not document (members a writer added without declaring them), e.g.
 * ['message.authentication.extra']. Empty when the value is fully described. Used by the test suite on every event it
 * wrote; the API itself keeps unknown members (see o()).
 */
export function undocumentedPaths(schema: z.ZodType, value: unknown, path = ''): string[] {
  const def = (schema as unknown as { _zod: { def: Record<string, unknown> } })._zod.def;
  switch (def.type) {
    case 'optional':
    case 'nullable':
    case 'default':
    case 'readonly':
    case 'catch':
      return value === undefined || value === null ? [] : undocumentedPaths(def.innerType as z.ZodType, value, path);
    case 'pipe':
      return undocumentedPaths(def.in as z.ZodType, value, path);
    case 'object': {
      if (typeof value !== 'object' || value === null) return [];
      const shape = def.shape as Record<string, z.ZodType>;
      return Object.entries(value).flatMap(([k, v]) => {
        const p = path ? `${path}.${k}` : k;
        return shape[k] ? undocumentedPaths(shape[k], v, p) : [p];
      });
    }
    case 'array':
      return Array.isArray(value) ? value.flatMap((v, i) => undocumentedPaths(def.element as z.ZodType, v, `${path}[${i}]`)) : [];
    case 'union': {
      const options = def.options as z.ZodType[];
      const fits = options.filter((s) => s.safeParse(value).success);
      const each = fits.map((s) => undocumentedPaths(s, value, path));
      return each.find((e) => e.length === 0) ?? each[0] ?? [];
    }
    default:
      return [];
  }
}

/** Why an event's data does not match its type in the catalogue (unknown type, a failed field, an undeclared member); null when it does. */
export function eventDataProblem(type: string, data: unknown): string | null {
  if (!isEventType(type)) return `unknown event type ${type}`;
  const schema = EVENT_CATALOGUE[type] as z.ZodType;
  const parsed = schema.safeParse(data);
  if (!parsed.success) return parsed.error.issues.map((i) => `${i.path.join('.') || '(data)'}: ${i.message}`).join('; ');
  const extra = undocumentedPaths(schema, data);
  return extra.length ? `undocumented member${extra.length > 1 ? 's' : ''} ${extra.join(', ')}` : null;
}
