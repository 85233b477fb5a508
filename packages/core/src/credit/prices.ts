/**
 * Prices, in integer micro-dollars (1 USD = 1,000,000): the one table of prices in the code. The price list
 * of docs/guide/credit.md and /.well-known/agentic.json are printed from it.
 */
import type { Config } from '@boxes/config';

export const PRICES_MICROS = {
  /** Each message sent (per recipient delivered) or received. */
  message: 1_600,
  /** The introductory message price (PRICE_INTRODUCTORY=true). */
  messageIntroductory: 400,
  /** Attachments, per MB (1,000,000 bytes) per message sent or received; rounded up to the micro-dollar. */
  attachmentPerMb: 1_200,
  /** Stored mail, per GB (10^9 bytes) per day, for mail older than STORAGE_FREE_DAYS. */
  storagePerGbDay: 33_300,
  /** DNS hosting of a delegated (byo_delegated) domain, per calendar month. */
  domainHostingPerMonth: 1_000_000,
  /** Name service of a registered domain, per calendar month (registration itself is priced per year). */
  domainMaintenancePerMonth: 1_000_000,
  /** Authoritative DNS queries beyond DNS_INCLUDED_QUERIES in a month, per million (pro rata). */
  dnsOveragePerMillion: 400_000,
  /** Per message sent without the trailer, until TRAILER_PAYOFF_MICROS has been paid. */
  trailerSurcharge: 1_000,
  /** A live dedicated sending IP, per calendar month (the first month when it is taken). */
  dedicatedIpPerMonth: 24_950_000,
} as const;

export const FREE_MESSAGES = 250;
export const STORAGE_FREE_DAYS = 10;
export const DNS_INCLUDED_QUERIES = 1_000_000n;
/** Opting out of the trailer costs this much in total (surcharges, or one buyout). */
export const TRAILER_PAYOFF_MICROS = 5_000_000n;

/** Ledger entry types: charges (negative amounts) and credits (positive). */
export const LEDGER_TYPES = [
  'message_sent',
  'message_received',
  'attachments',
  'storage',
  'domain_hosting',
  'domain_maintenance',
  'domain_registration',
  'domain_renewal',
  'dns_overage',
  'trailer_surcharge',
  'trailer_buyout',
  'dedicated_ip',
  'topup',
  'signup_credit',
] as const;
export type LedgerType = (typeof LEDGER_TYPES)[number];

export function messagePriceMicros(config: Pick<Config, 'billing'>): bigint {
  return BigInt(config.billing.introductoryPrice ? PRICES_MICROS.messageIntroductory : PRICES_MICROS.message);
}

/** Attachment charge for `bytes` of attachments, rounded up to the micro-dollar. */
export function attachmentMicros(bytes: number): bigint {
  if (bytes <= 0) return 0n;
  return (BigInt(bytes) * BigInt(PRICES_MICROS.attachmentPerMb) + 999_999n) / 1_000_000n;
}

/** One day of storage for `bytes`, rounded up to the micro-dollar. */
export function storageDayMicros(bytes: bigint): bigint {
  if (bytes <= 0n) return 0n;
  return (bytes * BigInt(PRICES_MICROS.storagePerGbDay) + 999_999_999n) / 1_000_000_000n;
}

export function dnsOverageMicros(queries: bigint): bigint {
  const over = queries - DNS_INCLUDED_QUERIES;
  if (over <= 0n) return 0n;
  return (over * BigInt(PRICES_MICROS.dnsOveragePerMillion) + 999_999n) / 1_000_000n;
}

/** Cents as the API shows them: rounded toward negative infinity, so a balance of -0.0016 USD shows as -1. */
export const microsToCents = (micros: bigint): number => Number(micros >= 0n ? micros / 10_000n : -((-micros + 9_999n) / 10_000n));
export const centsToMicros = (cents: number): bigint => BigInt(cents) * 10_000n;

/** "0.0032" for 3,200 micro-dollars. */
export function microsToUsd(micros: bigint): string {
  const neg = micros < 0n;
  const abs = neg ? -micros : micros;
  const whole = abs / 1_000_000n;
  const frac = (abs % 1_000_000n).toString().padStart(6, '0').replace(/0+$/, '');
  return `${neg ? '-' : ''}${whole}${frac ? `.${frac}` : ''}`;
}

/** The price list as the API and the discovery manifest print it. */
export function priceList(config: Pick<Config, 'billing'>) {
  return {
    currency: 'USD',
    model: 'prepaid credit, no subscription',
    free_messages: FREE_MESSAGES,
    per_message_usd: microsToUsd(messagePriceMicros(config)),
    standard_per_message_usd: microsToUsd(BigInt(PRICES_MICROS.message)),
    introductory_price: config.billing.introductoryPrice,
    per_message_applies_to: 'each message sent (per recipient delivered) or received',
    attachments_per_mb_usd: microsToUsd(BigInt(PRICES_MICROS.attachmentPerMb)),
    storage_per_gb_day_usd: microsToUsd(BigInt(PRICES_MICROS.storagePerGbDay)),
    storage_free_days: STORAGE_FREE_DAYS,
    delegated_dns_per_month_usd: microsToUsd(BigInt(PRICES_MICROS.domainHostingPerMonth)),
    registered_domain_name_service_per_month_usd: microsToUsd(BigInt(PRICES_MICROS.domainMaintenancePerMonth)),
    dns_included_queries_per_month: Number(DNS_INCLUDED_QUERIES),
    dns_overage_per_million_usd: microsToUsd(BigInt(PRICES_MICROS.dnsOveragePerMillion)),
    trailer_opt_out_surcharge_per_message_usd: microsToUsd(BigInt(PRICES_MICROS.trailerSurcharge)),
    trailer_opt_out_total_usd: microsToUsd(TRAILER_PAYOFF_MICROS),
    dedicated_ip_per_month_usd: microsToUsd(BigInt(PRICES_MICROS.dedicatedIpPerMonth)),
    boxes: 'unlimited, free',
  };
}
