/**
 * The evidence envelope on responses (beta): the checks keyProcedure ran for this call, and the envelope
 * added to a result when the account is enrolled (POST /beta/evidence/opt-in). Not enrolled: no field.
 */
import { buildEvidence, passed, type PolicyCheck, type Services } from '@boxes/core';
import type { Account, ApiKey } from '@boxes/db';

interface KeyedContext {
  svc: Services;
  requestId: string;
  account: Account;
  key: ApiKey;
  boxScope: string[] | null;
}

/** What keyProcedure checked before the procedure ran: the key, its scope and, for account-wide calls, no box restriction. */
export function keyChecks(ctx: KeyedContext, scope: string | null, accountWide = false): PolicyCheck[] {
  const out = [passed('api_key', `key ${ctx.key.id} (${ctx.key.prefix}...) is active on this account`)];
  if (scope) out.push(passed('scope', `the key holds the ${scope} scope`));
  if (accountWide) out.push(passed('account_wide_key', 'the key is not restricted to some boxes'));
  return out;
}

export function withEvidence<T extends object>(
  ctx: KeyedContext,
  result: T,
  opts: { capability: string; checks: PolicyCheck[]; idempotencyKey?: string | null | undefined; next: { description: string; method: string; url: string } },
): T {
  if (!ctx.account.evidenceEnrolledAt) return result;
  return {
    ...result,
    evidence: buildEvidence({
      requestId: ctx.requestId,
      capability: opts.capability,
      keyId: ctx.key.id,
      idempotencyKey: opts.idempotencyKey,
      checks: opts.checks,
      next: opts.next,
    }),
  };
}

export const bundleStep = (svc: Services, messageId: string) => ({
  description: 'Fetch the signed audit bundle of this message (JWS, EdDSA) and verify it with the public key it names',
  method: 'GET',
  url: `${svc.config.apiBaseUrl}/messages/${messageId}/audit`,
});

export const eventsStep = (svc: Services) => ({
  description: 'Read the event this call appended on GET /events, and ask for a signed checkpoint of the chain head (POST /events/checkpoints)',
  method: 'GET',
  url: `${svc.config.apiBaseUrl}/events`,
});
