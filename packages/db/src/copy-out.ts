/**
 * COPY (...) TO STDOUT (FORMAT binary) through a node-pg client, row by row. node-pg hands every column of an
 * ordinary result over as a decoded string (a bytea as hex text, twice its size, decoded again into bytes); the
 * rows of a binary COPY arrive as bytes and are passed on as they are. For reads of large bytea values in bulk
 * (the sealed messages a mail client downloads), where that decoding was most of the client-side cost.
 *
 * COPY takes no bind parameters: the caller builds the statement and is responsible for what it inlines.
 */
import type pg from 'pg';

/**
 * One row's fields: the column's binary representation (a bytea's bytes, a text's UTF-8), null for NULL. The
 * buffers are views into the connection's read buffer, valid only until onRow returns: copy or consume them.
 */
export type CopyRow = (Buffer | null)[];

const SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');

/** A query object node-pg runs like its own (its "submittable" interface). */
class BinaryCopyOut {
  private header = true;
  private error: Error | null = null;
  readonly done: Promise<void>;
  private settle!: (err: Error | null) => void;

  constructor(
    private readonly text: string,
    private readonly onRow: (row: CopyRow) => void,
  ) {
    this.done = new Promise((resolve, reject) => {
      this.settle = (err) => (err ? reject(err) : resolve());
    });
  }

  submit(connection: { query(text: string): void }): void {
    connection.query(this.text);
  }

  /** The backend sends one CopyData message per row (and the file header before the first row). */
  handleCopyData(msg: { chunk: Buffer }): void {
    if (this.error) return;
    try {
      this.parse(msg.chunk);
    } catch (err) {
      // The rest of the COPY still arrives and is ignored; the caller hears of the first error at the end.
      this.error = err as Error;
    }
  }

  private parse(b: Buffer): void {
    let p = 0;
    if (this.header) {
      if (b.length < 19 || !b.subarray(0, 11).equals(SIGNATURE)) throw new Error('COPY: not a binary COPY stream');
      p = 19 + b.readInt32BE(15);
      this.header = false;
    }
    while (p < b.length) {
      const count = b.readInt16BE(p);
      p += 2;
      if (count === -1) return; // the trailer
      const row: CopyRow = new Array(count);
      for (let i = 0; i < count; i++) {
        const len = b.readInt32BE(p);
        p += 4;
        if (len === -1) {
          row[i] = null;
          continue;
        }
        if (p + len > b.length) throw new Error('COPY: a row spans messages');
        row[i] = b.subarray(p, p + len);
        p += len;
      }
      this.onRow(row);
    }
  }

  handleError(err: Error): void {
    // A connection error is followed by nothing; an error from the server by ReadyForQuery. Either way the
    // caller learns of it at once (and should not give the client back to a pool for reuse).
    this.error ??= err;
    this.settle(err);
  }

  handleReadyForQuery(): void {
    this.settle(this.error);
  }

  // The other messages of a query: nothing to do for a COPY.
  handleRowDescription(): void {}
  handleDataRow(): void {}
  handleCommandComplete(): void {}
  handleEmptyQuery(): void {}
  handlePortalSuspended(): void {}
  handleCopyInResponse(connection: { sendCopyFail(message: string): void }): void {
    connection.sendCopyFail('COPY FROM is not supported here');
  }
}

/**
 * Runs `COPY (<query>) TO STDOUT (FORMAT binary)` on the client and calls onRow for each row as it arrives.
 * Rejects with the server's error, an error of onRow, or a broken connection.
 */
export async function copyOutBinary(client: pg.ClientBase, query: string, onRow: (row: CopyRow) => void): Promise<void> {
  const copy = new BinaryCopyOut(`COPY (${query}) TO STDOUT (FORMAT binary)`, onRow);
  client.query(copy as unknown as pg.Submittable);
  await copy.done;
}
