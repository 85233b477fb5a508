/**
 * Mail the service itself sends: owner links, billing notices. A notice is written in the transaction that
 * causes it (so it goes out if and only if the change commits) and announced with NOTIFY at commit; the
 * worker sends it (apps/worker), and a sweeper picks up any it missed.
 */
import type { Tx } from '@boxes/db';
import { exec, sql } from '@boxes/db';
import { newId } from '../shared/ids';

export const NOTICES_CHANNEL = 'boxes_notices';

export interface NoticeInput {
  accountId?: string | null;
  kind: string;
  to: string;
  subject: string;
  text: string;
}

export async function queueNotice(tx: Tx, n: NoticeInput): Promise<string> {
  const id = newId('ntc');
  await tx.notice.create({ data: { id, accountId: n.accountId ?? null, kind: n.kind, to: n.to, subject: n.subject, text: n.text } });
  await exec(tx, sql`SELECT pg_notify(${NOTICES_CHANNEL}, ${id})`);
  return id;
}
