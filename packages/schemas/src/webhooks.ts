import { z } from 'zod';
import { WEBHOOK_DELIVERY_STATUSES } from './statuses';
import { Timestamp } from './common';

const Scheme = z.record(z.string(), z.unknown()).meta({ description: 'How deliveries are signed and how to verify them' });

export const WebhookConfigOutput = z.object({
  agent_callback_webhook: z.string().nullable(),
  signing_secret: z.string().meta({ description: 'HMAC key of X-Boxes-Signature (and of the Standard Webhooks headers)', example: 'whsec_...' }),
  previous_secret_valid_until: Timestamp.nullable().meta({ description: 'After a rotation, until when the previous secret still signs deliveries' }),
  scheme: Scheme,
});

export const RotateSecretOutput = z.object({
  signing_secret: z.string(),
  previous_secret_valid_until: Timestamp,
  scheme: Scheme,
});

export const WebhookDeliveryOutput = z
  .object({
    id: z.string().meta({ example: 'whd_0a1b2c3d4e5f6g7h8j9k' }),
    event_id: z.string(),
    seq: z.number().int(),
    event_type: z.string(),
    url: z.string(),
    attempt: z.number().int(),
    status: z.enum(WEBHOOK_DELIVERY_STATUSES),
    status_code: z.number().int().nullable().meta({ description: 'HTTP status, or null when no response came' }),
    error: z.string().nullable(),
    latency_ms: z.number().int().nullable(),
    next_retry_at: Timestamp.nullable(),
    redelivery: z.boolean(),
    created_at: Timestamp,
  })
  .meta({ id: 'WebhookDelivery' });

export const ListDeliveriesInput = z.strictObject({
  status: z.enum(WEBHOOK_DELIVERY_STATUSES).optional(),
  limit: z.coerce.number<number>().int().min(1).max(200).default(50),
});
export const ListDeliveriesOutput = z.object({ deliveries: z.array(WebhookDeliveryOutput) });
export const DeliveryIdInput = z.strictObject({ id: z.string().max(40) });

export const IotProvisionOutput = z.object({
  client_id: z.string().meta({ description: 'Use as the MQTT client id (it is the certificate common name)', example: 'acct_0a1b2c3d4e5f6g7h8j9k-5x0c7b1n' }),
  certificate: z.string().meta({ description: "Client certificate (PEM), signed by this instance's CA" }),
  private_key: z.string().meta({ description: 'Private key (PEM). Shown once, never stored: keep it now.' }),
  ca_certificate: z.string().meta({ description: "The CA certificate (PEM) that signs the broker's certificate too" }),
  mqtt_endpoint: z.string().meta({
    description: 'mqtts://<MAIL_HOST>:<port>; on a local instance (a *.localhost MAIL_HOST) the address the broker listens on',
    example: 'mqtts://mail.example.com:8883',
  }),
  topic: z.string().meta({ example: 'boxes/accounts/acct_0a1b2c3d4e5f6g7h8j9k/events' }),
  not_after: Timestamp,
  qos: z.literal(1),
});

/** Webhook endpoints: /webhook-endpoints. */
const EndpointId = z.string().max(40).meta({ description: 'The webhook endpoint id', example: 'whe_0a1b2c3d4e5f6g7h8j9k' });
const EventTypeFilter = z
  .array(z.string().max(80))
  .max(50)
  .meta({
    description:
      'Event types it receives (GET /events lists them), or prefixes ending in .* (message.* is every message event); empty: every type. An unknown type is 400.',
    example: ['mail.received', 'message.*'],
  });
const BoxFilter = z
  .array(z.string().max(40))
  .max(50)
  .meta({
    description:
      'Box ids whose events it receives (events of other boxes and account-wide events are skipped); empty: every event. A box-restricted key must name only its own boxes.',
    example: ['box_0a1b2c3d4e5f6g7h8j9k'],
  });
const CustomHeaders = z.record(z.string().max(64), z.string().max(1024)).meta({
  description:
    'Headers sent with every delivery (e.g. an Authorization your receiver checks). Write-only: answers show only their names. At most 10, 4,096 bytes in all; hop-by-hop, content and signature headers (webhook-*, x-boxes-*) are refused, and values must not contain CR, LF or NUL.',
  example: { authorization: 'Bearer receiver-token' },
});
const EndpointUrl = z
  .string()
  .max(2048)
  .meta({ description: 'Where events are POSTed: https only, a public address (as agent_callback_webhook)', example: 'https://agent.example.com/hooks/boxes' });
const Description = z.string().max(200).meta({ description: 'A note of your own', example: 'billing agent' });

export const WebhookEndpointOutput = z
  .object({
    id: EndpointId,
    url: z.string().meta({ example: 'https://agent.example.com/hooks/boxes' }),
    description: z.string().nullable(),
    event_types: z.array(z.string()).meta({ description: 'The event type filter; empty: every type', example: ['mail.received', 'message.*'] }),
    box_ids: z.array(z.string()).meta({ description: 'The box filter; empty: every event', example: ['box_0a1b2c3d4e5f6g7h8j9k'] }),
    enabled: z.boolean().meta({ description: 'false: nothing is delivered (events of that time are not kept for it)' }),
    header_names: z.array(z.string()).meta({ description: 'The names of its custom headers (their values are never shown)', example: ['authorization'] }),
    previous_secret_valid_until: Timestamp.nullable().meta({ description: 'After a rotation, until when the previous secret still signs deliveries' }),
    created_at: Timestamp,
    updated_at: Timestamp,
  })
  .meta({ id: 'WebhookEndpoint' });

export const WebhookEndpointCreatedOutput = WebhookEndpointOutput.extend({
  signing_secret: z
    .string()
    .meta({ description: "The endpoint's own signing secret (shown only here and at rotation)", example: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' }),
});

export const CreateWebhookEndpointInput = z.strictObject({
  url: EndpointUrl,
  event_types: EventTypeFilter.optional(),
  box_ids: BoxFilter.optional(),
  headers: CustomHeaders.optional(),
  enabled: z.boolean().optional().meta({ description: 'Default true' }),
  description: Description.nullable().optional(),
});

export const UpdateWebhookEndpointInput = z.strictObject({
  id: EndpointId,
  url: EndpointUrl.optional(),
  event_types: EventTypeFilter.optional(),
  box_ids: BoxFilter.optional(),
  headers: CustomHeaders.nullable().optional().meta({ description: 'Replaces every custom header ({} or null removes them)' }),
  enabled: z.boolean().optional().meta({ description: 'Re-enabling starts from the newest event: what happened while disabled is not sent' }),
  description: Description.nullable().optional(),
});

export const WebhookEndpointIdInput = z.strictObject({ id: EndpointId });
export const WebhookEndpointListOutput = z.object({ endpoints: z.array(WebhookEndpointOutput) });
export const WebhookEndpointDeleted = z.object({ id: z.string(), deleted: z.literal(true) });
export const WebhookEndpointRotateOutput = z.object({
  id: z.string(),
  signing_secret: z.string(),
  previous_secret_valid_until: Timestamp,
});
export const ListEndpointDeliveriesInput = ListDeliveriesInput.extend({ id: EndpointId });
export const EndpointDeliveryIdInput = z.strictObject({
  id: EndpointId,
  delivery_id: z.string().max(40).meta({ description: 'A delivery of this endpoint', example: 'whd_0a1b2c3d4e5f6g7h8j9k' }),
});
