/**
 * Audit: the instance's signing key (public, and for keyed clients), a message's signed audit bundle, signed
 * checkpoints of the chain head and their verification, the evidence envelope (beta) and usermetadata.
 */
import { z } from 'zod';
import {
  auditBundle,
  evidenceStatus,
  getUsermetadata,
  listCheckpoints,
  optInEvidence,
  publicKeys,
  setUsermetadata,
  signCheckpoint,
  verifyCheckpoint,
  AppError,
} from '@boxes/core';
import {
  AuditBundleOutput,
  Checkpoint,
  CheckpointList,
  CheckpointListInput,
  EvidenceStatus,
  MessageIdInput,
  PublicKeyInput,
  PublicKeyOutput,
  UsermetadataInput,
  UsermetadataOutput,
  VerifyCheckpointInput,
  VerifyCheckpointOutput,
} from '@boxes/schemas';
import type { Services } from '@boxes/core';
import { keyProcedure, publicProcedure, router } from '../trpc';

async function publicKeyOf(svc: Services, keyId: string | undefined) {
  const { chosen, keys } = await publicKeys(svc, keyId);
  if (!chosen) throw new AppError('not_found', `No signing key ${keyId} on this instance`);
  return { ...chosen, keys };
}

const KEY_DESCRIPTION =
  'The Ed25519 public key (SPKI PEM) that signs audit bundles and chain checkpoints (compact JWS, alg EdDSA). key_id picks a key by the kid of what it signed: rotated keys stay served, so old bundles still verify. keys lists every key ever used.';

export const auditRouter = router({
  publicKey: publicProcedure
    .meta({
      errors: ['not_found'],
      openapi: {
        method: 'GET',
        path: '/audit/public-key',
        tags: ['audit'],
        summary: 'The audit signing key',
        description: `No key needed. ${KEY_DESCRIPTION}`,
        protect: false,
      },
    })
    .input(PublicKeyInput)
    .output(PublicKeyOutput)
    .query(({ ctx, input }) => publicKeyOf(ctx.svc, input.key_id)),
  accountPublicKey: keyProcedure
    .meta({
      errors: ['not_found'],
      openapi: {
        method: 'GET',
        path: '/account/audit/public-key',
        tags: ['audit'],
        summary: 'The audit signing key (keyed)',
        description: `The same as GET /audit/public-key, kept for compatibility. Any valid key. ${KEY_DESCRIPTION}`,
      },
    })
    .input(PublicKeyInput)
    .output(PublicKeyOutput)
    .query(({ ctx, input }) => publicKeyOf(ctx.svc, input.key_id)),
  messageBundle: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'receive',
      openapi: {
        method: 'GET',
        path: '/messages/{id}/audit',
        tags: ['audit'],
        summary: "A message's signed audit bundle",
        description:
          "A compact JWS (EdDSA, Ed25519) whose payload holds the message metadata, the SHA-256 of its raw bytes, every event about it with its _chain hashes, the account's chain head at signing time, evidence.body_state (available, or {reclaimed_at_utc}), the retention in force and signing.public_key_url. Verify it with jose (compactVerify with importSPKI(pem, 'EdDSA')) or openssl (the guide: /docs/guide/audit).",
      },
    })
    .input(MessageIdInput)
    .output(AuditBundleOutput)
    .query(({ ctx, input }) => auditBundle(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, id: input.id })),
  checkpoint: keyProcedure
    .meta({
      scope: 'receive',
      openapi: {
        method: 'POST',
        path: '/events/checkpoints',
        tags: ['audit'],
        summary: 'Sign the chain head now',
        description:
          "A signed checkpoint of the account's chain head (seq, hash, time) as a compact JWS. Keep it: it must verify against the chain later (POST /events/checkpoints/verify, or offline with openssl as the guide shows: /docs/guide/audit). The instance also signs every moved head hourly.",
      },
    })
    .input(z.void())
    .output(Checkpoint)
    .mutation(({ ctx }) => signCheckpoint(ctx.svc, ctx.account.id)),
  checkpoints: keyProcedure
    .meta({
      scope: 'receive',
      openapi: {
        method: 'GET',
        path: '/events/checkpoints',
        tags: ['audit'],
        summary: 'Signed checkpoints of the chain head',
        description: 'Newest first: the hourly ones and those asked for.',
      },
    })
    .input(CheckpointListInput)
    .output(CheckpointList)
    .query(({ ctx, input }) => listCheckpoints(ctx.svc, { accountId: ctx.account.id, limit: input.limit })),
  verifyCheckpoint: keyProcedure
    .meta({
      scope: 'receive',
      openapi: {
        method: 'POST',
        path: '/events/checkpoints/verify',
        tags: ['audit'],
        summary: 'Verify a kept checkpoint against the current chain',
        description:
          'Checks the signature (by any key this instance has used), that the checkpoint is of this account, and that the stored events 1..seq recompute from the genesis hash to its hash. ok false names the reason (an altered event fails even if every later hash was recomputed).',
      },
    })
    .input(VerifyCheckpointInput)
    .output(VerifyCheckpointOutput)
    .mutation(({ ctx, input }) => verifyCheckpoint(ctx.svc, { accountId: ctx.account.id, checkpoint: input.checkpoint })),
  evidenceOptIn: keyProcedure
    .meta({
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'POST',
        path: '/beta/evidence/opt-in',
        tags: ['audit'],
        summary: 'Enroll in the evidence envelope (beta)',
        description:
          'From then on the responses of POST /messages/send, DELETE /messages/{id}, POST /account/keys and DELETE /account/keys/{id} carry evidence: request_id, capability, action, acted_by_key, idempotency_key, policy_checks and next_verification_step. Admin scope, unrestricted key.',
      },
    })
    .input(z.void())
    .output(EvidenceStatus)
    .mutation(({ ctx }) => optInEvidence(ctx.svc, { accountId: ctx.account.id, actorKeyId: ctx.key.id })),
  evidenceStatus: keyProcedure
    .meta({
      openapi: { method: 'GET', path: '/beta/evidence/status', tags: ['audit'], summary: 'Evidence envelope enrollment (beta)', description: 'Any valid key.' },
    })
    .input(z.void())
    .output(EvidenceStatus)
    .query(({ ctx }) => evidenceStatus(ctx.account)),
  getUsermetadata: keyProcedure
    .meta({
      openapi: {
        method: 'GET',
        path: '/account/usermetadata',
        tags: ['account'],
        summary: 'Account settings (usermetadata)',
        description: 'audit_retention_days: days a message body is kept before it is reclaimed (default 14). Any valid key.',
      },
    })
    .input(z.void())
    .output(UsermetadataOutput)
    .query(({ ctx }) => getUsermetadata(ctx.svc, { accountId: ctx.account.id })),
  setUsermetadata: keyProcedure
    .meta({
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'PUT',
        path: '/account/usermetadata',
        tags: ['account'],
        summary: 'Set account settings (usermetadata)',
        description:
          'audit_retention_days (1 to 90, null for the default 14): bodies (parsed and raw) of messages older than this are reclaimed by the hourly audit job (message.deleted with reason retention); metadata, the raw SHA-256 and events stay. Admin scope, unrestricted key.',
      },
    })
    .input(UsermetadataInput)
    .output(UsermetadataOutput)
    .mutation(({ ctx, input }) =>
      setUsermetadata(ctx.svc, { accountId: ctx.account.id, auditRetentionDays: input.audit_retention_days, actorKeyId: ctx.key.id }),
    ),
});
