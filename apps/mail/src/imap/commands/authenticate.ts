/**
 * AUTHENTICATE PLAIN (RFC 3501 6.2.2, RFC 4616), with the initial response on the command line (SASL-IR,
 * RFC 4959) or after a "+" continuation; "*" cancels.
 */
import { atom, BadArgs, type Command } from '../parser';
import { ImapNo, type Session } from '../session';
import { authenticateAs } from './login';

export async function authenticate(s: Session, cmd: Command) {
  const mechanism = atom(cmd.args[0], 'mechanism').toUpperCase();
  if (mechanism !== 'PLAIN') throw new ImapNo('CANNOT', `Only AUTHENTICATE PLAIN is offered (or LOGIN)`);
  let response: string | null;
  if (cmd.args[1]) response = atom(cmd.args[1], 'initial response');
  else {
    s.write(['+ \r\n']);
    response = await s.readLine();
    if (response === null) return null;
  }
  if (response.trim() === '*') throw new BadArgs('AUTHENTICATE cancelled');
  const decoded = response.trim() === '=' ? '' : Buffer.from(response.trim(), 'base64').toString('utf8');
  const [authzid, authcid, password] = decoded.split('\0');
  if (authcid === undefined || password === undefined) throw new BadArgs('Malformed PLAIN response');
  // Acting as another user is not offered.
  if (authzid && authzid.toLowerCase() !== authcid.toLowerCase()) throw new ImapNo('AUTHORIZATIONFAILED', 'Acting as another user is not allowed');
  return authenticateAs(s, authcid, password);
}
