/**
 * The evidence envelope (beta, opt-in): what an enrolled account's mutating responses carry about the action
 * just taken: which request, which capability, which key (its id), the checks that ran and passed, and how
 * to verify the result (the audit bundle). Accounts that did not opt in get no evidence field.
 */
import { appendEvent } from '../events/append';
import type { Services } from '../shared/context';

export interface PolicyCheck {
  check: string;
  result: 'passed';
  detail: string;
}

export const passed = (check: string, detail: string): PolicyCheck => ({ check, result: 'passed', detail });

/** The calls whose responses carry evidence for an enrolled account. */
export const EVIDENCE_CAPABILITIES = ['messages.send', 'messages.delete', 'keys.create', 'keys.revoke'];

export interface EvidenceInput {
  requestId: string;
  capability: string;
  keyId: string;
  idempotencyKey?: string | null | undefined;
  checks: PolicyCheck[];
  next: { description: string; method: string; url: string };
}

export function buildEvidence(input: EvidenceInput) {
  return {
    request_id: input.requestId,
    capability: input.capability,
    action: 'taken' as const,
    acted_by_key: input.keyId,
    idempotency_key: input.idempotencyKey ?? null,
    policy_checks: input.checks,
    next_verification_step: input.next,
  };
}

export function evidenceStatus(account: { evidenceEnrolledAt: Date | null }) {
  return { enrolled: account.evidenceEnrolledAt !== null, enrolled_at: account.evidenceEnrolledAt?.toISOString() ?? null, covers: EVIDENCE_CAPABILITIES };
}

/** Enrolls the account (once; a repeated opt-in keeps the first time). */
export async function optInEvidence(svc: Services, input: { accountId: string; actorKeyId: string }) {
  return svc.db.$transaction(async (tx) => {
    const enrolled = await tx.account.updateManyAndReturn({
      where: { id: input.accountId, evidenceEnrolledAt: null },
      data: { evidenceEnrolledAt: new Date() },
      select: { evidenceEnrolledAt: true },
    });
    if (enrolled.length) {
      await appendEvent({
        db: tx,
        accountId: input.accountId,
        type: 'account.evidence.enrolled',
        data: { by_key_id: input.actorKeyId, enrolled_at: enrolled[0]!.evidenceEnrolledAt!.toISOString() },
      });
      return evidenceStatus(enrolled[0]!);
    }
    return evidenceStatus(await tx.account.findUniqueOrThrow({ where: { id: input.accountId }, select: { evidenceEnrolledAt: true } }));
  });
}
