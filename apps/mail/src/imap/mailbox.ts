/**
 * The selected mailbox of one session: the messages in sequence order as this client knows them, and what
 * changed since (other sessions, other processes, new mail folded in from the event stream). Changes reach the
 * client only when refresh() is called at a point the protocol allows (NOOP, IDLE, ...), so sequence numbers
 * stay stable between. Message bytes are read in batches and kept in a small cache, with read-ahead for clients
 * that fetch one message after another. The cache keeps them sealed, copied into slabs the session fills again,
 * and a message is opened (decrypted) when a command uses it: what a download opens is garbage as soon as it is
 * written, instead of hundreds of opened bodies read ahead outliving the young generation, each a Buffer of its
 * own that only a full collection reclaims.
 */
import { flagNames, folderHead, loadFolderEntries, loadSealedMessages, open, type FolderEntry, type RawCopy, type Services } from '@boxes/core';
import { paren, type Chunk } from './encode';
import type { ImapFolder } from './folders';
import { ParsedMessage } from './mime';

/** Messages kept parsed per session, and their total size. */
const CACHE_MESSAGES = 768;
const CACHE_BYTES = 64 * 1024 * 1024;
/** Messages read ahead when a client fetches one message after another, and the blocks read beyond. */
const READ_AHEAD = 128;
const AHEAD_BLOCKS = 2;
/** Messages read per query. */
const BATCH = 200;
/** Slabs the sealed bytes of cached messages are copied into; a message above SLAB_COPY_MAX gets its own copy. */
const SLAB = 1024 * 1024;
const SLAB_COPY_MAX = SLAB / 8;
/** Empty slabs kept for the next ones read. */
const SPARE_SLABS = 2;

/** A slab: bytes [0, used) hold the sealed messages put there, `live` of them still in the cache. */
interface Slab {
  buf: Buffer;
  used: number;
  live: number;
}

/**
 * A cached message: sealed (bytes [at, at + size) of a slab, or a copy of its own) or already opened (drafts),
 * parsed once used. A message in a slab has no Buffer of its own: the view is made when it is opened, so what
 * the cache holds for it (and carries into old space, as it outlives the young generation) is this object alone.
 */
interface Kept {
  bytes: Buffer | null;
  slab: Slab | null;
  at: number;
  size: number;
  sealed: boolean;
  parsed: ParsedMessage | null;
}

const range = (from: number, to: number): number[] => Array.from({ length: Math.max(0, to - from) }, (_, k) => from + k);

/**
 * The FLAGS list of every combination of the four flag bits and \Deleted, made once: a client's first look at a
 * folder (FETCH 1:* (UID FLAGS)) answers one per message, and most carry no keyword.
 */
const PLAIN_FLAG_LISTS = Array.from({ length: 32 }, (_, i) => `(${flagNames(i & 15, (i & 16) !== 0, []).join(' ')})`);

export function flagList(e: FolderEntry): Chunk[] {
  if (!e.keywords.length && e.flags >= 0 && e.flags < 16) return [PLAIN_FLAG_LISTS[e.flags | (e.deleted ? 16 : 0)]!];
  return paren(flagNames(e.flags, e.deleted, e.keywords).map((f) => [f]));
}

const SYSTEM_FLAGS = '\\Answered \\Flagged \\Deleted \\Seen \\Draft';

/** FLAGS and PERMANENTFLAGS for a mailbox whose messages use these keywords (SELECT, and when new ones appear). */
export function flagsResponses(keywords: readonly string[], readOnly: boolean): Chunk[][] {
  const flags = [SYSTEM_FLAGS, ...keywords].join(' ');
  return [[`* FLAGS (${flags})`], [`* OK [PERMANENTFLAGS (${readOnly ? '' : `${flags} \\*`})] ${readOnly ? 'Read-only' : 'Flags permitted'}`]];
}

/** The keywords of entries, each once (case-insensitively, first spelling kept). */
function keywordsOf(entries: readonly FolderEntry[]): string[] {
  const seen = new Map<string, string>();
  for (const e of entries) for (const k of e.keywords) if (!seen.has(k.toLowerCase())) seen.set(k.toLowerCase(), k);
  return [...seen.values()];
}

export class SelectedMailbox {
  private uidCache: number[] | null = null;
  private readonly cache = new Map<string, Kept | null>();
  private cacheBytes = 0;
  /** The slab being filled, and empty ones to fill next. */
  private slab: Slab | null = null;
  private spareSlabs: Slab[] = [];
  private lastSingle = -2;
  /** Blocks below this one have had their read-ahead started (see readAhead). */
  private aheadBlocks = 0;
  private readonly inflight = new Map<string, Promise<void>>();
  /** Keywords the client has been told of in FLAGS (lower-cased). */
  private announced = new Set<string>();

  private constructor(
    readonly folder: ImapFolder & { folderId: string },
    readonly readOnly: boolean,
    private readonly rawCopy: RawCopy | undefined,
    public entries: FolderEntry[],
    public uidValidity: number,
    public uidNext: number,
    public highestModseq: bigint,
  ) {}

  static async open(svc: Services, folder: ImapFolder & { folderId: string }, readOnly: boolean, rawCopy?: RawCopy): Promise<SelectedMailbox | null> {
    const head = await folderHead(svc.db, folder.folderId);
    if (!head) return null;
    const entries = await loadFolderEntries(svc, folder.folderId);
    return new SelectedMailbox(folder, readOnly, rawCopy, entries, head.uidValidity, head.uidNext, head.highestModseq);
  }

  /** FLAGS and PERMANENTFLAGS as SELECT answers them; the keywords named are remembered as announced. */
  flagsAtSelect(): Chunk[][] {
    const keywords = keywordsOf(this.entries);
    this.announced = new Set(keywords.map((k) => k.toLowerCase()));
    return flagsResponses(keywords, this.readOnly);
  }

  /**
   * FLAGS and PERMANENTFLAGS again when messages now carry keywords the client was not told of (a label set over
   * the API, another client's STORE): RFC 3501 7.2.6 has clients record each FLAGS response.
   */
  announceNewKeywords(): Chunk[][] {
    const keywords = keywordsOf(this.entries);
    if (keywords.every((k) => this.announced.has(k.toLowerCase()))) return [];
    return this.flagsAtSelect();
  }

  uids(): number[] {
    this.uidCache ??= this.entries.map((e) => e.uid);
    return this.uidCache;
  }

  indexOfUid(uid: number): number {
    const uids = this.uids();
    let a = 0;
    let b = uids.length - 1;
    while (a <= b) {
      const m = (a + b) >>> 1;
      if (uids[m] === uid) return m;
      if (uids[m]! < uid) a = m + 1;
      else b = m - 1;
    }
    return -1;
  }

  /** Flag changes made by this session: the view takes them at once. */
  applyChanged(changed: FolderEntry[], highestModseq: bigint, ownOnly: boolean): void {
    for (const c of changed) {
      const i = this.indexOfUid(c.uid);
      if (i !== -1) this.entries[i] = { ...this.entries[i]!, flags: c.flags, keywords: c.keywords, deleted: c.deleted, modseq: c.modseq };
    }
    // When nobody else changed the folder in between, this session is up to date with it.
    if (ownOnly) this.highestModseq = highestModseq;
  }

  /** Removes UIDs from the view; returns the EXPUNGE responses (highest sequence number first). */
  remove(uids: number[]): Chunk[][] {
    const gone = new Set(uids);
    const out: Chunk[][] = [];
    for (let i = this.entries.length - 1; i >= 0; i--) {
      if (gone.has(this.entries[i]!.uid)) {
        out.push([`* ${i + 1} EXPUNGE`]);
        this.entries.splice(i, 1);
      }
    }
    if (out.length) this.uidCache = null;
    return out;
  }

  /**
   * What changed since this client last looked, as untagged responses: EXPUNGE for messages gone, EXISTS for new
   * ones, FETCH (FLAGS) for changed flags. Cheap when nothing changed (one read of the folder head).
   */
  async refresh(svc: Services, opts: { condstore: boolean }): Promise<Chunk[][]> {
    const head = await folderHead(svc.db, this.folder.folderId);
    if (!head) return this.remove(this.uids());
    if (head.highestModseq === this.highestModseq && head.uidNext === this.uidNext) return [];
    const fresh = await loadFolderEntries(svc, this.folder.folderId);
    const byUid = new Map(fresh.map((e) => [e.uid, e]));
    const out = this.remove(this.uids().filter((u) => !byUid.has(u)));
    const changed: Chunk[][] = [];
    this.entries.forEach((e, i) => {
      const f = byUid.get(e.uid)!;
      const same = f.flags === e.flags && f.deleted === e.deleted && f.keywords.length === e.keywords.length && f.keywords.every((k, j) => k === e.keywords[j]);
      this.entries[i] = f;
      if (!same) changed.push([`* ${i + 1} FETCH (UID ${f.uid} FLAGS `, ...flagList(f), ...(opts.condstore ? [` MODSEQ (${f.modseq})`] : []), ')']);
    });
    // New keywords are announced before the FETCH responses that carry them.
    out.push(...this.announceNewKeywords(), ...changed);
    const last = this.entries.length ? this.entries[this.entries.length - 1]!.uid : 0;
    const added = fresh.filter((e) => e.uid > last);
    if (added.length) {
      this.entries.push(...added);
      this.uidCache = null;
      out.push([`* ${this.entries.length} EXISTS`]);
    }
    this.uidValidity = head.uidValidity;
    this.uidNext = head.uidNext;
    this.highestModseq = head.highestModseq;
    return out;
  }

  /**
   * Makes the messages of these entries available to message() (null: the body was reclaimed), reading what is
   * not cached. A client fetching one message after another gets the next ones read with it, and the batch
   * after those read in the background while it is served. Null when there is nothing to wait for (each message
   * of a download is most often read ahead already: no promise made for it).
   */
  messages(svc: Services, targets: number[]): Promise<void> | null {
    let wanted = targets;
    if (targets.length === 1) {
      const i = targets[0]!;
      const sequential = i === this.lastSingle + 1;
      this.lastSingle = i;
      if (this.cache.has(this.entries[i]!.messageId)) {
        // Served from what was read ahead; a client moving on into the next block starts its reading.
        if (sequential) this.readAhead(svc, Math.floor(i / READ_AHEAD) + 1);
        return null;
      }
      if (sequential) {
        // Aligned blocks: the rest of the one holding i now (those before i were served), the next ones in the
        // background (each read in one query).
        const block = Math.floor(i / READ_AHEAD);
        wanted = range(i, Math.min(this.entries.length, (block + 1) * READ_AHEAD));
        // A miss means what was read ahead is gone (a second pass, or the cache pushed it out): start afresh.
        this.aheadBlocks = block + 1;
        this.readAhead(svc, block + 1);
      }
    }
    return this.loadTargets(svc, wanted, targets);
  }

  private async loadTargets(svc: Services, wanted: number[], targets: number[]): Promise<void> {
    await this.load(svc, wanted);
    // What was read ahead may have pushed out a target in a large round: read those again.
    const missing = targets.filter((i) => !this.cache.has(this.entries[i]!.messageId));
    if (missing.length) await this.load(svc, missing);
  }

  /**
   * Starts reading the AHEAD_BLOCKS blocks from this one in the background, each once: a client fetching
   * message after message asks for every block only as it enters the one before, not on each message.
   */
  private readAhead(svc: Services, fromBlock: number): void {
    const until = fromBlock + AHEAD_BLOCKS;
    for (let b = Math.max(fromBlock, this.aheadBlocks); b < until; b++) {
      const start = b * READ_AHEAD;
      if (start >= this.entries.length) break;
      void this.load(svc, range(start, Math.min(this.entries.length, start + READ_AHEAD))).catch(() => undefined);
    }
    this.aheadBlocks = Math.max(this.aheadBlocks, until);
  }

  private async load(svc: Services, indexes: number[]): Promise<void> {
    const waits = new Set<Promise<void>>();
    const todo: FolderEntry[] = [];
    for (const i of indexes) {
      const e = this.entries[i];
      if (!e || this.cache.has(e.messageId)) continue;
      const pending = this.inflight.get(e.messageId);
      if (pending) waits.add(pending);
      else todo.push(e);
    }
    for (let k = 0; k < todo.length; k += BATCH) {
      const batch = todo.slice(k, k + BATCH);
      // Each message goes into the cache as its row arrives (sealed bytes are only valid during the call).
      const p = loadSealedMessages(
        svc,
        batch.map((e) => e.messageId),
        this.rawCopy,
        (id, bytes, sealed) => this.put(id, bytes && this.keep(bytes, sealed)),
      );
      const settled = p.finally(() => {
        for (const e of batch) this.inflight.delete(e.messageId);
      });
      for (const e of batch) this.inflight.set(e.messageId, settled);
      waits.add(settled);
    }
    await Promise.all(waits);
  }

  /**
   * A message read by messages(), opened now (null if the cache let it go meanwhile or it has no bytes: held()
   * tells, opened() reads it again): a sealed one is decrypted on every call, so callers take it once per use
   * and let it go. Throws when its bytes do not open.
   */
  message(svc: Pick<Services, 'secretKey'>, index: number): ParsedMessage | null {
    const kept = this.cache.get(this.entries[index]!.messageId);
    if (!kept) return null;
    const bytes = kept.bytes ?? kept.slab!.buf.subarray(kept.at, kept.at + kept.size);
    if (kept.sealed) return new ParsedMessage(open(svc.secretKey, bytes));
    kept.parsed ??= new ParsedMessage(bytes);
    return kept.parsed;
  }

  /** Whether the cache holds message `index` now (message() answers it without reading). */
  held(index: number): boolean {
    return this.cache.has(this.entries[index]!.messageId);
  }

  /**
   * message(), read again first if the cache let it go since messages(): a command that awaits something between
   * the two (FETCH marking \Seen, SEARCH matching) lets background read-ahead run, which may push its targets
   * out. Null only for a message that has no bytes.
   */
  async opened(svc: Services, index: number): Promise<ParsedMessage | null> {
    const id = this.entries[index]!.messageId;
    for (let tries = 0; !this.cache.has(id) && tries < 3; tries++) await this.load(svc, [index]);
    if (!this.cache.has(id)) throw new Error(`message ${id} could not be kept to be served`);
    return this.message(svc, index);
  }

  /** What the cache keeps of a message's bytes: sealed ones copied (they are a view into a read buffer). */
  private keep(bytes: Buffer, sealed: boolean): Kept {
    if (!sealed) return { bytes, slab: null, at: 0, size: bytes.length, sealed, parsed: null };
    if (bytes.length > SLAB_COPY_MAX) return { bytes: Buffer.from(bytes), slab: null, at: 0, size: bytes.length, sealed, parsed: null };
    let slab = this.slab;
    if (!slab || slab.used + bytes.length > SLAB) {
      if (slab && !slab.live) this.recycle(slab);
      slab = this.spareSlabs.pop() ?? { buf: Buffer.allocUnsafeSlow(SLAB), used: 0, live: 0 };
      this.slab = slab;
    }
    const at = slab.used;
    bytes.copy(slab.buf, at);
    slab.used += bytes.length;
    slab.live++;
    return { bytes: null, slab, at, size: bytes.length, sealed, parsed: null };
  }

  /** A slab none of whose messages is cached any more: filled again from the start. */
  private recycle(slab: Slab): void {
    slab.used = 0;
    if (this.spareSlabs.length < SPARE_SLABS) this.spareSlabs.push(slab);
  }

  private put(id: string, kept: Kept | null): void {
    if (this.cache.has(id)) this.drop(id);
    this.cache.set(id, kept);
    this.cacheBytes += kept?.size ?? 0;
    while ((this.cache.size > CACHE_MESSAGES || this.cacheBytes > CACHE_BYTES) && this.cache.size > 1) {
      this.drop(this.cache.keys().next().value as string);
    }
  }

  private drop(id: string): void {
    const m = this.cache.get(id);
    this.cache.delete(id);
    this.cacheBytes -= m?.size ?? 0;
    const slab = m?.slab;
    // The slab being filled is recycled once it is full (see keep).
    if (slab && --slab.live === 0 && slab !== this.slab) this.recycle(slab);
  }
}
