import { z } from 'zod';
import { ACCOUNT_STATUSES, PUBLIC_DOMAIN_STATUSES } from './statuses';
import { TrailerStatus } from './credit';
import { HttpsUrl, Timestamp } from './common';
import { DOMAIN_MODES } from './signup';

export const AccountOutput = z
  .object({
    id: z.string().meta({ example: 'acct_0a1b2c3d4e5f6g7h8j9k' }),
    account_status: z
      .enum(ACCOUNT_STATUSES)
      .meta({ description: 'active after confirm; closing once DELETE /account took effect (every key is revoked then, so only the owner sees it)' }),
    primary_address: z.string().meta({ example: 'agent@brave-otter.boxes.localhost' }),
    owner_email: z.string().meta({ description: "The human owner's email", example: 'owner@example.com' }),
    domain: z.object({
      name: z.string().meta({ example: 'brave-otter.boxes.localhost' }),
      mode: z.enum(DOMAIN_MODES),
      status: z
        .enum(PUBLIC_DOMAIN_STATUSES)
        .meta({ description: 'active: mail flows; pending_*: a claim being verified (GET /account/domain shows each record); expired: never proven in time' }),
    }),
    agent_callback_webhook: z.string().nullable().meta({ description: 'Where events are POSTed, or null' }),
    credit_balance_cents: z.number().int().meta({ description: 'Prepaid credit in cents; negative in deficit (details: GET /account/credit/balance)' }),
    balance_state: z.enum(['ok', 'low', 'critical']),
    low_balance: z.boolean().meta({ description: 'The low-balance flag' }),
    emails_covered: z.number().int().meta({ description: 'Estimate of the messages the free allowance and the balance still cover' }),
    trailer: TrailerStatus,
    close_protection: z
      .object({ enabled: z.boolean(), enabled_at: Timestamp.nullable() })
      .meta({ description: 'Close protection (POST /account/close-protection): DELETE /account then waits for the owner to approve by email' }),
    created_at: Timestamp,
  })
  .meta({ id: 'Account' });

export const CallbackWebhookOutput = z.object({
  agent_callback_webhook: z.string().nullable().meta({ description: 'The callback URL, or null when none is set' }),
});

export const CallbackWebhookInput = z.strictObject({
  agent_callback_webhook: HttpsUrl.nullable().meta({ description: 'The https callback URL, or null to remove it' }),
});
