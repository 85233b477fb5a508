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
