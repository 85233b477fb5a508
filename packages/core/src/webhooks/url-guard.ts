/**
 * Callback URLs may only reach the public internet: https only, and never loopback, private, link-local,
 * carrier-grade NAT, unspecified, multicast or reserved addresses, however the address is spelled (decimal,
 * hex and octal IPv4 forms are normalised by the WHATWG URL parser; IPv4-mapped IPv6 is unwrapped). Checked
 * when the URL is set (literal addresses, and names that resolve) and again at connect time on the resolved
 * addresses, so a name that later resolves to a private address is refused too.
 */
import { promises as dns, type LookupAddress } from 'node:dns';
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';
import { AppError } from '../shared/errors';

export interface UrlGuardOptions {
  /** Local development and tests: allow private and loopback targets (never on by default). */
  allowPrivate: boolean;
}

/** Why an address is refused, or null when it is a public unicast address. */
export function refusedRange(address: string): string | null {
  if (!ipaddr.isValid(address)) return 'not an IP address';
  let ip = ipaddr.parse(address);
  if (ip.kind() === 'ipv6' && (ip as ipaddr.IPv6).isIPv4MappedAddress()) ip = (ip as ipaddr.IPv6).toIPv4Address();
  const range = ip.range();
  return range === 'unicast' ? null : range;
}

function refuseField(message: string, field = 'agent_callback_webhook'): AppError {
  return new AppError('validation_error', `${field}: ${message}`, { fields: [{ path: field, message }] });
}

function hostOf(url: URL): string {
  return url.hostname.replace(/^\[|\]$/g, '');
}

/** Validates a callback URL for storing. Names that do not resolve now are accepted and checked at connect time. */
export async function checkCallbackUrl(raw: string, opts: UrlGuardOptions & { field?: string }): Promise<string> {
  const refuse = (message: string) => refuseField(message, opts.field);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw refuse('not a URL');
  }
  if (url.protocol !== 'https:') throw refuse('must be an https:// URL');
  if (url.username || url.password) throw refuse('must not carry credentials');
  if (opts.allowPrivate) return url.toString();
  const host = hostOf(url);
  if (ipaddr.isValid(host)) {
    const why = refusedRange(host);
    if (why) throw refuse(`${host} is a ${why} address; callbacks must reach a public address`);
    return url.toString();
  }
  if (host === 'localhost' || host.endsWith('.localhost') || host.endsWith('.local') || host.endsWith('.internal')) {
    throw refuse(`${host} is not a public host name`);
  }
  let addresses: LookupAddress[] = [];
  try {
    addresses = await dns.lookup(host, { all: true, verbatim: true });
  } catch {
    return url.toString(); // does not resolve now: the connect-time check decides
  }
  for (const a of addresses) {
    const why = refusedRange(a.address);
    if (why) throw refuse(`${host} resolves to ${a.address}, a ${why} address; callbacks must reach a public address`);
  }
  return url.toString();
}

/**
 * A dns.lookup replacement for http(s).request that refuses non-public addresses after resolution (the
 * connect-time check: it sees exactly the address the socket will use).
 */
export function guardedLookup(opts: UrlGuardOptions) {
  return (
    hostname: string,
    options: { all?: boolean; family?: number } | number,
    callback: (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void,
  ): void => {
    const all = typeof options === 'object' && options.all;
    const check = (addresses: LookupAddress[]) => {
      if (!opts.allowPrivate) {
        const bad = addresses.find((a) => refusedRange(a.address));
        if (bad) {
          const err: NodeJS.ErrnoException = new Error(`${hostname} resolves to ${bad.address}, a ${refusedRange(bad.address)} address`);
          err.code = 'EREFUSEDADDRESS';
          return callback(err, all ? [] : '', 0);
        }
      }
      if (all) return callback(null, addresses);
      const first = addresses[0];
      if (!first) return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), '', 0);
      callback(null, first.address, first.family);
    };
    // A literal address resolves to itself: checked as it is, without a trip through the resolver.
    const family = isIP(hostname);
    if (family) {
      process.nextTick(check, [{ address: hostname, family }]);
      return;
    }
    dns
      .lookup(hostname, { all: true, verbatim: true })
      .then(check)
      .catch((err: NodeJS.ErrnoException) => callback(err, all ? [] : '', 0));
  };
}
