/** Domain names: normalising and checking owner-supplied domains, and word-pair slugs for free subdomains. */
import { adjectives, animals, colors } from 'unique-names-generator';
import { randomInt } from 'node:crypto';

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;
const clean = (words: string[]) => words.filter((w) => /^[a-z]{3,10}$/.test(w));
const FIRST = clean([...adjectives, ...colors]);
const SECOND = clean(animals);

/** `<word>-<word>`, e.g. brave-otter. ~1,400 x ~350 combinations; callers retry on collision. */
export function wordPair(): string {
  return `${FIRST[randomInt(FIRST.length)]}-${SECOND[randomInt(SECOND.length)]}`;
}

/** Lower-cases, strips a trailing dot and checks the shape of a domain name. Returns null when invalid. */
export function normalizeDomain(input: string): string | null {
  const d = input.trim().toLowerCase().replace(/\.$/, '');
  if (d.length > 253) return null;
  const labels = d.split('.');
  if (labels.length < 2 || !labels.every((l) => LABEL.test(l))) return null;
  if (/^[0-9]+$/.test(labels[labels.length - 1]!)) return null; // an IP address, not a domain
  return d;
}
