/**
 * Webhook endpoints: POST/GET /webhook-endpoints, GET/PATCH/DELETE /webhook-endpoints/{id}, the secret's rotation,
 * the delivery log and redelivery (admin scope; box-restricted keys within their boxes).
 */
import { z } from 'zod';
import {
  AppError,
  createEndpoint,
  deleteEndpoint,
  endpointDeliveries,
  findEndpoint,
  listEndpoints,
  presentEndpoint,
  redeliverToEndpoint,
  rotateEndpointSecret,
  updateEndpoint,
  webhookHttpDeps,
} from '@boxes/core';
import {
  CreateWebhookEndpointInput,
  EndpointDeliveryIdInput,
  ListDeliveriesOutput,
  ListEndpointDeliveriesInput,
  UpdateWebhookEndpointInput,
  WebhookDeliveryOutput,
  WebhookEndpointCreatedOutput,
  WebhookEndpointDeleted,
  WebhookEndpointIdInput,
  WebhookEndpointListOutput,
  WebhookEndpointOutput,
  WebhookEndpointRotateOutput,
} from '@boxes/schemas';
import { keyProcedure, router } from '../trpc';
import { presentDelivery } from './webhook';

const tags = ['webhook'];

export const webhookEndpointsRouter = router({
  create: keyProcedure
    .meta({
      errors: ['conflict', 'box_restricted_key'],
      scope: 'admin',
      openapi: {
        method: 'POST',
        path: '/webhook-endpoints',
        tags,
        summary: 'Create a webhook endpoint',
        description:
          'A push target of its own beside agent_callback_webhook: events from now on that pass its filters (event_types: exact types or prefixes such as message.*; box_ids: events of those boxes only) are POSTed to url in order, at least once, signed with its own signing_secret (returned only here and at rotation) as X-Boxes-Signature and Standard Webhooks headers, with its custom headers. Each endpoint is delivered to independently: a slow or dead one never delays another. At most 10 per account (409 conflict beyond). A box-restricted key must name box_ids within its boxes.',
      },
    })
    .input(CreateWebhookEndpointInput)
    .output(WebhookEndpointCreatedOutput)
    .mutation(({ ctx, input }) =>
      createEndpoint(ctx.svc, {
        accountId: ctx.account.id,
        scope: ctx.boxScope,
        url: input.url,
        eventTypes: input.event_types,
        boxIds: input.box_ids,
        headers: input.headers,
        enabled: input.enabled,
        description: input.description,
      }),
    ),
  list: keyProcedure
    .meta({
      scope: 'admin',
      openapi: {
        method: 'GET',
        path: '/webhook-endpoints',
        tags,
        summary: 'Webhook endpoints',
        description:
          'Every endpoint of the account, oldest first (a box-restricted key sees those whose box_ids are all its own). No secrets, no header values.',
      },
    })
    .input(z.void())
    .output(WebhookEndpointListOutput)
    .query(async ({ ctx }) => ({ endpoints: await listEndpoints(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope }) })),
  get: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'admin',
      openapi: {
        method: 'GET',
        path: '/webhook-endpoints/{id}',
        tags,
        summary: 'A webhook endpoint',
        description: 'Its URL, filters, state and custom header names.',
      },
    })
    .input(WebhookEndpointIdInput)
    .output(WebhookEndpointOutput)
    .query(async ({ ctx, input }) => presentEndpoint(await findEndpoint(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, id: input.id }))),
  update: keyProcedure
    .meta({
      errors: ['not_found', 'box_restricted_key'],
      scope: 'admin',
      openapi: {
        method: 'PATCH',
        path: '/webhook-endpoints/{id}',
        tags,
        summary: 'Change a webhook endpoint',
        description:
          'Changes the fields given: url, event_types, box_ids, headers (replaces them all; null or {} removes them), enabled, description. Disabled, nothing is delivered; re-enabled or given a new url, it starts from the newest event (what happened meanwhile is not sent; GET /events has it).',
      },
    })
    .input(UpdateWebhookEndpointInput)
    .output(WebhookEndpointOutput)
    .mutation(({ ctx, input }) =>
      updateEndpoint(ctx.svc, {
        accountId: ctx.account.id,
        scope: ctx.boxScope,
        id: input.id,
        url: input.url,
        eventTypes: input.event_types,
        boxIds: input.box_ids,
        headers: input.headers,
        enabled: input.enabled,
        description: input.description,
      }),
    ),
  delete: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'admin',
      openapi: {
        method: 'DELETE',
        path: '/webhook-endpoints/{id}',
        tags,
        summary: 'Delete a webhook endpoint',
        description: 'Nothing more is sent to it; its delivery log goes with it.',
      },
    })
    .input(WebhookEndpointIdInput)
    .output(WebhookEndpointDeleted)
    .mutation(({ ctx, input }) => deleteEndpoint(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, id: input.id })),
  rotateSecret: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'admin',
      openapi: {
        method: 'POST',
        path: '/webhook-endpoints/{id}/secret/rotate',
        tags,
        summary: "Rotate an endpoint's signing secret",
        description:
          'Returns a new secret (shown only here). For 24 hours deliveries carry signatures under both, so the receiver can switch without losing events.',
      },
    })
    .input(WebhookEndpointIdInput)
    .output(WebhookEndpointRotateOutput)
    .mutation(({ ctx, input }) => rotateEndpointSecret(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, id: input.id })),
  deliveries: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'admin',
      openapi: {
        method: 'GET',
        path: '/webhook-endpoints/{id}/deliveries',
        tags,
        summary: "An endpoint's delivery attempts",
        description: 'Newest first: status (delivered, retrying, failed), attempt, status code, error, latency, next retry.',
      },
    })
    .input(ListEndpointDeliveriesInput)
    .output(ListDeliveriesOutput)
    .query(async ({ ctx, input }) => ({
      deliveries: (
        await endpointDeliveries(ctx.svc, { accountId: ctx.account.id, scope: ctx.boxScope, id: input.id, status: input.status, limit: input.limit })
      ).map(presentDelivery),
    })),
  redeliver: keyProcedure
    .meta({
      errors: ['not_found'],
      scope: 'admin',
      openapi: {
        method: 'POST',
        path: '/webhook-endpoints/{id}/deliveries/{delivery_id}/redeliver',
        tags,
        summary: 'Redeliver an event to an endpoint now',
        description:
          "Sends the event of one of the endpoint's recorded attempts again (outside its ordered stream), signed and with its headers, and records the attempt.",
      },
    })
    .input(EndpointDeliveryIdInput)
    .output(WebhookDeliveryOutput)
    .mutation(async ({ ctx, input }) => {
      const r = await redeliverToEndpoint(ctx.svc, webhookHttpDeps(ctx.svc.config), {
        accountId: ctx.account.id,
        scope: ctx.boxScope,
        id: input.id,
        deliveryId: input.delivery_id,
      });
      if (!r) throw new AppError('not_found', `webhook delivery ${input.delivery_id} not found`);
      return presentDelivery(r);
    }),
});
