import { z } from 'zod';

const TYPES = ['A', 'AAAA', 'CNAME', 'MX', 'TXT', 'SRV', 'CAA'] as const;

export const DnsRecordOutput = z
  .object({
    name: z.string().meta({ description: 'Fully qualified, without the trailing dot', example: 'www.example.com' }),
    type: z.string().meta({ example: 'A' }),
    ttl: z.number().int().nullable().meta({ example: 3600 }),
    values: z.array(z.string()).meta({ description: 'One value per record of the set (TXT unquoted)', example: ['192.0.2.10'] }),
    reserved: z.boolean().meta({ description: 'Carries the account mail (apex MX, SPF and NS, DKIM, DMARC): read-only' }),
  })
  .meta({ id: 'DnsRecord' });

export const DnsZoneOutput = z.object({
  zone: z.string().meta({ example: 'example.com' }),
  serial: z.number().int().meta({ description: 'The SOA serial; every change bumps it' }),
  records: z.array(DnsRecordOutput),
});

const name = z.string().min(1).max(253).meta({ description: 'Relative to the zone ("www", "@" for the apex) or fully qualified', example: 'www' });
const type = z.enum(TYPES).meta({ description: 'A, AAAA, CNAME, MX ("10 mail.example.com"), TXT, SRV ("10 5 5060 sip.example.com"), CAA ("0 issue \\"letsencrypt.org\\"")' });
const terms = z.literal(true).meta({ description: 'Required: you accept the terms of service of the managed DNS', example: true });

export const DnsRecordChangeInput = z.strictObject({
  terms_of_service: terms,
  name,
  type,
  ttl: z.number().int().min(60).max(86_400).optional().meta({ description: '60 to 86400 seconds (default 3600)', example: 3600 }),
  values: z.array(z.string().max(2048)).min(1).max(20).meta({ description: '1 to 20 values', example: ['192.0.2.10'] }),
});

export const DnsRecordDeleteInput = z.strictObject({
  // A string, as DELETE /messages/{id}'s purge: DELETE inputs travel in the query string (a JSON body's scalars too).
  terms_of_service: z.enum(['true']).meta({ description: 'Required: "true" (a JSON body {"terms_of_service": true} works too)' }),
  name,
  type,
});

export const DnsChangeOutput = z.object({
  zone: z.string(),
  serial: z.number().int(),
  action: z.enum(['create', 'replace', 'delete']),
  record: DnsRecordOutput,
});
