/**
 * The IMAP server: implicit TLS (993 in production), one Session per connection, and the hub that ties
 * sessions to the event stream. Every append NOTIFYs boxes_events with its account (on whichever process made
 * it); the hub LISTENs, folds the account's new events into its folders once per burst, and wakes that
 * account's sessions here (IDLE answers at once; a revoked app-password ends its sessions). A slow sweep does
 * the same for idling accounts in case a notification was missed (a dropped LISTEN connection).
 *
 * Accounts that use mail clients (they have a fold cursor: an app-password was made, or a client logged in) are
 * followed with no session open too: their new mail is folded in as it arrives, a burst at a time, so a client's
 * first sync after a week away finds its folders ready instead of folding the week at login. The set is read at
 * start, grows with each MAIL_FOLLOW_CHANNEL notification (a first app-password) and is read again on each sweep
 * (accounts no longer active leave it; those a missed notification left behind are folded). These folds wait a
 * second after the first event of a burst, run two at a time per process, and give way to any other fold of the
 * same account (see syncMailboxes' background). Folding at login stays the rule; this only does it earlier.
 */
import type { AddressInfo } from 'node:net';
import tls from 'node:tls';
import pg from 'pg';
import type { Config } from '@boxes/config';
import { copyOutBinary, k, quietWhileCheckedOut, rows as run, sql } from '@boxes/db';
import { ACCOUNT_STATUSES } from '@boxes/schemas';
import { EVENTS_CHANNEL, MAIL_FOLLOW_CHANNEL, statusLit, syncMailboxes, type MailTls, type RawCopy, type Services } from '@boxes/core';
import type { Logger } from 'pino';
import { Session, type Hub } from './session';

export interface ImapHandle {
  port: number;
  /** Open sessions (tests and metrics). */
  sessions(): number;
  stop(): Promise<void>;
}

/** How often accounts with sessions are looked at without a notification (and the followed ones read again). */
const SWEEP_MS = 15_000;
/** Folds of followed accounts with no session here running at once in this process, and their delay. */
const BACKGROUND_FOLDS = 2;
const BACKGROUND_DELAY_MS = 1000;

class SessionHub implements Hub {
  rawCopy?: RawCopy;
  private readonly byAccount = new Map<string, Set<Session>>();
  private readonly syncing = new Map<string, { run: Promise<void>; again: boolean }>();
  /** Accounts folded as their stream moves even with no session here (see above). */
  private following = new Set<string>();
  private addedDuringRefresh: Set<string> | null = null;
  /** Followed accounts waiting for a background fold: their delay running, then queued; then being folded. */
  private readonly delayed = new Map<string, NodeJS.Timeout>();
  private readonly backlog = new Set<string>();
  private readonly background = new Map<string, Promise<void>>();
  private stopped = false;
  readonly all = new Set<Session>();

  constructor(
    readonly svc: Services,
    readonly config: Config,
    readonly log: Logger,
  ) {}

  register(session: Session): void {
    const id = session.login!.accountId;
    let set = this.byAccount.get(id);
    if (!set) {
      set = new Set();
      this.byAccount.set(id, set);
    }
    set.add(session);
    this.follow(id);
  }

  unregister(session: Session): void {
    this.all.delete(session);
    const id = session.login?.accountId;
    if (!id) return;
    const set = this.byAccount.get(id);
    set?.delete(session);
    if (set && !set.size) this.byAccount.delete(id);
  }

  /** One fold at a time per account in this process; calls during a fold wait for one more after it. */
  sync(accountId: string): Promise<void> {
    const running = this.syncing.get(accountId);
    if (running) {
      running.again = true;
      return running.run;
    }
    const entry = { run: Promise.resolve(), again: false };
    entry.run = (async () => {
      try {
        do {
          entry.again = false;
          await syncMailboxes(this.svc, accountId);
        } while (entry.again);
      } finally {
        this.syncing.delete(accountId);
      }
    })();
    this.syncing.set(accountId, entry);
    return entry.run;
  }

  /** The account's stream moved: fold it, then let its sessions look (or fold it in the background: followed). */
  async wake(accountId: string): Promise<void> {
    const sessions = this.byAccount.get(accountId);
    if (!sessions?.size) {
      if (this.following.has(accountId)) this.foldLater(accountId);
      return;
    }
    try {
      await this.sync(accountId);
    } catch (err) {
      this.log.error({ err, accountId }, 'folding the event stream into folders failed');
    }
    for (const s of [...sessions]) void s.streamMoved();
  }

  /**
   * Followed accounts with no session here: folded BACKGROUND_DELAY_MS after the first event of a burst (so a
   * stream of mail costs one fold a second, not one per message), BACKGROUND_FOLDS at a time (they share the
   * process's database pool with the MX and the sessions), one fold per account at a time.
   */
  private foldLater(accountId: string): void {
    if (this.stopped || this.delayed.has(accountId) || this.backlog.has(accountId)) return;
    const timer = setTimeout(() => {
      this.delayed.delete(accountId);
      this.backlog.add(accountId);
      this.pump();
    }, BACKGROUND_DELAY_MS);
    timer.unref();
    this.delayed.set(accountId, timer);
  }

  private pump(): void {
    for (const id of [...this.backlog]) {
      if (this.stopped || this.background.size >= BACKGROUND_FOLDS) return;
      // An account being folded waits for that fold to end (its events since are folded by the next one).
      if (this.background.has(id)) continue;
      this.backlog.delete(id);
      const run = syncMailboxes(this.svc, id, { background: true })
        .then(() => undefined)
        .catch((err: Error) => this.log.error({ err, accountId: id }, 'folding the event stream into folders failed'))
        .finally(() => {
          this.background.delete(id);
          this.pump();
        });
      this.background.set(id, run);
    }
  }

  /** Stops taking background folds and waits for those running. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const timer of this.delayed.values()) clearTimeout(timer);
    this.delayed.clear();
    this.backlog.clear();
    await Promise.all([...this.background.values()]);
  }

  /**
   * Reads again which accounts to follow (active accounts with a fold cursor) and queues those whose stream has
   * moved past it: a notification missed while the listener was down is made up here.
   */
  async refreshFollowing(): Promise<void> {
    const addedMeanwhile = new Set<string>();
    this.addedDuringRefresh = addedMeanwhile;
    try {
      const rows = await run(
        this.svc.db,
        k
          .selectFrom('mail_sync_state as s')
          .innerJoin('accounts as a', 'a.id', 's.account_id')
          .select(['s.account_id', sql<boolean>`${sql.ref('a.chain_seq')} > ${sql.ref('s.seq')}`.as('behind')])
          .where('a.status', '=', statusLit(ACCOUNT_STATUSES, 'active')),
      );
      const next = new Set(rows.map((r) => r.account_id));
      for (const id of addedMeanwhile) next.add(id);
      for (const id of this.byAccount.keys()) next.add(id);
      this.following = next;
      for (const r of rows) if (r.behind && !this.byAccount.has(r.account_id)) this.foldLater(r.account_id);
    } finally {
      if (this.addedDuringRefresh === addedMeanwhile) this.addedDuringRefresh = null;
    }
  }

  follow(accountId: string): void {
    this.following.add(accountId);
    this.addedDuringRefresh?.add(accountId);
  }

  accounts(): string[] {
    return [...this.byAccount.keys()];
  }
}

export async function startImap(config: Config, deps: { svc: Services; log: Logger; tls: MailTls }): Promise<ImapHandle> {
  const hub = new SessionHub(deps.svc, config, deps.log);
  // Message bytes are read through a small pool of its own, as binary COPY (see RawCopy in core).
  const pool = new pg.Pool({ connectionString: config.databaseUrl, max: 4 });
  pool.on('error', (err) => deps.log.error({ err: err.message }, 'imap read pool error'));
  quietWhileCheckedOut(pool);
  hub.rawCopy = async (query, onRow) => {
    const client = await pool.connect();
    let failed: Error | undefined;
    try {
      await copyOutBinary(client, query, onRow);
    } catch (err) {
      failed = err as Error;
      throw err;
    } finally {
      // A client whose COPY failed may still be answering it: it is closed, not reused.
      client.release(failed);
    }
  };
  let nextId = 1;
  // A client that opens a connection and never completes TLS is closed as one that never logs in.
  const server = tls.createServer(
    { key: deps.tls.key, cert: deps.tls.cert, minVersion: 'TLSv1.2', handshakeTimeout: config.mailClients.imapLoginTimeoutMs },
    (socket) => {
      if (hub.all.size >= config.smtp.maxConnections) {
        socket.end('* BYE Too many connections; try again later\r\n');
        return;
      }
      hub.all.add(new Session(socket, hub, nextId++));
    },
  );
  // A failed or timed-out handshake: drop the connection (a listener here means Node leaves that to us).
  server.on('tlsClientError', (_err, socket) => socket.destroy());

  const refreshFollowing = () =>
    void hub.refreshFollowing().catch((err: Error) => deps.log.error({ err: err.message }, 'imap: reading the accounts to follow failed'));
  let stopped = false;
  let listener: pg.Client | null = null;
  const listen = async (): Promise<void> => {
    if (stopped) return;
    const client = new pg.Client({ connectionString: config.directDatabaseUrl });
    client.on('notification', (msg) => {
      if (!msg.payload) return;
      if (msg.channel === MAIL_FOLLOW_CHANNEL) hub.follow(msg.payload);
      void hub.wake(msg.payload);
    });
    const retry = () => {
      if (listener === client) listener = null;
      client.end().catch(() => undefined);
      if (!stopped) setTimeout(() => void listen().catch(() => undefined), 1000).unref();
    };
    client.on('error', (err) => {
      deps.log.error({ err: err.message }, 'imap event listener error');
      retry();
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${EVENTS_CHANNEL}; LISTEN ${MAIL_FOLLOW_CHANNEL}`);
      listener = client;
      // Whatever happened while not listening.
      for (const id of hub.accounts()) void hub.wake(id);
      refreshFollowing();
    } catch (err) {
      deps.log.error({ err: (err as Error).message }, 'imap event listener could not connect');
      retry();
    }
  };
  await listen();
  const sweep = setInterval(() => {
    for (const id of hub.accounts()) void hub.wake(id);
    refreshFollowing();
  }, SWEEP_MS);
  sweep.unref();

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.mailClients.imapPort, config.mailClients.imapHost, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    sessions: () => hub.all.size,
    async stop() {
      stopped = true;
      clearInterval(sweep);
      for (const s of [...hub.all]) s.bye('Server shutting down');
      await hub.stop();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await listener?.end().catch(() => undefined);
      await pool.end().catch(() => undefined);
    },
  };
}
