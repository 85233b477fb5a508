/**
 * One IMAP connection: reads commands (whole, literals included) from the framer, runs them one at a time
 * through the command table, and writes responses with backpressure. It holds the login, the selected mailbox
 * and the IDLE state; the hub wakes it when its account's event stream moves (new mail, flags changed
 * elsewhere, the app-password revoked).
 */
import type { Socket } from 'node:net';
import type { Config } from '@boxes/config';
import { appPasswordActive, type MailLogin, type RawCopy, type Services } from '@boxes/core';
import type { Logger } from 'pino';
import { COMMANDS, type State } from './command-table';
import type { Chunk } from './encode';
import { foldersOf, type ImapFolder } from './folders';
import type { SelectedMailbox } from './mailbox';
import { BadArgs, CommandFramer, parseCommand, ParseError, type Command, type Frame } from './parser';

export const CAPABILITIES_BEFORE_LOGIN = ['IMAP4rev1', 'SASL-IR', 'LITERAL+', 'ID', 'ENABLE', 'IDLE', 'AUTH=PLAIN'];
export const CAPABILITIES = [
  'IMAP4rev1',
  'SASL-IR',
  'LITERAL+',
  'ID',
  'ENABLE',
  'IDLE',
  'NAMESPACE',
  'UIDPLUS',
  'MOVE',
  'SPECIAL-USE',
  'UNSELECT',
  'CHILDREN',
  'CONDSTORE',
  'STATUS=SIZE',
];

/** A NO answer: [code] and text. */
export class ImapNo extends Error {
  constructor(
    readonly code: string | null,
    message: string,
  ) {
    super(message);
  }
}

/** What a handler answers on success: the tagged OK's response code and text. */
export interface Done {
  code?: string;
  text: string;
}

export interface Hub {
  svc: Services;
  config: Config;
  log: Logger;
  register(session: Session): void;
  unregister(session: Session): void;
  /** Folds the account's event stream into its folders (shared by the sessions of this process). */
  sync(accountId: string): Promise<void>;
  /** Reads of message bytes, outside Prisma (see RawCopy in core). */
  rawCopy?: RawCopy;
}

const LIMITS = { maxLine: 64 * 1024, maxLiteral: 50 * 1024 * 1024 };
/** Failed logins one connection may make before it is closed (the account and address counts go on elsewhere). */
const MAX_FAILED_LOGINS = 3;
/** Output gathered before it is sent, and how much may wait in the socket before a large FETCH pauses. */
const OUTPUT_FLUSH = 64 * 1024;
const OUTPUT_BACKLOG = 1024 * 1024;
/**
 * Output buffers kept for reuse (OUTPUT_FLUSH bytes each), and for how long after the last command: a client
 * pipelining a download sends its commands in bursts, and buffers dropped between two bursts were allocated again
 * for the next (tens of MB of short-lived memory per large download, reclaimed only by full collections).
 */
const OUTPUT_SPARES = 4;
const SPARES_KEPT_MS = 2000;
/** How often an IDLE client hears that the server is still there. */
const IDLE_KEEPALIVE_MS = 4 * 60_000;

export class Session {
  state: State = 'not-authenticated';
  login: MailLogin | null = null;
  selected: SelectedMailbox | null = null;
  condstore = false;
  readonly id: string;
  readonly remoteAddress: string;
  private readonly framer = new CommandFramer(LIMITS);
  private running = false;
  private closed = false;
  private idle: { tag: string; timer: NodeJS.Timeout } | null = null;
  private lineWaiter: ((line: string | null) => void) | null = null;
  private folderCache: ImapFolder[] | null = null;
  private checking = false;
  private failedLogins = 0;
  private closeAfterCommand = false;
  private out: Buffer | null = null;
  private outLen = 0;
  /** Output buffers the socket is done with (kept SPARES_KEPT_MS after the last command; then none). */
  private spare: Buffer[] = [];
  private spareTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly socket: Socket,
    readonly hub: Hub,
    id: number,
  ) {
    this.id = `imap-${id}`;
    this.remoteAddress = socket.remoteAddress ?? 'unknown';
    socket.setNoDelay(true);
    socket.setTimeout(hub.config.mailClients.imapLoginTimeoutMs);
    socket.on('data', (chunk: Buffer) => {
      this.framer.push(chunk);
      if (this.lineWaiter) this.deliverLine();
      else void this.drive();
    });
    socket.on('timeout', () => this.bye('Autologout; idle for too long'));
    socket.on('error', () => this.close());
    socket.on('close', () => this.close());
    this.write([`* OK [CAPABILITY ${CAPABILITIES_BEFORE_LOGIN.join(' ')}] Boxes IMAP ready\r\n`]);
  }

  get svc(): Services {
    return this.hub.svc;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /**
   * Writes chunks. While commands are running, output is gathered and sent in pieces of OUTPUT_FLUSH bytes or
   * when no further command is waiting, so a client fetching message after message gets few, full TLS records
   * instead of many small ones. Chunks are copied straight into an output buffer (text written as latin1, message
   * bytes copied once), and a buffer the socket has finished with is used again: a large download allocates no
   * new memory per response.
   */
  write(chunks: Chunk[]): void {
    if (this.closed) return;
    for (let i = 0; i < chunks.length; i++) {
      const c = chunks[i]!;
      if (typeof c === 'string') this.putText(c);
      else this.copyOut(c);
    }
    if (!this.running || this.outLen >= OUTPUT_FLUSH) this.flush();
  }

  /** write() of one piece of text (a whole response, or its end), without a list around it. */
  writeText(text: string): void {
    if (this.closed) return;
    this.putText(text);
    if (!this.running || this.outLen >= OUTPUT_FLUSH) this.flush();
  }

  private putText(c: string): void {
    if (c.length <= OUTPUT_FLUSH - this.outLen) this.outLen += this.outBuf().write(c, this.outLen, 'latin1');
    else this.copyOut(Buffer.from(c, 'latin1'));
  }

  /** The buffer output is gathered in (a spare one the socket is done with, or a new one). */
  private outBuf(): Buffer {
    this.out ??= this.spare.pop() ?? Buffer.allocUnsafeSlow(OUTPUT_FLUSH);
    return this.out;
  }

  private copyOut(b: Buffer): void {
    let at = 0;
    while (at < b.length) {
      const n = b.copy(this.outBuf(), this.outLen, at, Math.min(b.length, at + OUTPUT_FLUSH - this.outLen));
      this.outLen += n;
      at += n;
      if (this.outLen >= OUTPUT_FLUSH) this.flush();
    }
  }

  /** Sends what write() gathered. */
  flush(): void {
    const buf = this.out;
    if (!buf || !this.outLen || this.closed) {
      this.outLen = 0;
      return;
    }
    const len = this.outLen;
    this.out = null;
    this.outLen = 0;
    // The socket holds on to the bytes until they are written; then the buffer may carry the next ones.
    this.socket.write(buf.subarray(0, len), () => {
      if (!this.closed && this.spare.length < OUTPUT_SPARES) this.spare.push(buf);
    });
  }

  /** One untagged response line (chunks without the CRLF). */
  untagged(chunks: Chunk[]): void {
    this.write([...chunks, '\r\n']);
  }

  /** Whether drained() would wait: callers skip the await (and its promise) when it would not. */
  get backlogged(): boolean {
    return !this.closed && this.socket.writableLength >= OUTPUT_BACKLOG;
  }

  /** Waits while the client is slow to read, so a large FETCH does not pile up in memory. */
  async drained(): Promise<void> {
    // Up to OUTPUT_BACKLOG may wait in the socket while the next responses are made; beyond it, wait.
    if (!this.backlogged) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        this.socket.off('drain', done);
        this.socket.off('close', done);
        resolve();
      };
      this.socket.once('drain', done);
      this.socket.once('close', done);
    });
  }

  bye(text: string): void {
    this.write([`* BYE ${text}\r\n`]);
    this.end();
  }

  /** Ends the connection once what was written has gone out. */
  end(): void {
    this.flush();
    this.socket.end();
    this.closed = true;
    if (this.idle) clearInterval(this.idle.timer);
    this.releaseSpares();
    this.hub.unregister(this);
  }

  private close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.idle) clearInterval(this.idle.timer);
    this.releaseSpares();
    this.lineWaiter?.(null);
    this.hub.unregister(this);
    if (!this.socket.destroyed) this.socket.destroy();
  }

  /** The next bare line from the client (an AUTHENTICATE response), or null if the connection closed. */
  readLine(): Promise<string | null> {
    // What was written (the "+" continuation) must go out before waiting for the answer.
    this.flush();
    return new Promise((resolve) => {
      this.lineWaiter = resolve;
      this.deliverLine();
    });
  }

  private deliverLine(): void {
    const frame = this.framer.nextLine();
    if (!frame || !this.lineWaiter) return;
    const waiter = this.lineWaiter;
    this.lineWaiter = null;
    waiter(frame.kind === 'line' ? frame.text : null);
  }

  /** The folders this login sees (made current with the event stream first). */
  async folders(fresh = true): Promise<ImapFolder[]> {
    if (!this.login) return [];
    if (fresh || !this.folderCache) {
      await this.hub.sync(this.login.accountId);
      this.folderCache = await foldersOf(this.svc, this.login);
    }
    return this.folderCache;
  }

  loggedIn(login: MailLogin): void {
    this.login = login;
    this.state = 'authenticated';
    this.socket.setTimeout(this.hub.config.mailClients.imapAutologoutMs);
    this.hub.register(this);
    // A client's next steps (LIST, SELECT) need the folders made current with the event stream: that starts now,
    // while the login answer and whatever comes before LIST travel (a first login of a large account folds
    // thousands of events). Errors surface at the command that waits for it.
    void this.hub.sync(login.accountId).catch(() => undefined);
  }

  /** A failed login: after MAX_FAILED_LOGINS the connection ends once the answer is out. */
  loginFailed(): void {
    this.failedLogins++;
    if (this.failedLogins >= MAX_FAILED_LOGINS) this.closeAfterCommand = true;
  }

  /** Sends what changed in the selected mailbox since the client last heard. */
  async reportChanges(): Promise<void> {
    if (!this.selected || !this.login) return;
    await this.hub.sync(this.login.accountId);
    for (const line of await this.selected.refresh(this.svc, { condstore: this.condstore })) this.untagged(line);
  }

  enterIdle(tag: string): void {
    this.write(['+ idling\r\n']);
    const timer = setInterval(() => this.write(['* OK Still here\r\n']), IDLE_KEEPALIVE_MS);
    this.idle = { tag, timer };
    void this.streamMoved();
  }

  /**
   * The account's event stream moved (on any process): a revoked app-password ends the session; an idling
   * client hears about changes at once, others at their next NOOP or IDLE.
   */
  async streamMoved(): Promise<void> {
    if (this.closed || !this.login || this.checking) return;
    this.checking = true;
    try {
      if (!(await appPasswordActive(this.svc.db, this.login.appPasswordId))) {
        this.bye('This app-password has been revoked');
        return;
      }
      if (this.idle && !this.running) {
        this.running = true;
        try {
          await this.reportChanges();
        } finally {
          this.running = false;
          void this.drive();
        }
      }
    } catch (err) {
      this.hub.log.error({ err }, 'imap session refresh failed');
    } finally {
      this.checking = false;
    }
  }

  private nextFrame(): Frame | null {
    if (this.idle) return this.framer.nextLine();
    return this.framer.next();
  }

  /** Runs whatever complete input there is, one command at a time. */
  private async drive(): Promise<void> {
    if (this.running || this.closed) return;
    this.running = true;
    if (this.spareTimer) clearTimeout(this.spareTimer);
    this.spareTimer = null;
    try {
      for (;;) {
        if (this.closed) return;
        const frame = this.nextFrame();
        if (!frame) return;
        if (frame.kind === 'continue') {
          this.write(['+ Ready for literal data\r\n']);
          continue;
        }
        if (frame.kind === 'too-big') {
          this.write([`${frame.tag ?? '*'} BAD ${frame.message}\r\n`]);
          continue;
        }
        if (frame.kind === 'line') {
          if (this.idle) {
            const { tag, timer } = this.idle;
            if (frame.text.trim().toUpperCase() !== 'DONE') {
              this.write([`${tag} BAD Expected DONE\r\n`]);
            } else {
              this.write([`${tag} OK IDLE terminated\r\n`]);
            }
            clearInterval(timer);
            this.idle = null;
          }
          continue;
        }
        let cmd: Command;
        try {
          cmd = parseCommand(frame.bytes);
        } catch (err) {
          const tag = err instanceof ParseError ? err.tag : null;
          this.write([`${tag ?? '*'} BAD ${(err as Error).message}\r\n`]);
          continue;
        }
        // A command that had nothing to wait for is done here: no promise, no await.
        const running = this.run(cmd);
        if (running) await running;
      }
    } finally {
      this.running = false;
      this.flush();
      this.releaseSpares();
    }
  }

  /** Lets go of the output buffers once no command has come for SPARES_KEPT_MS (at once when closed). */
  private releaseSpares(): void {
    if (this.spareTimer) clearTimeout(this.spareTimer);
    this.spareTimer = null;
    if (this.closed) {
      this.spare = [];
      return;
    }
    this.spareTimer = setTimeout(() => {
      this.spareTimer = null;
      if (!this.running) this.spare = [];
    }, SPARES_KEPT_MS);
    this.spareTimer.unref();
  }

  /** Runs one command: answered when this returns, or when the promise it returns (if any) settles. */
  private run(cmd: Command): Promise<void> | undefined {
    const spec = COMMANDS[cmd.name];
    if (!spec) {
      this.write([`${cmd.tag} BAD Unknown command ${cmd.name.slice(0, 30)}\r\n`]);
      return;
    }
    if (!spec.states.includes(this.state)) {
      const why = this.state === 'not-authenticated' ? 'Log in first' : spec.states.includes('selected') ? 'Select a mailbox first' : 'Not allowed now';
      this.write([`${cmd.tag} BAD ${why}\r\n`]);
      return;
    }
    let done: Done | null | Promise<Done | null>;
    try {
      done = spec.handler(this, cmd, false);
    } catch (err) {
      this.failed(cmd, err);
      return;
    }
    if (done instanceof Promise) {
      return done.then(
        (d) => this.answer(cmd, d),
        (err) => this.failed(cmd, err),
      );
    }
    this.answer(cmd, done);
  }

  /** The tagged answer of a command that succeeded (null: the handler answered itself, as IDLE and LOGOUT do). */
  private answer(cmd: Command, done: Done | null): void {
    if (!done) return;
    this.writeText(done.code ? `${cmd.tag} OK [${done.code}] ${done.text}\r\n` : `${cmd.tag} OK ${done.text}\r\n`);
    this.afterCommand();
  }

  private failed(cmd: Command, err: unknown): void {
    if (err instanceof BadArgs) this.write([`${cmd.tag} BAD ${err.message.replace(/[\r\n]/g, ' ')}\r\n`]);
    else if (err instanceof ImapNo) this.write([`${cmd.tag} NO ${err.code ? `[${err.code}] ` : ''}${err.message}\r\n`]);
    else {
      this.hub.log.error({ err, command: cmd.name }, 'imap command failed');
      this.write([`${cmd.tag} NO [SERVERBUG] Internal error; try again\r\n`]);
    }
    this.afterCommand();
  }

  private afterCommand(): void {
    if (this.closeAfterCommand) this.bye('Too many failed logins on this connection');
  }
}
