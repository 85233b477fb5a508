/**
 * Messages just submitted, by the Message-ID the client gave them: mail clients append a copy of what they send
 * to the Sent folder, and Boxes has filed its own copy there already (under its own Message-ID). Kept in Redis
 * for a day, so an APPEND on any process finds it.
 */
import { sha256Hex, type Services } from '@boxes/core';

const TTL_SECONDS = 24 * 3600;

/** The Message-ID header of raw RFC 5322 bytes, or null. */
export function clientMessageId(raw: Buffer): string | null {
  const text = raw.subarray(0, 256 * 1024).toString('latin1');
  const end = text.search(/\r?\n\r?\n/);
  const head = (end === -1 ? text : text.slice(0, end)).replace(/\r?\n[ \t]+/g, ' ');
  const m = /^message-id:\s*(<[^>\s]{1,500}>)/im.exec(head);
  return m ? m[1]! : null;
}

const keyOf = (svc: Pick<Services, 'config'>, accountId: string, messageId: string) =>
  `${svc.config.redisPrefix}:submitted:${accountId}:${sha256Hex(messageId)}`;

export async function rememberSubmission(svc: Pick<Services, 'config' | 'redis'>, accountId: string, raw: Buffer, messageId: string): Promise<void> {
  const id = clientMessageId(raw);
  if (!id) return;
  try {
    await svc.redis.set(keyOf(svc, accountId, id), messageId, 'EX', TTL_SECONDS);
  } catch {
    // Without it a client's copy to Sent is refused, which clients report and carry on from.
  }
}

/** The id of the message this account submitted with the Message-ID of these bytes, or null. */
export async function submittedCopy(svc: Pick<Services, 'config' | 'redis'>, accountId: string, raw: Buffer): Promise<string | null> {
  const id = clientMessageId(raw);
  if (!id) return null;
  try {
    return await svc.redis.get(keyOf(svc, accountId, id));
  } catch {
    return null;
  }
}
