/**
 * Registering domains (mode register) goes through a Registrar: check a name's availability and price,
 * register it for a year with the instance's nameservers, renew it, hold it for transfer out. A real
 * registrar's adapter implements this interface; the instance ships the LocalRegistrar, which is SIMULATED:
 * its registry is a table in our database, its prices a fixed table, and no real registry is involved. Every
 * answer that reaches a user names it as such (`label`).
 */
import { randomBytes } from 'node:crypto';
import type { Db, Tx } from '@boxes/db';

export interface RegistrarQuote {
  name: string;
  available: boolean;
  /** Why not, when unavailable (taken, reserved, unsupported TLD). */
  reason: string | null;
  /** Price of one year, in cents. */
  priceCentsPerYear: number | null;
}

export interface Registrar {
  /** Shown wherever a registration is: "local registrar (built in; simulated, no real registry)". */
  readonly label: string;
  readonly id: string;
  quote(db: Db | Tx, name: string): Promise<RegistrarQuote>;
  /** Registers for `years` with these nameservers; inside the caller's transaction where the registrar allows it. */
  register(db: Tx, name: string, opts: { years: number; nameservers: string[]; registrant: string; now: Date }): Promise<{ expiresAt: Date }>;
  renew(db: Tx, name: string, opts: { years: number; currentExpiry: Date }): Promise<{ expiresAt: Date }>;
  /** Unlocks the name for transfer to another registrar; returns the auth code. */
  holdForTransfer(db: Tx, name: string): Promise<{ authCode: string }>;
  /** Names close to `name` that are available now (other TLDs, close variants). */
  suggest(db: Db | Tx, name: string, limit?: number): Promise<RegistrarQuote[]>;
  /** The yearly price of each TLD offered, in cents, when the registrar has a fixed list (the discovery manifest shows it). */
  priceList?(): Readonly<Record<string, number>>;
}

/** Yearly prices of the local registrar, in cents, per TLD. */
export const LOCAL_TLD_PRICES_CENTS: Record<string, number> = {
  xyz: 600,
  site: 700,
  online: 800,
  org: 1100,
  com: 1200,
  net: 1400,
  dev: 1500,
  app: 1600,
  io: 4500,
  ai: 7000,
};

/** Names the local registrar treats as registered by someone else (deterministic, so tests can rely on them). */
export const LOCAL_TAKEN = new Set([
  'google.com',
  'amazon.com',
  'openai.com',
  'gmail.com',
  'outlook.com',
  'taken-name.com',
  'agent.com',
  'mail.com',
  'boxes.dev',
  'agents.ai',
]);

/** RFC 2606 and RFC 6761: example names and reserved TLDs are never registrable. */
function reserved(name: string): boolean {
  const tld = name.slice(name.lastIndexOf('.') + 1);
  return ['example.com', 'example.net', 'example.org'].includes(name) || ['test', 'example', 'invalid', 'localhost', 'local', 'onion'].includes(tld);
}

export class LocalRegistrar implements Registrar {
  readonly id = 'local';
  readonly label = 'local registrar (built in; simulated, no real registry is involved)';

  async quote(db: Db | Tx, name: string): Promise<RegistrarQuote> {
    const labels = name.split('.');
    const tld = labels[labels.length - 1] ?? '';
    const price = LOCAL_TLD_PRICES_CENTS[tld] ?? null;
    const no = (reason: string): RegistrarQuote => ({ name, available: false, reason, priceCentsPerYear: price });
    if (reserved(name)) return no('reserved: example and test names can never be registered (RFC 2606)');
    if (labels.length !== 2) return no('only second-level names (name.tld) can be registered');
    if (price === null)
      return no(
        `the .${tld} TLD is not offered (offered: ${Object.keys(LOCAL_TLD_PRICES_CENTS)
          .map((t) => `.${t}`)
          .join(', ')})`,
      );
    if (LOCAL_TAKEN.has(name) || (await db.simulatedRegistryName.findUnique({ where: { name }, select: { name: true } }))) return no('already registered');
    return { name, available: true, reason: null, priceCentsPerYear: price };
  }

  async register(db: Tx, name: string, opts: { years: number; nameservers: string[]; registrant: string; now: Date }): Promise<{ expiresAt: Date }> {
    const expiresAt = addYears(opts.now, opts.years);
    // The primary key makes a second registration of one name fail, as a registry would.
    await db.simulatedRegistryName.create({ data: { name, holder: opts.registrant, expiresAt } });
    return { expiresAt };
  }

  async renew(db: Tx, name: string, opts: { years: number; currentExpiry: Date }): Promise<{ expiresAt: Date }> {
    const expiresAt = addYears(opts.currentExpiry, opts.years);
    await db.simulatedRegistryName.update({ where: { name }, data: { expiresAt } });
    return { expiresAt };
  }

  async holdForTransfer(db: Tx, name: string): Promise<{ authCode: string }> {
    const authCode = randomBytes(9).toString('base64url');
    await db.simulatedRegistryName.update({ where: { name }, data: { authCode } });
    return { authCode };
  }

  priceList(): Readonly<Record<string, number>> {
    return LOCAL_TLD_PRICES_CENTS;
  }

  async suggest(db: Db | Tx, name: string, limit = 5): Promise<RegistrarQuote[]> {
    const labels = name.split('.');
    const base = (labels.length >= 2 ? labels[labels.length - 2]! : labels[0]!).replace(/[^a-z0-9-]/g, '').slice(0, 50) || 'agent';
    const candidates = [
      ...Object.keys(LOCAL_TLD_PRICES_CENTS).map((tld) => `${base}.${tld}`),
      ...['mail', 'agent', 'hq', 'app'].flatMap((w) => [`${base}-${w}.com`, `get${base}.com`]),
    ];
    const out: RegistrarQuote[] = [];
    for (const c of [...new Set(candidates)]) {
      if (c === name) continue;
      const q = await this.quote(db, c);
      if (q.available) out.push(q);
      if (out.length >= limit) break;
    }
    return out;
  }
}

export function addYears(from: Date, years: number): Date {
  const d = new Date(from);
  d.setUTCFullYear(d.getUTCFullYear() + years);
  return d;
}
