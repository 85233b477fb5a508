import { z } from 'zod';
import { PUBLIC_DOMAIN_STATUSES } from './statuses';
import { Timestamp } from './common';
import { DOMAIN_MODES } from './signup';

export const DomainRecordCheck = z
  .object({
    name: z.string().meta({ description: 'Owner name of the record', example: '_dmarc.example.com' }),
    type: z.enum(['MX', 'TXT', 'NS']),
    purpose: z.string().meta({ example: 'DMARC policy' }),
    expected: z.array(z.string()).meta({ description: 'The value(s) to publish', example: ['v=DMARC1; p=quarantine; adkim=r; aspf=r'] }),
    found: z.array(z.string()).meta({ description: 'The related values the resolvers returned at the last check' }),
    state: z
      .enum(['found', 'missing', 'different'])
      .meta({ description: 'found: as expected; missing: nothing there; different: something else is published' }),
    last_checked_at: Timestamp,
  })
  .meta({ id: 'DomainRecordCheck' });

export const DomainOutput = z
  .object({
    id: z.string().meta({ example: 'dom_0a1b2c3d4e5f6g7h8j9k' }),
    name: z.string().meta({ example: 'example.com' }),
    mode: z.enum(DOMAIN_MODES),
    status: z
      .enum(PUBLIC_DOMAIN_STATUSES)
      .meta({ description: 'retiring: the account moved to another domain; mail to this one is still delivered until grace_until' }),
    primary: z.boolean(),
    created_at: Timestamp,
    verified_at: Timestamp.nullable().meta({ description: 'When the domain went live (domain.ready)' }),
    grace_until: Timestamp.nullable().meta({ description: 'A retiring domain receives until then (DOMAIN_MOVE_GRACE_DAYS, 30 by default)' }),
    claim_expires_at: Timestamp.nullable().meta({ description: 'A pending claim not proven by then expires (DOMAIN_CLAIM_TTL_DAYS, 7 by default)' }),
    last_checked_at: Timestamp.nullable(),
    next_check_at: Timestamp.nullable().meta({ description: 'When the verifier looks again (backing off from 1 minute to 1 hour)' }),
    nameservers: z.array(z.string()).nullable().meta({ description: 'byo_delegated: the nameservers to set at the registrar' }),
    records: z
      .array(DomainRecordCheck)
      .nullable()
      .meta({ description: 'Each required record at the last check; null before the first check and for free subdomains' }),
    blocked_by: z
      .string()
      .nullable()
      .meta({ description: 'Why a claim whose records are there is not live (for example another account proved the domain first)' }),
  })
  .meta({ id: 'Domain' });

export const DomainsOutput = z.object({ domains: z.array(DomainOutput) });

export const DomainMoveInput = z
  .strictObject({
    mode: z
      .enum(['byo_manual', 'byo_delegated', 'register'])
      .meta({ description: 'How the new domain is proven: your DNS records, delegation to this instance, or registration here (paid from the credit)' }),
    domain: z.string().max(253).meta({ description: 'The new domain', example: 'agents.example.com' }),
  })
  .meta({ id: 'DomainMove' });
