/** Dedicated sending IPs: POST, GET and DELETE /account/sending-ip (one per account). */
import { z } from 'zod';
import { deprovisionSendingIp, getSendingIp, provisionSendingIp } from '@boxes/core';
import { SendingIpDeleted, SendingIpInput, SendingIpOutput } from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

export const sendingIpRouter = router({
  provision: keyProcedure
    .meta({
      errors: ['not_found', 'payment_required', 'sending_ip_exists', 'sending_ip_unavailable'],
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'POST',
        path: '/account/sending-ip',
        tags: ['account'],
        summary: 'Take a dedicated sending IP',
        description:
          "mode live takes one of the addresses this instance offers (SENDING_IPS): status provisioning while the worker checks the address can be bound, then warming (daily caps, from 5,000 a day upward; volume over the cap goes through the shared addresses), then active. The delivery worker binds the account's outbound SMTP connections to it and announces its HELO name. Costs 24.95 USD a month, the first month now (402 payment_required without the credit). mode simulated starts at warming and routes nothing (free). While a row exists, sends carry the account's configuration set (X-Boxes-Configuration-Set). 409 sending_ip_exists when the account has one; 409 sending_ip_unavailable when no address is free. Event account.sending_ip.provisioned once the row is warming.",
      },
    })
    .input(SendingIpInput)
    .output(SendingIpOutput)
    .mutation(({ ctx, input }) => provisionSendingIp(ctx.svc, { accountId: ctx.account.id, mode: input.mode })),
  get: keyProcedure
    .meta({
      errors: ['not_found'],
      openapi: {
        method: 'GET',
        path: '/account/sending-ip',
        tags: ['account'],
        summary: 'The dedicated sending IP',
        description:
          "The row: ip, helo_name, status, provisioning_mode, phase, note, configuration_set and the warm-up schedule with today's cap and count. 404 when the account has none. Any key.",
      },
    })
    .input(z.void())
    .output(SendingIpOutput)
    .query(({ ctx }) => getSendingIp(ctx.svc, ctx.account.id)),
  deprovision: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'DELETE',
        path: '/account/sending-ip',
        tags: ['account'],
        summary: 'Tear down the dedicated sending IP',
        description:
          'Removes the row: the address is free for others, later deliveries use the shared addresses and sends no longer carry the configuration set. The month already charged is not refunded. Event account.sending_ip.deprovisioned. 404 when the account has none.',
      },
    })
    .input(z.void())
    .output(SendingIpDeleted)
    .mutation(({ ctx }) => deprovisionSendingIp(ctx.svc, ctx.account.id)),
});
