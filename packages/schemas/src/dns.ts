/** The managed DNS API's shapes: a record set {name, type, ttl, values} of the account's zone. */
import { z } from 'zod';

// NS is accepted so that a change to the apex NS records is answered as what it is (reserved), not as an unknown type.
const TYPES = ['A', 'AAAA', 'CNAME', 'MX', 'TXT', 'SRV', 'CAA', 'NS'] as const;

export const DnsRecordOutput = z
  .object({
    id: z.string().meta({
      description: 'Stable for the zone, name, type and reserved flag (a replace keeps it); calls address a record by name and type',
      example: 'rrs_5k2m9q8r7t6v4w3x2y1z',
    }),
    name: z.string().meta({ description: 'Fully qualified, lower case, without the trailing dot', example: 'www.example.com' }),
    type: z.string().meta({ example: 'A' }),
    ttl: z.number().int().nullable().meta({ description: 'Seconds (null for a deleted record)', example: 3600 }),
    values: z.array(z.string()).meta({
      description: 'One value per record of the set: TXT unquoted and whole (as verifiers join its strings); host names absolute, without the trailing dot',
      example: ['192.0.2.10'],
    }),
    reserved: z.boolean().meta({
      description:
        'Carries the account mail (apex MX, SPF and NS, DKIM, DMARC): read-only. The SPF value and the other TXT values of the apex are listed as two records.',
    }),
  })
  .meta({ id: 'DnsRecord' });

export const DnsZoneOutput = z.object({
  zone: z.string().meta({ example: 'example.com' }),
  serial: z.number().int().meta({ description: 'The SOA serial; every change bumps it' }),
  records: z.array(DnsRecordOutput),
});

const name = z.string().min(1).max(254).meta({
  description: 'Relative to the zone ("www", "@" for the apex, "*.dev" for a wildcard) or fully qualified (with or without the trailing dot); inside the zone',
  example: 'www',
});
const type = z.enum(TYPES).meta({
  description:
    'A (IPv4), AAAA (IPv6), CNAME (one host), MX ("10 mail.example.com"), TXT (text), SRV ("10 5 5060 sip.example.com"), CAA ("0 issue \\"letsencrypt.org\\""; tags issue, issuewild, iodef). NS: only the apex NS records exist, and they are reserved.',
});
const terms = z.literal(true).meta({ description: 'Required: true, accepting the terms of service of the managed DNS', example: true });

export const DnsRecordChangeInput = z.strictObject({
  terms_of_service: terms,
  name,
  type,
  ttl: z.number().int().min(60).max(86_400).optional().meta({ description: '60 to 86400 seconds (default 3600)', example: 3600 }),
  values: z
    .array(z.string().max(2048))
    .min(1)
    .max(20)
    .meta({ description: '1 to 20 values (duplicates count once)', example: ['192.0.2.10'] }),
});

export const DnsRecordDeleteInput = z.strictObject({
  // DELETE inputs travel in the query string over REST (a JSON body's scalars are moved there), so "true" is a
  // string there; tRPC and MCP pass the boolean. Either way it is true.
  terms_of_service: z
    .union([z.literal(true), z.literal('true')])
    .transform((): true => true)
    .meta({ description: 'Required: true ("true" in the query string; a JSON body {"terms_of_service": true} works too)', example: true }),
  name,
  type,
});

export const DnsChangeOutput = z.object({
  zone: z.string().meta({ example: 'example.com' }),
  serial: z.number().int().meta({ description: 'The SOA serial after the change' }),
  action: z.enum(['create', 'replace', 'delete']),
  // The record set as it is now (after a delete: no values, ttl null).
  record: DnsRecordOutput,
});
