/** The webhook: signing secret and scheme, rotation, the delivery log and redelivery (admin scope). */
import { z } from 'zod';
import { AppError, narrowStatus, provisionIot, redeliver, rotateWebhookSecret, webhookConfig, webhookHttpDeps } from '@boxes/core';
import type { WebhookDelivery } from '@boxes/db';
import {
  DeliveryIdInput,
  IotProvisionOutput,
  ListDeliveriesInput,
  ListDeliveriesOutput,
  RotateSecretOutput,
  WEBHOOK_DELIVERY_STATUSES,
  WebhookConfigOutput,
  WebhookDeliveryOutput,
} from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';

/** A webhook delivery as the API shows it (the callback's log and each endpoint's). */
export const presentDelivery = (d: WebhookDelivery) => ({
  id: d.id,
  event_id: d.eventId,
  seq: d.seq,
  event_type: d.eventType,
  url: d.url,
  attempt: d.attempt,
  status: narrowStatus(WEBHOOK_DELIVERY_STATUSES, d.status),
  status_code: d.statusCode,
  error: d.error,
  latency_ms: d.latencyMs,
  next_retry_at: d.nextRetryAt?.toISOString() ?? null,
  redelivery: d.redelivery,
  created_at: d.createdAt.toISOString(),
});

export const webhookRouter = router({
  get: keyProcedure
    .meta({
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'GET',
        path: '/account/webhook',
        tags: ['webhook'],
        summary: 'Signing secret and scheme',
        description: 'The secret that signs deliveries to agent_callback_webhook, and how to verify them.',
      },
    })
    .input(z.void())
    .output(WebhookConfigOutput)
    .query(({ ctx }) => webhookConfig(ctx.svc, ctx.account.id)),
  rotateSecret: keyProcedure
    .meta({
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'POST',
        path: '/account/webhook/secret/rotate',
        tags: ['webhook'],
        summary: 'Rotate the signing secret',
        description: 'Issues a new secret. For 24 hours deliveries carry signatures under both, so a receiver can switch without losing events.',
      },
    })
    .input(z.void())
    .output(RotateSecretOutput)
    .mutation(({ ctx }) => rotateWebhookSecret(ctx.svc, ctx.account.id, ctx.key.id)),
  deliveries: keyProcedure
    .meta({
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'GET',
        path: '/account/webhook/deliveries',
        tags: ['webhook'],
        summary: 'Recent delivery attempts',
        description: 'Newest first: status code, latency, next retry.',
      },
    })
    .input(ListDeliveriesInput)
    .output(ListDeliveriesOutput)
    .query(async ({ ctx, input }) => ({
      deliveries: (
        await ctx.svc.db.webhookDelivery.findMany({
          where: { accountId: ctx.account.id, endpointId: null, ...(input.status ? { status: input.status } : {}) },
          orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
          take: input.limit,
        })
      ).map(presentDelivery),
    })),
  redeliver: keyProcedure
    .meta({
      errors: ['conflict', 'not_found'],
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'POST',
        path: '/account/webhook/deliveries/{id}/redeliver',
        tags: ['webhook'],
        summary: 'Redeliver an event now',
        description: 'Sends the event of a recorded attempt again (outside the ordered stream) and records the attempt.',
      },
    })
    .input(DeliveryIdInput)
    .output(WebhookDeliveryOutput)
    .mutation(async ({ ctx, input }) => {
      const r = await redeliver(ctx.svc, webhookHttpDeps(ctx.svc.config), ctx.account.id, input.id);
      if (!r) throw new AppError('not_found', `webhook delivery ${input.id} not found`);
      if (!r.delivery) throw new AppError('conflict', `Cannot redeliver: ${r.reason}`);
      return presentDelivery(r.delivery);
    }),
});

export const iotRouter = router({
  provision: keyProcedure
    .meta({
      scope: 'admin',
      accountWide: true,
      openapi: {
        method: 'POST',
        path: '/account/iot/provision',
        tags: ['push'],
        summary: 'Issue an MQTT client certificate',
        description:
          "Returns a client certificate from this instance's CA, its private key (shown once, never stored), the MQTT endpoint (mutual TLS), the client_id to connect with and the topic boxes/accounts/<account id>/events. Provisioning again revokes the previous certificate.",
      },
    })
    .input(z.void())
    .output(IotProvisionOutput)
    .mutation(({ ctx }) => provisionIot(ctx.svc, ctx.account.id, ctx.key.id)),
});
