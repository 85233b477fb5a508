/** Address parsing (nodemailer's addressparser) and the checks Boxes applies to addresses. */
import addressparser from 'nodemailer/lib/addressparser';
import { AppError } from '../shared/errors';

const ADDRESS = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z0-9-]{2,63}$/;

export interface Mailbox {
  name: string | undefined;
  /** Lower-cased address. */
  address: string;
}

export function isAddress(s: string): boolean {
  return s.length <= 254 && ADDRESS.test(s);
}

/** Parses one "address" or "Name <address>" entry; throws a validation error naming the field. */
export function parseMailbox(input: string, field: string): Mailbox {
  if (/[\r\n]/.test(input)) throw invalid(field, input, 'line breaks are not allowed');
  const parsed = addressparser(input, { flatten: true });
  if (parsed.length !== 1 || !parsed[0]?.address || !isAddress(parsed[0].address)) {
    throw invalid(field, input, 'not an email address (use address or Name <address>)');
  }
  return { name: parsed[0].name || undefined, address: parsed[0].address.toLowerCase() };
}

export function parseMailboxes(input: string | string[] | undefined, field: string): Mailbox[] {
  const list = input === undefined ? [] : Array.isArray(input) ? input : [input];
  return list.map((s, i) => parseMailbox(s, Array.isArray(input) ? `${field}.${i}` : field));
}

function invalid(field: string, value: string, why: string): AppError {
  return new AppError('validation_error', `${field}: ${why}: ${JSON.stringify(value.slice(0, 100))}`, {
    fields: [{ path: field, message: why }],
  });
}

export const domainOf = (address: string): string => address.slice(address.lastIndexOf('@') + 1);
export const formatMailbox = (m: Mailbox): string => (m.name ? `${JSON.stringify(m.name)} <${m.address}>` : m.address);
