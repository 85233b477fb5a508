/** Audit bundles, the signing key, chain checkpoints, the evidence envelope (beta), usermetadata and closing. */
import { z } from 'zod';
import { ACCOUNT_STATUSES, EXPORT_STATUSES } from './statuses';
import { Timestamp } from './common';
import { EventOutput } from './events';

export const PublicKey = z
  .object({
    key_id: z.string().meta({ description: 'The JWS kid of what this key signed', example: 'ask_0a1b2c3d4e5f6g7h8j9k' }),
    algorithm: z.literal('EdDSA'),
    curve: z.literal('Ed25519'),
    public_key_pem: z.string().meta({
      description: 'SPKI PEM: save it as pub.pem for openssl, or importSPKI(pem, "EdDSA") with jose',
      example: '-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA...\n-----END PUBLIC KEY-----\n',
    }),
    created_at: Timestamp,
    retired_at: Timestamp.nullable().meta({ description: 'Set once the key was rotated out; what it signed still verifies with it' }),
  })
  .meta({ id: 'AuditPublicKey' });

export const PublicKeyInput = z.strictObject({
  key_id: z.string().max(40).optional().meta({ description: 'A key id (a JWS kid); default: the current key' }),
});

export const PublicKeyOutput = PublicKey.extend({
  keys: z.array(PublicKey).meta({ description: 'Every key this instance has signed with, the current one last' }),
});

export const AuditBundleOutput = z.object({
  bundle: z.string().meta({ description: 'The signed bundle: a compact JWS (header.payload.signature, base64url), alg EdDSA, kid = signing.key_id' }),
  payload: z
    .object({
      typ: z.literal('boxes.audit_bundle'),
      version: z.number().int(),
      issuer: z.string(),
      issued_at: Timestamp,
      account_id: z.string(),
      account_domain: z.string().nullable(),
      message: z.record(z.string(), z.unknown()).meta({ description: 'The message metadata as GET /messages/{id} shows it, without the body' }),
      raw_sha256: z
        .string()
        .nullable()
        .meta({ description: 'Hex SHA-256 of the raw RFC 5322 bytes as stored (kept after the body is reclaimed); null if a sent message was never composed' }),
      raw_state: z.enum(['available', 'reclaimed', 'not_composed']),
      events: z.array(EventOutput).meta({ description: 'Every event about this message, as GET /events serves it (with _chain)' }),
      chain_head: z
        .object({ seq: z.number().int(), hash: z.string(), at: Timestamp })
        .meta({ description: "The account's chain head when the bundle was signed" }),
      evidence: z.object({
        body_state: z.union([z.literal('available'), z.object({ reclaimed_at_utc: Timestamp })]).meta({ description: 'available, or {reclaimed_at_utc}' }),
      }),
      retention: z.object({
        audit_retention_days: z.number().int(),
        source: z.enum(['default', 'usermetadata']),
        body_reclaim_due_at_utc: Timestamp.nullable(),
      }),
      signing: z.object({ alg: z.literal('EdDSA'), key_id: z.string(), public_key_url: z.string(), public_keys_url: z.string() }),
    })
    .meta({ description: 'The decoded payload of bundle (the same bytes; verify the JWS, not this copy)' }),
  format: z.string(),
});

export const Checkpoint = z
  .object({
    id: z.string(),
    checkpoint: z
      .string()
      .meta({ description: 'The signed checkpoint (compact JWS, EdDSA) to keep: its payload is {typ, issuer, account_id, seq, hash, signed_at, key_id}' }),
    account_id: z.string(),
    seq: z.number().int(),
    hash: z.string(),
    signed_at: Timestamp,
    key_id: z.string(),
    public_key_url: z.string(),
  })
  .meta({ id: 'ChainCheckpoint' });

export const CheckpointList = z.object({ checkpoints: z.array(Checkpoint) });
export const CheckpointListInput = z.strictObject({
  limit: z.coerce.number<number>().int().min(1).max(200).default(24).meta({ description: 'How many, newest first (default 24)' }),
});
export const VerifyCheckpointInput = z.strictObject({
  checkpoint: z.string().min(1).max(4000).meta({ description: 'A checkpoint JWS you kept' }),
});
export const VerifyCheckpointOutput = z.object({
  ok: z.boolean(),
  signature_valid: z.boolean(),
  key_id: z.string().nullable(),
  seq: z.number().int().nullable(),
  hash: z.string().nullable(),
  signed_at: z.string().nullable(),
  recomputed_hash_at_seq: z.string().nullable().meta({ description: 'The hash the stored events 1..seq recompute to now' }),
  reason: z.string().nullable(),
  verified_at: Timestamp,
});

export const PolicyCheck = z.object({
  check: z.string().meta({
    description: 'api_key, scope, box_restriction, idempotency, recipients, header_rules, context_size, from_domain, domain_verified, suppression, credit, ...',
    example: 'from_domain',
  }),
  result: z.literal('passed'),
  detail: z.string().meta({ example: 'agent@brave-otter.boxes.localhost is on the account domain brave-otter.boxes.localhost' }),
});

export const Evidence = z
  .object({
    request_id: z.string(),
    capability: z.string().meta({ description: 'The procedure that acted', example: 'messages.send' }),
    action: z.enum(['taken', 'suggested']).meta({ description: 'taken; suggested is reserved for a future dry run' }),
    acted_by_key: z.string().meta({ description: 'The id of the key that acted (never the key)', example: 'key_0a1b2c3d4e5f6g7h8j9k' }),
    idempotency_key: z.string().nullable(),
    policy_checks: z
      .array(PolicyCheck)
      .meta({ description: 'The checks that ran and passed, in order; a check that did not apply (no headers, an unrestricted key) is absent' }),
    next_verification_step: z.object({ description: z.string(), method: z.string(), url: z.string() }),
  })
  .meta({ id: 'Evidence', description: 'Beta: present only for accounts enrolled with POST /beta/evidence/opt-in' });

export const EvidenceStatus = z.object({
  enrolled: z.boolean(),
  enrolled_at: Timestamp.nullable(),
  covers: z.array(z.string()).meta({ description: 'The calls whose responses carry evidence once enrolled' }),
});

export const UsermetadataOutput = z.object({
  audit_retention_days: z
    .number()
    .int()
    .meta({ description: 'Days a message body is kept after it was recorded before it is reclaimed (1 to 90; default 14)' }),
  audit_retention_source: z.enum(['default', 'usermetadata']),
});
export const UsermetadataInput = z.strictObject({
  audit_retention_days: z.number().int().min(1).max(90).nullable().meta({ description: '1 to 90 days; null returns to the default (14)', example: 30 }),
});

export const CloseProtectionOutput = z.object({
  enabled: z.boolean(),
  enabled_at: Timestamp.nullable(),
});
export const CloseProtectionInput = z.strictObject({
  enabled: z.literal(true).meta({ description: 'Only true: close protection is set-only (support can turn it off)' }),
});

export const CloseAccountInput = z.strictObject({
  confirm_domain: z.string().max(253).optional().meta({
    description: "The account's domain, exactly (case does not matter): without it or wrong, 400 and nothing closes",
    example: 'brave-otter.boxes.localhost',
  }),
});

export const CloseAccountOutput = z.object({
  status: z.enum(['closing', 'pending_owner_approval']),
  account_status: z.enum(ACCOUNT_STATUSES),
  message: z.string(),
  closed_at: Timestamp.nullable(),
  delete_after: Timestamp.nullable().meta({ description: 'When every piece of the account data is deleted for good' }),
  keys_revoked: z.number().int(),
  deliveries_stopped: z.number().int(),
  domains_held_for_transfer: z.array(z.string()).meta({ description: 'Registered domains unlocked for transfer; the auth code is mailed to the owner' }),
  export: z
    .object({
      id: z.string(),
      status: z.enum(EXPORT_STATUSES),
      download_url: z.string().meta({ description: 'Works without a key until expires_at (any number of downloads); 202 while the archive is being built' }),
      expires_at: Timestamp,
      format: z.literal('application/x-tar'),
    })
    .nullable(),
  close_request: z.object({ id: z.string(), status: z.literal('pending_owner_approval'), expires_at: Timestamp }).nullable(),
});

export const SearchIndexingInput = z.strictObject({
  enabled: z.boolean().meta({
    description:
      'false drops every search vector of the account now and keeps none (GET /messages/search then finds nothing); true indexes new mail again, and the worker indexes the stored messages within the hour',
  }),
});
export const SearchIndexingOutput = z.object({ search_indexing: z.boolean() });
