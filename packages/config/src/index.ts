/**
 * The one place that reads process.env. Every setting is parsed with zod at boot; a bad value stops the
 * process with one line naming the variable, never a stack trace.
 */
import { z } from 'zod';

const port = z.coerce.number().int().min(0).max(65535);
const bool = z
  .enum(['true', 'false', '1', '0', 'yes', 'no', ''])
  .transform((v) => v === 'true' || v === '1' || v === 'yes');

const envSchema = z.object({
  NODE_ENV: z.enum(['development', 'production', 'test']).default('development'),
  HOST: z.string().default('127.0.0.1'),
  PORT: port.default(3000),
  /** Public address of the site; the API lives at <SITE_URL>/api/v1. Defaults to http://localhost:<PORT>. */
  SITE_URL: z.url({ protocol: /^https?$/ }).optional(),
  /** Shared domain on which free subdomains are issued: <slug>.<BASE_DOMAIN>. */
  BASE_DOMAIN: z
    .string()
    .regex(/^(?=.{1,200}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9-]{2,63}$/i, 'must be a domain name')
    .default('boxes.localhost'),
  /** Host name mail clients and other MTAs use for this instance (MX target). Defaults to mail.<BASE_DOMAIN>. */
  MAIL_HOST: z.string().optional(),
  /** Nameservers an owner sets at the registrar for byo_delegated domains. */
  NAMESERVERS: z.string().default('ns1.boxes.localhost,ns2.boxes.localhost'),
  DATABASE_URL: z.url({ protocol: /^postgres(ql)?$/ }).default('postgresql://postgres@127.0.0.1:5432/boxes'),
  REDIS_URL: z.url({ protocol: /^rediss?$/ }).default('redis://127.0.0.1:6379'),
  /** 32-byte key (hex or base64) that encrypts secrets at rest. Generated into .data/ on first start if unset. */
  BOXES_SECRET_KEY: z.string().optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  TRUST_PROXY: bool.default(false),
});

export interface Config {
  nodeEnv: 'development' | 'production' | 'test';
  host: string;
  port: number;
  siteUrl: string;
  apiBaseUrl: string;
  baseDomain: string;
  mailHost: string;
  nameservers: string[];
  databaseUrl: string;
  redisUrl: string;
  secretKey: string | undefined;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  trustProxy: boolean;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Parses the environment (or the given record). Throws ConfigError with one readable line per bad setting. */
export function loadConfig(env: Record<string, string | undefined> = process.env, overrides: Partial<Config> = {}): Config {
  // An empty variable (PORT=) means unset, not zero or an empty string.
  const set = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const parsed = envSchema.safeParse(set);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `${i.path.join('.') || 'environment'}: ${i.message}`);
    throw new ConfigError(`invalid configuration: ${lines.join('; ')}`);
  }
  const e = parsed.data;
  const port = overrides.port ?? e.PORT;
  const siteUrl = (overrides.siteUrl ?? e.SITE_URL ?? `http://localhost:${port}`).replace(/\/+$/, '');
  return {
    nodeEnv: e.NODE_ENV,
    host: e.HOST,
    port,
    siteUrl,
    apiBaseUrl: `${siteUrl}/api/v1`,
    baseDomain: e.BASE_DOMAIN.toLowerCase(),
    mailHost: (e.MAIL_HOST ?? `mail.${e.BASE_DOMAIN}`).toLowerCase(),
    nameservers: e.NAMESERVERS.split(',').map((s) => s.trim().toLowerCase()).filter(Boolean),
    databaseUrl: e.DATABASE_URL,
    redisUrl: e.REDIS_URL,
    secretKey: e.BOXES_SECRET_KEY,
    logLevel: e.LOG_LEVEL,
    trustProxy: e.TRUST_PROXY,
    ...overrides,
    ...(overrides.siteUrl || overrides.port ? { siteUrl, apiBaseUrl: `${siteUrl}/api/v1` } : {}),
  };
}
