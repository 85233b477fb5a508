/** The DNS records a domain needs to receive and send through this instance (shown for byo_manual domains). */
import type { Config } from '@boxes/config';

export interface DnsRecord {
  name: string;
  type: 'MX' | 'TXT' | 'CNAME' | 'NS';
  ttl: number;
  values: string[];
  purpose: string;
}

export function requiredRecords(config: Config, domain: { name: string; dkimSelector: string; dkimPublicKey: string }): DnsRecord[] {
  return [
    { name: domain.name, type: 'MX', ttl: 3600, values: [`10 ${config.mailHost}.`], purpose: 'receive mail' },
    { name: domain.name, type: 'TXT', ttl: 3600, values: [`v=spf1 a:${config.mailHost} ~all`], purpose: 'SPF: authorise this instance to send' },
    {
      name: `${domain.dkimSelector}._domainkey.${domain.name}`,
      type: 'TXT',
      ttl: 3600,
      values: [`v=DKIM1; k=rsa; p=${domain.dkimPublicKey}`],
      purpose: 'DKIM: the public key that verifies our signatures',
    },
    { name: `_dmarc.${domain.name}`, type: 'TXT', ttl: 3600, values: ['v=DMARC1; p=quarantine; adkim=r; aspf=r'], purpose: 'DMARC policy' },
  ];
}
