/**
 * LOGIN (RFC 3501 6.2.3): the username is the owner's email or a box address, the password an app-password,
 * checked by core's verify call (which slows down and locks out repeated failures). The connection is TLS from
 * the first byte, so the password never travels in the clear.
 */
import { verifyMailLogin } from '@boxes/core';
import { astring, type Command } from '../parser';
import { CAPABILITIES, ImapNo, type Done, type Session } from '../session';

export async function authenticateAs(s: Session, username: string, password: string): Promise<Done> {
  const r = await verifyMailLogin(s.svc, { username, password, service: 'imap', remoteAddress: s.remoteAddress });
  if (!r.ok) {
    s.loginFailed();
    if (r.reason === 'locked') throw new ImapNo('UNAVAILABLE', r.message);
    throw new ImapNo(
      'AUTHENTICATIONFAILED',
      "Invalid username or app-password (use a box address or the owner's email, and an app-password from POST /account/app-passwords)",
    );
  }
  s.loggedIn(r.login);
  return { code: `CAPABILITY ${CAPABILITIES.join(' ')}`, text: 'Logged in' };
}

export async function login(s: Session, cmd: Command) {
  return authenticateAs(s, astring(cmd.args[0], 'username'), astring(cmd.args[1], 'password'));
}
