/**
 * The security cases every keyed route must pass, driven by ROUTES:
 *   (a) no key, a malformed header, an unknown or a revoked key: 401 with getting_started;
 *   (b) a key without the route's scope: 403 insufficient_scope (and a key with only that scope gets through);
 *   (c) another account's resource: 404, never 403;
 *   (d) a box-restricted key: only its boxes and their events, 404 for other boxes, 403 box_restricted_key for
 *       account-wide changes.
 * A new keyed route is one line in ROUTES; the router walk at the end fails until that line exists.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appRouter } from '@boxes/api';
import { mailTlsMaterial } from '@boxes/core';
import { mintKey, rest, signupAccount, startTestServer, type JsonResponse, type TestAccount, type TestServer } from '@boxes/testing';

type Scope = 'send' | 'receive' | 'admin';
type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
/**
 * What a box-restricted key holding every scope gets:
 *   account_wide: 403 box_restricted_key (keys, callback URL, new boxes);
 *   own_box:      200 on its own box (or its box's message), 404 on any other box of the account;
 *   sender:       200 sending from its own box, 403 box_restricted_key from any other box;
 *   filtered:     200, and the answer mentions only its own boxes;
 *   allowed:      200, the same as an unrestricted key.
 */
type Restricted = 'account_wide' | 'own_box' | 'sender' | 'filtered' | 'allowed';

interface RouteCase {
  /** Procedure path in the router (appRouter._def.procedures key). */
  proc: string;
  method: Method;
  /**
   * Path below /api/v1; {box}, {key} and {message} stand for a box id, an API key id and a message id of the
   * account under test, {address} for an address on its suppression list.
   */
  path: string;
  /** Scope the route needs; null: any valid key. */
  scope: Scope | null;
  /** A valid sample body (so that a refusal is about the key, not the input). */
  body?: unknown;
  restricted: Restricted;
  /** Statuses that mean "the key was accepted" when the call is repeated (default [200]). */
  ok?: number[];
}

// prettier-ignore
const ROUTES: RouteCase[] = [
  { proc: 'account.get', method: 'GET', path: '/account', scope: null, restricted: 'allowed' },
  { proc: 'account.getCallbackWebhook', method: 'GET', path: '/account/callback-webhook', scope: 'admin', restricted: 'allowed' },
  {
    proc: 'account.setCallbackWebhook',
    method: 'PUT',
    path: '/account/callback-webhook',
    scope: 'admin',
    restricted: 'account_wide',
    body: { agent_callback_webhook: 'https://agent.example.com/security-probe' },
  },
  {
    proc: 'keys.create',
    method: 'POST',
    path: '/account/keys',
    scope: 'admin',
    restricted: 'account_wide',
    body: { label: 'security-probe', scopes: ['send'] },
  },
  { proc: 'keys.list', method: 'GET', path: '/account/keys', scope: 'admin', restricted: 'account_wide' },
  { proc: 'keys.revoke', method: 'DELETE', path: '/account/keys/{key}', scope: 'admin', restricted: 'account_wide' },
  {
    proc: 'appPasswords.create',
    method: 'POST',
    path: '/account/app-passwords',
    scope: 'admin',
    restricted: 'account_wide',
    body: { label: 'security-probe' },
  },
  { proc: 'appPasswords.list', method: 'GET', path: '/account/app-passwords', scope: 'admin', restricted: 'account_wide' },
  { proc: 'appPasswords.revoke', method: 'DELETE', path: '/account/app-passwords/{apw}', scope: 'admin', restricted: 'account_wide' },
  { proc: 'boxes.create', method: 'POST', path: '/boxes', scope: 'admin', restricted: 'account_wide', body: { address: 'security-probe' } },
  { proc: 'boxes.list', method: 'GET', path: '/boxes', scope: null, restricted: 'filtered' },
  { proc: 'boxes.delete', method: 'DELETE', path: '/boxes/{box}', scope: 'admin', restricted: 'own_box' },
  { proc: 'boxes.setSignature', method: 'PUT', path: '/boxes/{box}/signature', scope: 'admin', restricted: 'own_box', body: { signature: 'security-probe' } },
  { proc: 'boxes.update', method: 'PATCH', path: '/boxes/{box}', scope: 'admin', restricted: 'own_box', body: { review: 'none' } },
  { proc: 'reviews.list', method: 'GET', path: '/reviews', scope: 'send', restricted: 'filtered' },
  { proc: 'reviews.get', method: 'GET', path: '/reviews/{review}', scope: 'send', restricted: 'own_box' },
  { proc: 'reviews.withdraw', method: 'POST', path: '/reviews/{review}/withdraw', scope: 'send', restricted: 'own_box', ok: [200, 409] },
  { proc: 'events.list', method: 'GET', path: '/events', scope: 'receive', restricted: 'filtered' },
  { proc: 'threads.list', method: 'GET', path: '/threads', scope: 'receive', restricted: 'filtered' },
  { proc: 'threads.get', method: 'GET', path: '/threads/{thread}', scope: 'receive', restricted: 'own_box' },
  { proc: 'threads.labels', method: 'POST', path: '/threads/{thread}/labels', scope: 'receive', restricted: 'own_box', body: { add: ['probe'] } },
  { proc: 'labels.list', method: 'GET', path: '/labels', scope: 'receive', restricted: 'filtered' },
  { proc: 'messages.reply', method: 'POST', path: '/messages/{message}/reply', scope: 'send', restricted: 'own_box', body: { text: 'security-probe' } },
  // 409: the message was not scheduled (the fixture's are not): the key and the message were accepted.
  { proc: 'messages.cancel', method: 'POST', path: '/messages/{message}/cancel', scope: 'send', restricted: 'own_box', ok: [200, 409] },
  { proc: 'events.verify', method: 'GET', path: '/events/verify', scope: 'receive', restricted: 'allowed' },
  {
    proc: 'messages.send',
    method: 'POST',
    path: '/messages/send',
    scope: 'send',
    restricted: 'sender',
    body: { to: 'probe@remote.invalid', subject: 'security probe', text: 'probe' },
  },
  {
    proc: 'bulk.send',
    method: 'POST',
    path: '/messages/send/bulk',
    scope: 'send',
    restricted: 'sender',
    body: { messages: [{ to: 'probe@remote.invalid', subject: 'security probe', text: 'probe' }], batch_size: 1 },
  },
  { proc: 'bulk.list', method: 'GET', path: '/messages/send/bulk', scope: 'send', restricted: 'filtered' },
  { proc: 'bulk.get', method: 'GET', path: '/messages/send/bulk/{bulk}', scope: 'send', restricted: 'own_box' },
  { proc: 'bulk.cancel', method: 'POST', path: '/messages/send/bulk/{bulk}/cancel', scope: 'send', restricted: 'own_box' },
  {
    proc: 'drafts.create',
    method: 'POST',
    path: '/drafts',
    scope: 'send',
    restricted: 'sender',
    body: { to: 'probe@remote.invalid', subject: 'security probe', text: 'probe' },
  },
  { proc: 'drafts.list', method: 'GET', path: '/drafts', scope: 'send', restricted: 'filtered' },
  { proc: 'drafts.get', method: 'GET', path: '/drafts/{draft}', scope: 'send', restricted: 'own_box' },
  { proc: 'drafts.update', method: 'PUT', path: '/drafts/{draft}', scope: 'send', restricted: 'own_box', body: { subject: 'security probe' } },
  { proc: 'drafts.delete', method: 'DELETE', path: '/drafts/{draft}', scope: 'send', restricted: 'own_box' },
  // The fixture's drafts are complete: sending one is 200 (and a second call answers the same message).
  { proc: 'drafts.send', method: 'POST', path: '/drafts/{draft}/send', scope: 'send', restricted: 'own_box' },
  { proc: 'messages.list', method: 'GET', path: '/messages', scope: 'receive', restricted: 'filtered' },
  // Every fixture message goes to an address at remote.invalid: the word the search looks for.
  { proc: 'messages.search', method: 'GET', path: '/messages/search?q=remote.invalid', scope: 'receive', restricted: 'filtered' },
  { proc: 'messages.get', method: 'GET', path: '/messages/{message}', scope: 'receive', restricted: 'own_box' },
  { proc: 'messages.delete', method: 'DELETE', path: '/messages/{message}', scope: 'receive', restricted: 'own_box' },
  { proc: 'messages.attachment', method: 'GET', path: '/messages/{message}/attachments/{attachment}', scope: 'receive', restricted: 'own_box' },
  { proc: 'messages.attachmentText', method: 'GET', path: '/messages/{message}/attachments/{attachment}/text', scope: 'receive', restricted: 'own_box' },
  { proc: 'messages.labels', method: 'POST', path: '/messages/{message}/labels', scope: 'receive', restricted: 'own_box', body: { add: ['probe'] } },
  { proc: 'lists.list', method: 'GET', path: '/lists', scope: null, restricted: 'filtered' },
  { proc: 'lists.add', method: 'POST', path: '/lists', scope: 'admin', restricted: 'account_wide', body: { list: 'block', value: 'probe.example' } },
  { proc: 'lists.remove', method: 'DELETE', path: '/lists/{entry}', scope: 'admin', restricted: 'own_box' },
  { proc: 'lists.getPolicy', method: 'GET', path: '/boxes/{box}/policy', scope: null, restricted: 'own_box' },
  { proc: 'lists.setPolicy', method: 'PUT', path: '/boxes/{box}/policy', scope: 'admin', restricted: 'own_box', body: { spam_action: 'label' } },
  { proc: 'suppression.list', method: 'GET', path: '/suppression', scope: 'send', restricted: 'allowed' },
  { proc: 'suppression.get', method: 'GET', path: '/suppression/{address}', scope: 'send', restricted: 'allowed' },
  { proc: 'suppression.unblock', method: 'POST', path: '/suppression/{address}/unblock', scope: 'admin', restricted: 'account_wide' },
  { proc: 'credit.balance', method: 'GET', path: '/account/credit/balance', scope: null, restricted: 'allowed' },
  { proc: 'credit.usage', method: 'GET', path: '/account/credit/usage', scope: null, restricted: 'allowed' },
  {
    proc: 'credit.setAlertThresholds',
    method: 'PUT',
    path: '/account/credit/alert-thresholds',
    scope: null,
    restricted: 'account_wide',
    body: { first_cents: 100, second_cents: 50 },
  },
  // No card is saved for these accounts: a top-up waits for the owner (200), an MPP challenge finds no wallet (402).
  { proc: 'credit.topup', method: 'POST', path: '/account/credit/topup', scope: 'admin', restricted: 'account_wide', body: { amount_cents: 100 } },
  { proc: 'credit.topupStatus', method: 'GET', path: '/account/credit/topup/{payment}', scope: null, restricted: 'allowed', ok: [404] },
  { proc: 'credit.mpp', method: 'POST', path: '/account/credit/topup/mpp', scope: null, restricted: 'allowed', body: { amount_cents: 100 }, ok: [402] },
  { proc: 'credit.mppStatus', method: 'GET', path: '/account/credit/topup/mpp/{payment}', scope: null, restricted: 'allowed', ok: [404] },
  { proc: 'credit.getPayerEmail', method: 'GET', path: '/account/credit/payer-email', scope: null, restricted: 'allowed' },
  {
    proc: 'credit.setPayerEmail',
    method: 'PUT',
    path: '/account/credit/payer-email',
    scope: 'admin',
    restricted: 'account_wide',
    body: { email: 'payer@example.com' },
  },
  { proc: 'credit.trailer', method: 'GET', path: '/account/trailer', scope: null, restricted: 'allowed' },
  { proc: 'credit.optOutOfTrailer', method: 'POST', path: '/account/trailer', scope: null, restricted: 'account_wide' },
  { proc: 'credit.buyOutTrailer', method: 'POST', path: '/account/trailer/buyout', scope: null, restricted: 'account_wide', ok: [402] },
  { proc: 'domains.get', method: 'GET', path: '/account/domain', scope: null, restricted: 'allowed' },
  {
    proc: 'domains.move',
    method: 'POST',
    path: '/account/domain',
    scope: 'admin',
    restricted: 'account_wide',
    body: { mode: 'byo_manual', domain: 'security-probe.example' },
  },
  // The accounts under test are on free subdomains, which have no managed zone: 409 means the key got through.
  // /domain/dns names no id: the zone is always the caller's own (managed-dns.test.ts: another account's names
  // are outside it).
  { proc: 'dns.list', method: 'GET', path: '/domain/dns', scope: null, restricted: 'allowed', ok: [409] },
  {
    proc: 'dns.create',
    method: 'POST',
    path: '/domain/dns',
    scope: 'admin',
    restricted: 'account_wide',
    body: { terms_of_service: true, name: 'probe', type: 'A', values: ['192.0.2.1'] },
    ok: [409],
  },
  {
    proc: 'dns.replace',
    method: 'PUT',
    path: '/domain/dns',
    scope: 'admin',
    restricted: 'account_wide',
    body: { terms_of_service: true, name: 'probe', type: 'A', values: ['192.0.2.1'] },
    ok: [409],
  },
  {
    proc: 'dns.delete',
    method: 'DELETE',
    path: '/domain/dns',
    scope: 'admin',
    restricted: 'account_wide',
    body: { terms_of_service: true, name: 'probe', type: 'A' },
    ok: [409],
  },
  { proc: 'domains.verify', method: 'POST', path: '/account/domain/verify', scope: null, restricted: 'allowed' },
  { proc: 'account.reputation', method: 'GET', path: '/account/reputation', scope: null, restricted: 'allowed' },
  { proc: 'webhook.get', method: 'GET', path: '/account/webhook', scope: 'admin', restricted: 'account_wide' },
  { proc: 'webhook.rotateSecret', method: 'POST', path: '/account/webhook/secret/rotate', scope: 'admin', restricted: 'account_wide' },
  { proc: 'webhook.deliveries', method: 'GET', path: '/account/webhook/deliveries', scope: 'admin', restricted: 'account_wide' },
  { proc: 'webhook.redeliver', method: 'POST', path: '/account/webhook/deliveries/{delivery}/redeliver', scope: 'admin', restricted: 'account_wide' },
  // A box-restricted key creates endpoints only with box_ids inside its boxes: without them, 403 box_restricted_key.
  {
    proc: 'webhookEndpoints.create',
    method: 'POST',
    path: '/webhook-endpoints',
    scope: 'admin',
    restricted: 'account_wide',
    body: { url: 'https://agent.example.com/security-probe', enabled: false },
  },
  { proc: 'webhookEndpoints.list', method: 'GET', path: '/webhook-endpoints', scope: 'admin', restricted: 'filtered' },
  { proc: 'webhookEndpoints.get', method: 'GET', path: '/webhook-endpoints/{endpoint}', scope: 'admin', restricted: 'own_box' },
  {
    proc: 'webhookEndpoints.update',
    method: 'PATCH',
    path: '/webhook-endpoints/{endpoint}',
    scope: 'admin',
    restricted: 'own_box',
    body: { description: 'security probe' },
  },
  { proc: 'webhookEndpoints.rotateSecret', method: 'POST', path: '/webhook-endpoints/{endpoint}/secret/rotate', scope: 'admin', restricted: 'own_box' },
  { proc: 'webhookEndpoints.deliveries', method: 'GET', path: '/webhook-endpoints/{endpoint}/deliveries', scope: 'admin', restricted: 'own_box' },
  // No delivery exists: 404 on the key's own endpoint means the key got through.
  {
    proc: 'webhookEndpoints.redeliver',
    method: 'POST',
    path: '/webhook-endpoints/{endpoint}/deliveries/{delivery}/redeliver',
    scope: 'admin',
    restricted: 'own_box',
    ok: [404],
  },
  { proc: 'webhookEndpoints.delete', method: 'DELETE', path: '/webhook-endpoints/{endpoint}', scope: 'admin', restricted: 'own_box' },
  { proc: 'iot.provision', method: 'POST', path: '/account/iot/provision', scope: 'admin', restricted: 'account_wide' },
  { proc: 'mailClients.certificate', method: 'GET', path: '/mail-clients/certificate', scope: null, restricted: 'allowed' },
  { proc: 'mcp.status', method: 'GET', path: '/account/mcp/status', scope: null, restricted: 'allowed' },
  { proc: 'mcp.enable', method: 'POST', path: '/account/mcp/enable', scope: 'admin', restricted: 'account_wide' },
  { proc: 'mcp.disable', method: 'POST', path: '/account/mcp/disable', scope: 'admin', restricted: 'account_wide' },
  { proc: 'mcp.betaOptIn', method: 'POST', path: '/beta/mcp/opt-in', scope: 'admin', restricted: 'allowed' },
  { proc: 'mcp.betaStatus', method: 'GET', path: '/beta/mcp/status', scope: null, restricted: 'allowed' },
  { proc: 'mcp.feedback', method: 'POST', path: '/beta/mcp/feedback', scope: null, restricted: 'allowed', body: { notes: 'security probe' } },
  { proc: 'support.ask', method: 'POST', path: '/support/questions', scope: null, restricted: 'allowed', body: { subject: 'security probe', body: 'probe' } },
  { proc: 'support.list', method: 'GET', path: '/support/questions', scope: null, restricted: 'allowed' },
  { proc: 'support.get', method: 'GET', path: '/support/questions/{question}', scope: null, restricted: 'allowed' },
  { proc: 'support.reply', method: 'POST', path: '/support/questions/{question}/replies', scope: null, restricted: 'allowed', body: { body: 'probe' } },
  {
    proc: 'features.create',
    method: 'POST',
    path: '/feature-requests',
    scope: null,
    restricted: 'allowed',
    body: { title: 'security probe', description: 'a probe from the security tests' },
  },
  { proc: 'features.list', method: 'GET', path: '/feature-requests', scope: null, restricted: 'allowed' },
  { proc: 'features.get', method: 'GET', path: '/feature-requests/{feature}', scope: null, restricted: 'allowed' },
  { proc: 'features.vote', method: 'POST', path: '/feature-requests/{feature}/vote', scope: null, restricted: 'allowed', ok: [200, 409] },
  { proc: 'account.closeProtection', method: 'GET', path: '/account/close-protection', scope: null, restricted: 'allowed' },
  {
    proc: 'account.setSearchIndexing',
    method: 'PUT',
    path: '/account/search-indexing',
    scope: 'admin',
    restricted: 'account_wide',
    body: { enabled: true },
  },
  {
    proc: 'account.enableCloseProtection',
    method: 'POST',
    path: '/account/close-protection',
    scope: 'admin',
    restricted: 'account_wide',
    body: { enabled: true },
  },
  // A wrong confirm_domain: 400 and nothing closes, so 400 means the key got through.
  {
    proc: 'account.close',
    method: 'DELETE',
    path: '/account',
    scope: 'admin',
    restricted: 'account_wide',
    body: { confirm_domain: 'security-probe.example' },
    ok: [400],
  },
  { proc: 'audit.accountPublicKey', method: 'GET', path: '/account/audit/public-key', scope: null, restricted: 'allowed' },
  { proc: 'audit.messageBundle', method: 'GET', path: '/messages/{message}/audit', scope: 'receive', restricted: 'own_box' },
  { proc: 'audit.checkpoint', method: 'POST', path: '/events/checkpoints', scope: 'receive', restricted: 'allowed' },
  { proc: 'audit.checkpoints', method: 'GET', path: '/events/checkpoints', scope: 'receive', restricted: 'allowed' },
  {
    proc: 'audit.verifyCheckpoint',
    method: 'POST',
    path: '/events/checkpoints/verify',
    scope: 'receive',
    restricted: 'allowed',
    body: { checkpoint: 'not.a.checkpoint' },
  },
  { proc: 'audit.evidenceOptIn', method: 'POST', path: '/beta/evidence/opt-in', scope: 'admin', restricted: 'account_wide' },
  { proc: 'audit.evidenceStatus', method: 'GET', path: '/beta/evidence/status', scope: null, restricted: 'allowed' },
  { proc: 'audit.getUsermetadata', method: 'GET', path: '/account/usermetadata', scope: null, restricted: 'allowed' },
  {
    proc: 'audit.setUsermetadata',
    method: 'PUT',
    path: '/account/usermetadata',
    scope: 'admin',
    restricted: 'account_wide',
    body: { audit_retention_days: 30 },
  },
  // Every fixture has a simulated dedicated IP, so a second one is 409 (the key got through).
  {
    proc: 'sendingIp.provision',
    method: 'POST',
    path: '/account/sending-ip',
    scope: 'admin',
    restricted: 'account_wide',
    body: { mode: 'simulated' },
    ok: [200, 409],
  },
  { proc: 'sendingIp.get', method: 'GET', path: '/account/sending-ip', scope: null, restricted: 'allowed' },
  { proc: 'sendingIp.deprovision', method: 'DELETE', path: '/account/sending-ip', scope: 'admin', restricted: 'account_wide' },
  { proc: 'forwards.create', method: 'POST', path: '/boxes/{box}/forwards', scope: 'admin', restricted: 'own_box', body: { to: 'probe@remote.invalid' } },
  { proc: 'forwards.list', method: 'GET', path: '/boxes/{box}/forwards', scope: null, restricted: 'own_box' },
  { proc: 'forwards.delete', method: 'DELETE', path: '/boxes/{box}/forwards/{forward}', scope: 'admin', restricted: 'own_box' },
  { proc: 'guard.pauseState', method: 'GET', path: '/account/pause', scope: null, restricted: 'filtered' },
  // Each pause row is followed by its resume: the account or box a probe pauses is active again afterwards.
  { proc: 'guard.pauseAccount', method: 'POST', path: '/account/pause', scope: 'admin', restricted: 'account_wide' },
  { proc: 'guard.resumeAccount', method: 'POST', path: '/account/resume', scope: 'admin', restricted: 'account_wide' },
  { proc: 'guard.pauseBox', method: 'POST', path: '/boxes/{box}/pause', scope: 'admin', restricted: 'own_box' },
  { proc: 'guard.resumeBox', method: 'POST', path: '/boxes/{box}/resume', scope: 'admin', restricted: 'own_box' },
  { proc: 'guard.boxCaps', method: 'GET', path: '/boxes/{box}/caps', scope: null, restricted: 'own_box' },
  { proc: 'guard.setBoxCaps', method: 'PUT', path: '/boxes/{box}/caps', scope: 'admin', restricted: 'own_box', body: { caps: {} } },
  { proc: 'guard.keyCaps', method: 'GET', path: '/account/keys/{key}/caps', scope: 'admin', restricted: 'account_wide' },
];

const ALL_SCOPES: Scope[] = ['send', 'receive', 'admin'];
const MISSING_BOX = 'box_00000000000000000000';
const MISSING_KEY = 'key_00000000000000000000';
const MISSING_MESSAGE = 'msg_00000000000000000000';
const MISSING_BULK = 'bulk_00000000000000000000';
const MISSING_REVIEW = 'rev_00000000000000000000';
const SUPPRESSED = 'bounced@remote.invalid';
const MISSING_APP_PASSWORD = 'apw_00000000000000000000';
type Ids = {
  box: string;
  key: string;
  message?: string;
  attachment?: string;
  thread?: string;
  question?: string;
  feature?: string;
  apw?: string;
  forward?: string;
  entry?: string;
  bulk?: string;
  endpoint?: string;
  draft?: string;
  review?: string;
};
const MISSING_THREAD = 'thr_00000000000000000000';
const MISSING_DRAFT = 'drf_00000000000000000000';
const MISSING_ATTACHMENT = 'att_00000000000000000000';
/** The attachment every fixture send carries (a message with a file, for the attachment routes). */
const PROBE_FILE = [{ filename: 'probe.txt', content_type: 'text/plain', content_b64: Buffer.from('security probe').toString('base64') }];
/** The attachment id of a stored message. */
async function attachmentOf(messageId: string): Promise<string> {
  return (await t.db.messageAttachment.findFirstOrThrow({ where: { messageId }, select: { id: true } })).id;
}

let t: TestServer;

/** An account with a spare (non-primary) box and a spare (non-owner) key, the targets of {box} and {key}. */
interface Fixture {
  account: TestAccount;
  primaryBoxId: string;
  spareBoxId: string;
  spareKeyId: string;
  spareKey: string;
  /** A message sent from the spare box (it stays queued: no worker runs here). */
  spareMessageId: string;
  /** Its attachment. */
  spareAttachmentId: string;
  /** Its thread. */
  spareThreadId: string;
  /** A support question and a feature request of the account. */
  questionId: string;
  featureId: string;
  /** An app-password of the account. */
  appPasswordId: string;
  /** A forward of the spare box. */
  forwardId: string;
  /** A block list entry of the spare box. */
  entryId: string;
  /** A bulk job sent from the spare box (it stays queued: no worker runs here). */
  bulkId: string;
  /** A webhook endpoint for the spare box's events (disabled: nothing is pushed). */
  endpointId: string;
  /** A draft of the spare box. */
  draftId: string;
  /** A send from the spare box held for the owner's review (by a key whose policy is all). */
  reviewId: string;
}

let A: Fixture; // the account whose resources are attacked
let B: Fixture; // another account
let revokedKey: string; // an all-scope key of A, revoked
const scopedKeys = new Map<string, string>(); // "send,receive" -> raw key of A with exactly those scopes
const scopedKeysOfC = new Map<Scope, string>(); // single-scope keys of a third account, for calls that succeed

async function fixture(): Promise<Fixture> {
  const account = await signupAccount(t, `sec-${randomBytes(4).toString('hex')}@example.com`);
  const boxes = await rest(t, 'GET', '/boxes', { key: account.apiKey });
  const spare = await rest(t, 'POST', '/boxes', { key: account.apiKey, body: { address: 'spare' } });
  if (spare.status !== 200) throw new Error(`box create failed: ${JSON.stringify(spare.body)}`);
  const key = await mintKey(t, account.apiKey, ALL_SCOPES);
  const sent = await rest(t, 'POST', '/messages/send', {
    key: account.apiKey,
    body: { from: spare.body.address, to: 'fixture@remote.invalid', text: 'fixture', attachments: PROBE_FILE },
  });
  if (sent.status !== 200) throw new Error(`send failed: ${JSON.stringify(sent.body)}`);
  await t.db.suppression.create({ data: { accountId: account.accountId, address: SUPPRESSED, reason: 'bounce' } });
  const question = await rest(t, 'POST', '/support/questions', { key: account.apiKey, body: { subject: 'fixture', body: 'fixture' } });
  const feature = await rest(t, 'POST', '/feature-requests', {
    key: account.apiKey,
    body: { title: 'fixture feature', description: 'a feature request of the fixture' },
  });
  const appPassword = await rest(t, 'POST', '/account/app-passwords', { key: account.apiKey, body: { label: 'fixture' } });
  const sendingIp = await rest(t, 'POST', '/account/sending-ip', { key: account.apiKey, body: { mode: 'simulated' } });
  const forward = await rest(t, 'POST', `/boxes/${spare.body.id}/forwards`, { key: account.apiKey, body: { to: 'fixture-forward@remote.invalid' } });
  const entry = await rest(t, 'POST', '/lists', { key: account.apiKey, body: { list: 'block', value: 'fixture.example', box: spare.body.id } });
  const bulk = await rest(t, 'POST', '/messages/send/bulk', {
    key: account.apiKey,
    body: { from: spare.body.address, messages: [{ to: 'fixture@remote.invalid', text: 'fixture' }] },
  });
  const endpoint = await rest(t, 'POST', '/webhook-endpoints', {
    key: account.apiKey,
    body: { url: 'https://agent.example.com/fixture', box_ids: [spare.body.id], enabled: false },
  });
  const draft = await rest(t, 'POST', '/drafts', { key: account.apiKey, body: { from: spare.body.address, to: 'fixture@remote.invalid', text: 'fixture' } });
  const held = await heldSend(account.apiKey, spare.body.address);
  if (
    question.status !== 200 ||
    feature.status !== 200 ||
    appPassword.status !== 200 ||
    sendingIp.status !== 200 ||
    forward.status !== 200 ||
    entry.status !== 200 ||
    bulk.status !== 200 ||
    endpoint.status !== 200 ||
    draft.status !== 200
  ) {
    throw new Error(
      `fixture failed: ${JSON.stringify([question.body, feature.body, appPassword.body, sendingIp.body, forward.body, entry.body, bulk.body, endpoint.body, draft.body])}`,
    );
  }
  return {
    account,
    primaryBoxId: boxes.body.boxes[0].id,
    spareBoxId: spare.body.id,
    spareKeyId: key.id,
    spareKey: key.api_key,
    spareMessageId: sent.body.message_id,
    spareAttachmentId: await attachmentOf(sent.body.message_id),
    spareThreadId: sent.body.thread_id,
    questionId: question.body.id,
    featureId: feature.body.id,
    appPasswordId: appPassword.body.id,
    forwardId: forward.body.id,
    entryId: entry.body.id,
    bulkId: bulk.body.id,
    endpointId: endpoint.body.id,
    draftId: draft.body.id,
    reviewId: held,
  };
}

/** A send from `from` held for the owner's review: made with a key whose review policy is all. */
async function heldSend(ownerKey: string, from: string): Promise<string> {
  const reviewed = await mintKey(t, ownerKey, ['send'], { review: 'all' });
  const r = await rest(t, 'POST', '/messages/send', { key: reviewed.api_key, body: { from, to: 'fixture-review@remote.invalid', text: 'fixture' } });
  if (r.status !== 202) throw new Error(`held send failed: ${r.status} ${JSON.stringify(r.body)}`);
  // The review stays; the key goes, so the account's key list is what the other cases expect.
  await rest(t, 'DELETE', `/account/keys/${reviewed.id}`, { key: ownerKey });
  return r.body.id;
}

function fill(path: string, ids: Ids): string {
  return (
    path
      .replace('{box}', ids.box)
      .replace('{key}', ids.key)
      .replace('{message}', ids.message ?? MISSING_MESSAGE)
      .replace('{attachment}', ids.attachment ?? MISSING_ATTACHMENT)
      .replace('{thread}', ids.thread ?? MISSING_THREAD)
      .replace('{address}', encodeURIComponent(SUPPRESSED))
      // No deliveries exist here (no webhook is set): any id is another account's or none at all.
      .replace('{delivery}', 'whd_00000000000000000000')
      .replace('{question}', ids.question ?? 'sq_00000000000000000000')
      .replace('{feature}', ids.feature ?? 'fr_00000000000000000000')
      .replace('{payment}', 'pi_00000000000000000000')
      .replace('{apw}', ids.apw ?? MISSING_APP_PASSWORD)
      .replace('{forward}', ids.forward ?? 'fwd_00000000000000000000')
      .replace('{entry}', ids.entry ?? 'tle_00000000000000000000')
      .replace('{bulk}', ids.bulk ?? MISSING_BULK)
      .replace('{endpoint}', ids.endpoint ?? 'whe_00000000000000000000')
      .replace('{draft}', ids.draft ?? MISSING_DRAFT)
      .replace('{review}', ids.review ?? MISSING_REVIEW)
  );
}

const targets = (f: Fixture): Ids => ({
  box: f.spareBoxId,
  key: f.spareKeyId,
  message: f.spareMessageId,
  attachment: f.spareAttachmentId,
  thread: f.spareThreadId,
  question: f.questionId,
  feature: f.featureId,
  apw: f.appPasswordId,
  forward: f.forwardId,
  entry: f.entryId,
  bulk: f.bulkId,
  endpoint: f.endpointId,
  draft: f.draftId,
  review: f.reviewId,
});

function call(route: RouteCase, opts: { key?: string; headers?: Record<string, string>; ids?: Ids; body?: unknown }) {
  const body = opts.body ?? route.body;
  return rest(t, route.method, fill(route.path, opts.ids ?? targets(A)), {
    ...(opts.key ? { key: opts.key } : {}),
    ...(opts.headers ? { headers: opts.headers } : {}),
    ...(body !== undefined ? { body } : {}),
  });
}

function expectError(r: JsonResponse, status: number, code: string, label: string) {
  expect({ status: r.status, code: r.body?.error?.code }, `${label}: ${JSON.stringify(r.body)}`).toEqual({ status, code });
  expect(r.body.error.request_id).toMatch(/^req_/);
}

beforeAll(async () => {
  // Fixtures create many bulk jobs per account, none of which runs here (no worker): the active-job bound has its test.
  t = await startTestServer({ env: { FORWARD_CONFIRMATIONS_PER_DAY: '1000', BULK_MAX_ACTIVE_JOBS: '1000', WEBHOOK_MAX_ENDPOINTS: '1000' } });
  // The mail listeners (not started here) keep the certificate GET /mail-clients/certificate shows: as their start would.
  await mailTlsMaterial(t.svc);
  const [a, b, c] = await Promise.all([fixture(), fixture(), signupAccount(t, 'sec-c@example.com')]);
  A = a;
  B = b;
  for (const s of ALL_SCOPES) scopedKeysOfC.set(s, (await mintKey(t, c.apiKey, [s])).api_key);
  const revoked = await mintKey(t, A.account.apiKey, ALL_SCOPES);
  const r = await rest(t, 'DELETE', `/account/keys/${revoked.id}`, { key: A.account.apiKey });
  if (r.status !== 200) throw new Error(`revoke failed: ${JSON.stringify(r.body)}`);
  revokedKey = revoked.api_key;
  const combos: Scope[][] = [['send'], ['receive'], ['admin'], ['receive', 'admin'], ['send', 'admin'], ['send', 'receive']];
  for (const scopes of combos) scopedKeys.set(scopes.join(','), (await mintKey(t, A.account.apiKey, scopes)).api_key);
});
afterAll(() => t?.stop());

const routeName = (r: RouteCase) => `${r.method} ${r.path}`;

describe('(a) no key, a malformed header, an unknown or a revoked key: 401 with getting_started', () => {
  it.each(ROUTES.map((r) => [routeName(r), r] as const))('%s', async (_name, route) => {
    const ownerKey = A.account.apiKey;
    const variants: [string, { key?: string; headers?: Record<string, string> }][] = [
      ['no Authorization header', {}],
      ['an empty Authorization header', { headers: { authorization: '' } }],
      ['the key without "Bearer"', { headers: { authorization: ownerKey } }],
      ['another scheme', { headers: { authorization: `Basic ${ownerKey}` } }],
      ['"Bearer" without a key', { headers: { authorization: 'Bearer' } }],
      ['two tokens', { headers: { authorization: `Bearer ${ownerKey} ${ownerKey}` } }],
      ['a key that does not exist', { key: `bxs_live_${'A'.repeat(43)}` }],
      ['a key without the bxs_live_ prefix', { key: ownerKey.replace('bxs_live_', 'bxs_test_') }],
      ['a truncated key', { key: ownerKey.slice(0, -1) }],
      ['a revoked key', { key: revokedKey }],
    ];
    for (const [label, opts] of variants) {
      const r = await call(route, opts);
      expectError(r, 401, 'unauthorized', label);
      const gs = r.body.error.getting_started;
      expect(gs, label).toBeDefined();
      expect(gs.signup, label).toBe(`${t.apiBase}/signup/agentic`);
      expect(gs.docs, label).toBe(`${t.url}/docs`);
    }
  });
});

describe('(b) scopes', () => {
  const scoped = ROUTES.filter((r): r is RouteCase & { scope: Scope } => r.scope !== null);
  const anyKey = ROUTES.filter((r) => r.scope === null);

  it.each(scoped.map((r) => [routeName(r), r.scope, r] as const))('%s needs %s: a key without it gets 403 insufficient_scope', async (_name, scope, route) => {
    const others = ALL_SCOPES.filter((s) => s !== scope);
    // Every key that lacks the scope, up to one holding both other scopes.
    for (const scopes of [...others.map((s) => [s]), others]) {
      const key = scopedKeys.get(ALL_SCOPES.filter((s) => scopes.includes(s)).join(','))!;
      const r = await call(route, { key });
      expectError(r, 403, 'insufficient_scope', `key with ${scopes.join('+')}`);
      expect(r.body.error.required_scope).toBe(scope);
    }
  });

  it.each(scoped.map((r) => [routeName(r), r.scope, r] as const))('%s: a key with only %s gets through', async (_name, scope, route) => {
    // On a third account and at ids that do not exist, so nothing of A changes; the answer must not be about the key.
    const r = await call(route, {
      key: scopedKeysOfC.get(scope)!,
      ids: { box: MISSING_BOX, key: MISSING_KEY, message: MISSING_MESSAGE, thread: MISSING_THREAD },
    });
    expect([401, 403], `${JSON.stringify(r.body)}`).not.toContain(r.status);
    expect(r.status === 200 || r.status === 404 || (route.ok ?? []).includes(r.status), `${r.status} ${JSON.stringify(r.body)}`).toBe(true);
  });

  it.each(anyKey.map((r) => [routeName(r), r] as const))('%s needs no particular scope: every single-scope key gets 200', async (_name, route) => {
    for (const s of ALL_SCOPES) {
      const r = await call(route, { key: scopedKeys.get(s)! });
      expect(route.ok ?? [200], `${s}: ${r.status} ${JSON.stringify(r.body)}`).toContain(r.status);
    }
  });
});

describe("(c) another account's resource: 404, never 403", () => {
  const withIds = ROUTES.filter((r) => /\{(box|key|message|thread|apw|entry|bulk|endpoint|draft|review)\}/.test(r.path));

  it('every route with an id is covered', () => {
    expect(withIds.map((r) => r.proc).sort()).toEqual([
      'appPasswords.revoke',
      'audit.messageBundle',
      'boxes.delete',
      'boxes.setSignature',
      'boxes.update',
      'bulk.cancel',
      'bulk.get',
      'drafts.delete',
      'drafts.get',
      'drafts.send',
      'drafts.update',
      'forwards.create',
      'forwards.delete',
      'forwards.list',
      'guard.boxCaps',
      'guard.keyCaps',
      'guard.pauseBox',
      'guard.resumeBox',
      'guard.setBoxCaps',
      'keys.revoke',
      'lists.getPolicy',
      'lists.remove',
      'lists.setPolicy',
      'messages.attachment',
      'messages.attachmentText',
      'messages.cancel',
      'messages.delete',
      'messages.get',
      'messages.labels',
      'messages.reply',
      'reviews.get',
      'reviews.withdraw',
      'threads.get',
      'threads.labels',
      'webhookEndpoints.delete',
      'webhookEndpoints.deliveries',
      'webhookEndpoints.get',
      'webhookEndpoints.redeliver',
      'webhookEndpoints.rotateSecret',
      'webhookEndpoints.update',
    ]);
  });

  it("another account's suppression list is not visible or changeable", async () => {
    const seen = await rest(t, 'GET', `/suppression/${encodeURIComponent(SUPPRESSED)}`, { key: scopedKeysOfC.get('send')! });
    expect(seen.body).toMatchObject({ suppressed: false, entry: null });
    const list = await rest(t, 'GET', '/suppression', { key: scopedKeysOfC.get('send')! });
    expect(list.body.suppressions).toEqual([]);
    expectError(
      await rest(t, 'POST', `/suppression/${encodeURIComponent(SUPPRESSED)}/unblock`, { key: scopedKeysOfC.get('admin')! }),
      404,
      'not_found',
      'unblock',
    );
    expect((await rest(t, 'GET', `/suppression/${encodeURIComponent(SUPPRESSED)}`, { key: A.account.apiKey })).body.suppressed).toBe(true);
  });

  it.each(withIds.map((r) => [routeName(r), r] as const))("%s with another account's id", async (_name, route) => {
    // B's owner key holds every scope and no box restriction: the only thing wrong is whose resource it is.
    for (const [label, ids] of [
      ["A's spare box / key", targets(A)],
      [
        "A's primary box / owner key",
        {
          box: A.primaryBoxId,
          key: A.account.keyId,
          message: A.spareMessageId,
          thread: A.spareThreadId,
          bulk: A.bulkId,
          endpoint: A.endpointId,
          draft: A.draftId,
          review: A.reviewId,
        },
      ],
    ] as const) {
      const r = await call(route, { key: B.account.apiKey, ids });
      expectError(r, 404, 'not_found', label);
    }
    // Same answer as for an id that does not exist at all.
    const missing = await call(route, { key: B.account.apiKey, ids: { box: MISSING_BOX, key: MISSING_KEY, message: MISSING_MESSAGE, thread: MISSING_THREAD } });
    expectError(missing, 404, 'not_found', 'missing id');
  });

  it("A's resources are untouched, and lists show only the caller's own", async () => {
    const boxes = await rest(t, 'GET', '/boxes', { key: A.account.apiKey });
    const boxIds = (boxes.body.boxes as { id: string; signature: string | null }[]).map((b) => b.id);
    expect(boxIds).toEqual(expect.arrayContaining([A.primaryBoxId, A.spareBoxId]));
    expect((boxes.body.boxes as { id: string; signature: string | null }[]).find((b) => b.id === A.spareBoxId)?.signature).toBeNull();
    expect((await rest(t, 'GET', '/account', { key: A.spareKey })).status).toBe(200);

    const bBoxes = await rest(t, 'GET', '/boxes', { key: B.account.apiKey });
    expect((bBoxes.body.boxes as { id: string }[]).map((b) => b.id).sort()).toEqual([B.primaryBoxId, B.spareBoxId].sort());
    const bKeys = await rest(t, 'GET', '/account/keys', { key: B.account.apiKey });
    expect((bKeys.body.keys as { id: string }[]).map((k) => k.id).sort()).toEqual([B.account.keyId, B.spareKeyId].sort());
    const bEvents = await rest(t, 'GET', '/events?limit=500', { key: B.account.apiKey });
    expect(bEvents.status).toBe(200);
    for (const e of bEvents.body.events as { account_id: string }[]) expect(e.account_id).toBe(B.account.accountId);
    const text = JSON.stringify([bBoxes.body, bKeys.body, bEvents.body]);
    for (const id of [A.account.accountId, A.primaryBoxId, A.spareBoxId, A.spareKeyId, A.account.keyId]) expect(text).not.toContain(id);
    const bAccount = await rest(t, 'GET', '/account', { key: B.account.apiKey });
    expect(bAccount.body.id).toBe(B.account.accountId);
  });
});

describe('(d) a box-restricted key', () => {
  /** A fresh box of A and a key holding every scope, restricted to that box. */
  async function restricted(by: 'allowed_boxes' | 'allowed_box_ids' = 'allowed_boxes') {
    const local = `own-${randomBytes(3).toString('hex')}`;
    const box = await rest(t, 'POST', '/boxes', { key: A.account.apiKey, body: { address: local } });
    expect(box.status).toBe(200);
    const key = await mintKey(
      t,
      A.account.apiKey,
      ALL_SCOPES,
      by === 'allowed_boxes' ? { allowed_boxes: [box.body.address] } : { allowed_box_ids: [box.body.id] },
    );
    const sent = await rest(t, 'POST', '/messages/send', {
      key: A.account.apiKey,
      body: { from: box.body.address, to: 'own@remote.invalid', text: 'own', attachments: PROBE_FILE },
    });
    expect(sent.status).toBe(200);
    const forward = await rest(t, 'POST', `/boxes/${box.body.id}/forwards`, { key: A.account.apiKey, body: { to: 'own-forward@remote.invalid' } });
    expect(forward.status).toBe(200);
    const entry = await rest(t, 'POST', '/lists', { key: A.account.apiKey, body: { list: 'allow', value: `friend@${local}.example`, box: box.body.id } });
    expect(entry.status).toBe(200);
    const bulk = await rest(t, 'POST', '/messages/send/bulk', {
      key: A.account.apiKey,
      body: { from: box.body.address, messages: [{ to: 'own@remote.invalid', text: 'own' }] },
    });
    expect(bulk.status).toBe(200);
    const endpoint = await rest(t, 'POST', '/webhook-endpoints', {
      key: A.account.apiKey,
      body: { url: 'https://agent.example.com/own', box_ids: [box.body.id], enabled: false },
    });
    expect(endpoint.status).toBe(200);
    const draft = await rest(t, 'POST', '/drafts', { key: A.account.apiKey, body: { from: box.body.address, to: 'own@remote.invalid', text: 'own' } });
    expect(draft.status).toBe(200);
    const reviewId = await heldSend(A.account.apiKey, box.body.address);
    return {
      boxId: box.body.id as string,
      address: box.body.address as string,
      key: key.api_key,
      keyId: key.id,
      messageId: sent.body.message_id as string,
      attachmentId: await attachmentOf(sent.body.message_id),
      threadId: sent.body.thread_id as string,
      forwardId: forward.body.id as string,
      entryId: entry.body.id as string,
      bulkId: bulk.body.id as string,
      endpointId: endpoint.body.id as string,
      draftId: draft.body.id as string,
      reviewId,
    };
  }

  it.each(ROUTES.map((r) => [routeName(r), r.restricted, r] as const))('%s: %s', async (_name, kind, route) => {
    const own = await restricted();
    switch (kind) {
      case 'account_wide': {
        const r = await call(route, { key: own.key, ids: { box: own.boxId, key: A.spareKeyId } });
        expectError(r, 403, 'box_restricted_key', 'restricted key');
        break;
      }
      case 'own_box': {
        for (const other of [A.spareBoxId, A.primaryBoxId]) {
          const r = await call(route, {
            key: own.key,
            ids: {
              box: other,
              key: own.keyId,
              message: A.spareMessageId,
              attachment: A.spareAttachmentId,
              thread: A.spareThreadId,
              entry: A.entryId,
              bulk: A.bulkId,
              endpoint: A.endpointId,
              draft: A.draftId,
              review: A.reviewId,
            },
          });
          expectError(r, 404, 'not_found', 'a box outside the restriction');
        }
        const mine = await call(route, {
          key: own.key,
          ids: {
            box: own.boxId,
            key: own.keyId,
            message: own.messageId,
            attachment: own.attachmentId,
            thread: own.threadId,
            forward: own.forwardId,
            entry: own.entryId,
            bulk: own.bulkId,
            endpoint: own.endpointId,
            draft: own.draftId,
            review: own.reviewId,
          },
        });
        expect(route.ok ?? [200], JSON.stringify(mine.body)).toContain(mine.status);
        break;
      }
      case 'sender': {
        // Without from, the sender is the primary box, which is outside the restriction.
        expectError(await call(route, { key: own.key }), 403, 'box_restricted_key', 'the primary box');
        const other = await rest(t, 'GET', '/boxes', { key: A.account.apiKey });
        const spare = (other.body.boxes as { id: string; address: string }[]).find((b) => b.id === A.spareBoxId)!;
        expectError(await call(route, { key: own.key, body: { ...(route.body as object), from: spare.address } }), 403, 'box_restricted_key', 'another box');
        const mine = await call(route, { key: own.key, body: { ...(route.body as object), from: own.address } });
        expect(mine.status, JSON.stringify(mine.body)).toBe(200);
        break;
      }
      case 'filtered': {
        const r = await call(route, {
          key: own.key,
          ids: { box: own.boxId, key: own.keyId, message: own.messageId, thread: own.threadId, entry: own.entryId },
        });
        expect(r.status, JSON.stringify(r.body)).toBe(200);
        const text = JSON.stringify(r.body);
        expect(text).toContain(own.boxId);
        for (const other of [A.primaryBoxId, A.spareBoxId]) expect(text).not.toContain(other);
        break;
      }
      case 'allowed': {
        const r = await call(route, { key: own.key, ids: { box: own.boxId, key: own.keyId, question: A.questionId, feature: A.featureId } });
        expect(route.ok ?? [200], `${r.status} ${JSON.stringify(r.body)}`).toContain(r.status);
        break;
      }
    }
  });

  it('GET /boxes lists exactly its boxes; GET /events only the events of its boxes', async () => {
    const one = await rest(t, 'POST', '/boxes', { key: A.account.apiKey, body: { address: 'r-one' } });
    const two = await rest(t, 'POST', '/boxes', { key: A.account.apiKey, body: { address: 'r-two' } });
    const outside = await rest(t, 'POST', '/boxes', { key: A.account.apiKey, body: { address: 'r-outside' } });
    const k = await mintKey(t, A.account.apiKey, ['receive'], { allowed_boxes: ['r-one', `r-two@${A.account.domain}`] });
    await rest(t, 'PUT', `/boxes/${two.body.id}/signature`, { key: A.account.apiKey, body: { signature: 'two' } });
    await rest(t, 'PUT', `/boxes/${outside.body.id}/signature`, { key: A.account.apiKey, body: { signature: 'outside' } });

    const boxes = await rest(t, 'GET', '/boxes', { key: k.api_key });
    expect(boxes.status).toBe(200);
    expect((boxes.body.boxes as { id: string }[]).map((b) => b.id)).toEqual([one.body.id, two.body.id]);

    const events = await rest(t, 'GET', '/events?limit=500', { key: k.api_key });
    expect(events.status).toBe(200);
    const seen = (events.body.events as { type: string; data: any }[]).map((e) => [e.type, e.data.box?.id ?? e.data.box_id]);
    expect(seen).toEqual([
      ['box.created', one.body.id],
      ['box.created', two.body.id],
      ['box.signature_updated', two.body.id],
    ]);
    // The cursor still moves to the head, so polling does not rescan what the key cannot see. (The head, not one
    // page of the owner key: the account has more than a page of events by now.)
    const head = await t.db.account.findUniqueOrThrow({ where: { id: A.account.accountId }, select: { chainSeq: true } });
    expect(events.body.next_cursor).toBe(String(head.chainSeq));
    expect(events.body.has_more).toBe(false);

    const typed = await rest(t, 'GET', '/events?type=box.created,signup.completed,api_key.created', { key: k.api_key });
    expect((typed.body.events as { type: string; data: any }[]).map((e) => e.data.box?.id)).toEqual([one.body.id, two.body.id]);
  });

  it('allowed_box_ids restricts the same way', async () => {
    const own = await restricted('allowed_box_ids');
    const boxes = await rest(t, 'GET', '/boxes', { key: own.key });
    expect((boxes.body.boxes as { id: string }[]).map((b) => b.id)).toEqual([own.boxId]);
    expectError(await rest(t, 'DELETE', `/boxes/${A.spareBoxId}`, { key: own.key }), 404, 'not_found', 'other box');
    expectError(await rest(t, 'POST', '/boxes', { key: own.key, body: { address: 'nope' } }), 403, 'box_restricted_key', 'new box');
  });
});

describe('refused calls changed nothing', () => {
  it("A's spare box, spare key and callback URL are as they were", async () => {
    const boxes = await rest(t, 'GET', '/boxes', { key: A.account.apiKey });
    const spare = (boxes.body.boxes as { id: string; signature: string | null; local_part: string }[]).find((b) => b.id === A.spareBoxId);
    expect(spare).toMatchObject({ local_part: 'spare', signature: null });
    expect((boxes.body.boxes as { local_part: string }[]).map((b) => b.local_part)).not.toContain('security-probe');
    const keys = await rest(t, 'GET', '/account/keys', { key: A.account.apiKey });
    expect((keys.body.keys as { id: string; label: string }[]).map((k) => k.id)).toContain(A.spareKeyId);
    expect((keys.body.keys as { label: string }[]).map((k) => k.label)).not.toContain('security-probe');
    const cb = await rest(t, 'GET', '/account/callback-webhook', { key: A.account.apiKey });
    expect(cb.body).toEqual({ agent_callback_webhook: null });
    const apws = await rest(t, 'GET', '/account/app-passwords', { key: A.account.apiKey });
    expect((apws.body.app_passwords as { id: string; label: string }[]).map((p) => p.id)).toContain(A.appPasswordId);
    expect((apws.body.app_passwords as { label: string }[]).map((p) => p.label)).not.toContain('security-probe');
    const bBoxes = await rest(t, 'GET', '/boxes', { key: B.account.apiKey });
    expect((bBoxes.body.boxes as { id: string }[]).map((b) => b.id)).toContain(B.spareBoxId);
  });
});

describe('the security table covers the router', () => {
  type ProcDef = { _def: { type?: string; meta?: { scope?: string; openapi?: { method: string; path: string; protect?: boolean } } } };
  const procedures = (appRouter as unknown as { _def: { procedures: Record<string, ProcDef> } })._def.procedures;
  const normalise = (p: string) => p.replace(/\?.*$/, '').replace(/\{[^}]+\}/g, '{}');

  it('every keyed procedure (protect !== false) has a row, and every row a keyed procedure', () => {
    const keyed = Object.entries(procedures)
      .filter(([, p]) => p._def.meta?.openapi?.protect !== false)
      .map(([name]) => name)
      .sort();
    const rows = ROUTES.map((r) => r.proc).sort();
    expect(keyed.length).toBeGreaterThan(0);
    expect({ missingFromTable: keyed.filter((n) => !rows.includes(n)), notInRouter: rows.filter((n) => !keyed.includes(n)) }).toEqual({
      missingFromTable: [],
      notInRouter: [],
    });
    expect(new Set(rows).size).toBe(rows.length);
  });

  it("each row's method, path and scope match the procedure", () => {
    for (const route of ROUTES) {
      const meta = procedures[route.proc]?._def.meta;
      expect(meta?.openapi, `${route.proc} has a REST route`).toBeDefined();
      expect(`${meta!.openapi!.method} ${normalise(meta!.openapi!.path)}`, route.proc).toBe(`${route.method} ${normalise(route.path)}`);
      expect(meta!.scope ?? null, `${route.proc} scope`).toBe(route.scope);
    }
  });

  it('the OpenAPI document marks every row as needing the bearer key, and only those', async () => {
    const res = await fetch(`${t.url}/openapi.json`);
    expect(res.status).toBe(200);
    const doc = (await res.json()) as {
      paths: Record<string, Record<string, { security?: unknown[]; responses: Record<string, unknown>; 'x-boxes-stream'?: boolean }>>;
    };
    const secured: string[] = [];
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        // The event stream is no router row: events-stream.test.ts covers its key, scope and box restriction.
        if (op['x-boxes-stream']) {
          expect(op.security?.length, path).toBeTruthy();
          continue;
        }
        if (op.security?.length) {
          secured.push(`${method.toUpperCase()} ${normalise(path)}`);
          expect(op.responses, `${method} ${path}`).toHaveProperty('401');
          // 403 where this table refuses a key: a scope it lacks, or an account-wide change by a box-restricted key.
          const row = ROUTES.find((r) => r.method === method.toUpperCase() && normalise(r.path) === normalise(path));
          if (row && (row.scope !== null || row.restricted === 'account_wide')) expect(op.responses, `${method} ${path}`).toHaveProperty('403');
        }
      }
    }
    expect(secured.sort()).toEqual(ROUTES.map((r) => `${r.method} ${normalise(r.path)}`).sort());
  });
});

describe('the attachment content route (served beside the router)', () => {
  const content = (ids: { message: string; attachment: string }, key?: string) =>
    fetch(`${t.apiBase}/messages/${ids.message}/attachments/${ids.attachment}/content`, key ? { headers: { authorization: `Bearer ${key}` } } : {});
  const code = async (r: Response) => ((await r.json()) as { error: { code: string } }).error.code;
  const ownIds = () => ({ message: A.spareMessageId, attachment: A.spareAttachmentId });

  it('needs a key with the receive scope, of the account, and a box-restricted key only for its boxes', async () => {
    const none = await content(ownIds());
    expect([none.status, await code(none)]).toEqual([401, 'unauthorized']);
    const revoked = await content(ownIds(), revokedKey);
    expect([revoked.status, await code(revoked)]).toEqual([401, 'unauthorized']);
    const sendOnly = await content(ownIds(), scopedKeys.get('send')!);
    expect([sendOnly.status, await code(sendOnly)]).toEqual([403, 'insufficient_scope']);
    const otherAccount = await content(ownIds(), B.account.apiKey);
    expect([otherAccount.status, await code(otherAccount)]).toEqual([404, 'not_found']);
    const restrictedToPrimary = await mintKey(t, A.account.apiKey, ['receive'], { allowed_box_ids: [A.primaryBoxId] });
    const outside = await content(ownIds(), restrictedToPrimary.api_key);
    expect([outside.status, await code(outside)]).toEqual([404, 'not_found']);
    const ok = await content(ownIds(), A.account.apiKey);
    expect(ok.status).toBe(200);
    expect(ok.headers.get('x-content-type-options')).toBe('nosniff');
    expect(Buffer.from(await ok.arrayBuffer()).toString()).toBe('security probe');
  });
});
