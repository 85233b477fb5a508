/** The DNS records a domain needs to receive and send through this instance (shown for byo_manual domains). */
import type { Config } from '@boxes/config';
import { DEFAULT_TTL, DMARC_VALUE, dkimValue, spfValue } from '../dns/zones';

export interface DnsRecord {
  name: string;
  type: 'MX' | 'TXT' | 'CNAME' | 'NS';
  ttl: number;
  values: string[];
  purpose: string;
}

export function requiredRecords(config: Config, domain: { name: string; dkimSelector: string; dkimPublicKey: string }): DnsRecord[] {
  return [
    { name: domain.name, type: 'MX', ttl: DEFAULT_TTL, values: [`10 ${config.mailHost}.`], purpose: 'receive mail' },
    { name: domain.name, type: 'TXT', ttl: DEFAULT_TTL, values: [spfValue(config)], purpose: 'SPF: authorise this instance to send' },
    {
      name: `${domain.dkimSelector}._domainkey.${domain.name}`,
      type: 'TXT',
      ttl: DEFAULT_TTL,
      values: [dkimValue(domain.dkimPublicKey)],
      purpose: 'DKIM: the key generated for this claim; publishing it also proves the claim is yours',
    },
    { name: `_dmarc.${domain.name}`, type: 'TXT', ttl: DEFAULT_TTL, values: [DMARC_VALUE], purpose: 'DMARC policy' },
  ];
}
