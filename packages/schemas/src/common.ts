import { z } from 'zod';

export const SCOPES = ['send', 'receive', 'admin'] as const;
export const Scope = z.enum(SCOPES).meta({ description: 'A permission of an API key', example: 'send' });
export type Scope = z.infer<typeof Scope>;

export const Timestamp = z.string().max(64).meta({ description: 'ISO 8601 time in UTC', example: '2026-11-21T08:00:00.000Z' });

export const HttpsUrl = z
  .url({ protocol: /^https$/, error: 'must be an https:// URL' })
  .max(2048)
  .meta({ description: 'An https:// URL', example: 'https://agent.example.com/boxes-events' });

export const EmailAddress = z.email({ error: 'must be an email address' }).max(254);

/** The error body of every REST error response. */
export const ErrorBody = z
  .object({
    error: z
      .object({
        code: z.string().meta({ description: 'Stable machine-readable error code', example: 'validation_error' }),
        message: z.string().meta({ description: 'What went wrong, for a human or an agent', example: 'human_email: must be an email address' }),
        request_id: z.string().meta({ description: 'Quote this id when asking support', example: 'req_4k2m9x0c7b1n3p5q8r6s' }),
      })
      .catchall(z.unknown()),
  })
  .meta({ id: 'Error', description: 'Every REST error has this shape; extra members (fields, getting_started, suggestions, ...) depend on the code' });

export const Deleted = z.object({
  id: z.string().meta({ description: 'Id of the removed resource', example: 'box_0a1b2c3d4e5f6g7h8j9k' }),
  deleted: z.literal(true),
});
