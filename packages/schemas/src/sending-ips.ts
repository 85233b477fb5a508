/** Dedicated sending IPs: POST, GET and DELETE /account/sending-ip. */
import { z } from 'zod';
import { SENDING_IP_MODES, SENDING_IP_STATUSES } from './statuses';
import { Timestamp } from './common';

export const SendingIpInput = z.strictObject({
  mode: z.enum(SENDING_IP_MODES).default('live').meta({
    description:
      'live: take one of the addresses the operator lists in SENDING_IPS; outbound SMTP of the account is bound to it (24.95 USD a month, the first month now). simulated: a row that goes through the warm-up but binds and routes nothing (free).',
    example: 'live',
  }),
});

export const SendingIpOutput = z
  .object({
    id: z.string().meta({ description: 'The row id', example: 'sip_0a1b2c3d4e5f6g7h8j9k' }),
    ip: z.string().meta({ description: 'The address (a documentation address, RFC 5737, for a simulated row)', example: '203.0.113.25' }),
    helo_name: z.string().meta({ description: 'The name its SMTP connections announce in EHLO/HELO', example: 'mail2.example.net' }),
    status: z.enum(SENDING_IP_STATUSES).meta({
      description: 'provisioning: the worker checks the address can be bound; warming: daily caps apply (see warmup); active: no cap',
      example: 'warming',
    }),
    provisioning_mode: z.enum(SENDING_IP_MODES).meta({ description: 'live binds outbound SMTP to the address; simulated routes nothing', example: 'live' }),
    phase: z.string().meta({ description: 'checking_address, warmup_day_<n>_of_<days>, warmed_up, or simulated', example: 'warmup_day_1_of_7' }),
    note: z.string().meta({
      description: 'What the row means now, in a sentence (a simulated row says that it routes nothing)',
      example: 'Warming up: at most 5000 messages through 203.0.113.25 today (UTC); more goes through the shared addresses.',
    }),
    configuration_set: z.string().meta({
      description: "The account's own configuration set: sends carry it in X-Boxes-Configuration-Set while the row exists (provisioning, warming or active)",
      example: 'dedicated-acct_0a1b2c3d4e5f6g7h8j9k',
    }),
    warmup: z
      .object({
        started_at: Timestamp.nullable().meta({
          description: 'When provisioning finished and the warm-up began; null while provisioning',
          example: '2026-11-23T10:00:00.000Z',
        }),
        day: z.number().int().nullable().meta({ description: 'The warm-up day today (UTC) is, from 1; beyond the schedule once active', example: 1 }),
        today_cap: z.number().int().nullable().meta({ description: 'Messages that may go through the address today; null when no cap applies', example: 5000 }),
        sent_today: z
          .number()
          .int()
          .nullable()
          .meta({ description: 'Messages that went through the address today (UTC); null if the counter cannot be read', example: 120 }),
        active_from: Timestamp.nullable().meta({ description: 'When the cap ends (status active)', example: '2026-11-30T00:00:00.000Z' }),
        schedule: z
          .array(
            z.object({
              day: z.number().int().meta({ description: 'Warm-up day, from 1', example: 1 }),
              daily_cap: z
                .number()
                .int()
                .meta({ description: 'Messages through the address that UTC day; more goes through the shared addresses', example: 5000 }),
              date: z.string().nullable().meta({ description: 'The UTC date of that day (YYYY-MM-DD); null while provisioning', example: '2026-11-23' }),
            }),
          )
          .meta({ description: 'The daily caps, day by day (SENDING_IP_WARMUP_CAPS; from 5,000 a day upward by default)' }),
      })
      .meta({ description: 'The warm-up schedule and where the row is in it' }),
    monthly_price_usd: z.string().meta({ description: 'Charged each calendar month while the row exists (0 for simulated)', example: '24.95' }),
    created_at: Timestamp,
  })
  .meta({ id: 'SendingIp' });

export const SendingIpDeleted = z.object({
  deleted: z.literal(true).meta({ description: 'The row is gone: later sends use the shared addresses', example: true }),
  id: z.string().meta({ description: 'The row that was removed', example: 'sip_0a1b2c3d4e5f6g7h8j9k' }),
  ip: z.string().meta({ description: 'The address it had', example: '203.0.113.25' }),
});
