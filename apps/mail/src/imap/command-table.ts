/**
 * The command table: each IMAP command, the states it is allowed in (RFC 3501 6), and its handler (one per
 * command, in commands/). UID FETCH, UID STORE, ... go through UID to the same handlers with uid set.
 */
import type { Command } from './parser';
import type { Done, Session } from './session';
import { authenticate } from './commands/authenticate';
import { capability } from './commands/capability';
import { check, noop } from './commands/noop';
import { close, unselect } from './commands/close';
import { copy, move } from './commands/copy';
import { create, deleteMailbox, rename } from './commands/create';
import { enable } from './commands/enable';
import { expunge } from './commands/expunge';
import { fetch } from './commands/fetch';
import { id } from './commands/id';
import { idle } from './commands/idle';
import { list, lsub } from './commands/list';
import { login } from './commands/login';
import { logout } from './commands/logout';
import { namespace } from './commands/namespace';
import { search } from './commands/search';
import { examine, select } from './commands/select';
import { status } from './commands/status';
import { store } from './commands/store';
import { subscribe, unsubscribe } from './commands/subscribe';
import { append } from './commands/append';
import { uid } from './commands/uid';

export type State = 'not-authenticated' | 'authenticated' | 'selected';

/**
 * A handler answers with the tagged OK's text (and code), or null when it wrote the completion itself; at once
 * when it had nothing to wait for (a download's FETCH of a message read ahead), else by a promise.
 */
export type Handler = (session: Session, cmd: Command, uid: boolean) => Done | null | Promise<Done | null>;

export interface CommandSpec {
  states: State[];
  handler: Handler;
}

const ANY: State[] = ['not-authenticated', 'authenticated', 'selected'];
const AUTHED: State[] = ['authenticated', 'selected'];
const SELECTED: State[] = ['selected'];

export const COMMANDS: Record<string, CommandSpec> = {
  CAPABILITY: { states: ANY, handler: capability },
  NOOP: { states: ANY, handler: noop },
  LOGOUT: { states: ANY, handler: logout },
  ID: { states: ANY, handler: id },
  LOGIN: { states: ['not-authenticated'], handler: login },
  AUTHENTICATE: { states: ['not-authenticated'], handler: authenticate },
  ENABLE: { states: AUTHED, handler: enable },
  NAMESPACE: { states: AUTHED, handler: namespace },
  LIST: { states: AUTHED, handler: list },
  LSUB: { states: AUTHED, handler: lsub },
  STATUS: { states: AUTHED, handler: status },
  SELECT: { states: AUTHED, handler: select },
  EXAMINE: { states: AUTHED, handler: examine },
  CREATE: { states: AUTHED, handler: create },
  DELETE: { states: AUTHED, handler: deleteMailbox },
  RENAME: { states: AUTHED, handler: rename },
  SUBSCRIBE: { states: AUTHED, handler: subscribe },
  UNSUBSCRIBE: { states: AUTHED, handler: unsubscribe },
  APPEND: { states: AUTHED, handler: append },
  IDLE: { states: AUTHED, handler: idle },
  CHECK: { states: SELECTED, handler: check },
  CLOSE: { states: SELECTED, handler: close },
  UNSELECT: { states: SELECTED, handler: unselect },
  EXPUNGE: { states: SELECTED, handler: expunge },
  SEARCH: { states: SELECTED, handler: search },
  FETCH: { states: SELECTED, handler: fetch },
  STORE: { states: SELECTED, handler: store },
  COPY: { states: SELECTED, handler: copy },
  MOVE: { states: SELECTED, handler: move },
  UID: { states: SELECTED, handler: uid },
};

/** The commands UID may prefix. */
export const UID_COMMANDS = new Set(['FETCH', 'STORE', 'SEARCH', 'COPY', 'MOVE', 'EXPUNGE']);
